"""Static value ranges (maskc.ranges): which C type each intermediate gets, and expressions that might
overflow 64 bits refused at their source position -- including constant arithmetic, which must not wrap
while it is folded."""

from __future__ import annotations

import pytest

from maskc import ir
from maskc.codegen import mask_code
from maskc.compiler import compile_text
from maskc.diagnostics import MaskError
from maskc.ir.ranges import INT64, static_range

HEADER = "mask t(a: int = 1, b: int = 2, c: int = 3, L: [int] = [1], const w: int = 64, const big: int = 3_000_000_000)\n"


def compiled(rules: str, segments: str = "S = n"):
    return compile_text(HEADER + "segments:\n    " + segments + "\nrules:\n    " + rules + "\n")


def ranges_of(rule: str, segments: str = "S = n") -> dict[str, object]:
    """The static range of every int subexpression of the (single) region's predicate, by its text."""
    c = compiled(rule, segments)
    region = c.program.regions[0]
    return {ir.show(node): static_range(node, c.program, region) for node in ir.walk(region.pred)
            if not isinstance(node, (ir.Compare, ir.Logic, ir.Ancestor))}


def test_differences_of_positions_fit_int32():
    r = ranges_of("S -> S   where 0 <= q - k < a")
    assert r["q - k"].fits_int32 and r["q - k"].ctype == "int"
    assert (r["q - k"].lo, r["q - k"].hi) == (-(2**31 - 2), 2**31 - 2)


def test_squares_of_runtime_values_need_int64():
    r = ranges_of("S -> S   where (q - k)^2 < a^2")
    assert r["a^2"].ctype == "long long" and r["a^2"].hi == 2**62
    assert r["(q - k)^2"].ctype == "long long"
    # Grid coordinates of a grid with const dimensions stay small, so their squares fit 32 bits.
    r = ranges_of("I -> I   where (q.y - k.y)^2 + (q.x - k.x)^2 < a", "I = grid(w, w)")
    assert r["(q.y - k.y)^2 + (q.x - k.x)^2"].ctype == "int"
    assert r["(q.y - k.y)^2 + (q.x - k.x)^2"].hi == 2 * 63**2


def test_const_values_are_known_exactly():
    r = ranges_of("S -> S   where q < big")
    assert r["3000000000"].ctype == "long long"  # inlined: wider than int32
    r = ranges_of("S -> S   where q < w * 2")
    assert r["128"].ctype == "int"


def _seq_value(code, text: str):
    """The per-sequence value the generated code computes for `text` (other values may sit beside it, such as
    the segment bounds of row intervals)."""
    return next(v for v in code.seq_values if ir.show(v.expr) == text)


def test_generated_code_uses_the_chosen_types():
    code = mask_code(compiled("S -> S   where (q - k)^2 < a^2").program)
    (value,) = code.seq_values
    assert ir.show(value.expr) == "a^2" and value.ctype == "long long"
    code = mask_code(compiled("S -> S   where q - k < a - 5").program)
    assert _seq_value(code, "a - 5").ctype == "long long"  # int32 - 5 may leave int32
    code = mask_code(compiled("S -> S   where q - k < a % 7").program)
    assert _seq_value(code, "a % 7").ctype == "int"


@pytest.mark.parametrize("rule, culprit", [
    ("S -> S   where q * k * k * k < a", "q * k * k"),  # the first part that may overflow
    ("S -> S   where a * b * c > 0", "a * b * c"),
    ("S -> S   where q < (a * b + a * b) * 2", "a * b + a * b"),
    ("S -> S   where L[q]^3 > 0", "L[q]^3"),
    ("S -> S   where abs(a^2 * b) > 0", "a^2 * b"),
])
def test_an_expression_that_may_overflow_64_bits_is_an_error_pointing_at_it(rule, culprit):
    with pytest.raises(MaskError) as info:
        compiled(rule)
    text = info.value.render()
    assert "overflow 64-bit integers" in text
    col = rule.index(culprit) + 5  # 4 spaces of indent, columns from 1
    assert f"<mask>:5:{col}:" in text, text
    assert "^" * len(culprit) in text


