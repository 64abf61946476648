"""Binding a batch at once (maskc.plan.layout_batch): the same SequenceValues and ConcreteLayouts as binding its
sequences one by one, or None -- never a different answer, and never an accepted value the per-sequence path
refuses. The forms it takes (scalar lengths, `R[i] = list[i]` families) must take the fast path, or the test of
sameness would pass by never running it."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mask_strategies as ms
from maskc.compiler import compile_file, compile_text
from maskc.kernels import KernelOptions
from maskc.plan.layout import (ValueProblem, bind_sequence, concrete_layout, entries_per_sequence, joined, scalar_column,
                               validate_values)
from maskc.compiler import _values_key
from maskc.plan.layout_batch import ValueColumns, bind_batch
from maskc.plan.tiling import segment_boundaries
from test_layout import program

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def one_by_one(prog, sequences):
    values, layouts = [], []
    for seq in sequences:
        v = bind_sequence(prog, seq)
        lay = concrete_layout(prog, v)
        validate_values(prog, v, lay)
        values.append(v)
        layouts.append(lay)
    return values, layouts


def same_array(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def assert_same(at_once, expected) -> None:
    for got, want in zip(at_once[0], expected[0], strict=True):
        assert got.n == want.n and got.scalars == want.scalars
        assert list(got.scalars.items()) == list(want.scalars.items()) and list(got.arrays) == list(want.arrays)
        assert all(type(got.scalars[k]) is type(want.scalars[k]) for k in want.scalars)
        assert all(same_array(got.arrays[k], want.arrays[k]) for k in want.arrays)
        assert got.key() == want.key()
    for got, want in zip(at_once[1], expected[1], strict=True):
        assert got.n == want.n and got.bounds == want.bounds and got.grid_dims == want.grid_dims
        for field in ("starts", "lengths", "symbol", "member", "first"):
            assert same_array(getattr(got, field), getattr(want, field)), field
    # The columns the planner reads instead of the objects.
    values, layouts = at_once
    for field in ("starts", "lengths", "symbol", "member"):
        assert same_array(joined(layouts, field, np.int64), joined(expected[1], field, np.int64)), field
    assert same_array(entries_per_sequence(layouts), entries_per_sequence(expected[1]))
    segments = len(expected[1][0].bounds) - 1 if expected[1] else 0
    assert same_array(segment_boundaries(layouts, segments), segment_boundaries(list(expected[1]), segments))
    for name in (expected[0][0].scalars if expected[0] else ()):
        assert same_array(scalar_column(values, name), scalar_column(expected[0], name)), name


def as_columns(sequences) -> ValueColumns | None:
    """The same values as a call's keywords give them (`Attention.sequences`), where every sequence gives the
    same names."""
    names = list(sequences[0]) if sequences else []
    if any(set(given) != set(names) for given in sequences):
        return None
    return ValueColumns(len(sequences), {name: [given[name] for given in sequences] for name in names})


def check(prog, sequences) -> bool:
    """bind_batch agrees with the per-sequence path, given the values as dicts or as columns (and the plan cache
    keys both alike); True when it took the batch."""
    at_once = bind_batch(prog, sequences)
    columns = as_columns(sequences)
    if columns is not None:
        assert list(columns) == list(sequences) and _values_key(columns) == _values_key(sequences)
        from_columns = bind_batch(prog, columns)
        assert (from_columns is None) == (at_once is None), sequences
        if at_once is not None:
            assert_same(from_columns, at_once)
            assert list(from_columns[0].ns) == list(at_once[0].ns) and from_columns[0].scalars == at_once[0].scalars
    try:
        expected = one_by_one(prog, sequences)
    except ValueProblem:
        assert at_once is None, f"bind_batch accepted values the per-sequence path refuses: {sequences}"
        return False
    if at_once is None:
        return False
    assert_same(at_once, expected)
    return True


@pytest.mark.parametrize("name", ["causal", "full", "sliding_window", "hstu", "hstu_jagged", "document", "rm_shared"])
def test_the_anchor_masks_bind_at_once_as_one_by_one(name):
    compiled = compile_file(EXAMPLES / f"{name}.mask", KernelOptions())
    prog = compiled.program
    sequences = [dict(line) for line in prog.batch] if prog.batch else [{}]
    assert check(prog, sequences)
    assert compiled.bind(sequences)[1][0].n == one_by_one(prog, sequences)[1][0].n


REWARD = program("prompt: int, responses: [int] = [], flag: bool = false", "P = prompt;R[i] = responses[i]",
                 "P -> P  causal;R[i] -> P  full;R[i] -> R[i]  causal")
JAGGED = program("c: int = 6, t: int = 256", "C = c;H = n - c - t;T = t", "* -> *   causal")


@pytest.mark.parametrize("sequences", [
    [{"prompt": 5, "responses": [3, 0, 4]}, {"prompt": 0, "responses": []}, {"prompt": 7, "responses": [1]}],
    [{"prompt": np.int64(5), "responses": np.array([3, 4], np.int32)}, {"prompt": 2, "responses": (1, 1)}],
    [{"prompt": 5, "responses": [3], "n": 8}, {"prompt": 1, "flag": np.bool_(True)}],
    [{"prompt": 2**31 - 1}],
])
def test_families_and_their_values_bind_at_once(sequences):
    assert check(REWARD, sequences)


@pytest.mark.parametrize("sequences", [
    [{"prompt": 5, "responses": [3, -1]}],  # a negative member
    [{"prompt": -1}],  # a negative segment
    [{"prompt": 5, "responses": [3]}, {"prompt": 5, "n": 9}],  # a layout that is not n
    [{"prompt": 2**31}],  # outside 32 bits
    [{"prompt": True}],  # a bool for an int
    [{"prompt": 1.0}],
    [{"prompt": 1, "responses": [1.0]}],
    [{"prompt": 1, "responses": [[1]]}],
    [{"prompt": 1, "responses": [2**31]}],
    [{"prompt": 1, "flag": 1}],
    [{"prompt": 1, "other": 1}],  # unknown
    [{"responses": [1]}],  # missing
    [{"prompt": 2**31 - 1, "responses": [1]}],  # past 2^31 - 1 tokens
    [{"prompt": 1, "n": True}],
])
def test_values_the_per_sequence_path_refuses_are_left_to_it(sequences):
    assert bind_batch(REWARD, sequences) is None
    check(REWARD, sequences)


@pytest.mark.parametrize("sequences", [
    [{"n": 300}, {"n": 262}, {"n": 1000, "c": 0, "t": 0}],
    [{"n": 261}],  # a negative history
    [{"c": 1}],  # no n
])
def test_lengths_of_scalars_and_n_bind_at_once(sequences):
    assert check(JAGGED, sequences) == all("n" in s and s["n"] >= 262 for s in sequences)


@pytest.mark.parametrize("params, segments", [
    ("d: int = 2", "A = n // d;B = n - n // d"),  # a divisor: checked per sequence
    ("L: [int] = [1, 2]", "P = n - sum(L);R[i] = L[i]"),  # a length reading a list
    ("", "G = grid(2, 3);S = n - 6"),  # a grid
    ("L: [int] = [1, 2]", "R[i < 2] = L[i] + 1;S = n - L[0] - L[1] - 2"),  # a family of another form
])
def test_other_layouts_are_left_to_the_per_sequence_path(params, segments):
    assert bind_batch(program(params, segments), [{"n": 20}]) is None


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=ms.cases(max_sequences=5), shuffle=st.randoms(use_true_random=False))
def test_generated_programs_bind_at_once_as_one_by_one(case, shuffle):
    try:
        compiled = compile_text(case.text, KernelOptions(), case.consts)
    except ValueError:
        return  # refused programs are test_fuzz_grammar's business
    sequences = list(case.sequences)
    shuffle.shuffle(sequences)
    check(compiled.program, sequences)


def test_a_batch_bound_at_once_reads_like_a_list():
    values, layouts = bind_batch(REWARD, [{"prompt": 5, "responses": [3, 4]}, {"prompt": 1}, {"prompt": 2, "n": 2}])
    assert len(layouts) == len(values) == 3
    assert layouts[-1] is layouts[2] and [lay.n for lay in layouts] == [12, 1, 2] and layouts[1:][0] is layouts[1]
    assert values[0].arrays["responses"].tolist() == [3, 4] and values[2].n == 2 and values[1].n is None
    with pytest.raises(IndexError):
        layouts[3]
    before = len(pickle.dumps((values, layouts)))
    [lay.n for lay in layouts], [v.n for v in values]  # every item made
    assert len(pickle.dumps((values, layouts))) == before  # and not pickled
    again = pickle.loads(pickle.dumps((values, layouts)))
    assert_same(again, one_by_one(REWARD, [{"prompt": 5, "responses": [3, 4]}, {"prompt": 1}, {"prompt": 2, "n": 2}]))
