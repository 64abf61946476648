"""The `maskc` command: compile, check, explain and run `.mask` files.

Exit codes, as compilers have them: 0 success; 1 an error in the user's mask or its values (diagnostics on
stderr, never a traceback), or an output that could not be written; 2 misuse of the command line (click's
usage message); 3 an internal error (a maskc bug: the message says so; `MASKC_DEBUG=1` shows the traceback).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import click

from maskc import __version__, ir
from maskc.compiler import compile_program
from maskc.diagnostics import MaskError
from maskc.front import read_file, read_program
from maskc.kernels import ARCHS, BACKWARD_PASSES, DTYPES, HEAD_DIMS, KernelOptions

# The tooling (maskc.tools: explain, trial and the brute-force reference) is imported by the commands that use
# it, so that `maskc compile` loads the compile path only.

EMIT_SUFFIX = {"cu": ".cu", "ptx": ".ptx", "cubin": ".cubin"}

# ---------------------------------------------------------------------------------------------------
# Errors and exit codes
# ---------------------------------------------------------------------------------------------------


def fail(message: str, code: int) -> NoReturn:
    click.echo(message, err=True)
    raise SystemExit(code)


def internal_error(exc: Exception) -> None:
    if os.environ.get("MASKC_DEBUG") == "1":
        raise exc
    # A BuildError's message names the dumped source and carries NVRTC's log.
    lines = [f"maskc: internal error: {type(exc).__name__}: {exc}".rstrip()]
    lines.append("This is a bug in maskc, not in your mask. Please report it with the .mask file, the command "
                 "and this message (MASKC_DEBUG=1 shows the traceback).")
    fail("\n".join(lines), 3)


def reporting_errors(command):
    """Turn exceptions into messages and exit codes; click's own (usage errors, exits) pass through."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except MaskError as exc:
            fail(exc.render(), 1)
        except ValueError as exc:  # PlanError (sizes), the tools' and the runtime's checks
            fail(f"error: {exc}", 1)
        except MemoryError:  # a plan the size checks could not refuse ahead (a thin band over a huge grid)
            fail("error: out of memory: the mask is too large to plan at these sizes on this machine (the host "
                 "planner needs memory per visited tile); give smaller sizes", 1)
        except Exception as exc:  # BuildError and anything unexpected
            internal_error(exc)

    return wrapper


# ---------------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------------

_INT = re.compile(r"^[+-]?\d+(_\d+)*$")


def parse_value(text: str):
    """A parameter value as the language writes literals: 12, -3, 32_768, true, [1, 2], [[true, false]]."""
    text = text.strip()
    if _INT.match(text):
        return int(text.replace("_", ""))
    if text in ("true", "false"):
        return text == "true"
    if text.startswith("["):
        try:
            value = json.loads(re.sub(r"(?<=\d)_(?=\d)", "", text))
        except (json.JSONDecodeError, RecursionError):
            value = None
        if _is_literal_list(value):
            return value
    raise ValueError("expected an int, true, false or a bracketed list of them, nested at most two deep, such as "
                     "[1, 2, 3] or [[true, false]]")


def _is_literal_list(value, depth: int = 2) -> bool:
    """A list of ints and bools, or of such lists, nested at most `depth` deep (as the language's values are)."""
    if not isinstance(value, list) or depth == 0:
        return False
    return all(isinstance(x, (int, bool)) or _is_literal_list(x, depth - 1) for x in value)


class ParamAssignment(click.ParamType):
    """`NAME=VALUE`, converted to (name, value)."""

    name = "NAME=VALUE"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        name, sep, text = value.partition("=")
        name = name.strip()
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            self.fail(f"expected NAME=VALUE, got {value!r}", param, ctx)
        try:
            return name, parse_value(text)
        except ValueError as exc:
            shown = text.strip()
            shown = repr(shown) if len(shown) <= 60 else f"{shown[:60]!r}... ({len(shown):,} characters)"
            self.fail(f"{name}: {exc}, got {shown}", param, ctx)


DETERMINISTIC_HELP = ("A backward pass that gives the same bits on the same inputs (the fastest such one; sm_90a's "
                      "default at head dim 128 is not).")


def param_option(help_text: str):
    return click.option("--param", "params", type=ParamAssignment(), multiple=True, metavar="NAME=VALUE",
                        help=help_text + " Values are written as in the language: 12, 32_768, true, a list "
                                         "'docs=[100, 0, 250]', a table 'layout=[[true, false], [false, true]]'.")


MASK_ARGUMENT = click.Path(exists=True, dir_okay=False, allow_dash=True)