@pytest.mark.parametrize("expr", ["2^64", "3^50", "4611686018427387904 * 4", "9223372036854775807 + 1",
                                  "-9223372036854775807 - 2", "-(2^63)", "(2^62)^2 // 2^62"])
def test_constant_arithmetic_past_64_bits_is_an_error_not_a_wrapped_value(expr):
    """Folding constants must not wrap: `q < 2^64` would otherwise become `q < 0`."""
    with pytest.raises(MaskError) as info:
        compiled(f"S -> S   where q < {expr}")
    assert "overflow 64-bit integers" in info.value.render()


def test_constant_arithmetic_that_fits_is_folded_exactly():
    pred = compiled("S -> S   where q < 2^62 + (2^62 - 1) and k > -2^62 - 2^62").program.regions[0].pred
    assert ir.Const(INT64[1]) in list(ir.walk(pred)) and ir.Const(INT64[0]) in list(ir.walk(pred))


def test_segment_lengths_are_checked_too():
    with pytest.raises(MaskError) as info:
        compiled("* -> *   full", "A = a * b * c\n    B = n - 1")
    assert "overflow 64-bit integers" in info.value.render()
    with pytest.raises(MaskError):
        compiled("* -> *   full", "A = 2^64\n    B = n")


def test_const_values_outside_64_bits_are_refused_and_those_inside_are_range_checked():
    text = HEADER + "segments:\n    S = n\nrules:\n    S -> S   where k < q + w\n"
    for value in (2**63, -(2**63) - 1, 10**27):
        with pytest.raises(MaskError) as info:
            compile_text(text, consts={"w": value})
        assert f"<mask>:1:{HEADER.index('const w') + 1}: error: const parameter 'w' = {value} does not fit in a " \
               "64-bit integer" in info.value.render()
    with pytest.raises(MaskError) as info:  # 2^63 - 1 fits, but q + w may not
        compile_text(text, consts={"w": 2**63 - 1})
    assert "overflow 64-bit integers" in info.value.render() and f"<mask>:5:{text.split(chr(10))[4].index('q + w') + 1}:" \
        in info.value.render()
    assert compile_text(text, consts={"w": 2**62}).program.consts == (("w", 2**62), ("big", 3_000_000_000))



def test_a_const_value_of_the_wrong_type_is_spelled_as_in_the_language():
    with pytest.raises(MaskError, match="const parameter 'w' is int, got true"):
        compile_text(HEADER + "segments:\n    S = n\nrules:\n    S -> S   where q < w\n", consts={"w": True})


@pytest.mark.parametrize("expr", ["w // -1", "w // a", "w // (0 - 1)", "1 + w // -1"])
def test_int64_min_divided_by_minus_one_is_an_error_not_a_wrapped_value(expr):
    """A regression found by the grammar fuzzer (tests/test_fuzz_grammar.py): -2^63 // -1 is 2^63, past 64 bits,
    but `//` was not range-checked. Folded, `q < w // -1` (w = -2^63) became `q < -2^63`, so a rule true of every
    pair showed none; with a runtime divisor, the C division overflowed."""
    text = HEADER + f"segments:\n    S = n\nrules:\n    S -> S   where q < {expr}\n"
    with pytest.raises(MaskError) as info:
        compile_text(text, consts={"w": -(2**63)})
    assert "overflow 64-bit integers (its values can reach 9223372036854775808)" in info.value.render()
    assert f"<mask>:5:{text.split(chr(10))[4].index('w // ') + 1}:" in info.value.render()


def test_int64_min_divided_by_anything_but_minus_one_is_folded_exactly():
    text = HEADER + "segments:\n    S = n\nrules:\n    S -> S   where q > w // 2 and k > w // -2 - 2^62 - 1\n"
    pred = compile_text(text, consts={"w": -(2**63)}).program.regions[0].pred
    assert ir.show(pred) == "q > -4611686018427387904 and k > -1", ir.show(pred)
    # With any other w, w // -1 fits.
    text = HEADER + "segments:\n    S = n\nrules:\n    S -> S   where q > w // -1\n"
    pred = compile_text(text, consts={"w": 2**63 - 1}).program.regions[0].pred
    assert ir.show(pred) == "q > -9223372036854775807", ir.show(pred)
