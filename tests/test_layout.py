"""Runtime values and concrete layouts (maskc.layout): validation of each sequence's values, the layout of
its segments, and the checks only runtime values allow (zero divisors, malformed trees). Every problem is a
ValueProblem (a ValueError) whose message names the parameter and its value, reported like maskc's other
diagnostics at the source it concerns: the parameter's declaration, the segment being laid out."""

from __future__ import annotations

import copy
import pickle
from dataclasses import replace

import numpy as np
import pytest

from maskc.front import read_program
from maskc.plan.layout import (
    ValueProblem,
    bind_sequence,
    concrete_layout,
    validate_values,
)


def program(params: str, segments: str, rules: str = "* -> *   full"):
    text = f"mask t({params})\nsegments:\n" + "".join(f"    {s}\n" for s in segments.split(";")) + \
        "rules:\n" + "".join(f"    {r}\n" for r in rules.split(";"))
    return read_program(text)


def layout(prog, **given):
    values = bind_sequence(prog, given)
    return concrete_layout(prog, values)


def problem(fn, *args, **kwargs) -> str:
    """The message of the ValueProblem `fn` raises (what its report says after `error: `)."""
    with pytest.raises(ValueProblem) as info:
        fn(*args, **kwargs)
    assert isinstance(info.value, ValueError)
    [diagnostic] = info.value.diagnostics
    return diagnostic.message


def report(fn, *args, **kwargs) -> tuple[str, str]:
    """The ValueProblem `fn` raises as it reads: its first line, and the source text under its carets."""
    with pytest.raises(ValueProblem) as info:
        fn(*args, **kwargs)
    head, excerpt, carets = str(info.value).splitlines()
    return head, excerpt[carets.index("^"):carets.rindex("^") + 1]


# ---------------------------------------------------------------------------------------------------
# bind_sequence
# ---------------------------------------------------------------------------------------------------

TYPED = program("a: int = 1, flag: bool = true, L: [int] = [1], B: [bool] = [true], T: [[int]] = [[1]]",
                "S = n", "S -> S   where flag and q < a + L[0] + T[0][0] and B[0]")


@pytest.mark.parametrize("name, bad", [
    ("a", True), ("a", 1.0), ("a", "3"), ("a", [1]), ("a", None),
    ("flag", 1), ("flag", "true"), ("flag", np.int64(0)),
    ("L", 3), ("L", [[1, 2]]), ("L", [1.5]), ("L", [True, False]), ("L", ["x"]), ("L", [[1], [2, 3]]),
    ("B", [1, 0]), ("B", True),
    ("T", [1, 2]), ("T", [[1], [2, 3]]), ("T", [[True]]),
])
def test_values_of_the_wrong_type_name_the_parameter(name, bad):
    message = problem(bind_sequence, TYPED, {"n": 4, name: bad})
    assert f"'{name}'" in message


def test_values_of_the_right_type_are_accepted_and_defaults_filled_in():
    v = bind_sequence(TYPED, {"n": 4, "a": np.int32(-7), "flag": np.bool_(False), "L": np.array([3, 4], np.int16)})
    assert v.n == 4 and v.scalars == {"a": -7, "flag": False}
    assert v.arrays["L"].dtype == np.int64 and v.arrays["L"].tolist() == [3, 4]
    assert v.arrays["B"].tolist() == [True] and v.arrays["T"].tolist() == [[1]]
    # Given lists are copied: changing the caller's array later changes nothing.
    mine = np.array([True, False])
    v = bind_sequence(TYPED, {"B": mine})
    mine[0] = False
    assert v.arrays["B"].tolist() == [True, False]