def shown_path(path: str) -> str:
    """How messages name a mask argument ('-' is stdin)."""
    return "<stdin>" if path == "-" else path


@contextlib.contextmanager
def naming_the_file(path: str):
    """Errors about runtime values name the mask file they came from: a ValueProblem (a MaskError) points into
    it already; any other ValueError (a size the tools refuse, a descriptor too large) is given its name."""
    try:
        yield
    except MaskError:
        raise
    except ValueError as exc:
        fail(f"{shown_path(path)}: error: {exc}", 1)


def read_mask(path: str) -> ir.Program:
    if path == "-":
        return read_program(sys.stdin.read(), "<stdin>")
    return read_file(path)


def given_once(n: int | None, runtime: dict[str, object]) -> None:
    """--n and --param n= say the same thing: one of them, not both."""
    if n is not None and "n" in runtime:
        raise click.UsageError(f"n is given twice: --n {n} and --param n={runtime['n']}; give one")


def split_params(program: ir.Program, params: tuple[tuple[str, object], ...],
                 allow_runtime: bool = True) -> tuple[dict[str, object], dict[str, object]]:
    """--param values split into (const values to compile in, runtime values); names are checked here,
    so a typo is a usage error rather than a diagnostic about the file."""
    consts: dict[str, object] = {}
    runtime: dict[str, object] = {}
    for name, value in params:
        if name in consts or name in runtime:
            raise click.BadParameter(f"'{name}' is given twice", param_hint="--param")
        decl = program.param(name)
        if decl is None and name != "n":
            known = ", ".join(["n"] + [p.name for p in program.params if p.name != "n"])
            raise click.BadParameter(f"mask {program.name} has no parameter '{name}' (its parameters: {known})",
                                     param_hint="--param")
        if decl is not None and decl.const:
            consts[name] = value
        elif allow_runtime:
            runtime[name] = value
        else:
            const_names = ", ".join(p.name for p in program.params if p.const) or "none"
            raise click.BadParameter(
                f"'{name}' is a runtime parameter: it is a kernel argument given at call time (changing it never "
                f"recompiles), so compile does not take it. Only const parameters are compiled in "
                f"(those of {program.name}: {const_names}).", param_hint="--param")
    return consts, runtime


def cannot_write(name: str, exc: OSError) -> NoReturn:
    fail(f"error: cannot write {name}: {exc.strerror or exc}", 1)


def write_atomically(path: Path, data: bytes) -> None:
    """Write beside the target, then rename over it: a failed or interrupted run never leaves half a file.
    A symbolic link is followed (the file it names is replaced; the link stays). A target that exists and is
    not a regular file (/dev/null, /dev/full, a pipe) is written in place: renaming over it would replace
    the device itself. Any failure, a full disk included, is an error naming the file (exit 1)."""
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file() and not target.is_dir():
        try:
            with open(target, "wb") as f:
                f.write(data)
        except OSError as exc:
            cannot_write(str(path), exc)
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        cannot_write(str(path), exc)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; an output file gets the usual permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            cannot_write(str(path), exc)
        raise


def echo(data: str | bytes = "", nl: bool = True) -> None:
    """click.echo to stdout; a failed write (a full disk, a closed pipe) is an error (exit 1), not a maskc bug."""
    try:
        click.echo(data, nl=nl)  # flushes
    except OSError as exc:
        try:  # what is still buffered would fail again when Python flushes stdout at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            pass
        cannot_write("to standard output", exc)


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


# ---------------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="maskc")
def cli():
    """maskc: a compiler for attention masks.

    A .mask file says which tokens may attend to which; maskc turns it into a CUDA attention kernel
    that skips hidden tiles and runs no mask code on fully visible ones. The language is described
    in docs/language.md.

    Exit codes: 0 ok, 1 an error in the mask or its values (or a failed write), 2 misuse of the command
    line, 3 an internal error (a maskc bug; MASKC_DEBUG=1 shows the traceback).
    """


@cli.command("compile", short_help="Emit the CUDA kernel (.cu), PTX or a cubin for masks.")
@click.argument("masks", type=MASK_ARGUMENT, nargs=-1, required=True, metavar="MASK...")
@click.option("-o", "--output", metavar="FILE|DIR",
              help="Where to write: a file, or '-' for stdout (one mask); a directory (several masks). Default: "
                   "each input's name with the suffix of --emit, in the current directory (hstu.mask -> hstu.cu), "
                   "as a C compiler does.")
