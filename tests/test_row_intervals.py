"""Row intervals against brute force: where the pass finds [lo(q), hi(q)) for a region, "q on the q side,
the row condition, lo <= k < hi" must be exactly the region's visible set."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from mask_gen import random_masks
from small_configs import SMALL

from maskc import ir
from maskc.compiler import compile_file, compile_text
from maskc.front import read_program
from maskc.ir.evaluate import evaluate
from maskc.kernels import KernelOptions
from maskc.passes import run_pipeline
from maskc.plan.layout import segment_bounds, token_info
from maskc.tools.reference import pair_env, region_visible

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples"


def rows_visible(program: ir.Program, region: ir.Region, layout, values) -> np.ndarray:
    """The [n, n] visible set of a region computed from its row intervals alone."""
    n = layout.n
    q = np.arange(n, dtype=np.int64)[:, None]
    k = np.arange(n, dtype=np.int64)[None, :]
    facts = token_info(program, layout, q)
    params = {name: (v if isinstance(v, bool) else np.int64(v)) for name, v in values.scalars.items()}
    params["n"] = np.int64(n)
    env = pair_env(params, values.arrays, q, q, facts, facts)  # only the q side may be read
    env.bounds = segment_bounds([s.name for s in program.segments], layout)
    q_bits = sum(1 << program.segment_index(s) for s in region.q.segments)
    on_side = ((q_bits >> facts["symbol"]) & 1).astype(bool)
    row = np.broadcast_to(np.asarray(evaluate(region.rows.row, env), dtype=bool), q.shape)
    lo = np.broadcast_to(evaluate(region.rows.lo, env), q.shape)
    hi = np.broadcast_to(evaluate(region.rows.hi, env), q.shape)
    return on_side & row & (k >= lo) & (k < hi)


def check_rows(compiled, sequences) -> int:
    values, layouts = compiled.bind(sequences)
    found = 0
    for region in compiled.program.regions:
        if region.rows is None:
            continue
        found += 1
        for lay, val in zip(layouts, values):
            if lay.n == 0:
                continue
            want = region_visible(compiled.program, region, lay, val, np.arange(lay.n)[:, None], np.arange(lay.n)[None, :])
            got = rows_visible(compiled.program, region, lay, val)
            if not np.array_equal(got, want):
                q, k = np.argwhere(got != want)[0]
                raise AssertionError(f"{region.rule}: rows say {got[q, k]} at (q={q}, k={k}), the region {want[q, k]}"
                                     f" (lo = {ir.show(region.rows.lo)}, hi = {ir.show(region.rows.hi)})")
    return found


@pytest.mark.parametrize("name", sorted(SMALL))
def test_row_intervals_of_every_example_are_exact(name):
    consts, sequences = SMALL[name]
    check_rows(compile_file(EXAMPLES / f"{name}.mask", KernelOptions(), consts), sequences)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=random_masks())
def test_row_intervals_of_random_masks_are_exact(case):
    text, consts, sequences = case
    check_rows(compile_text(text, KernelOptions(), consts), sequences)


def rows_of(rules: str, segments: str = "S = n") -> list[ir.RowIntervals | None]:
    text = f"mask m(n: int = 64, w: int = 8, docs: [int] = [3, 5])\nsegments:\n    {segments}\nrules:\n    {rules}\n"
    return [r.rows for r in run_pipeline(read_program(text)).regions]


def test_the_usual_forms_have_row_intervals():
    (causal,) = rows_of("S -> S causal")
    assert ir.show(causal.lo) == "start(S)" and ir.show(causal.hi) == "min(end(S), q + 1)"
    (window,) = rows_of("S -> S where 0 <= q - k < w")
    assert ir.show(window.lo) == "max(start(S), q - w + 1)" and ir.show(window.hi) == "min(end(S), q + 1)"
    (diag,) = rows_of("S -> S diag")
    assert ir.show(diag.lo) == "max(start(S), q)" and ir.show(diag.hi) == "min(end(S), q + 1)"
    (own,) = rows_of("D[i] -> D[i] causal", "D[i] = docs[i]")
    assert "q.start" in ir.show(own.lo) and "q.end" in ir.show(own.hi)
    (prefix,) = rows_of("S -> P full", "P = 4\n    S = n - 4")
    assert (ir.show(prefix.lo), ir.show(prefix.hi)) == ("start(P)", "end(P)")
    (row_condition,) = rows_of("S -> S causal where q % 2 == 0")
    assert ir.show(row_condition.row) == "q % 2 == 0"
    (symmetric,) = rows_of("S -> S where abs(q - k) <= w")  # both sides of q: -w <= q - k <= w
    assert ir.show(symmetric.lo) == "max(start(S), q - w)" and ir.show(symmetric.hi) == "min(end(S), -(-q - w) + 1)"
    (written_the_other_way,) = rows_of("S -> S where w > abs(k - q - 3)")
    assert ir.show(written_the_other_way.lo) == "max(start(S), -(-q - 3) - w + 1)"  # k > q + 3 - w


KEY_FACTS = [
    ("D[i] -> D[i] where k.pos < w", "D[i] = docs[i]"),                        # a prefix of each member
    ("D[i] -> D[i] where k.pos < docs[i] - 1 and k <= q", "D[i] = docs[i]"),  # the member's own list entry
    ("D[i] -> D[i] where q.pos - k.pos < w and k <= q", "D[i] = docs[i]"),    # a window, member-relative
    ("S -> P where k.pos >= 1", "P = 4\n    S = n - 4"),                      # a plain segment's own start
    ("S -> S where k.pos <= q.pos", "S = n"),
    ("D[i] -> D[j] where j < i", "D[i] = docs[i]"),                          # earlier members (chat turns)
    ("D[i] -> D[j] where i <= j and k <= q", "D[i] = docs[i]"),
    ("D[i] -> D[j] where j > i", "D[i] = docs[i]"),
    ("D[i] -> D[j] where i >= j and k <= q", "D[i] = docs[i]"),
]


@pytest.mark.parametrize("rules, segments", KEY_FACTS)
def test_a_keys_facts_are_bounds_where_its_segment_is_known(rules, segments):
    # k.pos (and the key's member) read where the key's segment is the query's own member, or one plain
    # segment: an interval of keys per row, exact against brute force.
    text = f"mask m(n: int = 64, w: int = 8, docs: [int] = [3, 5])\nsegments:\n    {segments}\nrules:\n    {rules}\n"
    assert rows_of(rules, segments) != [None]
    compiled = compile_text(text, KernelOptions(), {})
    sequences = [{"n": 40 if "n" in segments else sum(docs), "w": w, "docs": docs}  # (members fix their own n)
                 for w in (0, 2, 9) for docs in ([3, 5, 12], [0, 7], [20, 1, 1, 2])]
    assert check_rows(compiled, sequences) == 1


@pytest.mark.parametrize("rules, segments", [
    ("S -> S where abs(q - k) >= w", "S = n"),               # outside a window: two intervals
    ("S -> S where abs(q - 2 * k) <= w", "S = n"),           # coefficient 2 inside abs
    ("S -> S where k != q", "S = n"),                         # two intervals
    ("S -> S where 2 * k <= q", "S = n"),                     # coefficient 2
    ("A|C -> A|C full", "A = 4\n    B = 4\n    C = n - 8"),   # the k side is not one run
    ("A[i] -> B[i] full", "A[i] = docs[i]\n    B[i] = docs[i]\n    C = n - 16"),  # another family's member
])
def test_other_forms_keep_the_general_path(rules, segments):
    assert rows_of(rules, segments) == [None]
