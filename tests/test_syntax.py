"""The parser: every construct of docs/language.md, source spans, and syntax errors in words."""

import pytest

from maskc.diagnostics import MaskError, Span
from maskc.front.syntax import (
    AllSegments,
    Attribute,
    BinaryOp,
    BoolLit,
    BoolOp,
    Call,
    Comparison,
    FamilySegment,
    GridSegment,
    IntLit,
    ListLit,
    Name,
    SingleSegment,
    Subscript,
    UnaryOp,
    ValueList,
    parse,
)
from maskc.resources import resource_dir

HEADER = "mask m()\nsegments:\n    S = n\nrules:\n"


def predicate(text: str):
    """The AST of `text` used as the predicate of a rule."""
    return parse(HEADER + f"    S -> S where {text}\n").rules[0].where


def strip(e):
    """`e` as nested tuples without spans, for comparisons that only care about structure."""
    if isinstance(e, Name):
        return e.text
    if isinstance(e, (IntLit, BoolLit)):
        return e.value
    if isinstance(e, Attribute):
        return f"{e.base.text}.{e.attr.text}"
    if isinstance(e, UnaryOp):
        return (e.op, strip(e.arg))
    if isinstance(e, BinaryOp):
        return (e.op, strip(e.lhs), strip(e.rhs))
    if isinstance(e, Comparison):
        return ("chain", *(strip(o) for o in e.operands), e.ops)
    if isinstance(e, BoolOp):
        return (e.op, *(strip(a) for a in e.args))
    if isinstance(e, Call):
        return (e.func.text + "()", *(strip(a) for a in e.args))
    if isinstance(e, Subscript):
        return (e.array.text + "[]", *(strip(i) for i in e.indices))
    raise TypeError(e)


def syntax_error(text: str) -> str:
    with pytest.raises(MaskError) as info:
        parse(text, "t.mask")
    return info.value.render()


# ---- the whole file


FULL_FILE = """\
# a comment before the header

mask demo(n: int = 4096, const w: int = -3, docs: [int] = [1, 2,
          3], table: [[bool]] = [[true, false], [false, true]], flag: bool = false, empty: [int] = [],)
segments:
    P    = n - sum(docs) - 2 * w   # trailing comment
    # a comment line, then a blank line

    D[i] = docs[i]
    B[j < 4] = 64 + j
    I = grid(w, w)
    V = grid(2, w, w)
rules:
    P -> P causal
    D[i] -> P|B full
    D[i] -> D[j] diag where j < i
    * -> I where q.y == k.x
batch:
    n = 100, docs = [1]
    flag = true
"""


def test_every_section_and_definition():
    f = parse(FULL_FILE)
    assert f.name.text == "demo"
    assert [(p.name.text, p.type.elem, p.type.depth, p.const) for p in f.params] == [
        ("n", "int", 0, False),
        ("w", "int", 0, True),
        ("docs", "int", 1, False),
        ("table", "bool", 2, False),
        ("flag", "bool", 0, False),
        ("empty", "int", 1, False),
    ]
    defaults = [strip_literal(p.default) for p in f.params]
    assert defaults == [4096, -3, [1, 2, 3], [[True, False], [False, True]], False, []]

    p, d, b, i, v = f.segments
    assert isinstance(p, SingleSegment) and strip(p.length) == ("-", ("-", "n", ("sum()", "docs")), ("*", 2, "w"))
    assert isinstance(d, FamilySegment) and (d.index.text, d.count) == ("i", None)
    assert strip(d.length) == ("docs[]", "i")
    assert isinstance(b, FamilySegment) and (b.index.text, strip(b.count), strip(b.length)) == ("j", 4, ("+", 64, "j"))
    assert isinstance(i, GridSegment) and [strip(x) for x in i.dims] == ["w", "w"]
    assert isinstance(v, GridSegment) and [strip(x) for x in v.dims] == [2, "w", "w"]

    r0, r1, r2, r3 = f.rules
    assert (r0.shape.text, r0.where) == ("causal", None)
    assert [(item.name.text, item.index) for item in r1.k.items] == [("P", None), ("B", None)]
    assert r1.q.items[0].index.text == "i"
    assert r2.shape.text == "diag" and strip(r2.where) == ("chain", "j", "i", ("<",))
    assert isinstance(r3.q.items[0], AllSegments) and r3.shape is None

    assert [[(a.name.text, strip_literal(a.value)) for a in line.assignments] for line in f.batch] == [
        [("n", 100), ("docs", [1])],
        [("flag", True)],
    ]