@click.option("--emit", type=click.Choice(list(EMIT_SUFFIX)), default="cu", show_default=True,
              help="cu: the self-contained kernel source; ptx or cubin: built with NVRTC for --arch.")
@click.option("--arch", type=click.Choice(ARCHS), default="sm_90", show_default=True, help="Target GPU architecture.")
@click.option("--head-dim", type=click.Choice([str(d) for d in HEAD_DIMS]), default="128", show_default=True)
@click.option("--dtype", type=click.Choice(list(DTYPES)), default="bf16", show_default=True,
              help="Type of q, k, v and the output (accumulation is fp32).")
@click.option("--backward-kernels", type=click.Choice(BACKWARD_PASSES),
              help="Which backward pass the file carries (default: the family's best for these options; "
                   "docs/training.md).")
@click.option("--deterministic", is_flag=True, help=DETERMINISTIC_HELP)
@param_option("Value of a const parameter, compiled in (repeatable). Runtime parameters are call arguments, "
              "not compile options.")
@reporting_errors
def compile_command(masks, output, emit, arch, head_dim, dtype, backward_kernels, deterministic, params):
    """Compile each MASK ('-' reads stdin) into a kernel for one architecture, head dim and dtype.

    With several masks, a mask with an error is reported and the others are still written; the exit code
    is then 1. The output is deterministic: the same mask, options and maskc version give the same bytes,
    from any directory (the banner names the mask by its base name).
    """
    several = len(masks) > 1
    if several and "-" in masks:
        raise click.UsageError("'-' (stdin) is one mask: compile it alone")
    if several and output is not None and not Path(output).is_dir():
        raise click.UsageError(f"several masks: -o must be an existing directory, got {output!r}")
    if masks == ("-",) and output is None:
        raise click.UsageError("reading the mask from stdin: say where the output goes with -o FILE (or -o -)")
    if output == "-" and emit == "cubin" and stdout_is_terminal():
        raise click.UsageError("a cubin is binary: redirect stdout to a file, or give -o FILE")
    try:
        options = KernelOptions(int(head_dim), dtype, arch, backward_kernels=backward_kernels,
                                deterministic=deterministic)
    except ValueError as exc:  # an option the chosen kernel family does not support
        raise click.UsageError(str(exc)) from None
    failed = False
    for mask in masks:
        target = output if not several and output is not None else \
            str(Path(output or ".") / (Path(mask).stem + EMIT_SUFFIX[emit]))
        if not several:
            compile_one(mask, target, options, emit, params)
            continue
        try:
            compile_one(mask, target, options, emit, params)
        except MaskError as exc:
            click.echo(exc.render(), err=True)
            failed = True
        except ValueError as exc:
            click.echo(f"{mask}: error: {exc}", err=True)
            failed = True
    if failed:
        raise SystemExit(1)


def compile_one(mask: str, output: str, options: KernelOptions, emit: str, params) -> None:
    program = read_mask(mask)
    consts, _ = split_params(program, params, allow_runtime=False)
    compiled = compile_program(program, options, consts)
    data = compiled.source.encode() if emit == "cu" else compiled.build(emit).path.read_bytes()
    if output == "-":
        echo(data, nl=False)  # bytes go to the binary stream beneath stdout
    else:
        write_atomically(Path(output), data)


@cli.command("check", short_help="Parse and check masks; exit code 1 on any error (for CI).")
@click.argument("masks", type=MASK_ARGUMENT, nargs=-1, required=True)
@param_option("Value of a parameter (repeatable): const values compile in, runtime values replace defaults.")
@click.option("-v", "--verbose", is_flag=True, help="Print 'FILE: ok' for each mask that passes.")
@reporting_errors
def check_command(masks, params, verbose):
    """Check each MASK: parse, names and types, the passes, integer ranges and code generation, and, where
    the file gives complete default values (or a batch: section), that those lay out exactly.

    Prints nothing and exits 0 when every file is fine; otherwise diagnostics on stderr and exit 1.
    """
    from maskc.tools import explain

    failed = False
    for path in masks:
        try:
            program = read_mask(path)
            consts, runtime = split_params(program, params)
            compiled = compile_program(program, KernelOptions(), consts)
            sequences, _ = explain.choose_sequences(program, runtime=runtime)
            if defaults_are_complete(compiled.program, sequences):
                compiled.bind(sequences)
        except MaskError as exc:
            click.echo(exc.render(), err=True)
            failed = True
            continue
        except ValueError as exc:
            click.echo(f"{shown_path(path)}: error: {exc}", err=True)
            failed = True
            continue
        if verbose:
            echo(f"{shown_path(path)}: ok")
    if failed:
        raise SystemExit(1)


