"""Packed members run as sequences of their own (maskc/plan/members.py): which masks may, how a call's values
split, and that the split batch sees exactly the pairs the sequence it came from sees."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_examples import EXAMPLES

from maskc.compiler import compile_file, compile_text
from maskc.diagnostics import MaskError, ValueProblem
from maskc.ir.members import member_split
from maskc.kernels import KernelOptions
from maskc.plan.layout_batch import ValueColumns
from maskc.plan.members import split
from maskc.tools.reference import dense_mask

HEADER = "mask docs_mask(docs: [int], w: int = 3, table: [int] = [1, 2])\nsegments:\n    D[i] = docs[i]\nrules:\n"

SPLITS = {
    "causal": "D[i] -> D[i] causal",
    "window": "D[i] -> D[i] where k <= q and q - k < w",
    "own positions": "D[i] -> D[i] where q.pos >= 2 * k.pos",
    "strided": "D[i] -> D[i] where (q - k) % 3 == 0",
    "two rules": "D[i] -> D[i] where k <= q and q - k < w\nD[i] -> D[i] where k.pos == 0",
    "shifted both": "D[i] -> D[i] where max(q, k + 1) - min(q, k) <= 2 * w",
}

STAYS = {
    "cross-member": "D[i] -> D[j] causal",
    "the previous member": "D[i] -> D[j] where j == i - 1",
    "its own index": "D[i] -> D[i] where i % 2 == 0 and k <= q",
    "a position": "D[i] -> D[i] where k <= q and q < 10",
    "n": "D[i] -> D[i] where k <= q and q - k < n // 4",
    "a list": "D[i] -> D[i] where k <= q and q - k < table[0]",
    "a position times a position": "D[i] -> D[i] where q * k >= 0",
}


def compiled(rules: str):
    return compile_text(HEADER + "    " + rules.replace("\n", "\n    ") + "\n", KernelOptions(), {})


@pytest.mark.parametrize("name", SPLITS)
def test_a_family_whose_members_only_see_themselves_by_their_own_positions_splits(name):
    how = member_split(compiled(SPLITS[name]).program)
    assert how is not None and (how.family, how.lengths) == ("D", "docs")


@pytest.mark.parametrize("name", STAYS)
def test_a_rule_across_members_or_reading_where_a_member_lies_keeps_the_sequence(name):
    assert member_split(compiled(STAYS[name]).program) is None


def test_among_the_examples_only_the_packed_documents_split():
    splits = {p.stem for p in EXAMPLES.glob("*.mask")
              if member_split(compile_file(p, KernelOptions()).program) is not None}
    assert splits == {"document"}


def test_other_layouts_keep_their_sequences():
    for text in ("mask m(docs: [int])\nsegments:\n    P = 4\n    D[i] = docs[i]\nrules:\n    D[i] -> D[i] causal\n",
                 "mask m(m: int)\nsegments:\n    D[i < m] = 4\nrules:\n    D[i] -> D[i] causal\n"):
        assert member_split(compile_text(text, KernelOptions(), {}).program) is None


def test_a_call_splits_into_its_non_empty_members_at_their_offsets():
    how = member_split(compiled(SPLITS["window"]).program)
    values = ValueColumns(2, {"n": [10, 5], "docs": [[3, 0, 7], [5]], "w": [2, 4]})
    members = split(how, [10, 5], np.array([100, 110]), values, None)
    assert members.lengths == [3, 7, 5] and members.offsets.tolist() == [100, 103, 110] and members.rows == [0, 0, 1]
    assert members.values(values).columns == {"n": [3, 7, 5], "docs": [[3], [7], [5]], "w": [2, 2, 4]}


def test_a_call_that_leaves_the_lengths_out_splits_by_their_default():
    text = "mask m(docs: [int] = [2, 6])\nsegments:\n    D[i] = docs[i]\nrules:\n    D[i] -> D[i] causal\n"
    how = member_split(compile_text(text, KernelOptions(), {}).program)
    members = split(how, [8, 8], np.array([0, 8]), ValueColumns(2, {"n": [8, 8]}), None)
    assert members.lengths == [2, 6, 2, 6] and members.offsets.tolist() == [0, 2, 8, 10]


@pytest.mark.parametrize("docs, n", [([[3, -1, 6]], 8), ([[3, 4]], 8), ([["3", 5]], 8), ([[0, 0]], 0), ([3], 3)])
def test_values_that_do_not_split_are_left_for_the_planner_to_report(docs, n):
    how = member_split(compiled(SPLITS["causal"]).program)
    assert split(how, [n], np.array([0]), ValueColumns(1, {"n": [n], "docs": docs}), None) is None


@pytest.mark.parametrize("members, apart", [
    ([2053, 328, 850, 361, 2568, 1799, 1174, 5864, 2613, 5035, 6306, 3817], True),  # ANCHORS' documents
    ([500] * 65, True), ([100] * 327, True), ([128] * 256, False), ([64] * 512, False), ([16] * 2048, False),
])
def test_members_run_apart_where_that_visits_fewer_tiles(members, apart):
    how = member_split(compiled(SPLITS["causal"]).program)
    n = sum(members)
    values = ValueColumns(2, {"n": [n, 300], "docs": [members, [300]]})
    parts = split(how, [n, 300], np.array([0, n]), values, (128, 128))
    assert (parts is not None) == apart


def _dense(name: str, sequences: list[dict], offsets, total: int) -> np.ndarray:
    """The mask of sequences at these token offsets, each on its diagonal block of the [total, total] mask."""
    c = compiled_cache[name]
    values, layouts = c.bind(sequences)
    out = np.zeros((total, total), dtype=bool)
    for at, lay, val in zip(offsets, layouts, values):
        out[at:at + lay.n, at:at + lay.n] = dense_mask(c.program, lay, val)
    return out


compiled_cache: dict[str, object] = {}


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(SPLITS)), docs=st.lists(st.lists(st.integers(0, 9), max_size=5), min_size=1,
                                                           max_size=3), w=st.integers(0, 4))
def test_the_members_as_sequences_see_exactly_what_their_sequence_sees(name, docs, w):
    if name not in compiled_cache:
        compiled_cache[name] = compiled(SPLITS[name])
    lengths = [sum(d) for d in docs]
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    total = sum(lengths)
    values = ValueColumns(len(docs), {"n": lengths, "docs": docs, "w": [w] * len(docs)})
    parts = split(member_split(compiled_cache[name].program), lengths, offsets, values, None)
    if total == 0:
        assert parts is None
        return
    want = _dense(name, [values._make(b) for b in range(len(docs))], offsets, total)
    got = parts.values(values)
    assert sum(parts.lengths) == total
    assert np.array_equal(_dense(name, [got._make(b) for b in range(len(got))], parts.offsets, total), want)


def _int_terms(depth: int):
    """Random integer expressions over what a rule inside members may read, and what it may not (`n`, `i`, a list)."""
    atoms = st.sampled_from(["q", "k", "q.pos", "k.pos", "w", "n", "i", "table[0]", "0", "1", "3", "-2"])
    if depth == 0:
        return atoms
    sub = _int_terms(depth - 1)
    return st.one_of(
        atoms,
        st.tuples(sub, st.sampled_from(["+", "-", "*", "//", "%"]), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["min", "max"]), sub, sub).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
        sub.map(lambda a: f"abs({a})"),
    )


_predicates = st.tuples(_int_terms(2), st.sampled_from(["<", "<=", "==", "!=", ">="]), _int_terms(2),
                        st.sampled_from(["", " and k <= q", " or q.pos == k.pos"])).map(
    lambda t: f"{t[0]} {t[1]} {t[2]}{t[3]}")


@settings(max_examples=150, deadline=None)
@given(predicate=_predicates, docs=st.lists(st.integers(0, 7), min_size=1, max_size=4), w=st.integers(-2, 3))
def test_whatever_a_rule_reads_a_split_it_allows_sees_the_same_pairs(predicate, docs, w):
    """The analysis is sound: any rule `D[i] -> D[i] where ...` that member_split accepts sees, split, exactly the
    pairs it sees over the whole sequence (random rules over positions, parameters, the member index and a list)."""
    try:
        c = compiled(f"D[i] -> D[i] where {predicate}")
    except MaskError:
        return  # (an expression the language refuses: a division by a constant 0, say)
    how = member_split(c.program)
    if how is None or sum(docs) == 0:
        return
    name = f"D[i] -> D[i] where {predicate}"
    compiled_cache.setdefault(name, c)
    n = sum(docs)
    values = ValueColumns(1, {"n": [n], "docs": [docs], "w": [w]})
    members = split(how, [n], np.array([0]), values, None)
    got = members.values(values)
    try:
        want = _dense(name, [values._make(0)], [0], n)
    except ValueProblem:  # (a division by w = 0): refused apart too
        with pytest.raises(ValueProblem):
            _dense(name, [got._make(b) for b in range(len(got))], members.offsets, n)
        return
    assert np.array_equal(_dense(name, [got._make(b) for b in range(len(got))], members.offsets, n), want)


def test_the_standalone_source_says_where_members_may_be_sequences_of_their_own():
    """`maskc compile`'s users plan their own batches: the source tells them when they may split."""
    note = "may be planned and launched as a sequence of its own (docs = [its length]"
    sources = {name: compile_file(EXAMPLES / f"{name}.mask", KernelOptions()).source for name in ("document", "causal")}
    assert note in sources["document"].replace("\n// ", " ") and note not in sources["causal"].replace("\n// ", " ")