@pytest.mark.parametrize("name, bad, shown", [
    ("T", [[True], [False, True]], "[[true], [false, true]]"), ("a", True, "true"), ("a", np.bool_(False), "false"),
    ("L", np.array([[1, 2]]), "[[1, 2]]"), ("flag", np.int64(0), "0"), ("a", "3", "'3'"),
    ("L", [[1]] * 12, "[[1], [1], [1], ..., [1], [1], [1]]"),
    ("L", [True, False], "[true, false]"), ("L", np.array([1.5, 2.0]), "[1.5, 2.0]"), ("B", [1, 0], "[1, 0]"),
    ("B", np.array([0, 1], np.int8), "[0, 1]"),
])
def test_values_in_messages_are_spelled_as_in_the_language(name, bad, shown):
    message = problem(bind_sequence, TYPED, {"n": 4, name: bad})
    assert f"parameter '{name}' " in message and message.endswith(f", got {shown}"), message
    assert problem(bind_sequence, TYPED, {"n": True}) == "mask: n = true must be an integer in [0, 2^31 - 1]"
    bools = program("const c: bool = true, flag: [bool] = [true]", "S = n", "S -> S   where c")
    assert "compiled in (as true)" in problem(bind_sequence, replace(bools, consts=(("c", True),)), {"c": False})
    assert "(n = 5, docs = [3, -1, 2])" in problem(layout, FAMILY, n=5, docs=[3, -1, 2])


@pytest.mark.parametrize("given", [{"a": 2**31}, {"a": -(2**31) - 1}, {"L": [0, 2**31]}, {"L": [-(2**31) - 1]},
                                   {"T": [[2**40]]}])
def test_runtime_ints_outside_32_bits_are_refused(given):
    message = problem(bind_sequence, TYPED, {"n": 4, **given})
    assert f"'{next(iter(given))}'" in message and "32-bit" in message


def test_runtime_ints_at_the_32_bit_limits_are_accepted():
    v = bind_sequence(TYPED, {"a": 2**31 - 1, "L": [-(2**31), 2**31 - 1]})
    assert v.scalars["a"] == 2**31 - 1 and v.arrays["L"].tolist() == [-(2**31), 2**31 - 1]


@pytest.mark.parametrize("n", [-1, 2**31, True, 3.0, "8"])
def test_bad_sequence_lengths(n):
    assert "n = " in problem(bind_sequence, TYPED, {"n": n})


def test_const_given_at_run_time_is_refused():
    prog = program("const w: int = 4, r: int = 2", "I = grid(3, w)", "I -> I   where abs(q.x - k.x) <= r")
    prog = replace(prog, consts=(("w", 4),))  # as compiling binds it
    assert bind_sequence(prog, {"r": 3}).scalars == {"w": 4, "r": 3}
    message = problem(bind_sequence, prog, {"w": 5})
    assert "'w'" in message and "const" in message


def test_unknown_and_missing_parameters():
    message = problem(bind_sequence, TYPED, {"n": 4, "radius": 3})
    assert "'radius'" in message and "unknown" in message
    prog = program("a: int", "S = n", "S -> S   where q < a")
    message = problem(bind_sequence, prog, {"n": 4})
    assert "'a'" in message and "no default" in message


def test_an_empty_table_is_a_table():
    """`[]` is a legal default for a `[[bool]]` parameter (language.md: defaults include `[]`), and an empty
    table reads false everywhere."""
    prog = program("T: [[bool]] = []", "S = n", "S -> S   where T[q][k]")
    for given in ({}, {"T": []}, {"T": [[]]}):
        v = bind_sequence(prog, {"n": 3, **given})
        assert v.arrays["T"].ndim == 2 and v.arrays["T"].size == 0


# ---------------------------------------------------------------------------------------------------
# concrete_layout
# ---------------------------------------------------------------------------------------------------

FAMILY = program("a: int = 2, docs: [int] = [3, 0, 2]", "A = a;D[i] = docs[i];G = grid(2, 3);Z = n - a - sum(docs) - 6")


def test_families_with_empty_members():
    lay = layout(FAMILY, n=20)
    assert lay.n == 20
    assert lay.starts.tolist() == [0, 2, 5, 5, 7, 13]
    assert lay.lengths.tolist() == [2, 3, 0, 2, 6, 7]
    assert lay.symbol.tolist() == [0, 1, 1, 1, 2, 3]
    assert lay.member.tolist() == [0, 0, 1, 2, 0, 0]
    assert [lay.span(s) for s in range(4)] == [(0, 2), (2, 7), (7, 13), (13, 20)]
    assert lay.grid_dims == {2: (2, 3)}


def test_an_empty_family_and_empty_segments():
    lay = layout(FAMILY, n=6, a=0, docs=[])
    assert lay.n == 6 and [lay.span(s) for s in range(4)] == [(0, 0), (0, 0), (0, 6), (6, 6)]
    lay = layout(program("docs: [int] = []", "D[i] = docs[i]"), docs=[])
    assert lay.n == 0


