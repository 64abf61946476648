"""The `maskc` command line through click's CliRunner: every command on examples, key lines of the output,
exit codes 0 / 1 / 2 / 3, stdin and stdout, atomic and deterministic output, pictures and mask dumps."""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat as stat_module
import subprocess
import sys
from pathlib import Path

import bounded
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from small_configs import SMALL

import maskc
from maskc import cli
from maskc.build import BuildError
from maskc.compiler import CompiledMask, compile_file
from maskc.kernels import KernelOptions
from maskc.plan import native
from maskc.tools.explain import choose_sequences
from maskc.tools.reference import dense_mask

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BAD_MASK = """mask bad(n: int = 100)
segments:
    S = n
rules:
    S -> S   where q < nope
"""


def example(name: str) -> str:
    return str(EXAMPLES / f"{name}.mask")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("maskc-cache")


@pytest.fixture
def run(cache_dir):
    """Invoke `maskc ARGS...`, with a private build cache; stdout and stderr stay apart."""

    def invoke(*args, input=None, env=None):
        runner = CliRunner(env={"MASKC_CACHE_DIR": str(cache_dir), "MASKC_DEBUG": None, **(env or {})})
        return runner.invoke(cli.cli, [str(a) for a in args], input=input, prog_name="maskc")

    return invoke


def as_cli(value) -> str:
    """A parameter value as `--param` takes it."""
    return json.dumps(np.asarray(value).tolist()) if isinstance(value, (list, tuple, np.ndarray)) else (
        str(value).lower() if isinstance(value, bool) else str(value))


def small_args(name: str) -> list[str]:
    """`--n` and `--param`s for the first sequence of the example's small configuration."""
    consts, sequences = SMALL[name]
    args = []
    for key, value in {**consts, **sequences[0]}.items():
        args += ["--n", str(value)] if key == "n" else ["--param", f"{key}={as_cli(value)}"]
    return args


def small_mask(name: str) -> np.ndarray:
    """The exact mask of the small configuration's first sequence, by brute force."""
    consts, sequences = SMALL[name]
    compiled = compile_file(example(name), KernelOptions(), consts)
    values, layouts = compiled.bind(sequences[:1])
    return dense_mask(compiled.program, layouts[0], values[0])


def small_masks(name: str) -> list[np.ndarray]:
    """The exact masks of the sequences that `small_args` gives: one, or a batch: section's with the
    small configuration's values in every line."""
    consts, sequences = SMALL[name]
    compiled = compile_file(example(name), KernelOptions(), consts)
    runtime = {k: v for k, v in sequences[0].items() if k != "n"}
    chosen, _ = choose_sequences(compiled.program, sequences[0].get("n"), runtime)
    values, layouts = compiled.bind(chosen)
    return [dense_mask(compiled.program, lay, val) for lay, val in zip(layouts, values)]


# ---------------------------------------------------------------------------------------------------
# The command itself
# ---------------------------------------------------------------------------------------------------


def test_help_lists_every_command_with_a_description(run):
    result = run("--help")
    assert result.exit_code == 0
    for command in ("compile", "check", "explain", "run"):
        assert re.search(rf"^  {command}\s+\S", result.stdout, re.M), command


def test_version(run):
    result = run("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"maskc, version {maskc.__version__}"


def test_entry_point_is_main():
    assert callable(cli.main)


@pytest.mark.parametrize("args", [["frobnicate"], ["compile", "--bogus", example("causal")], ["compile"],
                                  ["compile", example("causal"), "--arch", "sm_70"],
                                  ["compile", example("causal"), "--head-dim", "96"]])
def test_misuse_exits_2_with_usage(run, args):
    result = run(*args)
    assert result.exit_code == 2
    assert "Usage: maskc" in result.stderr


def test_missing_file_exits_2(run, tmp_path):
    result = run("check", tmp_path / "nowhere.mask")
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


# ---------------------------------------------------------------------------------------------------
# --param
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [
    ("12", 12), ("-3", -3), ("32_768", 32768), ("true", True), ("false", False), ("[]", []),
    ("[1, 2, 3]", [1, 2, 3]), ("[[true,false],[false,true]]", [[True, False], [False, True]]),
    (" [ 1_000 , -2 ] ", [1000, -2]),
])
def test_param_values(text, value):
    assert cli.parse_value(text) == value


@pytest.mark.parametrize("text", ["", "1.5", "abc", "True", "[1,", "[1, 2.5]", '["a"]', "{}", "1e3", "0x10",
                                  "[[[1]]]", "[" * 5000 + "]" * 5000])  # (lists nest two deep at most)
def test_bad_param_values(text):
    with pytest.raises(ValueError):
        cli.parse_value(text)


@pytest.mark.parametrize("param", ["targets", "targets=1.5", "=3", "targets=abc", "1x=2", "responses=[1,",
                                   "responses=" + "[" * 1000 + "]" * 1000])
def test_bad_param_syntax_is_a_usage_error(run, param):
    result = run("explain", example("hstu"), "--param", param)
    assert result.exit_code == 2
    assert "Usage: maskc explain" in result.stderr and "--param" in result.stderr


@pytest.mark.parametrize("command", ["explain", "run"])
def test_n_given_by_both_n_and_param_is_a_usage_error(run, command):
    result = run(command, example("causal"), "--n", 300, "--param", "n=5")  # (--param n was ignored)
    assert result.exit_code == 2 and "n is given twice: --n 300 and --param n=5" in result.stderr


def test_a_negative_seed_is_a_usage_error(run):
    result = run("run", example("causal"), "--n", 64, "--cpu", "--seed", -1)
    assert result.exit_code == 2 and "Invalid value for '--seed'" in result.stderr


def test_unknown_or_repeated_param_is_a_usage_error(run):
    result = run("explain", example("hstu"), "--param", "nope=1")
    assert result.exit_code == 2
    assert "mask hstu has no parameter 'nope'" in result.stderr and "targets" in result.stderr
    result = run("explain", example("hstu"), "--param", "targets=1", "--param", "targets=2")
    assert result.exit_code == 2 and "given twice" in result.stderr


# ---------------------------------------------------------------------------------------------------
# compile
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["hstu", "document", "clear_text", "tree", "rm_shared"])
def test_compile_writes_the_generated_source(run, tmp_path, name):
    out = tmp_path / "out.cu"
    result = run("compile", example(name), "-o", out, "--head-dim", "64", "--dtype", "fp16", "--arch", "sm_80")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""
    text = out.read_text()
    assert text.startswith(f"// Generated by maskc {maskc.__version__} from {name}.mask -- do not edit")
    assert f"maskc_{name}_fwd_sm80_hd64_fp16" in text and 'extern "C"' in text
    expected = compile_file(example(name), KernelOptions(64, "fp16", "sm_80")).source
    assert text == expected


