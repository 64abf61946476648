"""read_program / read_file: the whole front end, and input that is not a readable mask at all."""

import inspect
import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maskc.diagnostics import MaskError
from maskc.front import read_file, read_program

CAUSAL = "mask m()\nsegments:\n    S = n\nrules:\n    S -> S causal\n"


def error_text(call, *args) -> str:
    with pytest.raises(MaskError) as info:
        call(*args)
    return info.value.render()


def test_read_file(tmp_path):
    path = tmp_path / "m.mask"
    path.write_text(CAUSAL)
    program = read_file(path)
    assert program.name == "m" and program.source.path == str(path)


def test_errors_carry_the_source_and_its_path():
    text = error_text(read_program, CAUSAL.replace("causal", "casual"), "dir/m.mask")
    assert text.splitlines()[0].startswith("dir/m.mask:5:12: error: unexpected name 'casual'")
    assert text.splitlines()[1] == "   5 |     S -> S casual"


def test_missing_file(tmp_path):
    path = tmp_path / "missing.mask"
    assert error_text(read_file, path) == f"{path}: error: cannot read {path}: No such file or directory"


def test_directory(tmp_path):
    assert error_text(read_file, tmp_path) == f"{tmp_path}: error: cannot read {tmp_path}: Is a directory"


def test_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "latin1.mask"
    path.write_bytes(CAUSAL.replace("S -> S", "# caf\xe9\n    S -> S").encode("latin-1"))
    assert error_text(read_file, path).splitlines() == [
        f"{path}:5:10: error: this file is not UTF-8 text: byte 0xe9 cannot be decoded",
        "   5 |     # caf\ufffd",
        "     |          ^",
        "  note: save it as UTF-8",
    ]


def test_byte_order_mark_is_ignored(tmp_path):
    path = tmp_path / "bom.mask"
    path.write_bytes(b"\xef\xbb\xbf" + CAUSAL.encode())
    assert read_file(path).regions


def nested_too_deeply_at(text: str, rule: str) -> int:
    """The column of an 'expressions are nested too deeply' error on the rules' line (5), checking its report:
    the line under it and one caret."""
    head, excerpt, carets = text.splitlines()
    col = int(re.fullmatch(r"<mask>:5:(\d+): error: expressions are nested too deeply", head)[1])
    assert excerpt.startswith("   5 | ") and carets.startswith("     | ") and carets.count("^") == 1
    if "..." not in excerpt:  # a long line is shown as a window around the caret
        assert excerpt == "   5 |     " + rule and carets == "     | " + " " * (col - 1) + "^"
    return col


@pytest.mark.parametrize("predicate", ["-" * 5000 + "q < k", "q" + " + (q" * 5000 + ")" * 5000 + " < k"])
def test_pathological_nesting_is_an_error_not_a_crash(predicate):
    """Reported at the innermost expression reached (how deep that is depends on the stack the parser was
    called on): inside the predicate, which starts at column 18."""
    rule = "S -> S where " + predicate
    col = nested_too_deeply_at(error_text(read_program, CAUSAL.replace("S -> S causal", rule)), rule)
    assert 18 < col < 18 + len(predicate) and rule[col - 5] in "-q"


def test_nesting_too_deep_for_the_checker_is_reported_where_it_stopped(monkeypatch):
    """The checker and lowering recurse too; a nesting the parser accepts but they cannot follow is reported
    where they stopped (here the checker, given little stack)."""
    import maskc.front

    check = maskc.front.check

    def check_with_little_stack(ast, source):
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(len(inspect.stack(0)) + 50)
        try:
            check(ast, source)
        finally:
            sys.setrecursionlimit(limit)

    monkeypatch.setattr(maskc.front, "check", check_with_little_stack)
    rule = "S -> S where " + "-" * 200 + "q < k"
    col = nested_too_deeply_at(error_text(read_program, CAUSAL.replace("S -> S causal", rule)), rule)
    assert 18 < col < 18 + 200 and rule[col - 5] == "-"


# ---- robustness: whatever the input, the front end returns a program or raises MaskError

FUZZ_HEADER = (
    "mask m(w: int = 4, d: [int] = [2, 2], t: [[bool]] = [[true]], p: [int] = [-1], const h: int = 2)\n"
    "segments:\n    D[i] = d[i]\n    I = grid(h, h)\nrules:\n"
)
FRAGMENTS = [
    "mask", "m", "(", ")", "[", "]", "n", ":", "int", "bool", "=", ",", "\n", "    ", "segments", "rules",
    "batch", "where", "full", "causal", "->", "|", "*", "q", "k", ".", "pos", "y", "t", "+", "-", "^", "//",
    "<", "<=", "==", "and", "not", "1", "99999999999999999999", "1_", "true", "#", "grid", "é", "\t", "D[i]",
    "D[j]", "I", "i", "j", "w", "d", "len", "sum", "min", "clamp", "ancestor",
]  # fmt: skip