def test_a_layout_that_does_not_add_up_to_n():
    prog = program("", "A = n // 2;B = 3")
    assert layout(prog, n=6).n == 6
    message = problem(layout, prog, n=10)
    assert "cover 8 tokens, not n = 10" in message


def test_negative_lengths_name_the_values():
    message = problem(layout, FAMILY, n=5)  # Z = 5 - 2 - 5 - 6 < 0
    assert "segment Z" in message and "negative length -8" in message and "n = 5" in message and "a = 2" in message
    message = problem(layout, FAMILY, n=20, docs=[3, -1, 2])
    assert "segment D" in message and "member 1" in message and "docs = [3, -1, 2]" in message
    message = problem(layout, program("h: int = 2", "G = grid(h, 3)"), h=-1)
    assert message == "mask: segment G has negative grid dimensions -1 x 3 (h = -1)"
    message = problem(layout, program("m: int = 2", "B[i < m] = 4"), m=-1)
    assert "segment B" in message and "negative member count" in message


def test_n_fixed_by_the_layout():
    prog = program("a: int = 5", "A = a;B = 3")
    assert layout(prog).n == 8
    assert layout(prog, n=8).n == 8
    message = problem(layout, prog, n=9)
    assert "fixes the length to 8 tokens" in message and "n = 9" in message
    message = problem(layout, program("", "A = n - 1;B = 1"))
    assert "depends on n" in message


def test_family_lists_of_different_lengths():
    prog = program("L: [int] = [1, 2], M: [int] = [3, 4]", "R[i] = L[i] + M[i]")
    assert layout(prog).n == 10
    message = problem(layout, prog, M=[3])
    assert "family R" in message and "'M'" in message


def test_limits():
    message = problem(layout, program("m: int = 2", "B[i < m] = 0"), m=2**24 + 1)
    assert "more than the limit" in message
    message = problem(layout, program("a: int = 2, b: int = 2", "A = a;B = b"), a=2**31 - 1, b=1)
    assert "beyond the limit" in message


def test_a_zero_divisor_in_a_length():
    message = problem(layout, program("c: int = 2", "A = 10 // c;B = 4"), c=0)
    assert "segment A" in message and "divides by zero" in message and "c = 0" in message


# ---------------------------------------------------------------------------------------------------
# validate_values
# ---------------------------------------------------------------------------------------------------


def validated(prog, **given):
    values = bind_sequence(prog, given)
    lay = concrete_layout(prog, values)
    validate_values(prog, values, lay)
    return lay


def test_zero_divisors_are_refused_naming_the_values():
    prog = program("d: int = 2, e: int = 3", "S = n", "S -> S   where q // d == k % (e - 1)")
    assert validated(prog, n=4).n == 4
    message = problem(validated, prog, n=4, d=0)
    assert "divisor d is zero" in message and "d = 0" in message
    message = problem(validated, prog, n=4, e=1)
    assert "e - 1" in message and "e = 1" in message


def test_trees_must_list_parents_before_children():
    prog = program("parent: [int] = [-1, 0, 0]", "P = n - len(parent);D = len(parent)",
                   "D -> D   where ancestor(parent, q.pos, k.pos)")
    assert validated(prog, n=5).n == 5
    assert validated(prog, n=6, parent=[-1, 0, -1, 2]).n == 6
    message = problem(validated, prog, n=5, parent=[-1, 2, 0])
    assert "'parent'" in message and "parent[1] = 2" in message
    message = problem(validated, prog, n=5, parent=[0, -1, -1])  # a node that is its own parent
    assert "parent[0] = 0" in message


# ---------------------------------------------------------------------------------------------------
# Where problems are reported
# ---------------------------------------------------------------------------------------------------