def strip_literal(value):
    if isinstance(value, ListLit):
        return [strip_literal(item) for item in value.items]
    if isinstance(value, ValueList):
        return list(value.values)
    return value.value


def test_batch_section_is_optional_and_rules_may_be_empty():
    f = parse("mask m()\nsegments:\nrules:\n")
    assert (f.segments, f.rules, f.batch) == ((), (), ())


def test_file_without_final_newline_and_with_crlf_and_tabs():
    f = parse("mask m()\r\nsegments:\r\n\tS = n\r\nrules:\r\n\tS -> S\tfull")
    assert f.rules[0].shape.text == "full"


def test_a_mask_may_be_named_after_a_shape():
    assert parse("mask causal()\nsegments:\nrules:\n").name.text == "causal"


def test_newlines_inside_brackets_are_ignored():
    where = predicate("(q < k\n        and\n  k < 4)")
    assert strip(where) == ("and", ("chain", "q", "k", ("<",)), ("chain", "k", 4, ("<",)))


# ---- expressions


@pytest.mark.parametrize(
    "text, tree",
    [
        ("-a^2 == 0", ("chain", ("-", ("^", "a", 2)), 0, ("==",))),
        ("a^b^c > 0", ("chain", ("^", "a", ("^", "b", "c")), 0, (">",))),
        ("a^-1 > 0", ("chain", ("^", "a", -1), 0, (">",))),
        ("a - b - c > 0", ("chain", ("-", ("-", "a", "b"), "c"), 0, (">",))),
        ("a + b * c // d % e > 0", ("chain", ("+", "a", ("%", ("//", ("*", "b", "c"), "d"), "e")), 0, (">",))),
        ("-(a + b) < 0", ("chain", ("-", ("+", "a", "b")), 0, ("<",))),
        ("0 <= q - k < w", ("chain", 0, ("-", "q", "k"), "w", ("<=", "<"))),
        ("a < b or c > d and not e", ("or", ("chain", "a", "b", ("<",)), ("and", ("chain", "c", "d", (">",)), ("not", "e")))),
        ("not a and b", ("and", ("not", "a"), "b")),
        ("a and b and c", ("and", "a", "b", "c")),
        ("true or false", ("or", True, False)),
        ("q.pos != k.y", ("chain", "q.pos", "k.y", ("!=",))),
        ("layout[q // 128][k // 128]", ("layout[]", ("//", "q", 128), ("//", "k", 128))),
        ("ancestor(parent, q.pos, k.pos)", ("ancestor()", "parent", "q.pos", "k.pos")),
        ("clamp(x, 0, h - 1) >= min(a, b, c)", ("chain", ("clamp()", "x", 0, ("-", "h", 1)), ("min()", "a", "b", "c"), (">=",))),
        ("f() == 1", ("chain", ("f()",), 1, ("==",))),
        ("32_768 == -9223372036854775808", ("chain", 32768, -(2**63), ("==",))),
    ],
)
def test_expression_structure(text, tree):
    assert strip(predicate(text)) == tree


def test_spans_are_one_based_and_end_exclusive():
    f = parse(HEADER + "    S -> S where (q - k) * 2 < w\n")
    rule = f.rules[0]
    assert rule.span == Span(5, 5, 5, 33)
    product = rule.where.operands[0]
    assert product.span == Span(5, 18, 5, 29)  # includes the parentheses of its operand
    assert product.lhs.span == Span(5, 19, 5, 24)  # a parenthesised node spans its content
    assert rule.where.operands[1].span == Span(5, 32, 5, 33)
    assert f.params == () and f.segments[0].span == Span(3, 5, 3, 10)