def test_compile_default_output_is_beside_the_cwd_like_a_c_compiler(run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run("compile", example("hstu")).exit_code == 0
    assert run("compile", example("hstu"), "--emit", "ptx").exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hstu.cu", "hstu.ptx"]


def test_compile_is_deterministic(run, tmp_path):
    for name in ("a.cu", "b.cu"):
        assert run("compile", example("clear_text"), "-o", tmp_path / name).exit_code == 0
    assert (tmp_path / "a.cu").read_bytes() == (tmp_path / "b.cu").read_bytes()


def test_compile_gives_the_same_bytes_from_any_directory(run, tmp_path, monkeypatch):
    """The banner names the mask by its base name, not by the path as typed."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "window.mask").write_text((EXAMPLES / "sliding_window.mask").read_text())
    outputs = []
    for cwd, mask in ((tmp_path, "sub/window.mask"), (tmp_path / "sub", "window.mask"),
                      (tmp_path / "sub", "../sub/./window.mask"), (EXAMPLES, tmp_path / "sub" / "window.mask")):
        monkeypatch.chdir(cwd)
        result = run("compile", mask, "-o", "-")
        assert result.exit_code == 0, result.stderr
        outputs.append(result.stdout_bytes)
    assert all(out == outputs[0] for out in outputs)
    assert outputs[0].startswith(f"// Generated by maskc {maskc.__version__} from window.mask -- ".encode())


def test_compile_to_stdout(run):
    result = run("compile", example("causal"), "-o", "-")
    assert result.exit_code == 0
    assert result.stdout == compile_file(example("causal")).source


def test_compile_from_stdin(run, tmp_path):
    text = (EXAMPLES / "sliding_window.mask").read_text()
    result = run("compile", "-", "-o", "-", input=text)
    assert result.exit_code == 0
    assert result.stdout.startswith(f"// Generated by maskc {maskc.__version__} from <stdin>")
    result = run("compile", "-", input=text)
    assert result.exit_code == 2 and "-o" in result.stderr


def test_compile_cubin_is_an_elf_file(run, tmp_path):
    out = tmp_path / "hstu.cubin"
    result = run("compile", example("hstu"), "--emit", "cubin", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes()[:4] == b"\x7fELF"


def test_compile_ptx_names_its_target(run):
    result = run("compile", example("causal"), "--emit", "ptx", "--arch", "sm_80", "-o", "-")
    assert result.exit_code == 0
    assert re.search(r"^\.target sm_80", result.stdout, re.M)


def test_cubin_to_stdout_goes_to_a_pipe_but_not_to_a_terminal(run, monkeypatch):
    result = run("compile", example("causal"), "--emit", "cubin", "-o", "-")
    assert result.exit_code == 0 and result.stdout_bytes[:4] == b"\x7fELF"
    monkeypatch.setattr(cli, "stdout_is_terminal", lambda: True)
    result = run("compile", example("causal"), "--emit", "cubin", "-o", "-")
    assert result.exit_code == 2
    assert "binary" in result.stderr and result.stdout_bytes == b""


def test_compile_bakes_in_const_params(run):
    default = run("compile", example("clear"), "-o", "-").stdout
    small = run("compile", example("clear"), "-o", "-", "--param", "h=64", "--param", "w=100")
    assert small.exit_code == 0 and small.stdout != default


def test_compile_refuses_runtime_params(run):
    result = run("compile", example("hstu"), "--param", "targets=100", "-o", "-")
    assert result.exit_code == 2
    assert "'targets' is a runtime parameter" in result.stderr and "call time" in result.stderr
    assert "those of hstu: none" in result.stderr


def test_a_bad_mask_gets_diagnostics_and_exit_1(run, tmp_path):
    bad = tmp_path / "bad.mask"
    bad.write_text(BAD_MASK)
    result = run("compile", bad, "-o", tmp_path / "bad.cu")
    assert result.exit_code == 1
    assert re.search(rf"^{re.escape(str(bad))}:5:\d+: error: .*nope", result.stderr, re.M)
    assert "^" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "bad.cu").exists()


def test_a_failed_compile_leaves_the_old_output_alone(run, tmp_path):
    bad = tmp_path / "bad.mask"
    bad.write_text(BAD_MASK)
    out = tmp_path / "out.cu"
    out.write_text("old contents")
    assert run("compile", bad, "-o", out).exit_code == 1
    assert out.read_text() == "old contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.mask", "out.cu"]  # no temporary left behind


def test_writing_into_a_missing_directory_is_an_error(run, tmp_path):
    result = run("compile", example("causal"), "-o", tmp_path / "no" / "such" / "dir.cu")
    assert result.exit_code == 1
    assert "dir.cu" in result.stderr and "Traceback" not in result.stderr


def is_char_device(path: str) -> bool:
    return os.path.exists(path) and stat_module.S_ISCHR(os.stat(path).st_mode)


@pytest.mark.skipif(not is_char_device("/dev/full"), reason="needs /dev/full")
def test_a_failed_write_is_an_error_naming_the_file(run, tmp_path):
    """A full disk (/dev/full, reached through a link so that the code before the fix renamed over the link,
    not over the device) is exit 1 with the file named, not a silent exit 0."""
    link = tmp_path / "out.cu"
    link.symlink_to("/dev/full")
    result = run("compile", example("causal"), "-o", link)
    assert result.exit_code == 1
    assert result.stderr == f"error: cannot write {link}: No space left on device\n"
    result = run("explain", example("causal"), "--n", "256", "--dump-mask", link)
    assert result.exit_code == 1 and f"error: cannot write {link}: No space left on device" in result.stderr
    assert link.is_symlink() and is_char_device("/dev/full")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.cu"]  # no temporary left behind


@pytest.mark.skipif(not is_char_device("/dev/full"), reason="needs /dev/full")
def test_a_failed_write_to_stdout_is_an_error_not_an_internal_one():
    with open("/dev/full", "wb") as full:
        result = subprocess.run([sys.executable, "-m", "maskc", "compile", example("causal"), "-o", "-"],
                                stdout=full, stderr=subprocess.PIPE, text=True, env={**os.environ, "MASKC_DEBUG": ""})
    assert result.returncode == 1, result.stderr
    assert result.stderr == "error: cannot write to standard output: No space left on device\n"


def test_output_through_a_link_replaces_the_file_it_names(run, tmp_path):
    (tmp_path / "real.cu").write_text("old contents")
    link = tmp_path / "out.cu"
    link.symlink_to("real.cu")
    assert run("compile", example("causal"), "-o", link).exit_code == 0
    assert link.is_symlink() and (tmp_path / "real.cu").read_text() == compile_file(example("causal")).source


def test_output_to_a_pipe_is_written_into_it(run, tmp_path):
    """A target that is not a regular file (a pipe here; /dev/null, /dev/full) is written in place: renaming
    over it would replace the device node itself."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader exists, so the writer's open does not block
    try:
        if hasattr(fcntl, "F_SETPIPE_SZ"):
            fcntl.fcntl(reader, fcntl.F_SETPIPE_SZ, 1 << 20)
        result = run("compile", example("causal"), "-o", fifo)
        assert result.exit_code == 0, result.stderr
        chunks = []
        while True:
            try:
                chunk = os.read(reader, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(reader)
    assert b"".join(chunks).decode() == compile_file(example("causal")).source
    assert stat_module.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_const_param_without_a_value_is_reported(run, tmp_path):
    mask = tmp_path / "grid.mask"
    mask.write_text("mask image(const w: int)\nsegments:\n    I = grid(4, w)\nrules:\n    I -> I full\n")
    result = run("compile", mask, "-o", "-")
    assert result.exit_code == 1 and "const parameter 'w' has no value" in result.stderr
    assert run("compile", mask, "-o", "-", "--param", "w=8").exit_code == 0


WINDOW_MASK = "mask window(n: int = 64, const w: int = 4)\nsegments:\n    S = n\nrules:\n    S -> S   causal where q - k < w\n"


@pytest.mark.parametrize("value", ["999999999999999999999999999", "9223372036854775808", "-9223372036854775809"])
def test_a_const_value_outside_64_bits_is_an_error_at_its_declaration(run, tmp_path, value):
    """A C compiler wraps `999999999999999999999999999LL` silently: the kernel would test another window."""
    mask = tmp_path / "window.mask"
    mask.write_text(WINDOW_MASK)
    col = WINDOW_MASK.index("const w") + 1
    for command in (("compile", mask, "-o", "-"), ("check", mask)):
        result = run(*command, "--param", f"w={value}")
        assert result.exit_code == 1, result.stderr
        assert result.stderr.startswith(f"{mask}:1:{col}: error: const parameter 'w' = {value} does not fit in a "
                                        "64-bit integer"), result.stderr
        assert "^^^" in result.stderr and result.stdout == ""
    assert run("compile", mask, "-o", "-", "--param", "w=9223372036854775807").exit_code == 0
    assert run("check", mask, "--param", "w=-9223372036854775808").exit_code == 0


# ---------------------------------------------------------------------------------------------------
# Exit code 3: internal errors
# ---------------------------------------------------------------------------------------------------


def test_an_unexpected_exception_is_an_internal_error(run, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the optimiser fell over")

    monkeypatch.setattr(cli, "compile_program", broken)
    result = run("compile", example("causal"), "-o", "-")
    assert result.exit_code == 3
    assert "internal error" in result.stderr and "the optimiser fell over" in result.stderr
    assert "report" in result.stderr and "Traceback" not in result.stderr


def test_a_build_error_names_the_dumped_source(run, monkeypatch, tmp_path):
    dumped = tmp_path / "failed" / "abc.cu"

    def reject(self, emit="cubin"):
        raise BuildError("NVRTC could not compile the generated kernel for sm_90 (a maskc bug)", "error: oops",
                         dumped)

    monkeypatch.setattr(maskc.compiler.CompiledMask, "build", reject)
    result = run("compile", example("causal"), "--emit", "cubin", "-o", tmp_path / "x.cubin")
    assert result.exit_code == 3
    assert "internal error" in result.stderr and f"the generated source is in {dumped}" in result.stderr
    assert not (tmp_path / "x.cubin").exists()


def test_maskc_debug_shows_the_exception(run, monkeypatch):
    monkeypatch.setattr(cli, "compile_program", lambda *a, **k: 1 / 0)
    result = run("compile", example("causal"), "-o", "-", env={"MASKC_DEBUG": "1"})
    assert isinstance(result.exception, ZeroDivisionError)


# ---------------------------------------------------------------------------------------------------
# check
# ---------------------------------------------------------------------------------------------------


def test_check_every_example_silently(run):
    result = run("check", *sorted(EXAMPLES.glob("*.mask")))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""


def test_check_verbose_and_errors(run, tmp_path):
    bad = tmp_path / "bad.mask"
    bad.write_text(BAD_MASK)
    result = run("check", "-v", example("hstu"), bad, example("tree"))
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [f"{example('hstu')}: ok", f"{example('tree')}: ok"]
    assert f"{bad}:5:" in result.stderr


def test_check_reads_stdin(run):
    result = run("check", "-v", "-", input=(EXAMPLES / "causal.mask").read_text())
    assert result.exit_code == 0 and result.stdout == "<stdin>: ok\n"
    result = run("check", "-", input=BAD_MASK)
    assert result.exit_code == 1 and result.stderr.startswith("<stdin>:5:")


def test_check_catches_defaults_that_do_not_lay_out(run, tmp_path):
    mask = tmp_path / "overfull.mask"
    mask.write_text("mask overfull(n: int = 100, a: int = 200)\nsegments:\n    A = a\n    B = n - a\n"
                    "rules:\n    A -> A full\n")
    result = run("check", mask)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"{mask}:4:5: error: overfull: segment B has negative length -100 (n = 100, a = 200)",
        "   4 |     B = n - a",
        "     |     ^^^^^^^^^",
    ]
    # Values given on the command line are checked instead of the defaults.
    assert run("check", mask, "--param", "a=50").exit_code == 0


def test_check_skips_values_the_file_leaves_open(run, tmp_path):
    mask = tmp_path / "open.mask"
    mask.write_text("mask open(prompt: int)\nsegments:\n    P = prompt\n    S = n - prompt\nrules:\n    S -> P full\n")
    assert run("check", mask).exit_code == 0


# ---------------------------------------------------------------------------------------------------
# explain
# ---------------------------------------------------------------------------------------------------


def stat(output: str, label: str) -> str:
    match = re.search(rf"^  {label}\s+(.*)$", output, re.M)
    assert match, f"no '{label}' line in:\n{output}"
    return match.group(1)


def visible_pairs(output: str) -> int:
    return int(stat(output, "visible pairs").split(" of ")[0].replace(",", ""))


@pytest.mark.parametrize("name, region", [
    ("hstu", "[0] H -> H where k <= q"),
    ("shared_prompt", "[2] R -> R where k <= q and q.member == k.member"),
    ("clear_text", "[2] I -> I where (q.y - k.y)^2 + (q.x - k.x)^2 < r^2"),
    ("rm_shared", "[1] R -> P full"),
])
def test_explain_prints_the_ir_after_each_pass(run, name, region):
    result = run("explain", example(name))
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"mask {name}(")
    assert "== lowered\n  segments:\n" in out and "\n  regions:\n" in out
    assert region in out
    for stage, _ in maskc.passes.PIPELINE:
        assert re.search(rf"^== {stage}", out, re.M), stage


def test_explain_shows_what_a_pass_changed(run):
    out = run("explain", example("clear_text")).stdout
    assert "== inline-consts\n  segments:\n    T = text\n    I = grid(128, 252)\n" in out
    assert "== fold-constants: no change" in out
    merged = run("explain", example("hstu_jagged")).stdout
    assert re.search(r"== merge-regions\n  regions:\n    \[0\] C\|T -> C\|H full +# C -> C\|H full; T -> C\|H full",
                     merged)


def test_explain_shows_what_a_pair_of_a_partial_tile_costs(run):
    out = run("explain", example("dilated_window"), "--arch", "sm_90a").stdout
    test = out.split("== pair test")[1].split("\n\n")[0]
    # (The residue-grids pass laid the sequence out as a grid of `dilation` columns and its partial last row: the
    # grid's own pairs test columns, the tail's too.)
    assert "[0] per pair: (0 <= (q.index - k.index)) && (k.index > q.h0) && (q.S_x == k.S_x)" in test
    assert "per pair: 32-bit integer operations only" in test
    # A rule that reads positions inside the segment keeps it a run: the residues are hoisted out of the pairs.
    residue = run("explain", "-", "--n", "300", input="mask t(d: int = 3)\nsegments:\n    S = n\nrules:\n"
                                                       "    S -> S   where 0 <= q - k < 9 * d and (q - k) % d == 0 and q.pos > 1\n")
    test = residue.stdout.split("== pair test")[1].split("\n\n")[0]
    assert "per pair: (0 <= (q.index - k.index)) && (k.index > q.h0)" in test and "(q.h1 == k.h0)" in test
    assert "q.h1 = q % d  (once per row)" in test and "k.h0 = k % d  (once per column)" in test
    tree = run("explain", example("tree")).stdout.split("== pair test")[1]
    assert "per pair: 64-bit arithmetic, an ancestor() walk" in tree
    slow = run("explain", "-", "--n", "300", input="mask t(d: int = 3)\nsegments:\n    S = n\nrules:\n"
                                                    "    S -> S   where (q * k) % d == 0\n")
    assert slow.exit_code == 0 and "per pair: 64-bit arithmetic, a division\n" in slow.stdout.split("== pair test")[1]
    intervals = run("explain", example("document")).stdout.split("== pair test")[1]
    assert "every rule is an interval of keys per row" in intervals


def test_explain_statistics_of_the_defaults(run):
    out = run("explain", example("shared_prompt")).stdout
    assert "tile statistics, values: the mask's defaults (1 sequence, tiles of 128 queries x 64 keys)" in out
    assert stat(out, "sequence 0:") == "n = 32768, responses = [4096, 4096, 4096, 4096, 4096, 4096]"
    # 8192 causal prompt rows, 6 responses that see the prompt and are causal inside.
    assert visible_pairs(out) == 8192 * 8193 // 2 + 6 * (4096 * 8192 + 4096 * 4097 // 2)
    tiles = re.match(r"([\d,]+): ([\d,]+) empty .*, ([\d,]+) full .*, ([\d,]+) partial", stat(out, "tiles"))
    total, empty, full, partial = (int(g.replace(",", "")) for g in tiles.groups())
    assert total == 256 * 512 and empty + full + partial == total
    for label in ("tile density", "planner", "partial tiles", "descriptor"):
        stat(out, label)


@pytest.mark.parametrize("name, planned_by", [
    ("shared_prompt", "row intervals in closed form, in C++" if native.library(wait=True) else
     "row intervals in closed form, with numpy"),
    ("natten2d", "every rule in closed form, by its factors;"),
    ("clear_text", "1 of 3 rules in closed form by their factors, the others searched;"),
    ("tree", "interval search;"),
])
def test_explain_says_how_the_planner_found_the_tiles(run, name, planned_by):
    assert stat(run("explain", example(name)).stdout, "planner").startswith(planned_by)


def test_explain_says_when_numpy_planned_the_row_intervals(run, monkeypatch):
    monkeypatch.setenv("MASKC_NATIVE", "0")
    planner = stat(run("explain", example("document")).stdout, "planner")
    assert planner.startswith("row intervals in closed form, with numpy (the C++ planner is off")


def test_explain_counts_no_ragged_tile_as_one_a_planner_could_make_full(run):
    # clear_text's grid is 252 wide: its right edge's k tiles have empty slots, and a FULL tile may have none.
    # Some of those see every real pair; the planner is exact, so none of its partial tiles could be full.
    assert stat(run("explain", example("clear_text")).stdout, "partial tiles").startswith("0 are in fact full")


def test_explain_counts_the_tiles_of_the_family_named_by_arch(run):
    portable = run("explain", example("causal"), "--n", "4096").stdout
    hopper = run("explain", example("causal"), "--n", "4096", "--arch", "sm_90a").stdout
    assert "tiles of 128 queries x 64 keys" in portable and "tiles of 128 queries x 128 keys" in hopper
    assert stat(portable, "tiles").startswith("2,048: ") and stat(hopper, "tiles").startswith("1,024: ")
    assert visible_pairs(portable) == visible_pairs(hopper) == 4096 * 4097 // 2


def test_explain_says_when_a_packed_call_runs_each_member_as_a_sequence(run):
    # Two documents of 1000 tokens, apart: 8 query tiles of 128 each, the i-th seeing min(128 (i + 1), 1000) / 64
    # key tiles of 64 (rounded up), 72 tiles per document, against 152 together.
    out = run("explain", example("document"), "--n", "2000", "--param", "docs=[1000, 1000]").stdout
    assert stat(out, "tiles").endswith("98 full (19.14%), 54 partial (10.55%)")
    assert stat(out, "as called") == ("2 sequences in a packed call, one per member of D (no rule crosses its members: "
                                      "tiles start at each): 144 tiles visited, 112 full, 32 partial")
    # Short documents stay together (apart, each would fill a tile of its own), and other masks never split.
    assert "as called" not in run("explain", example("document"), "--n", "256", "--param", "docs=[100, 156]").stdout
    assert "as called" not in run("explain", example("causal"), "--n", "256").stdout


def test_explain_uses_the_batch_section(run):
    out = run("explain", example("rm_shared")).stdout
    assert "values: the mask's default batch (9 sequences" in out
    assert stat(out, "sequence 8:") == "n = 776, prompt = 776, responses = []"


@pytest.mark.parametrize("name", sorted(SMALL))
def test_explain_counts_visible_pairs_exactly(run, name):
    result = run("explain", example(name), *small_args(name))
    assert result.exit_code == 0, result.stderr
    masks = small_masks(name)
    assert visible_pairs(result.stdout) == sum(int(m.sum()) for m in masks)
    assert f"of {sum(m.size for m in masks):,} (exact count)" in result.stdout


@pytest.fixture
def child_env(cache_dir):
    """The environment of `maskc` in a child process (tests/bounded.py): the private build cache."""
    return {**os.environ, "MASKC_CACHE_DIR": str(cache_dir), "MASKC_DEBUG": ""}


@pytest.mark.parametrize("command", ["explain", "run"])
@pytest.mark.parametrize("n", [2**31 - 1, 10**8])
def test_a_huge_n_is_refused_at_once(child_env, command, n):
    """n = 2^31 - 1 (the documented maximum) used to be planned before any check: killed at 24 GB; under a
    1 GiB cap, a MemoryError after 8-16 s. Now explain's planner refuses it from the layout, run's CPU check
    before planning (the GPU path plans first as well, before allocating its inputs)."""
    child = bounded.maskc(command, example("causal"), "--n", n, *(["--cpu"] if command == "run" else []),
                          memory=bounded.GiB, env=child_env)
    assert child.returncode == 1, child.stderr[-2000:]
    last = child.stderr.splitlines()[-1]
    if command == "explain":
        assert last.startswith(f"{example('causal')}: error: the descriptor would list at least ") and "1 GiB limit" in last
        assert " at least 0 tiles" not in last
    else:
        assert last == (f"{example('causal')}: error: {n:,} tokens are too many for the CPU check (at most 262,144); "
                        "give a smaller --n or --batch")
    # Python's start and imports included (~3 s idle on a two-core machine): the refusal itself takes milliseconds.
    # The failure this guards against is the message and return code above; the bound leaves a loaded CI room.
    assert child.seconds < 20


def test_explain_estimates_the_counts_of_a_long_sequence_from_a_sample(child_env):
    """n = 10^6 visits 61 million tiles: counting each took over 4 GiB (killed under this 2 GiB cap, 38 s
    and 7.5 GB with --png). Now a sample of 2^22 of them is counted."""
    child = bounded.maskc("explain", example("causal"), "--n", 10**6, memory=2 * bounded.GiB, env=child_env)
    assert child.returncode == 0, child.stderr[-2000:]
    assert stat(child.stdout, "counted").startswith("a sample of 4,070,05")
    assert stat(child.stdout, "visible pairs").startswith("~")
    assert abs(float(re.search(r"= ([\d.]+)%", stat(child.stdout, "visible pairs")).group(1)) - 50.0) < 0.01
    assert stat(child.stdout, "tiles").startswith("122,078,125: 61,027,344 empty")  # from the plan: exact
    assert child.seconds < 30


def test_explain_refuses_the_picture_of_a_long_sequence_at_once(child_env, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "m.png"
    child = bounded.maskc("explain", example("causal"), "--n", 10**6, "--png", out, memory=2 * bounded.GiB,
                          env=child_env)
    assert child.returncode == 1, child.stderr[-2000:]
    assert child.stderr.splitlines()[-1] == (
        f"{example('causal')}: error: --png draws every visited tile, and these values visit 61,050,781: more than the 4,194,304 explain "
        "goes through one by one (causal attention up to n ~ 260,000); give a smaller --n, or leave out --png "
        "(the counts are then estimated)")
    assert not out.exists() and child.seconds < 10


def test_explain_sampled_counts_agree_with_the_exact_ones(run, monkeypatch):
    from maskc.tools import explain

    exact = run("explain", example("shared_prompt")).stdout
    monkeypatch.setattr(explain, "COUNTED_TILES_MAX", 5000)
    sampled = run("explain", example("shared_prompt")).stdout
    visited = int(re.search(r"of the ([\d,]+) visited tiles", stat(exact, "tile density")).group(1).replace(",", ""))
    assert stat(sampled, "counted").startswith(f"a sample of {-(-visited // -(-visited // 5000)):,} of the {visited:,} ")
    assert "(exact count)" in exact and "(estimated)" in sampled
    assert stat(sampled, "tiles") == stat(exact, "tiles")  # the plan's own counts
    estimate = int(stat(sampled, "visible pairs").split(" of ")[0].lstrip("~").replace(",", ""))
    assert abs(estimate / visible_pairs(exact) - 1) < 0.02


def test_counted_tiles_hold_the_tokens_of_their_slots():
    """VisitedTiles sizes tiles from their extents (no token lists): the same as counting their real slots."""
    from maskc.tools import explain

    for name in ("natten2d", "video3d", "clear_text", "rm_shared", "full"):
        consts, sequences = SMALL[name]
        compiled = compile_file(example(name), KernelOptions(), consts)
        desc, _, _ = compiled.plan(sequences)
        for entries in (None, np.arange(0, len(desc.k_tile), 3)):
            tiles = explain.VisitedTiles.of(desc, entries)
            q = (explain.tile_tokens(desc, "q", tiles.seq, tiles.qtile) >= 0).sum(axis=1)
            k = (explain.tile_tokens(desc, "k", tiles.seq, tiles.ktile) >= 0).sum(axis=1)
            np.testing.assert_array_equal(tiles.area, q * k)


def test_explain_bad_values_exit_1(run):
    result = run("explain", example("hstu"), "--n", "100")  # 2048 targets do not fit in 100 tokens
    assert result.exit_code == 1
    assert result.stderr.startswith(f"{example('hstu')}:7:5: error: hstu: segment H has negative length -1948 "
                                    "(n = 100, targets = 2048)\n   7 |     H = n - targets ")
    result = run("explain", example("clear"), "--n", "100")  # the grid fixes n = 32768
    assert result.exit_code == 1 and "fixes the length" in result.stderr


RUNTIME_VALUES = """mask r(lengths: [int], p: int)
segments:
    S = sum(lengths)
rules:
    S -> S where q - k < p
"""


@pytest.mark.parametrize("params, expected", [
    (["lengths=[1, -2]", "p=3"], ["3:5: error: r: segment S has negative length -1 (lengths = [1, -2])",
                                  "   3 |     S = sum(lengths)",
                                  "     |     ^^^^^^^^^^^^^^^^"]),
    (["lengths=[1]", "p=true"], ["1:24: error: r: parameter 'p' is an int, got true",
                                 "   1 | mask r(lengths: [int], p: int)",
                                 "     |                        ^^^^^^"]),
    (["lengths=[1]"], ["1:24: error: r: runtime parameter 'p' has no default and was not given",
                       "   1 | mask r(lengths: [int], p: int)",
                       "     |                        ^^^^^^"]),
    (["lengths=[[1], [2, 3]]", "p=1"], ["1:8: error: r: parameter 'lengths' must be a [int] (1-dimensional, "
                                        "rectangular), got [[1], [2, 3]]",
                                        "   1 | mask r(lengths: [int], p: int)",
                                        "     |        ^^^^^^^^^^^^^^"]),
    (["lengths=[1]", "p=1", "n=3_000_000_000"], ["1:6: error: r: n = 3000000000 must be an integer in [0, 2^31 - 1]",
                                                 "   1 | mask r(lengths: [int], p: int)",
                                                 "     |      ^"]),
])
@pytest.mark.parametrize("command", ["explain", "check", "run"])
def test_errors_about_runtime_values_point_at_the_source(run, tmp_path, command, params, expected):
    """A value given with --param is reported as a diagnostic: file:line:col, the line and a caret under the
    parameter's declaration or the segment that cannot be laid out; exit code 1, never a traceback."""
    mask = tmp_path / "r.mask"
    mask.write_text(RUNTIME_VALUES)
    args = [a for p in params for a in ("--param", p)] + (["--cpu"] if command == "run" else [])
    result = run(command, mask, *args)
    if command == "check" and "has no default" in expected[0]:
        assert result.exit_code == 0  # check leaves alone the values a file leaves open
        return
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[-3:] == [f"{mask}:{expected[0]}", *expected[1:]]
    if command == "explain":  # stdin is named as in every other diagnostic
        result = run(command, "-", *args, input=RUNTIME_VALUES)
        assert result.exit_code == 1 and result.stderr.splitlines() == [f"<stdin>:{expected[0]}", *expected[1:]]


@pytest.mark.parametrize("name", ["block_sparse", "document", "natten2d", "tree", "clear_text"])
def test_dump_mask_is_the_exact_mask(run, tmp_path, name):
    out = tmp_path / "mask.npy"
    result = run("explain", example(name), *small_args(name), "--dump-mask", out)
    assert result.exit_code == 0, result.stderr
    assert f"mask of sequence 0: {out}" in result.stdout
    np.testing.assert_array_equal(np.load(out), small_mask(name))


def test_dump_mask_refuses_a_huge_n(run, tmp_path):
    out = tmp_path / "mask.npy"
    result = run("explain", example("causal"), "--dump-mask", out)
    assert result.exit_code == 1 and "16384" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("args", [["hstu", "--n", "1000", "--param", "targets=100"],
                                  ["causal", "--n", "9000"], ["rm_shared"], ["natten2d"]])
def test_explain_png(run, tmp_path, args):
    pytest.importorskip("matplotlib")
    out = tmp_path / "mask.png"
    name, *rest = args
    result = run("explain", example(name), *rest, "--png", out)
    assert result.exit_code == 0, result.stderr
    assert f"picture: {out}" in result.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_explain_png_without_matplotlib(run, tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # makes `import matplotlib` fail
    result = run("explain", example("causal"), "--n", "100", "--png", tmp_path / "m.png")
    assert result.exit_code == 2
    assert "pip install matplotlib" in result.stderr
    assert not (tmp_path / "m.png").exists()


def test_picture_pixels_count_the_same_pairs(tmp_path):
    """The downsampled picture's pixels add up to the exact count (full tiles by area, partial ones pair
    by pair), and its tile codes cover every visible pair."""
    from maskc.tools import explain

    compiled = compile_file(example("sliding_window"))
    desc, layouts, values = compiled.plan([{"n": 9000, "window": 700}])
    tiles = explain.VisitedTiles.of(desc)
    picture = explain.MaskPicture(desc, tiles, 0, 9000, explain.picture_scale(9000))
    counts = explain.visible_per_tile(compiled.program, desc, layouts, values, tiles, picture.add_partial)
    picture.add_tiles(count_full=True)
    assert picture.scale == 8 and picture.visible.sum() == counts.sum()
    assert not ((picture.visible > 0) & (picture.kinds == 0)).any()


# ---------------------------------------------------------------------------------------------------
# run (no GPU here: the CPU check)
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["hstu"], ["rm_shared"], ["document"], ["causal", "--n", "300"],
                                  ["block_sparse"], ["shared_prompt", "--n", "1000", "--param", "responses=[100,0,250]"],
                                  ["clear_text", "--param", "h=20", "--param", "w=30", "--param", "text=40"],
                                  ["natten2d"]])
def test_run_without_a_gpu_checks_on_the_cpu(run, args):
    name, *rest = args
    result = run("run", example(name), *rest, "--cpu")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "checking on the CPU instead" in result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{name}: ")
    assert "descriptor   exact against the brute-force mask" in result.stdout
    assert re.search(r"tile loop +max \|O - O_ref\| = \S+, max \|LSE - LSE_ref\| = ", result.stdout)
    assert lines[-1] == "passed"


def test_run_backward_on_the_cpu_checks_the_gradients_model(run):
    result = run("run", example("shared_prompt"), "--n", "700", "--param", "responses=[200,0,120]", "--cpu",
                 "--backward")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert re.search(r"backward +built: [\d,]+ bytes of cubin", result.stdout)
    assert re.search(r"gradients +max \|dX - dX_ref\| / max \|dX_ref\| = \S+ over dq, dk, dv", result.stdout)
    long = run("run", example("causal"), "--cpu", "--backward").stdout
    assert "gradients    not checked: 32,768 tokens" in long
    # sm_90a at head dim 128: the CPU model of the fused pass (dQ summed per query tile's work item)
    fused = run("run", example("document"), "--param", "docs=[300, 5, 250]", "--cpu", "--backward", "--arch", "sm_90a")
    assert fused.exit_code == 0 and fused.stdout.splitlines()[-1] == "passed", fused.stdout + fused.stderr


def test_run_backward_fails_on_a_wrong_key_descriptor(run, monkeypatch):
    key_descriptor = CompiledMask.key_descriptor

    def forgetful(self, desc):  # lose the last query tile of every key tile
        kd = key_descriptor(self, desc)
        keep = np.ones(len(kd.q_tile), dtype=bool)
        keep[kd.col_ptr[1:][np.diff(kd.col_ptr) > 0] - 1] = False
        counts = np.diff(kd.col_ptr) - (np.diff(kd.col_ptr) > 0)
        return type(kd)(kd.work_seq, kd.work_ktile, np.concatenate([[0], np.cumsum(counts)]).astype(np.int32),
                        kd.q_tile[keep], kd.kind[keep], kd.q_item[keep])

    monkeypatch.setattr(CompiledMask, "key_descriptor", forgetful)
    result = run("run", example("causal"), "--n", "300", "--cpu", "--backward")
    assert result.exit_code == 1 and result.stdout.splitlines()[-1] == "FAILED"


def test_run_checks_every_row_of_a_short_sequence(run):
    out = run("run", example("hstu"), "--n", "700", "--param", "targets=90", "--cpu").stdout
    assert "1 sequence of 700 tokens (n from --n, with --param values)" in out
    assert "checked      every query row" in out


def test_run_samples_long_sequences(run):
    out = run("run", example("causal"), "--cpu", "--batch", "2").stdout
    assert "2 sequences, 65,536 tokens (the mask's defaults, repeated 2 times)" in out
    assert re.search(r"checked +[\d,]+ of 65,536 query rows \(\d+ of 512 query tiles", out)


def test_run_json(run):
    result = run("run", example("rm_shared"), "--json", "--cpu")
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert report["passed"] is True and report["device"] == "cpu" and report["mask"] == "rm_shared"
    assert report["descriptor_problems"] == [] and report["max_error"] < 1e-4


def test_run_fails_on_a_wrong_descriptor(run, monkeypatch):
    plan = maskc.compiler.CompiledMask.plan

    def full_everywhere(self, sequences):  # claim every visited tile is full: diagonal tiles are not
        desc, layouts, values = plan(self, sequences)
        desc.kind[:] = 0
        return desc, layouts, values

    monkeypatch.setattr(maskc.compiler.CompiledMask, "plan", full_everywhere)
    result = run("run", example("causal"), "--n", "256", "--cpu")  # no ragged tiles
    assert result.exit_code == 1
    assert "hidden pairs lie in key tiles marked full" in result.stdout and result.stdout.endswith("FAILED\n")


def test_run_refuses_a_sequence_too_long_for_the_cpu_before_planning_it(run, monkeypatch):
    def no_plan(self, sequences):
        raise AssertionError("planned a sequence the CPU check refuses")

    monkeypatch.setattr(maskc.compiler.CompiledMask, "plan", no_plan)
    result = run("run", example("causal"), "--n", 10**6, "--cpu")  # descriptor of 0.5 GB: seconds to plan
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (f"{example('causal')}: error: 1,000,000 tokens are too many for the "
                                               "CPU check (at most 262,144); give a smaller --n or --batch")


@pytest.mark.parametrize("batch, message", [
    (10**12, "1,000,000,000,000 sequences in all; a call takes at most 1,048,576"),
    (10**20, "sequences in all; a call takes at most 1,048,576"),
    (2000, "600,000 tokens are too many for the CPU check (at most 262,144)"),
])
def test_run_refuses_a_batch_too_large_before_making_it(run, batch, message):
    result = run("run", example("causal"), "--n", 300, "--cpu", "--batch", batch)  # (once: MemoryError, minutes)
    assert result.exit_code == 2
    assert "Invalid value for --batch" in result.stderr and message in result.stderr


def test_running_out_of_memory_is_an_error_not_a_bug(run, monkeypatch):
    # A thin band over a huge grid passes the size checks (no coarse box is wholly visible to prove a floor),
    # then the planner's memory per visited tile runs out: a plain error, exit 1.
    def out_of_memory(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(maskc.plan.planner, "plan", out_of_memory)
    monkeypatch.setattr(maskc.compiler, "plan", out_of_memory)
    result = run("explain", example("causal"), "--n", 4096)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith("error: out of memory: the mask is too large to plan")


def test_the_gpu_check_bounds_its_rows_times_keys():
    """The float32 reference holds a score per (row, key) and head: sampled rows x n stay within
    GPU_CHECK_PAIRS (the first and last row always), where 258 rows of 10^8 keys took 26 GB on the host."""
    from maskc.tools import trial

    rng = np.random.default_rng(0)
    assert len(trial._sampled_rows(1000, rng)) == 1000
    assert len(trial._sampled_rows(100_000, rng)) == 258  # 256 random rows, the first and the last
    for n in (10**6, 10**7, 2**31 - 1):
        rows = trial._sampled_rows(n, rng)
        assert rows[0] == 0 and rows[-1] == n - 1 and len(rows) == max(trial.GPU_CHECK_PAIRS // n, 2)


def test_run_bad_values_exit_1(run):
    result = run("run", example("rm_shared"), "--n", "100", "--cpu")
    assert result.exit_code == 1 and result.stderr.splitlines()[-3:] == [
        f"{example('rm_shared')}:7:16: error: rm_shared: runtime parameter 'prompt' has no default and was not given",
        "   7 | mask rm_shared(prompt: int, responses: [int])",
        "     |                ^^^^^^^^^^^",
    ]


def test_run_refuses_query_heads_that_key_heads_do_not_divide(run):
    result = run("run", EXAMPLES / "causal.mask", "--n", "64", "--heads", "3", "--kv-heads", "2", "--cpu")
    assert result.exit_code == 2 and "--heads (3) must be a multiple of --kv-heads (2)" in result.output


def test_run_on_the_gpu_path_is_chosen_only_with_a_gpu():
    from maskc.tools import trial

    problem = trial.gpu_problem()
    assert problem is None or isinstance(problem, str)


@pytest.mark.gpu
def test_run_on_a_gpu(run):
    from maskc.tools import trial

    if trial.gpu_problem():
        pytest.skip(trial.gpu_problem())
    result = run("run", example("hstu"), "--n", "4096", "--param", "targets=512", "--heads", "4", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] and report["tflops"] > 0 and report["visible_pairs"] > 0


@pytest.mark.gpu
def test_run_on_a_gpu_refuses_what_cannot_fit_before_allocating(run):
    """Planned, and weighed against the GPU's free memory, before the inputs are allocated: a clear refusal
    (exit 1), never an out-of-memory error (exit 3)."""
    from maskc.tools import trial

    if trial.gpu_problem():
        pytest.skip(trial.gpu_problem())
    result = run("run", example("causal"), "--n", 2**31 - 1)
    assert result.exit_code == 1 and "1 GiB limit" in result.stderr
    result = run("run", example("sliding_window"), "--n", 10**8, "--param", "window=64", "--heads", "64")
    assert result.exit_code == 1 and "GiB of GPU memory for the inputs, outputs" in result.stderr


@pytest.mark.gpu
def test_run_on_a_gpu_counts_a_long_sequence_within_bounds(run):
    from maskc.tools import trial

    if trial.gpu_problem():
        pytest.skip(trial.gpu_problem())
    # At least 4.9 million visited tiles (9.8 million with the portable kernels' 128 x 64 tiles), past the 2^22
    # that are counted exactly: the visible pairs are estimated from a sample of them.
    n = 400_000
    result = run("run", example("causal"), "--n", n, "--heads", "1", "--head-dim", "64", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] and report["visible_pairs_estimated"]
    assert report["rows_checked"] <= trial.GPU_CHECK_PAIRS // n
    assert abs(report["visible_pairs"] / (n * (n + 1) // 2) - 1) < 1e-3


def test_compile_refuses_options_the_family_does_not_support(run, tmp_path):
    result = run("compile", example("causal"), "-o", tmp_path / "x.cu", "--head-dim", "256", "--arch", "sm_80")
    assert result.exit_code == 2 and "head_dim must be one of (64, 128) for sm_80" in result.stderr
    result = run("compile", example("causal"), "-o", tmp_path / "x.cu", "--head-dim", "256", "--arch", "sm_90a")
    assert result.exit_code == 0 and "maskc_causal_fwd_sm90a_hd256_bf16" in (tmp_path / "x.cu").read_text()


def test_compile_chooses_the_backward_pass(run, tmp_path):
    out = tmp_path / "x.cu"
    result = run("compile", example("causal"), "-o", out, "--arch", "sm_90a", "--backward-kernels", "hopper_fused")
    assert result.exit_code == 0, result.stderr
    text = out.read_text()
    assert "maskc_causal_bwd_prep_sm90a_hd128_bf16" in text and "maskc_causal_bwd_dq_store_sm90a_hd128_bf16" in text
    assert "maskc_causal_bwd_dq_sm90a" not in text  # the deterministic pair's dQ kernel is not in this file
    result = run("compile", example("causal"), "-o", out, "--arch", "sm_90a", "--backward-kernels", "portable")
    assert result.exit_code == 0 and "maskc_causal_bwd_dq_sm90a_hd128_bf16" in out.read_text()
    result = run("compile", example("causal"), "-o", out, "--arch", "sm_90a", "--deterministic")
    assert result.exit_code == 0 and "deterministic (no atomics)" in out.read_text()  # the Hopper pair
    result = run("compile", example("causal"), "-o", out, "--arch", "sm_90a", "--deterministic",
                 "--backward-kernels", "hopper_fused")
    assert result.exit_code == 2 and "'hopper_fused' is not deterministic" in result.stderr
    result = run("compile", example("causal"), "-o", out, "--arch", "sm_90a", "--head-dim", "64",
                 "--backward-kernels", "hopper_fused")
    assert result.exit_code == 2 and "backward_kernels must be one of ['hopper', 'portable']" in result.stderr


def test_compile_takes_several_masks(run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("compile", example("causal"), example("hstu"))
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["causal.cu", "hstu.cu"]
    assert (tmp_path / "hstu.cu").read_text() == run("compile", example("hstu"), "-o", "-").stdout


def test_compile_of_several_masks_reports_each_bad_one_and_writes_the_others(run, tmp_path):
    bad = tmp_path / "bad.mask"
    bad.write_text("mask bad()\nsegments:\n    S = n\nrules:\n    S -> S casual\n")
    out = tmp_path / "out"
    out.mkdir()
    result = run("compile", str(bad), example("causal"), "-o", str(out))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"{bad}:5:12: error: unexpected name 'casual'")
    assert sorted(p.name for p in out.iterdir()) == ["causal.cu"]
    misuse = run("compile", str(bad), example("causal"), "-o", str(out / "x.cu"))
    assert misuse.exit_code == 2 and "several masks: -o must be an existing directory" in misuse.stderr


def test_a_length_fixed_by_the_parameters_names_the_file_and_says_what_to_change(run):
    for command in ("explain", "run"):
        result = run(command, example("clear"), "--n", "4096", *(["--cpu"] if command == "run" else []))
        assert result.exit_code == 1
        head, excerpt, carets = result.stderr.strip().splitlines()[-3:]
        assert head.startswith(f"{example('clear')}:7:5: error: clear: the layout fixes the length to 32768 tokens")
        assert excerpt.startswith("   7 |     I = grid(h, w)") and carets == "     |     " + "^" * 14
        assert "--param NAME=VALUE rather than --n" in result.stderr


def test_param_help_shows_how_to_write_lists_and_tables(run):
    for command in ("compile", "check", "explain", "run"):
        assert "'docs=[100, 0, 250]'" in " ".join(run(command, "--help").stdout.split())


def test_explain_dumps_the_whole_packed_batch(run, tmp_path):
    from maskc.compiler import compile_file
    from maskc.kernels import KernelOptions
    from maskc.tools.reference import dense_mask

    out = tmp_path / "batch.npz"
    # The default batch, each of its nine sequences shrunk to 450 tokens.
    result = run("explain", example("rm_shared"), "--param", "prompt=300", "--param", "responses=[100, 0, 50]",
                 "--dump-batch", str(out))
    assert result.exit_code == 0, result.stderr
    data = np.load(out)
    compiled = compile_file(example("rm_shared"), KernelOptions())
    values, layouts = compiled.bind([{"prompt": 300, "responses": [100, 0, 50]}] * len(compiled.program.batch))
    cu = data["cu_seqlens"]
    assert cu.tolist() == np.concatenate([[0], np.cumsum([lay.n for lay in layouts])]).tolist()
    mask = data["mask"]
    assert mask.shape == (cu[-1], cu[-1])
    for b, (lay, val) in enumerate(zip(layouts, values)):
        block = mask[cu[b]:cu[b + 1]]
        assert (block[:, cu[b]:cu[b + 1]] == dense_mask(compiled.program, lay, val)).all()
        assert block.sum() == block[:, cu[b]:cu[b + 1]].sum(), "no pair crosses sequences"
    too_big = run("explain", example("causal"), "--dump-batch", str(tmp_path / "x.npz"))
    assert too_big.exit_code == 1 and "--dump-batch writes a T x T array" in too_big.stderr


_CLI_VALUES = st.sampled_from(["-1", "0", "3", "2147483648", "99999999999999999999", "1.5", "true", "x", "[]",
                               "[1, 2]", "[[1], [2, 3]]", "[-5, 7]", "[1, 2", "", "=", "1e3", "0x10", "32_768"])


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(SMALL)), data=st.data())
def test_explain_with_odd_values_exits_cleanly(name, data):
    """`maskc explain` with one --param of the example's given an odd value (or a name it does not have, or an
    odd --n): exit 0, or 1 for an error in the values, or 2 for misuse, with a message; never 3 (a maskc bug)."""
    args = small_args(name)
    params = [i for i, a in enumerate(args) if a == "--param"]
    choice = data.draw(st.sampled_from(["param", "unknown", "n"] if params else ["unknown", "n"]))
    if choice == "param":
        i = data.draw(st.sampled_from(params)) + 1
        args[i] = args[i].split("=")[0] + "=" + data.draw(_CLI_VALUES)
    elif choice == "unknown":
        args += ["--param", "zzz=" + data.draw(_CLI_VALUES)]
    else:
        args += ["--n", data.draw(st.sampled_from(["-1", "0", "1", "x", "5000000000"]))]
    runner = CliRunner(env={"MASKC_DEBUG": None})
    result = runner.invoke(cli.cli, ["explain", str(EXAMPLES / f"{name}.mask"), *args], prog_name="maskc")
    assert result.exit_code in (0, 1, 2), result.output
    if result.exit_code:
        assert "error" in result.output.lower() or "usage" in result.output.lower(), result.output


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(sorted(SMALL)),
       arch=st.sampled_from(["sm_80", "sm_86", "sm_90", "sm_90a", "sm_90a", "sm_90a", "sm_70"]),
       head_dim=st.sampled_from(["64", "64", "128", "128", "256", "96"]),
       dtype=st.sampled_from(["bf16", "bf16", "fp16", "fp16", "fp32"]),
       backward=st.sampled_from([[], ["--backward-kernels", "portable"], ["--backward-kernels", "hopper"],
                                 ["--backward-kernels", "hopper_fused"], ["--deterministic"],
                                 ["--deterministic", "--backward-kernels", "hopper_fused"]]),
       param=st.sampled_from([[], ["--param", "n=5"], ["--param", "h=0"], ["--param", "w=-3"], ["--param", "zzz=1"],
                              ["--param", "h=2147483648"], ["--param", "w=[1]"]]))
def test_compile_with_any_options_exits_cleanly(name, arch, head_dim, dtype, backward, param):
    """`maskc compile --emit cu -o -` with any architecture, head dim, dtype, backward pass and a --param: the
    kernel source (exit 0), or an error in the values (1) or the command line (2) with a message; never 3."""
    runner = CliRunner(env={"MASKC_DEBUG": None})
    args = ["compile", str(EXAMPLES / f"{name}.mask"), "-o", "-", "--arch", arch, "--head-dim", head_dim,
            "--dtype", dtype, *backward, *param]
    result = runner.invoke(cli.cli, args, prog_name="maskc")
    assert result.exit_code in (0, 1, 2), result.output
    if result.exit_code == 0:
        assert "__global__" in result.output
    else:
        assert "error" in result.output.lower(), result.output