def test_a_problem_reads_like_maskcs_other_diagnostics():
    prog = read_program("mask r(lengths: [int], p: int)\nsegments:\n    S = sum(lengths)\nrules:\n"
                        "    S -> S where q - k < p\n", "/tmp/r.mask")
    with pytest.raises(ValueError) as info:
        layout(prog, lengths=[1, -2], p=3)
    assert str(info.value).splitlines() == [
        "/tmp/r.mask:3:5: error: mask: segment S has negative length -1 (lengths = [1, -2])",
        "   3 |     S = sum(lengths)",
        "     |     ^^^^^^^^^^^^^^^^",
    ]
    with pytest.raises(ValueError) as info:
        bind_sequence(prog, {"lengths": [1], "p": True}, "r")
    assert str(info.value).splitlines() == [
        "/tmp/r.mask:1:24: error: r: parameter 'p' is an int, got true",
        "   1 | mask r(lengths: [int], p: int)",
        "     |                        ^^^^^^",
    ]


DECLARED_N = program("n: int = 4, b: int = 1", "S = n - b;B = b")


@pytest.mark.parametrize("prog, given, head, marked", [
    (TYPED, {"a": True}, "1:8: error: mask: parameter 'a' is an int, got true", "a: int = 1"),
    (TYPED, {"flag": 1}, "1:20: error: mask: parameter 'flag' is a bool, got 1", "flag: bool = true"),
    (TYPED, {"a": 2**31}, "1:8: error: mask: parameter 'a' = 2147483648 is outside the 32-bit range of runtime "
                          "integers", "a: int = 1"),
    (TYPED, {"L": [[1]]}, "1:39: error: mask: parameter 'L' must be a [int] (1-dimensional, rectangular), got [[1]]",
     "L: [int] = [1]"),
    (TYPED, {"L": [1, 2**40]}, "1:39: error: mask: parameter 'L' has values outside the 32-bit range",
     "L: [int] = [1]"),
    (TYPED, {"B": [1]}, "1:55: error: mask: parameter 'B' must hold bools, got [1]", "B: [bool] = [true]"),
    (TYPED, {"T": [[1], [2, 3]]}, "1:75: error: mask: parameter 'T' must be a [[int]] (2-dimensional, rectangular), "
                                  "got [[1], [2, 3]]", "T: [[int]] = [[1]]"),
    (program("a: int, b: int = 2", "S = n"), {"n": 1}, "1:8: error: mask: runtime parameter 'a' has no default and "
                                                       "was not given", "a: int"),
    (replace(program("r: int = 1, const w: int = 4", "S = n"), consts=(("w", 4),)), {"w": 5},
     "1:20: error: mask: 'w' is const: it is compiled in (as 4); compile again to change it", "const w: int = 4"),
    # n: where it is declared, else the first segment that reads it, else the mask's name
    (DECLARED_N, {"n": -1}, "1:8: error: mask: n = -1 must be an integer in [0, 2^31 - 1]", "n: int = 4"),
    (TYPED, {"n": 2**31}, "3:5: error: mask: n = 2147483648 must be an integer in [0, 2^31 - 1]", "S = n"),
    (program("", "S = 4"), {"n": True}, "1:6: error: mask: n = true must be an integer in [0, 2^31 - 1]", "t"),
    (TYPED, {"radius": 2}, "1:6: error: mask: unknown parameter 'radius' (runtime parameters: a, flag, L, B, T)", "t"),
])
def test_a_bad_value_of_one_parameter_points_at_its_declaration(prog, given, head, marked):
    assert report(bind_sequence, prog, given) == (f"<mask>:{head}", marked)


@pytest.mark.parametrize("parent, x", [([-1, 2, 0], 1), ([-1, 0, -5], 2)])  # a later parent; a parent below -1
def test_a_malformed_tree_points_at_the_parameter(parent, x):
    prog = program("n: int = 5, parent: [int] = [-1, 0, 0]", "P = n - len(parent);D = len(parent)",
                   "D -> D   where ancestor(parent, q.pos, k.pos)")
    assert report(validated, prog, parent=parent) == (
        "<mask>:1:20: error: mask: 'parent' must list each parent before its child (-1 <= parent[x] < x, -1 for a "
        f"root); parent[{x}] = {parent[x]}", "parent: [int] = [-1, 0, 0]")


