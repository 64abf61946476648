"""The planner inside every generated .cu (for use without maskc) against maskc's own planner: the same
sequence tables and the same descriptor, on every example. Host C++ only (the GPU classify kernel runs
the same per-pair code as classify_tile, which the host version here uses)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import host_mask
import numpy as np
import pytest
from small_configs import SMALL

from maskc.compiler import compile_file, compile_text
from maskc.kernels import KernelOptions, TileKind, planner_name

pytestmark = pytest.mark.skipif(host_mask.compiler() is None, reason="needs a C++ compiler")

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples"

HARNESS = r"""
extern "C" long long maskc_test_descriptor(const long long* seq_table, const int* seg_start, const int* seg_code,
                                           const int* arrays, int* work_out, int* row_ptr, int* k_tiles,
                                           unsigned* kinds) {
    const MaskSeq s = mask_seq(seq_table, seg_start, seg_code, arrays, 0);
    const int items = count_q_tiles(s), tiles = count_k_tiles(s);
    std::vector<int> work(2 * items), per_item(items, tiles);
    std::vector<long long> offset(items);
    std::vector<unsigned> classes((size_t)items * tiles);
    for (int w = 0; w < items; ++w) {
        work[2 * w] = 0;
        work[2 * w + 1] = w;
        offset[w] = (long long)w * tiles;
        for (int k = 0; k < tiles; ++k) classes[offset[w] + k] = classify_tile(s, w, k);
    }
    std::vector<KIND> narrow((size_t)items * tiles + 1);
    const long long n = PLANNER_build_descriptor(items, work.data(), offset.data(), per_item.data(), classes.data(),
                                                 work_out, row_ptr, k_tiles, narrow.data());
    for (long long i = 0; i < n; ++i) kinds[i] = narrow[i];
    return n;
}
"""


def _values_code(prefix: str, program, values, index: int) -> str:
    """C++ that fills the values struct of one sequence and calls its plan_sequence."""
    lines, data = [f"    {prefix}_values v;", f"    v.n = {values.n if values.n is not None else -1};"], []
    for p in program.runtime_params:
        if p.type.depth == 0:
            lines.append(f"    v.{p.name} = {int(values.scalars[p.name])};")
            continue
        a = values.arrays[p.name].astype(np.int64)
        flat = ", ".join(str(int(x)) for x in a.reshape(-1)) or "0"
        data.append(f"static const int data_{index}_{p.name}[] = {{{flat}}};")
        lines.append(f"    v.{p.name} = data_{index}_{p.name};")
        if p.type.depth == 1:
            lines.append(f"    v.{p.name}_len = {a.shape[0]};")
        else:
            rows, cols = a.shape if a.ndim == 2 else (0, 0)
            lines.append(f"    v.{p.name}_rows = {rows}; v.{p.name}_cols = {cols};")
    body = "\n".join(lines)
    return "\n".join(data) + f"""