def defaults_are_complete(program: ir.Program, sequences: list[dict[str, object]]) -> bool:
    """Whether every sequence has a value for every runtime parameter (and n, if the layout needs it)."""
    n_decl = program.param("n")
    for given in sequences:
        if ir.layout_uses_n(program) and "n" not in given and (n_decl is None or n_decl.default is None):
            return False
        if any(p.name not in given and p.default is None for p in program.runtime_params):
            return False
    return True


@cli.command("explain", short_help="Show the IR after each pass, the pair test, tile statistics and a picture.")
@click.argument("mask", type=MASK_ARGUMENT)
@click.option("--n", "n", type=click.IntRange(min=0), help="Plan one sequence of N tokens (default: the mask's "
              "default n, or its batch: section). A descriptor over 1 GiB is refused (causal attention: n above "
              "about 1.48 million); past 4,194,304 visited tiles (causal: n above about 260,000) the counts are "
              "estimated from a sample and --png is refused (docs/language.md, Sizes).")
@param_option("Value of a parameter (repeatable): const values compile in, runtime values replace defaults.")
@click.option("--png", type=click.Path(dir_okay=False, writable=True), metavar="FILE",
              help="Draw the first sequence's mask with the visited tiles over it (exact up to n = 4096, "
                   "downsampled beyond; up to 4,194,304 visited tiles). Needs matplotlib.")
@click.option("--dump-mask", type=click.Path(dir_okay=False, writable=True), metavar="FILE",
              help="Write the exact boolean mask of the first sequence as a .npy file (n <= 16384).")
@click.option("--dump-batch", type=click.Path(dir_okay=False, writable=True), metavar="FILE",
              help="Write the exact mask of the whole packed batch as a .npz file: 'mask' [T, T], block-diagonal, "
                   "and 'cu_seqlens' [B + 1] (T <= 16384).")
@click.option("--arch", type=click.Choice(ARCHS), default="sm_90", show_default=True,
              help="Kernel family whose tiles to count: sm_80 or sm_90, the portable kernels' tiles of 128 x 64 "
                   "(the sizes quoted under --n are for these); sm_90a, the Hopper kernels' 128 x 128 (and their "
                   "grid boxes), what maskc runs on an H100/H200.")
@reporting_errors
def explain_command(mask, n, params, png, dump_mask, dump_batch, arch):
    """Explain what maskc makes of MASK: the IR after each pass; the test a pair of a partial tile runs,
    rule by rule, with the values computed once per row and per column and what a pair pays beyond 32-bit
    compares (64-bit arithmetic, a division, a list read); then, for concrete runtime values, how
    the tiles of --arch's kernels fall (empty, full, partial), the visible fraction (exact, or estimated
    from a sample of the visited tiles when they are many), the tile density and the descriptor's size and
    planning time.
    """
    if png:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            fail("error: --png needs matplotlib: pip install matplotlib", 2)
    from maskc.tools import explain

    program = read_mask(mask)
    consts, runtime = split_params(program, params)
    given_once(n, runtime)
    compiled, lines = explain.compile_explained(program, KernelOptions(arch=arch), consts)
    echo("\n".join(lines + explain.pair_test_lines(compiled)))
    sequences, origin = explain.choose_sequences(compiled.program, n, runtime)
    with naming_the_file(mask):
        result = explain.explain_values(compiled, sequences, origin, png=bool(png), dump=bool(dump_mask),
                                        dump_whole_batch=bool(dump_batch))
    echo("")
    echo("\n".join(result.report.lines()))
    if result.png is not None:
        write_atomically(Path(png), result.png)
        echo(f"picture: {png}")
    if result.mask_npy is not None:
        write_atomically(Path(dump_mask), result.mask_npy)
        echo(f"mask of sequence 0: {dump_mask}")
    if result.batch_npz is not None:
        write_atomically(Path(dump_batch), result.batch_npz)
        echo(f"mask of the whole batch, with its cu_seqlens: {dump_batch}")


@cli.command("run", short_help="Run a mask on random inputs, check it against a reference, time it.")
@click.argument("mask", type=MASK_ARGUMENT)
@click.option("--n", "n", type=click.IntRange(min=0), help="One sequence of N tokens (default: the mask's "
              "default n, or its batch: section). Without a GPU at most 262,144 tokens in all, --batch included "
              "(docs/language.md, Sizes).")
