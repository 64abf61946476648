"""The .cu's own GPU classify kernel (the standalone planner's step 2) against maskc's descriptor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from small_configs import SMALL

cupy = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu

from maskc.compiler import compile_file  # noqa: E402
from maskc.kernels import KernelOptions, planner_name  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TILE_FULL = 0x80000000


@pytest.mark.parametrize("name", ["causal", "document", "rm_shared", "clear_text", "natten2d", "tree", "block_sparse"])
def test_classify_kernel_matches_the_descriptor(name):
    consts, sequences = SMALL[name]
    compiled = compile_file(EXAMPLES / f"{name}.mask", KernelOptions(arch="sm_90"), consts)
    desc, tables, layouts = compiled.tables(sequences)
    q_tiles, k_tiles = desc.blocks.tiles("q"), desc.blocks.tiles("k")
    work = np.array([(b, t) for b in range(len(layouts)) for t in range(q_tiles[b])], dtype=np.int32).reshape(-1, 2)
    tiles_per_item = k_tiles[work[:, 0]]
    offset = np.concatenate([[0], np.cumsum(tiles_per_item)[:-1]]).astype(np.int64)
    classes = cupy.full(int(tiles_per_item.sum()) + 1, 0xDEADBEEF, dtype=cupy.uint32)  # poisoned
    module = cupy.RawModule(path=str(compiled.cubin))
    kernel = module.get_function(f"{planner_name(compiled.program.name, compiled.options)}_classify")
    args = [cupy.asarray(a) for a in (tables.seq_table, tables.seg_start, tables.seg_code, tables.arrays, work, offset)]
    kernel((len(work),), (256,), (*args, classes))
    classes = classes.get()
    for w, (b, qt) in enumerate(work):
        kts, kinds = desc.tiles_of(int(b), int(qt))
        expected = np.zeros(tiles_per_item[w], dtype=np.int64)  # 0 empty, 1 full, 2 partial
        expected[kts] = np.where(kinds == 0, 1, 2)
        got = classes[offset[w]:offset[w] + tiles_per_item[w]].astype(np.int64)
        got = np.where(got == 0, 0, np.where(got == TILE_FULL, 1, 2))
        np.testing.assert_array_equal(got, expected, err_msg=f"sequence {b}, query tile {qt}")
