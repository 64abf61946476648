"""Grammar-aware fuzzing: random valid `.mask` programs (tests/mask_strategies.py builds them from the
language's constructs and writes them with random layout), checked against an oracle that evaluates the
same random structure directly (the subset and its semantics are stated in mask_strategies' docstring):

- every generated program compiles (or, with expressions allowed past 64 bits, is refused with a positioned
  error), and `maskc check` exits 0 or 1, never 3, never with a traceback;
- values the oracle refuses are refused by `bind` with a ValueError; the others lay out as the oracle says;
- the mask is exact: maskc's IR evaluation, the planner's descriptor (every FULL tile fully visible, nothing
  visible outside the listed tiles, no listed tile empty, partial tiles evaluated per element by the rules
  their kind names, through the row intervals where a rule has them, as the kernel does) and the generated
  mask code compiled for the host and run over the descriptor as the kernel's tile loop does, all equal the
  oracle's brute-force mask;
- programs damaged at the grammar level (a token swapped for another kind, a required part dropped, a type
  error, an unknown or unbound name, an out-of-range literal...) are refused with a diagnostic that has a
  position on the damaged line.

Deterministic in CI (the `ci` hypothesis profile of conftest.py derandomizes). Locally each run draws new
examples; `MASKC_FUZZ_EXAMPLES=N` runs N examples per test instead of the CI counts, `MASKC_FUZZ_SEED=S`
fixes the seed."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

import host_mask
import mask_strategies as ms
import numpy as np
import pytest
from click.testing import CliRunner
from descriptor_check import check_descriptor
from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st
from mask_strategies import const_values, split_sequences
from test_row_intervals import rows_visible
from test_standalone import HARNESS as STANDALONE_HARNESS
from test_standalone import _values_code

import maskc
from maskc import cli
from maskc.compiler import compile_program, compile_text
from maskc.diagnostics import MaskError
from maskc.front import read_program
from maskc.kernels import KernelOptions, TileKind, planner_name
from maskc.plan.planner import TileConfig, plan
from maskc.runtime import Attention
from maskc.tools.explain import choose_sequences
from maskc.tools.reference import dense_mask, visible

PATH = "gen.mask"
CONFIGS = [TileConfig(16, 8), TileConfig(8, 16), TileConfig(32, 32), TileConfig(16, 16, 8), TileConfig(128, 64)]
# Kernel families and tiles of the generated code: 128 x 64 (sm80), 128 x 128 and 128 x 64 with grid tiles at
# least 8 wide (sm90a).
OPTIONS = [KernelOptions(), KernelOptions(arch="sm_90a"), KernelOptions(arch="sm_90a", key_tile=64)]
UNLIMITED = 1 << 40  # a refinement budget that never runs out: the descriptor must be exact
_EXAMPLES = int(os.environ.get("MASKC_FUZZ_EXAMPLES", "0"))
_SEED = os.environ.get("MASKC_FUZZ_SEED")


def fuzz(examples: int):
    """The settings of one fuzz test: `examples` in CI, MASKC_FUZZ_EXAMPLES if set; MASKC_FUZZ_SEED fixes
    the seed."""
    checks = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
              HealthCheck.function_scoped_fixture]

    def wrap(test):
        test = settings(max_examples=_EXAMPLES or examples, deadline=None, suppress_health_check=checks)(test)
        return seed(int(_SEED))(test) if _SEED is not None else test

    return wrap


# ---------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------


def assert_positioned(exc: MaskError, text: str, lines: tuple[int, int] | None = None) -> None:
    """Every diagnostic has a position, the rendering shows it, and (if `lines` is given) one of them lies
    on those lines."""
    unplaced = [d.message for d in exc.diagnostics if d.span.line == 0]
    assert not unplaced, f"a diagnostic without a position ({unplaced[0]}) for\n{text}"
    rendered = exc.render()
    first = exc.diagnostics[0]
    assert f"{PATH}:{first.span.line}:{first.span.col}: error:" in rendered, rendered
    if lines is not None:
        found = [d.span.line for d in exc.diagnostics]
        assert any(lines[0] <= line <= lines[1] for line in found), \
            f"the diagnostics are on lines {found}, the damage on lines {lines[0]}-{lines[1]}:\n{rendered}\n{text}"


def compiled_case(case: ms.Case, options: KernelOptions | None = None):
    """The compiled program, or an AssertionError saying why maskc refused a valid one."""
    text = case.text
    try:
        return compile_text(text, options or KernelOptions(), case.consts, path=PATH)
    except MaskError as exc:
        assert_positioned(exc, text)
        raise AssertionError(f"maskc refused a valid program:\n{exc.render()}\n--- program:\n{text}\n"
                             f"consts {case.consts}") from None


def check_layouts(case, compiled, oracle, context):
    """Refused values raise ValueError; the others lay out as the oracle says. Returns (values, layouts,
    oracle masks) of the accepted sequences."""
    ok, refused = split_sequences(case, oracle)
    for seq, why in refused:
        try:
            compiled.bind([seq])
        except ValueError:
            continue
        raise AssertionError(f"bind accepted values the oracle refuses ({why}): {seq}{context}")
    if not ok:
        return [], [], []
    try:
        values, layouts = compiled.bind([seq for seq, _ in ok])
    except ValueError as exc:
        raise AssertionError(f"bind refused values the oracle accepts: {exc}{context}") from None
    for b, ((seq, want), got) in enumerate(zip(ok, layouts)):
        have = (got.n, got.starts.tolist(), got.lengths.tolist(), got.symbol.tolist(), got.member.tolist())
        expect = (want.n, want.starts, want.lengths, want.symbol, want.member)
        assert have == expect, f"sequence {b}: layout (n, starts, lengths, segment, member) {have}, oracle {expect}{context}"
    masks = [oracle.mask(seq, lay) for seq, lay in ok]
    return values, layouts, masks


def first_difference(got: np.ndarray, want: np.ndarray) -> str:
    q, k = np.argwhere(got != want)[0]
    return f"(q={q}, k={k}): maskc {bool(got[q, k])}, oracle {bool(want[q, k])}; {int((got != want).sum())} pairs differ"


def region_matrix(program, region, layout, values) -> np.ndarray:
    """The [n, n] pairs one region makes visible as the kernel evaluates it in a partial tile: through its
    row intervals (q on the side, the row condition, lo <= k < hi) where it has them, else its predicate."""
    if region.rows is not None:
        return rows_visible(program, region, layout, values)
    n = layout.n
    q = np.arange(n, dtype=np.int64)[:, None]
    k = np.arange(n, dtype=np.int64)[None, :]
    return visible(program, layout, values, q, k, regions=[region])


def implied_by_plan(program, desc, layouts, values) -> list[np.ndarray]:
    """The visible pairs the kernel would compute from this descriptor: every pair of a FULL tile, the pairs
    of a partial tile that a region its kind names makes visible, nothing outside the listed tiles."""
    out = []
    regions = [None] * len(program.regions)
    for b, (lay, val) in enumerate(zip(layouts, values)):
        n = lay.n
        tile_of = {}
        for side in "qk":
            count = int(desc.blocks.tiles(side)[b])
            tokens = desc.tokens(side, b, np.arange(count))
            of = np.full(n, -1, dtype=np.int64)
            for t, row in enumerate(tokens):
                of[row[row >= 0]] = t
            tile_of[side] = (of, count)
        listed = np.full((tile_of["q"][1] + 1, tile_of["k"][1] + 1), -1, dtype=np.int64)
        for w in np.nonzero(desc.work_seq == b)[0]:
            for j in range(desc.row_ptr[w], desc.row_ptr[w + 1]):
                listed[int(desc.work_qtile[w]), int(desc.k_tile[j])] = int(desc.kind[j])
        kinds = listed[tile_of["q"][0][:, None], tile_of["k"][0][None, :]]
        got = kinds == TileKind.FULL
        for r, region in enumerate(program.regions):
            named = (kinds > 0) & ((kinds & TileKind.rule_bit(r)) != 0)
            if named.any():
                regions[r] = region_matrix(program, region, lay, val)
                got |= named & regions[r]
        out.append(got)
    return out


# ---------------------------------------------------------------------------------------------------
# Valid programs: exactness against the oracle
# ---------------------------------------------------------------------------------------------------


@fuzz(250)
@given(case=ms.cases(), config=st.sampled_from(CONFIGS))
def test_generated_programs_compile_and_match_the_oracle(case, config):
    compiled = compiled_case(case)
    text = case.text
    context = f"\n--- program:\n{text}\nconsts {case.consts}\nsequences {case.sequences}\nconfig {config}"
    oracle = ms.Oracle(case.program, const_values(case))
    if case.program.batch:  # the batch: section reads back as written
        read = [{k: (list(map(list, v)) if v and isinstance(v[0], tuple) else list(v)) if isinstance(v, tuple) else v
                 for k, v in s.items()} for s in choose_sequences(compiled.program)[0]]
        assert read == case.program.batch, f"batch: section read as {read}{context}"
    values, layouts, masks = check_layouts(case, compiled, oracle, context)
    if not layouts:
        return
    for b, (lay, val, want) in enumerate(zip(layouts, values, masks)):
        got = dense_mask(compiled.program, lay, val)
        assert np.array_equal(got, want), f"sequence {b}: the IR's mask differs at {first_difference(got, want)}{context}"
    desc = plan(compiled.program, layouts, values, config, refine_budget=UNLIMITED)
    try:
        assert desc.stats.tiles_conservative == 0
        check_descriptor(compiled.program, desc, layouts, values, masks)
    except AssertionError as exc:
        raise AssertionError(f"{exc}{context}") from None
    for b, (got, want) in enumerate(zip(implied_by_plan(compiled.program, desc, layouts, values), masks)):
        assert np.array_equal(got, want), f"sequence {b}: the plan's mask differs at {first_difference(got, want)}{context}"


KERNEL_MODEL = r"""
// The kernel's tile loop on the host: for each work item, each listed k tile; a FULL tile shows every pair
// (and must hold a token in every key slot), a partial one what mask_visible says for the rules in its kind.
extern "C" void maskc_kernel_model(const i64* seq_table, const int* seg_start, const int* seg_code, const int* arrays,
                                   int items, const int* work, const int* row_ptr, const int* k_tiles,
                                   const unsigned* kinds, int block_q, int block_k, const long long* offsets,
                                   unsigned char* out, int* problems) {
    for (int w = 0; w < items; ++w) {
        const int b = work[2 * w], q_tile = work[2 * w + 1];
        const MaskSeq s = mask_seq(seq_table, seg_start, seg_code, arrays, b);
        const long long n = s.length;
        unsigned char* o = out + offsets[b];
        for (int j = row_ptr[w]; j < row_ptr[w + 1]; ++j) {
            const int k_tile = k_tiles[j];
            const unsigned kind = kinds[j];
            for (int r = 0; r < block_q; ++r) {
                const int qt = q_token(s, q_tile, r);
                if (qt < 0) continue;
                const MaskRow row = mask_row(s, qt);
                for (int c = 0; c < block_k; ++c) {
                    const int kt = k_token(s, k_tile, c);
                    const bool shown = kind == 0 ? true : mask_visible(s, row, mask_col(s, kt), kind);
                    if (!shown) continue;
                    if (kt < 0 || kt >= n || qt >= n) { ++*problems; continue; }
                    o[qt * n + kt] = 1;
                }
            }
        }
    }
}
"""


def kernel_model(compiled, sequences, workdir: Path) -> tuple[list[np.ndarray], list[tuple[np.ndarray, ...]]]:
    """The pairs the kernel shows for these sequences: its tile loop over the descriptor maskc plans for its
    own tiles (KERNEL_MODEL), with the generated mask code compiled for the host; and where the mask code has
    interval rules, the pairs its interval masks show per sequence (visible_columns, visible_slots; else none).
    Also the planner inside the generated file (test_standalone's harness) gives the same tables and descriptor
    as maskc's, sequence by sequence."""
    desc, tables, layouts = compiled.tables(sequences)
    values, _ = compiled.bind(sequences)
    prefix = planner_name(compiled.program.name, compiled.options)
    standalone = STANDALONE_HARNESS.replace("PLANNER", prefix).replace("KIND", compiled.code.kind_type)
    standalone += "".join(_values_code(prefix, compiled.program, v, i) for i, v in enumerate(values))
    lib = host_mask.build(compiled.source + host_mask.HARNESS + KERNEL_MODEL + standalone, workdir)
    sizes = [lay.n * lay.n for lay in layouts]
    offsets = np.array([0, *np.cumsum(sizes)[:-1]], dtype=np.int64)
    kinds = tables.kinds.astype(np.uint32)
    arrays = [np.ascontiguousarray(a) for a in (tables.seq_table, tables.seg_start, tables.seg_code, tables.arrays,
                                                 tables.work, tables.row_ptr, tables.k_tiles, kinds)]
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731

    def run():
        out = np.zeros(max(1, sum(sizes)), dtype=np.uint8)
        problems = np.zeros(1, dtype=np.int32)
        lib.maskc_kernel_model(*map(ptr, arrays[:4]), ctypes.c_int(len(tables.work)), *map(ptr, arrays[4:]),
                               ctypes.c_int(compiled.options.block_q), ctypes.c_int(compiled.options.tile[1]),
                               ptr(offsets), ptr(out), ptr(problems))
        planned = []
        for b, (val, lay) in enumerate(zip(values, layouts)):
            row = np.zeros(compiled.code.seq_table.width, dtype=np.int64)
            capacity = len(lay.starts) + 4
            seg_start, seg_code = np.zeros(capacity, dtype=np.int32), np.zeros(capacity, dtype=np.int32)
            arr = np.zeros(max(1, sum(a.size for a in val.arrays.values())), dtype=np.int32)
            used = ctypes.c_longlong(0)
            count = getattr(lib, f"maskc_test_plan_{b}")(ptr(row), ptr(seg_start), ptr(seg_code), ctypes.c_int(capacity),
                                                          ptr(arr), ctypes.c_longlong(arr.size), ctypes.byref(used))
            items = int(desc.blocks.tiles("q")[b])
            work = np.zeros(2 * max(items, 1), dtype=np.int32)
            row_ptr = np.zeros(items + 1, dtype=np.int32)
            k_tiles = np.zeros(max(1, items * int(desc.blocks.tiles("k")[b])), dtype=np.int32)
            kind = np.zeros_like(k_tiles, dtype=np.uint32)
            listed = 0
            if count == len(lay.starts):
                lib.maskc_test_descriptor.restype = ctypes.c_longlong
                listed = lib.maskc_test_descriptor(ptr(row), ptr(seg_start), ptr(seg_code), ptr(arr), ptr(work),
                                                   ptr(row_ptr), ptr(k_tiles), ptr(kind))
            planned.append((count, row, seg_start[:max(count, 0)], seg_code[:max(count, 0)], arr[:used.value],
                            row_ptr, k_tiles[:listed], kind[:listed]))
        # Where every rule is an interval of keys per row, the kernels' interval masks too (visible_columns,
        # visible_slots), over each sequence's key tiles.
        intervals = [host_mask.evaluate_key_intervals(lib, tables, b, lay.n, int(desc.blocks.tiles("k")[b]),
                                                      compiled.options.block_k)
                     for b, lay in enumerate(layouts)] if "struct RowKeys" in compiled.source else []
        return out, int(problems[0]), planned, intervals

    out, problems, planned, intervals = host_mask.isolated(run)
    assert problems == 0, f"{problems} pairs shown outside the sequence (or FULL tiles with empty key slots)"
    for b, (count, row, seg_start, seg_code, arr, row_ptr, k_tiles, kind) in enumerate(planned):
        one, one_tables, _ = compiled.tables([sequences[b]])
        where = f"the standalone planner, sequence {b}"
        assert count == len(layouts[b].starts), f"{where}: {count} segments, maskc has {len(layouts[b].starts)}"
        np.testing.assert_array_equal(row, one_tables.seq_table[0], err_msg=f"{where}: seq_table row")
        np.testing.assert_array_equal(seg_start, one_tables.seg_start, err_msg=where)
        np.testing.assert_array_equal(seg_code, one_tables.seg_code, err_msg=where)
        np.testing.assert_array_equal(arr, one_tables.arrays[:len(arr)], err_msg=where)
        np.testing.assert_array_equal(row_ptr, one.row_ptr, err_msg=f"{where}: row_ptr")
        np.testing.assert_array_equal(k_tiles, one.k_tile, err_msg=f"{where}: k tiles")
        np.testing.assert_array_equal(kind == TileKind.FULL, one.kind == TileKind.FULL, err_msg=f"{where}: full tiles")
    masks = [out[o:o + size].reshape(lay.n, lay.n).astype(bool) for o, size, lay in zip(offsets, sizes, layouts)]
    return masks, intervals


@pytest.fixture(scope="module")
def host_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("grammar-fuzz-host")


@pytest.mark.skipif(host_mask.compiler() is None, reason="needs a C++ compiler")
@fuzz(25)
@given(case=ms.cases(), options=st.sampled_from(OPTIONS))
def test_generated_code_of_generated_programs_matches_the_oracle(case, options, host_dir):
    """The kernel's own mask code (compiled for the host), run over the descriptor maskc plans for the
    kernel's tiles, shows exactly the oracle's pairs, and so do its interval masks where it has them."""
    note(f"--- program:\n{case.text}\nconsts {case.consts}\nsequences {case.sequences}\noptions {options}")
    compiled = compiled_case(case, options)
    context = f"\n--- program:\n{case.text}\nconsts {case.consts}\nsequences {case.sequences}"
    oracle = ms.Oracle(case.program, const_values(case))
    ok, _ = split_sequences(case, oracle)
    if not ok:
        return
    sequences = [seq for seq, _ in ok]
    got, intervals = kernel_model(compiled, sequences, host_dir)
    for b, ((seq, lay), mask) in enumerate(zip(ok, got)):
        want = oracle.mask(seq, lay)
        assert np.array_equal(mask, want), f"sequence {b}: the generated code differs at {first_difference(mask, want)}{context}"
        for how, seen in zip(("visible_columns", "visible_slots"), intervals[b] if intervals else ()):
            assert np.array_equal(seen, want), f"sequence {b}: {how} differs at {first_difference(seen, want)}{context}"


@fuzz(60)
@given(case=ms.cases(), as_arrays=st.booleans())
def test_runtime_values_given_per_sequence_by_a_caller_reach_the_plan_unchanged(case, as_arrays):
    """A batch's values passed as a call's keywords, one per sequence (lists and tables as the Python lists
    `tolist()` makes, or as numpy arrays), bind to what the sequences gave: `Attention.sequences` tells one value
    per sequence from one for all by depth, and an empty first list or table must not change the reading (it
    made a batch of tables look like one ragged table, or read empty tables as rows of one)."""
    compiled = compiled_case(case)
    ok, _ = split_sequences(case, ms.Oracle(case.program, const_values(case)))
    if not ok:
        return
    values, layouts = compiled.bind([seq for seq, _ in ok])
    keywords = {p.name: [(v.arrays[p.name] if as_arrays else v.arrays[p.name].tolist()) if p.type.depth
                         else v.scalars[p.name] for v in values]
                for p in compiled.program.runtime_params}
    note(f"--- program:\n{case.text}\nkeywords {keywords}")
    again, _ = compiled.bind(Attention(compiled).sequences([lay.n for lay in layouts], keywords))
    for b, (bound, read) in enumerate(zip(values, again)):
        assert {k: int(x) for k, x in bound.scalars.items()} == {k: int(x) for k, x in read.scalars.items()}, b
        for name, array in bound.arrays.items():
            assert array.shape == read.arrays[name].shape and np.array_equal(array, read.arrays[name]), \
                f"sequence {b}: '{name}' is {read.arrays[name].tolist()} through the keywords, {array.tolist()} given"


@fuzz(60)
@given(case=ms.cases(max_sequences=1, overflow=True))
def test_expressions_past_64_bits_compile_or_are_refused_where_written(case):
    """With expressions that may leave 64 bits: a clean compile, or an error at the expression's position."""
    text = case.text
    try:
        compiled = compile_text(text, KernelOptions(), case.consts, path=PATH)
    except MaskError as exc:
        assert_positioned(exc, text)
        assert "overflow" in exc.render() or "64 bits" in exc.render(), f"{exc.render()}\n{text}"
        return
    except Exception as exc:  # noqa: BLE001 - exactly what this test looks for
        raise AssertionError(f"{type(exc).__name__}: {exc} for\n{text}") from exc
    try:
        compiled.tables(case.sequences)
    except ValueError:
        pass


# ---------------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------------


def cli_check(text: str, consts: dict, tmp: Path, subprocess_run: bool = False) -> tuple[int, str]:
    path = tmp / PATH
    path.write_text(text, encoding="utf-8", newline="")
    args = ["check", PATH]
    for name, value in consts.items():
        args += ["--param", f"{name}={str(value).lower() if isinstance(value, bool) else value}"]
    if subprocess_run:
        package_root = str(Path(maskc.__file__).resolve().parent.parent)  # wherever maskc is imported from
        env = {**os.environ, "MASKC_DEBUG": "",
               "PYTHONPATH": os.pathsep.join([package_root, *filter(None, [os.environ.get("PYTHONPATH")])])}
        done = subprocess.run([sys.executable, "-m", "maskc", *args], cwd=tmp, capture_output=True, text=True, env=env,
                              check=False)
        return done.returncode, done.stdout + done.stderr
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        result = CliRunner(env={"MASKC_DEBUG": None}).invoke(cli.cli, args, prog_name="maskc")
    finally:
        os.chdir(cwd)
    return result.exit_code, result.output


def expected_check_result(case: ms.Case) -> int:
    """What `maskc check` must say of a valid program: 1 when the values it binds (the batch: section, else
    the defaults, where they are complete) are refused, else 0."""
    oracle = ms.Oracle(case.program, const_values(case))
    sequences = case.program.batch or [{}]
    n_decl = case.program.param("n")
    for seq in sequences:
        if oracle.uses_n and "n" not in seq and (n_decl is None or n_decl.default is None):
            return 0
        if any(p.name not in seq and p.default is None for p in case.program.params
               if not p.const and p.name != "n"):
            return 0
    try:
        for seq in sequences:
            oracle.layout(seq)
    except ms.Refused:
        return 1
    return 0


def assert_clean_exit(code: int, output: str, text: str) -> None:
    assert code in (0, 1), f"maskc check exited {code}:\n{output}\n{text}"
    assert "Traceback" not in output and "internal error" not in output, f"{output}\n{text}"


@fuzz(30)
@given(case=ms.cases())
def test_maskc_check_accepts_generated_programs(case, tmp_path_factory):
    text = case.text
    code, output = cli_check(text, case.consts, tmp_path_factory.mktemp("check"))
    assert_clean_exit(code, output, text)
    assert code == expected_check_result(case), f"maskc check exited {code}:\n{output}\n{text}"


# ---------------------------------------------------------------------------------------------------
# Damaged programs
# ---------------------------------------------------------------------------------------------------


@fuzz(400)
@given(damaged=ms.damaged_cases())
def test_damaged_programs_are_refused_at_the_damage(damaged):
    text, consts, lines, what = damaged
    try:
        compile_program(read_program(text, PATH), KernelOptions(), consts)
    except MaskError as exc:
        assert_positioned(exc, text, lines)
        return
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"{type(exc).__name__}: {exc} for ({what})\n{text}") from exc
    raise AssertionError(f"maskc accepted a damaged program ({what}):\n{text}")


