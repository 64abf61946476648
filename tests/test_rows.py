"""The row-interval fast path (maskc/plan/rows.py) on masks whose regions meet in one piece in ways the examples
do not: a hole in each row that moves with the row, so that only some rows of a piece see a tile through the
union of two regions (the row-by-row check), and three regions meeting the same k tile (several pairs at once)."""

from __future__ import annotations

import numpy as np
import pytest
from test_plan import check_fast_path, takes_fast_path

from maskc.compiler import compile_text
from maskc.kernels import KernelOptions
from maskc.plan.planner import TileConfig

MASKS = {
    "hole": ("""mask hole(n: int = 300, a: int = 10, b: int = 4)
segments:
    S = n
rules:
    S -> S   where k < q - a
    S -> S   where k > q + b
""", lambda rng, n: dict(n=n, a=int(rng.integers(-3, 30)), b=int(rng.integers(-3, 30)))),
    "three": ("""mask three(n: int = 300, p: int = 40, w: int = 7)
segments:
    P = p
    S = n - p
rules:
    S -> P   full
    S -> S   where 0 <= q - k < w
    S -> S   where k < q - w + 3
    P -> P   causal
""", lambda rng, n: dict(n=n, p=int(rng.integers(0, n + 1)), w=int(rng.integers(0, 40)))),
}
CONFIGS = [TileConfig(128, 64), TileConfig(16, 8), TileConfig(8, 16), TileConfig(32, 8), TileConfig(64, 16)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.block_q}x{c.block_k}")
@pytest.mark.parametrize("name", sorted(MASKS))
def test_fast_path_equals_the_general_search_where_regions_meet(name, config):
    text, draw = MASKS[name]
    compiled = compile_text(text, KernelOptions())
    assert takes_fast_path(compiled)
    rng = np.random.default_rng(0)
    for _ in range(10):
        sequences = [draw(rng, int(rng.integers(1, 400))) for _ in range(rng.integers(1, 4))]
        values, layouts = compiled.bind(sequences)
        check_fast_path(compiled, values, layouts, config, note=f" ({sequences})")