# Well-typed predicates mostly, so that checking and lowering run; `q.t` and `k.y` are errors on some sides.
INTS = st.deferred(
    lambda: st.one_of(
        st.sampled_from(["q", "k", "q.pos", "k.y", "q.t", "i", "j", "w", "n", "0", "2", "-3", "len(d)", "sum(d)"]),
        st.tuples(INTS, st.sampled_from(["+", "-", "*"]), INTS).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(INTS, st.sampled_from(["//", "%"]), st.sampled_from(["w", "2", "q"])).map(" ".join),
        INTS.map(lambda e: f"-{e}^2"),
        st.tuples(INTS, INTS).map(lambda t: f"min({t[0]}, {t[1]}, 3)"),
        st.tuples(INTS, INTS).map(lambda t: f"clamp({t[0]}, 0, {t[1]})"),
        INTS.map(lambda e: f"abs(d[{e}])"),
    )
)
BOOLS = st.deferred(
    lambda: st.one_of(
        st.tuples(INTS, st.sampled_from(["<", "<=", "==", "!="]), INTS).map(" ".join),
        st.tuples(INTS, INTS, INTS).map(lambda t: f"{t[0]} <= {t[1]} < {t[2]}"),
        st.tuples(BOOLS, st.sampled_from(["and", "or"]), BOOLS).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        BOOLS.map(lambda e: f"not {e}"),
        st.tuples(INTS, INTS).map(lambda t: f"t[{t[0]}][{t[1]}]"),
        st.tuples(INTS, INTS).map(lambda t: f"ancestor(p, {t[0]}, {t[1]})"),
        st.just("true"),
    )
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map(" ".join))
def test_random_text_is_a_program_or_a_mask_error(text):
    for candidate in (text, FUZZ_HEADER + "    " + text):
        try:
            read_program(candidate)
        except MaskError as e:
            e.render()


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["D[i] -> D[j]", "D[i] -> D[i]", "I -> I", "* -> D"]), BOOLS)
def test_random_predicates_are_a_program_or_a_mask_error(sides, predicate):
    try:
        read_program(FUZZ_HEADER + f"    {sides} where {predicate}\n")
    except MaskError as e:
        e.render()


# ---- local names (`let`)


def _rules_text(program) -> list[str]:
    from maskc import ir

    return [ir.show(r.pred) for r in program.regions]


def _mask(rule: str, header: str = "mask m(w: int = 8)", segments: str = "    A = n") -> str:
    return f"{header}\nsegments:\n{segments}\nrules:\n    {rule}\n"


def test_let_means_exactly_the_expressions_written_out():
    with_let = read_program(_mask("A -> A where (let lo = q - w, hi = lo + 2 * w\n in lo <= k and k < hi)"))
    written_out = read_program(_mask("A -> A where q - w <= k and k < q - w + 2 * w"))
    assert _rules_text(with_let) == _rules_text(written_out)


def test_let_bindings_see_the_earlier_ones_and_an_inner_let_its_outer():
    nested = read_program(_mask("A -> A where let s = 1 in let s = s + 1, t = s * 3 in q - k < t"))
    assert _rules_text(nested) == _rules_text(read_program(_mask("A -> A where q - k < (1 + 1) * 3")))


def test_let_in_a_segment_length_and_inside_a_call():
    program = read_program(_mask("A -> A causal", segments="    A = let half = n // 2 in half\n    B = n - n // 2"))
    assert [s.name for s in program.segments] == ["A", "B"]
    read_program(_mask("A -> A where q - k < max(let a = w in a, 2)"))


@pytest.mark.parametrize("rule, message", [
    ("A -> A where let w = 3 in q - k < w", "local name 'w' is already a parameter"),
    ("A -> A where let n = 3 in q - k < n", "local name 'n' is already a parameter"),
    ("A -> A where let A = 3 in q - k < A", "local name 'A' is already a segment"),
    ("A -> A where let q = 3 in q - k < 2", "local name 'q' is already the query token"),
    ("A -> A where let clamp = 3 in q - k < clamp", "local name 'clamp' is already a function"),
])
def test_a_local_name_may_not_hide_another_name(rule, message):
    text = error_text(read_program, _mask(rule))
    assert "<mask>:5:" in text.splitlines()[0] and message in text.splitlines()[0]


def test_a_problem_inside_a_definition_is_reported_where_it_is_written():
    text = error_text(read_program, _mask("A -> A where let a = 3, b = a + nope in q - k < b"))
    assert text.splitlines()[0] == "<mask>:5:37: error: unknown name 'nope'"  # the column of nope
    text = error_text(read_program, _mask("A -> A where let a = true in q - k < a"))
    assert "<mask>:5:" in text.splitlines()[0] and "bool" in text