@fuzz(30)
@given(damaged=ms.damaged_cases())
def test_maskc_check_reports_damaged_programs(damaged, tmp_path_factory):
    text, consts, _, what = damaged
    code, output = cli_check(text, consts, tmp_path_factory.mktemp("check"))
    assert_clean_exit(code, output, text)
    assert code == 1 and re.search(rf"{re.escape(PATH)}:\d+:\d+: error: ", output), f"({what}) {output}\n{text}"


def test_maskc_check_in_a_process(tmp_path):
    """The installed command itself, in a process of its own, on one valid and one damaged program."""
    good = "mask m(n: int = 40, w: int = 3)\nsegments:\n  S = n\nrules:\n  S -> S where 0 <= q - k < w  # window\n"
    code, output = cli_check(good, {}, tmp_path, subprocess_run=True)
    assert (code, output) == (0, "")
    bad = good.replace("0 <= q - k < w", "0 <= q - k < w and q.y")
    code, output = cli_check(bad, {}, tmp_path, subprocess_run=True)
    assert_clean_exit(code, output, bad)
    assert code == 1 and f"{PATH}:5:" in output, output


# ---------------------------------------------------------------------------------------------------
# Problems this fuzzer found, kept as regression cases
# ---------------------------------------------------------------------------------------------------


def test_an_unused_let_binding_is_checked_too():
    """`let x = nope + true in q < k` is accepted: `nope` is unknown and `nope + true` adds a bool, but x is
    never used. docs/language.md: unknown names and type errors are reported."""
    text = "mask m()\nsegments:\n  S = n\nrules:\n  S -> S where (let x = nope + true in q < k)\n"
    with pytest.raises(MaskError) as info:
        read_program(text, PATH)
    assert f"{PATH}:5:25: error: unknown name 'nope'" in info.value.render()
