"""The checker, mostly through golden diagnostics: `tests/golden/NAME.mask` is a bad file and
`NAME.expected` the exact text maskc must report for it (syntax errors included).

After a deliberate change to the messages, regenerate the expected files with

    MASKC_UPDATE_GOLDEN=1 pytest tests/test_check.py

and read the diff before committing it.
"""

import os
from pathlib import Path

import pytest

from maskc.diagnostics import MaskError
from maskc.front import read_program
from maskc.front.check import fold_constant
from maskc.front.syntax import parse
from maskc.compiler import compile_text
from maskc.kernels import KernelOptions

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("MASKC_UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("case", sorted(GOLDEN.glob("*.mask")), ids=lambda p: p.stem)
def test_golden_diagnostics(case: Path):
    with pytest.raises(MaskError) as info:
        read_program(case.read_text(encoding="utf-8"), f"tests/golden/{case.name}")
    rendered = info.value.render() + "\n"
    expected = case.with_suffix(".expected")
    if UPDATE:
        expected.write_text(rendered, encoding="utf-8")
    assert rendered == expected.read_text(encoding="utf-8")


def test_every_golden_case_has_an_expected_file():
    cases = {p.stem for p in GOLDEN.glob("*.mask")}
    assert cases == {p.stem for p in GOLDEN.glob("*.expected")}
    assert len(cases) >= 25


VALID = """\
mask ok(n: int = 64, w: int = 4, docs: [int] = [8, 8], flags: [[bool]] = [[true]], parent: [int] = [-1, 0],
        const h: int = 2, const g: int = 3)
segments:
    P    = n - sum(docs) - len(parent) - h * g * 2 - 3 * w
    D[i] = docs[i] * (i + 1) // 2
    B[j < w] = 3
    T = len(parent)
    I = grid(h, g)
    V = grid(2, h, g)
rules:
    P -> P       causal where 0 <= q - k < w * 2 and not flags[q // 64][k // 64]
    D[i] -> D[i] causal
    D[i] -> D[j] where j < i and i % 2 == 0 and q.pos >= k.pos
    B -> D|P     full where max(q, k, 1) - min(q, k) <= clamp(w, 0, 8) and abs(q - k) < 2^3
    T -> T       where ancestor(parent, q.pos, k.pos) or -q^2 < -(k^2) or true
    I -> I       where (q.y - k.y)^2 + (q.x - k.x)^2 <= w^2
    V -> V       where q.t == k.t and q.y % h == k.x // g
    * -> *       diag
batch:
    n = 64, docs = [], flags = [[true, false], [false, true]]
    w = 2
"""


def test_a_file_using_every_construct_passes():
    read_program(VALID)


def test_all_errors_are_reported_at_once_in_source_order():
    with pytest.raises(MaskError) as info:
        read_program("mask m(a: int = true)\nsegments:\n    S = x\nrules:\n    S -> T full\n")
    assert [(d.span.line, d.message) for d in info.value.diagnostics] == [
        (1, "wrong type in the default of 'a': expected an int, found a bool"),
        (3, "unknown name 'x'"),
        (5, "unknown segment 'T'"),
    ]


@pytest.mark.parametrize(
    "text, value",
    [("2", 2), ("-3", -3), ("(1 + 2) * 3 - 1", 8), ("7 // 2 + 7 % 2", 4), ("-7 // 2", -4), ("2 ^ 3 ^ 2", 512), ("x", None), ("2 ^ x", None)],
)
def test_fold_constant(text, value):
    where = parse(f"mask m()\nsegments:\nrules:\n    S -> S where {text} == 0\n").rules[0].where
    assert fold_constant(where.operands[0]) == value


@pytest.mark.parametrize("text", ["1 // 0", "3 % 0", "2 ^ -1", "2 ^ 63", "2 ^ 1000000"])
def test_fold_constant_refuses_values_without_a_64_bit_result(text):
    where = parse(f"mask m()\nsegments:\nrules:\n    S -> S where {text} == 0\n").rules[0].where
    with pytest.raises(ValueError):
        fold_constant(where.operands[0])


@pytest.mark.parametrize("power", ["2^100000", "2^2^2^2^2", "2^1000000000000", "(-3)^1000000001"])
def test_a_power_far_outside_64_bits_is_reported_at_once_where_it_is_written(power):
    import time

    start = time.perf_counter()
    with pytest.raises(MaskError) as info:
        compile_text(f"mask m()\nsegments:\n    S = n\nrules:\n    S -> S where q - k < {power}\n", KernelOptions())
    assert time.perf_counter() - start < 2
    text = info.value.render()
    assert text.splitlines()[0].startswith("<mask>:5:26: error: this expression may overflow 64-bit integers")
    assert "or more)" in text.splitlines()[0] and "digits" not in text


@pytest.mark.parametrize("text, consts, where", [
    ("mask m(n: int = 64)\nsegments:\n    S = n // (1 - 1)\nrules:\n    S -> S full\n", {}, (3, 15)),
    ("mask m(n: int = 64)\nsegments:\n    S = n\nrules:\n    S -> S where q // 0 == k % (2 - 2)\n", {}, (5, 23)),
    ("mask m(n: int = 64, const c: int = 4)\nsegments:\n    S = n\nrules:\n    S -> S where q // c == k // c\n",
     {"c": 0}, (5, 23)),
])
def test_a_divisor_that_is_always_zero_is_an_error_at_compile_time(text, consts, where):
    # (A divisor that is 0 only for some runtime values is reported when those values are planned.)
    with pytest.raises(MaskError, match="division by zero: the divisor of .* is always 0") as info:
        compile_text(text, KernelOptions(), consts)
    span = info.value.diagnostics[0].span
    assert (span.line, span.col) == where


def test_a_const_value_that_makes_a_segment_negative_is_an_error_at_compile_time():
    text = "mask m(const h: int = 4, w: int = 8)\nsegments:\n    I = grid(h, w)\nrules:\n    I -> I full\n"
    with pytest.raises(MaskError, match=r"segment I has a negative grid dimension \(-3\)"):
        compile_text(text, KernelOptions(), {"h": -3})
