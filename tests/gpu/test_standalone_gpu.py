"""The .cu's own GPU classify kernel (the standalone planner's step 2) against maskc's descriptor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from small_configs import SMALL

cupy = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu

from maskc.compiler import compile_file  # noqa: E402
from maskc.kernels import KernelOptions, TileKind, planner_name  # noqa: E402
from maskc.kernels.abi import CLASS_EMPTY, CLASS_FULL  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


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
    module = cupy.RawModule(path=str(compiled.build("cubin").path))  # the whole file: maskc's one-direction builds lack it
    kernel = module.get_function(f"{planner_name(compiled.program.name, compiled.options)}_classify")
    args = [cupy.asarray(a) for a in (tables.seq_table, tables.seg_start, tables.seg_code, tables.arrays, work, offset)]
    kernel((len(work),), (256,), (*args, classes))
    classes = classes.get()
    for w, (b, qt) in enumerate(work):
        kts, kinds = desc.tiles_of(int(b), int(qt))
        expected = np.full(tiles_per_item[w], TileKind.EMPTY, dtype=np.int64)
        expected[kts] = np.where(kinds == TileKind.FULL, TileKind.FULL, TileKind.PARTIAL)
        got = classes[offset[w]:offset[w] + tiles_per_item[w]].astype(np.int64)
        got = np.where(got == CLASS_EMPTY, TileKind.EMPTY, np.where(got == CLASS_FULL, TileKind.FULL, TileKind.PARTIAL))
        np.testing.assert_array_equal(got, expected, err_msg=f"sequence {b}, query tile {qt}")
