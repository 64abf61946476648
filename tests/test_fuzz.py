"""Byte-level mutation of the examples (inserted operators, keywords and huge numbers, deleted and replaced
runs of characters): whatever the front end, the passes and the code generator make of a damaged file, it is
a diagnostic with a position (`file:line:col`) or a clean compile, never a traceback. When the damaged file
still compiles and its defaults are complete, binding them gives a clean result or a ValueError.

Deterministic in CI (fixed seeds); `MASKC_FUZZ_SEED=N` runs another stream locally, `MASKC_FUZZ_CASES` more
cases."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from maskc.compiler import compile_program
from maskc.diagnostics import MaskError
from maskc.front import read_program
from maskc.kernels import KernelOptions
from maskc.tools.explain import choose_sequences

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.mask"))
PIECES = [*"()[]{},.:;=<>+-*/%^ \n#_aqkn019", "->", "//", "where", "let", " in ", "causal", "full", "diag",
          "grid(", "const ", "[i]", "q.y", "k.x", "sum(", "len(", "2^", "-1", "999999999999999999999", "\t", "é"]
CASES = int(os.environ.get("MASKC_FUZZ_CASES", "3000"))
SEEDS = [int(os.environ["MASKC_FUZZ_SEED"])] if "MASKC_FUZZ_SEED" in os.environ else [0, 1]


def mutate(text: str, rng: random.Random) -> str:
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(text) + 1)
        j = min(len(text), i + rng.randint(1, 6))
        kind = rng.random()
        if kind < 0.4:
            text = text[:i] + rng.choice(PIECES) + text[i:]
        elif kind < 0.7:
            text = text[:i] + text[j:]
        else:
            text = text[:i] + rng.choice(PIECES) + text[j:]
    return text


@pytest.mark.parametrize("seed", SEEDS)
def test_damaged_examples_give_positioned_diagnostics_never_tracebacks(seed):
    rng = random.Random(seed)
    for case in range(CASES // len(SEEDS)):
        path = rng.choice(EXAMPLES)
        text = mutate(path.read_text(encoding="utf-8"), rng)
        where = f"case {case} of seed {seed}, from {path.name}:\n{text}"
        try:
            compiled = compile_program(read_program(text, path.name), KernelOptions(arch="sm_80"))
        except MaskError as exc:
            unplaced = [d for d in exc.diagnostics if d.span.line == 0]
            assert not unplaced, f"a diagnostic without a position ({unplaced[0].message}) for {where}"
            continue
        except Exception as exc:  # noqa: BLE001 - exactly what this test looks for
            raise AssertionError(f"{type(exc).__name__}: {exc} for {where}") from exc
        sequences, _ = choose_sequences(compiled.program)
        try:
            compiled.bind(sequences)
        except (MaskError, ValueError):
            pass  # incomplete or inconsistent defaults: a clear error is the right answer
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"{type(exc).__name__}: {exc} binding the defaults of {where}") from exc