extern "C" int maskc_test_plan_{index}(long long* seq_row, int* seg_start, int* seg_code, int capacity, int* arrays,
                                      long long array_capacity, long long* used) {{
{body}
    return {prefix}_plan_sequence(v, 0, 0, seq_row, seg_start, seg_code, capacity, 0, arrays, array_capacity, used);
}}
"""


@pytest.mark.parametrize("name", sorted(SMALL))
def test_standalone_planner_matches_maskc(name, tmp_path):
    consts, sequences = SMALL[name]
    compiled = compile_file(EXAMPLES / f"{name}.mask", KernelOptions(), consts)
    prefix = planner_name(compiled.program.name, compiled.options)
    values, layouts = compiled.bind(sequences)
    extra = HARNESS.replace("PLANNER", prefix).replace("KIND", compiled.code.kind_type)
    extra += "".join(_values_code(prefix, compiled.program, v, i) for i, v in enumerate(values))
    lib = host_mask.build(compiled.source + extra, tmp_path)
    fields = compiled.code.seq_table.width
    for b, (val, lay) in enumerate(zip(values, layouts)):
        desc, tables, _ = compiled.tables([sequences[b]])
        row = np.zeros(fields, dtype=np.int64)
        capacity = len(lay.starts) + 4
        seg_start = np.zeros(capacity, dtype=np.int32)
        seg_code = np.zeros(capacity, dtype=np.int32)
        arrays = np.zeros(max(1, sum(a.size for a in val.arrays.values())), dtype=np.int32)
        used = ctypes.c_longlong(0)
        ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
        count = getattr(lib, f"maskc_test_plan_{b}")(ptr(row), ptr(seg_start), ptr(seg_code), ctypes.c_int(capacity),
                                                      ptr(arrays), ctypes.c_longlong(arrays.size), ctypes.byref(used))
        assert count == len(lay.starts), f"sequence {b}: {count} segments, maskc has {len(lay.starts)}"
        np.testing.assert_array_equal(row, tables.seq_table[0], err_msg=f"sequence {b}: seq_table row")
        np.testing.assert_array_equal(seg_start[:count], tables.seg_start)
        np.testing.assert_array_equal(seg_code[:count], tables.seg_code)
        np.testing.assert_array_equal(arrays[:used.value], tables.arrays[:used.value])

        # Classify every tile exactly and build the descriptor: the same lists and full/partial kinds.
        items = len(desc.work_seq)
        work_out = np.zeros(2 * max(items, 1), dtype=np.int32)
        row_ptr = np.zeros(items + 1, dtype=np.int32)
        k_tiles = np.zeros(max(1, items * int(desc.blocks.tiles("k")[0])), dtype=np.int32)
        kinds = np.zeros_like(k_tiles, dtype=np.uint32)
        lib.maskc_test_descriptor.restype = ctypes.c_longlong
        listed = lib.maskc_test_descriptor(ptr(row), ptr(seg_start), ptr(seg_code), ptr(arrays), ptr(work_out),
                                           ptr(row_ptr), ptr(k_tiles), ptr(kinds))
        assert listed == len(desc.k_tile)
        np.testing.assert_array_equal(work_out[:2 * items].reshape(-1, 2)[:, 1], desc.work_qtile)
        np.testing.assert_array_equal(row_ptr, desc.row_ptr)
        np.testing.assert_array_equal(k_tiles[:listed], desc.k_tile)
        np.testing.assert_array_equal(kinds[:listed] == TileKind.FULL, desc.kind == TileKind.FULL,
                                      err_msg="full tiles differ")


def test_len_of_a_table_in_a_sequence_value(tmp_path):
    """A regression found by the grammar fuzzer (tests/test_fuzz_grammar.py): `len(T)` of a table parameter,
    a value of the sequence alone, was written `v.T_len` in the standalone planner, whose values struct holds
    `T_rows` and `T_cols` for a table: the generated .cu did not compile as C++."""
    text = ("mask t(T: [[bool]] = [[true], [false]], L: [int] = [1, 2, 3])\nsegments:\n    S = n - len(T) - len(L)\n"
            "    U = len(T) + len(L)\nrules:\n    S|U -> S|U   where k <= q and q < len(T) * 3 + len(L)\n")
    compiled = compile_text(text, KernelOptions())
    assert "v.T_rows" in compiled.source and "v.T_len" not in compiled.source
    prefix = planner_name(compiled.program.name, compiled.options)
    sequences = [{"n": 20}, {"n": 30, "T": [[True, False]] * 5, "L": []}]
    values, layouts = compiled.bind(sequences)
    extra = "".join(_values_code(prefix, compiled.program, v, i) for i, v in enumerate(values))
    lib = host_mask.build(compiled.source + extra, tmp_path)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    for b, lay in enumerate(layouts):
        _, tables, _ = compiled.tables([sequences[b]])
        row = np.zeros(compiled.code.seq_table.width, dtype=np.int64)
        seg_start, seg_code = np.zeros(8, dtype=np.int32), np.zeros(8, dtype=np.int32)
        arrays = np.zeros(16, dtype=np.int32)
        used = ctypes.c_longlong(0)
        count = getattr(lib, f"maskc_test_plan_{b}")(ptr(row), ptr(seg_start), ptr(seg_code), ctypes.c_int(8),
                                                      ptr(arrays), ctypes.c_longlong(16), ctypes.byref(used))
        assert count == len(lay.starts)
        np.testing.assert_array_equal(row, tables.seq_table[0])


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("name, options", [("document", dict(arch="sm_90a")), ("rm_shared", dict(arch="sm_80")),
                                           ("clear", dict(arch="sm_90a", head_dim=64)),
                                           ("causal", dict(arch="sm_90a", head_dim=256))])
def test_the_cu_builds_with_nvcc_as_its_banner_says_without_warnings(name, options, tmp_path):
    """The whole generated file (kernels, mask code, host planner) with the nvcc command its banner gives,
    every warning an error: the forward and backward kernels of both families (the Hopper fused pass at head
    dim 128, its dQ and dK/dV pair at 64 and, with the head dim split in two, at 256), lists and grids in the
    planner."""
    compiled = compile_file(EXAMPLES / f"{name}.mask", KernelOptions(**options))
    source = tmp_path / f"{name}.cu"
    source.write_text(compiled.source)
    banner = next(line for line in compiled.source.splitlines() if line.startswith("// Build: "))
    command = banner.removeprefix("// Build: ").split(" (")[0].replace("FILE.cu", str(source)).split()
    run = subprocess.run([*command, "-Werror", "all-warnings", "-o", str(tmp_path / f"{name}.o")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