@pytest.mark.parametrize("prog, given, head, marked", [
    (FAMILY, {"n": 5}, "6:5: error: mask: segment Z has negative length -8 (n = 5, a = 2, docs = [3, 0, 2])",
     "Z = n - a - sum(docs) - 6"),
    (FAMILY, {"n": 20, "docs": [3, -1, 2]}, "4:5: error: mask: segment D member 1 has negative length -1 "
                                            "(n = 20, docs = [3, -1, 2])", "D[i] = docs[i]"),
    (program("h: int = 2", "A = 1;G = grid(3, h)"), {"h": -1}, "4:17: error: mask: segment G has negative grid "
                                                               "dimensions 3 x -1 (h = -1)", "h"),
    (program("m: int = 2", "B[i < m + 1] = 4"), {"m": -3}, "3:11: error: mask: segment B has a negative member count "
                                                           "-2 (m = -3)", "m + 1"),
    (program("m: int = 2", "B[i < m] = 0"), {"m": 2**24 + 1}, "3:11: error: mask: segment B has 16777217 members, "
                                                              "more than the limit of 16777216 (m = 16777217)", "m"),
    (program("a: int = 2, b: int = 2", "A = a;B = b"), {"a": 2**31 - 1, "b": 1},
     "4:5: error: mask: segment B ends at token 2147483648, beyond the limit of 2^31 - 1 tokens per sequence (b = 1)",
     "B = b"),
    (program("L: [int] = [1, 2], M: [int] = [3, 4]", "R[i] = L[i] + M[i]"), {"M": [3]},
     "3:5: error: mask: family R has 2 members but 'M' has 1 entries", "R[i] = L[i] + M[i]"),
    (program("c: int = 2", "A = 3 + 10 // c;B = 4"), {"c": 0},
     "3:13: error: mask: segment A divides by zero: division by zero in 10 // c (c = 0)", "10 // c"),
    (program("c: [int] = [2]", "A[i] = 1 + 10 % c[i];B = 4"), {"c": [0]},
     "3:16: error: mask: segment A divides by zero: division by zero in 10 % c[i] (c = [0])", "10 % c[i]"),
    # the tiling as a whole: where n enters it, else the segments
    (program("", "B = 3;A = n // 2"), {"n": 10}, "4:5: error: mask: the segments cover 8 tokens, not n = 10: the "
                                                 "layout must tile [0, n) exactly (n = 10)", "A = n // 2"),
    (program("", "B = 1;A = n - 1"), {}, "4:5: error: mask: the layout depends on n; give the sequence length",
     "A = n - 1"),
    (program("a: int = 5", "A = a;B = 3"), {"n": 9}, "3:5: error: mask: the layout fixes the length to 8 tokens, but "
                                                     "n = 9 was given: its segments never mention n, so the length "
                                                     "comes from the parameters; change those instead (with the "
                                                     "command line: --param NAME=VALUE rather than --n)", "A = a"),
])
def test_a_segment_that_cannot_be_laid_out_is_reported_where_it_is_written(prog, given, head, marked):
    assert report(layout, prog, **given) == (f"<mask>:{head}", marked)


def test_a_zero_divisor_points_at_the_divisor():
    prog = program("d: int = 2, e: int = 3", "S = n", "S -> S   where q // d == k % (e - 1)")
    assert report(validated, prog, n=4, d=0) == ("<mask>:5:25: error: mask: the divisor d is zero (n = 4, d = 0)", "d")
    assert report(validated, prog, n=4, e=1) == ("<mask>:5:35: error: mask: the divisor e - 1 is zero (n = 4, e = 1)",
                                                 "e - 1")


def test_a_problem_survives_pickling_and_copying():
    """As a ValueError does (multiprocessing workers send exceptions back pickled)."""
    with pytest.raises(ValueProblem) as info:
        layout(FAMILY, n=5)
    for again in (pickle.loads(pickle.dumps(info.value)), copy.copy(info.value)):
        assert type(again) is ValueProblem and str(again) == str(info.value) and again.diagnostics[0].span.line == 6


def test_problems_binding_a_batch_name_the_sequence_and_point_at_the_source():
    from maskc.compiler import compile_program

    compiled = compile_program(program("a: int = 1", "A = a;B = n - a"))
    with pytest.raises(ValueError) as info:
        compiled.bind([{"n": 4}, {"n": 4, "a": 5}])
    assert str(info.value).splitlines()[0] == "<mask>:4:5: error: sequence 1: segment B has negative length -1 " \
                                              "(n = 4, a = 5)"