def test_span_of_a_multi_line_literal():
    f = parse("mask m(d: [int] = [1,\n  2])\nsegments:\nrules:\n")
    assert f.params[0].default.span == Span(1, 19, 2, 5)


def test_negative_literal_spans_its_minus_sign():
    assert predicate("x == -5").operands[1] == IntLit(-5, Span(5, 23, 5, 25))


# ---- syntax errors


@pytest.mark.parametrize(
    "text, message",
    [
        (HEADER + "    S -> S\n", "t.mask:5:11: error: unexpected end of line; expected a shape (full, causal, diag), '[', '|' or 'where'"),
        (HEADER + "    S -> S where (q < k))\n", "t.mask:5:25: error: unexpected ')'; expected end of line"),
        (HEADER + "    S -> S where q <\n", "t.mask:5:21: error: unexpected end of line; expected an expression"),
        ("mask m()\nsegments:\n", "t.mask:2:10: error: unexpected end of file; expected a name or 'rules'"),
        ("", "t.mask:1:1: error: unexpected end of file; expected 'mask'"),
        ("mask m(x: float)", "t.mask:1:11: error: unexpected name 'float'; expected a type (int, bool, [int], [[int]], ...)"),
        ("mask m(x: int = )", "t.mask:1:17: error: unexpected ')'; expected a value (a number, true, false or a list)"),
        ("mask m(grid: int)", "t.mask:1:8: error: unexpected keyword 'grid'; expected 'const', a name or ')'"),
        (HEADER + "    S -> S where q < 1_\n", "t.mask:5:22: error: malformed integer literal '1_'"),
        (HEADER + "    S -> S where q < 12ab\n", "t.mask:5:22: error: malformed integer literal '12ab'"),
        (HEADER + "    S -> S where q < 9223372036854775808\n", "t.mask:5:22: error: integer literal 9223372036854775808 does not fit in 64 bits"),
        (HEADER + "    S -> S where q < -9223372036854775809\n", "t.mask:5:22: error: integer literal -9223372036854775809 does not fit in 64 bits"),
        ("mask m(x: int = 1.5)", "t.mask:1:18: error: unexpected '.'; expected ',' or ')'"),
        ("mask m(x: int = $)", "t.mask:1:17: error: unexpected character '$'"),
        ("mask m(x: int)\fsegments:", "t.mask:1:15: error: unexpected character '\\x0c'"),
    ],
)
def test_syntax_error_messages(text, message):
    assert syntax_error(text).splitlines()[0] == message


def test_keyword_used_as_a_name_is_explained():
    assert "note: 'grid' is a keyword and cannot be used as a name" in syntax_error("mask m(grid: int)")


def test_unclosed_bracket_is_named_when_the_error_comes_lines_later():
    rendered = syntax_error("mask m(n: int = 4\nsegments:\n    S = n\nrules:\n")
    assert rendered.splitlines() == [
        "t.mask:2:1: error: unexpected keyword 'segments'; expected ',' or ')'",
        "   2 | segments:",
        "     | ^^^^^^^^",
        "  note: the '(' at line 1, column 7 is not closed",
    ]


def test_non_ascii_letter_gets_a_hint():
    assert "note: names are ASCII letters, digits and '_'" in syntax_error("mask m(é: int)")


def test_the_grammar_has_no_conflicts():
    """Lark's strict mode refuses shift/reduce conflicts and colliding terminals. It needs the optional
    `interegular` package, so maskc does not load the grammar this way at run time."""
    pytest.importorskip("interegular")
    import lark

    grammar = (resource_dir("grammar") / "mask.lark").read_text()
    lark.Lark(grammar, parser="lalr", lexer="basic", strict=True)