@param_option("Value of a parameter (repeatable): const values compile in, runtime values replace defaults.")
@click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True,
              help="Repeat the sequences this many times (a packed batch).")
@click.option("--heads", type=click.IntRange(min=1), default=16, show_default=True, help="Query heads (GPU).")
@click.option("--kv-heads", type=click.IntRange(min=1), help="Key/value heads (GPU; default: --heads).")
@click.option("--head-dim", type=click.Choice([str(d) for d in HEAD_DIMS]), default="128", show_default=True)
@click.option("--dtype", type=click.Choice(list(DTYPES)), default="bf16", show_default=True)
@click.option("--arch", type=click.Choice(ARCHS), help="Kernel family by target (default: the best one for this "
              "GPU: the Hopper kernels, sm_90a, on an H100/H200; the portable ones elsewhere).")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True,
              help="Seed of the random inputs and row samples.")
@click.option("--cpu", "force_cpu", is_flag=True, help="Check on the CPU even when a GPU is usable.")
@click.option("--backward", is_flag=True, help="Also run the backward pass (GPU): check dq, dk and dv against "
              "float32 autograd and time the backward and forward + backward.")
@click.option("--backward-kernels", type=click.Choice(BACKWARD_PASSES),
              help="Which backward pass (default: the family's best for these options; docs/training.md).")
@click.option("--deterministic", is_flag=True, help=DETERMINISTIC_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@reporting_errors
def run_command(mask, n, params, batch, heads, kv_heads, head_dim, dtype, arch, seed, force_cpu, backward,
                backward_kernels, deterministic, as_json):
    """Run MASK on fresh random inputs and check the result.

    On a GPU (PyTorch and CuPy installed): launch the kernel, compare with float32 attention (every row of
    short sequences, sampled rows of long ones), print the errors, the median time and effective TFLOP/s
    (4 x visible pairs x head dim x heads / time).

    Without a GPU: say so, build the cubin, check the descriptor against the brute-force mask and run a
    CPU model of the kernel's tile loop against dense attention, on every query tile of short sequences
    and on sampled ones of long sequences.

    Exits 0 when the check passes, 1 when it does not.
    """
    from maskc.runtime import MAX_SEQUENCES
    from maskc.tools import explain, trial

    if kv_heads is not None and heads % kv_heads:  # (refused on the CPU too, where heads are not used)
        raise click.BadParameter(f"--heads ({heads}) must be a multiple of --kv-heads ({kv_heads})",
                                 param_hint="--kv-heads")
    program = read_mask(mask)
    consts, runtime = split_params(program, params)
    given_once(n, runtime)
    sequences, origin = explain.choose_sequences(program, n, runtime)
    if len(sequences) * batch > MAX_SEQUENCES:
        raise click.BadParameter(f"{len(sequences) * batch:,} sequences in all; a call takes at most "
                                 f"{MAX_SEQUENCES:,}", param_hint="--batch")
    problem = "--cpu was given" if force_cpu else trial.gpu_problem()
    if problem is not None:
        click.echo(f"maskc run: no GPU run ({problem}); checking on the CPU instead", err=True)
        try:
            options = KernelOptions(int(head_dim), dtype, arch or "sm_90", backward_kernels=backward_kernels,
                                    deterministic=deterministic)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        compiled = compile_program(program, options, consts)
        if batch > 1:  # the CPU check's limit, before the batch is made
            with naming_the_file(mask):
                tokens = batch * sum(trial.sequence_lengths(compiled, sequences))
            if tokens > trial.CPU_MAX_TOKENS:
                raise click.BadParameter(f"{tokens:,} tokens are too many for the CPU check (at most "
                                         f"{trial.CPU_MAX_TOKENS:,})", param_hint="--batch")
    if batch > 1:
        sequences, origin = sequences * batch, f"{origin}, repeated {batch} times"
    if problem is None:
        with naming_the_file(mask):
            result = trial.run_on_gpu(program, consts, sequences, origin, heads=heads, kv_heads=kv_heads or heads,
                                      head_dim=int(head_dim), dtype=dtype, seed=seed, arch=arch, backward=backward,
                                      backward_kernels=backward_kernels, deterministic=deterministic)
    else:
        with naming_the_file(mask):
            result = trial.run_on_cpu(compiled, sequences, origin, seed=seed, backward=backward)
    echo(json.dumps(result.as_json(), sort_keys=True) if as_json else "\n".join(result.lines()))
    if not result.passed:
        raise SystemExit(1)


def main() -> None:
    cli(prog_name="maskc")


if __name__ == "__main__":
    main()
