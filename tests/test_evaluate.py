"""The exact evaluator (maskc.evaluate), the definition every faster path is tested against: the language's
integer semantics (floor division and modulo on negative values, pow, abs/min/max/clamp), reads outside a
list, and `ancestor` on a small tree. Expressions are written in the language and lowered by the front end,
so that `clamp` and chained comparisons are checked through their lowering too."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from maskc import ir
from maskc.front import read_program
from maskc.ir.evaluate import Env, evaluate, gather, is_ancestor


def lowered(expr: str) -> ir.Expr:
    """The IR of an int expression over scalars x, y and lists L (ints), B (bools), T (a table)."""
    text = (f"mask t(x: int = 0, y: int = 0, L: [int] = [], B: [bool] = [], T: [[int]] = [[0]])\n"
            f"segments:\n    S = n\nrules:\n    S -> S   where {expr} == 0\n")
    pred = read_program(text).regions[0].pred
    assert isinstance(pred, ir.Compare) and pred.rhs == ir.Const(0)
    return pred.lhs


def value(expr: str, **params) -> int:
    arrays = {name: np.asarray(params.pop(name)) for name in ("L", "B", "T") if name in params}
    env = Env(params={k: np.int64(v) for k, v in params.items()}, arrays=arrays)
    return int(evaluate(lowered(expr), env))


SIGNED = [-7, -6, -1, 0, 1, 6, 7]
DIVISORS = [-3, -2, -1, 1, 2, 3]


def test_floor_division_and_modulo_round_toward_negative_infinity():
    assert value("x // 2", x=-7) == -4
    assert value("x % 2", x=-7) == 1
    assert value("x // y", x=7, y=-2) == -4
    assert value("x % y", x=7, y=-2) == -1
    assert value("x // y", x=-7, y=-2) == 3
    assert value("x % y", x=-7, y=-2) == -1
    for a, b in itertools.product(SIGNED, DIVISORS):
        assert value("x // y", x=a, y=b) == a // b, (a, b)
        assert value("x % y", x=a, y=b) == a % b, (a, b)
        # The defining identity holds, and the remainder takes the divisor's sign.
        assert value("(x // y) * y + x % y", x=a, y=b) == a


def test_division_is_elementwise_over_arrays():
    a, b = np.meshgrid(np.arange(-9, 10), np.array(DIVISORS), indexing="ij")
    env = Env(params={"x": a.astype(np.int64), "y": b.astype(np.int64)})
    np.testing.assert_array_equal(evaluate(lowered("x // y"), env), [[i // j for j in DIVISORS] for i in range(-9, 10)])
    np.testing.assert_array_equal(evaluate(lowered("x % y"), env), [[i % j for j in DIVISORS] for i in range(-9, 10)])


def test_division_by_zero_raises():
    with pytest.raises(ZeroDivisionError):
        value("x // y", x=3, y=0)
    with pytest.raises(ZeroDivisionError):
        value("x % y", x=3, y=0)


def test_pow():
    assert value("x^2", x=-3) == 9
    assert value("x^3", x=-3) == -27
    assert value("x^0", x=-5) == 1
    assert value("x^1", x=-5) == -5
    assert value("2^40") == 2**40  # 64-bit, not 32
    assert value("-x^2", x=3) == -9  # -(x^2)
    assert value("x^2^1", x=3) == 9  # right-associative: x^(2^1)


def test_abs_min_max_clamp():
    assert value("abs(x)", x=-4) == 4
    assert value("abs(x)", x=4) == 4
    assert value("min(x, y)", x=-4, y=2) == -4
    assert value("max(x, y)", x=-4, y=2) == 2
    assert value("min(x, y, 1, 7)", x=5, y=3) == 1
    assert value("max(x, -2, y)", x=-5, y=-3) == -2
    for v in range(-3, 12):
        assert value("clamp(x, 0, 8)", x=v) == min(max(v, 0), 8)
    # An empty clamp range (lo > hi) gives hi: min(max(x, lo), hi).
    assert value("clamp(x, 5, 2)", x=0) == 2


def test_list_reads_outside_the_list_give_zero():
    L = [5, -3, 9]
    assert [value("L[x]", x=i, L=L) for i in range(-2, 5)] == [0, 0, 5, -3, 9, 0, 0]
    assert value("L[x]", x=0, L=np.zeros(0, np.int64)) == 0
    T = [[1, 2, 3], [4, 5, 6]]
    reads = {(i, j): value("T[x][y]", x=i, y=j, T=T) for i in range(-1, 3) for j in range(-1, 4)}
    assert reads == {(i, j): (T[i][j] if 0 <= i < 2 and 0 <= j < 3 else 0) for i, j in reads}
    # A bool list reads false outside.
    env = Env(params={"x": np.arange(-1, 4)}, arrays={"B": np.array([True, False, True])})
    b = evaluate(read_program("mask t(x: int = 0, B: [bool] = [])\nsegments:\n    S = n\nrules:\n    S -> S   where B[x]\n"
                              ).regions[0].pred, env)
    np.testing.assert_array_equal(b, [False, True, False, True, False])
    # gather itself, on a table with an empty axis
    np.testing.assert_array_equal(gather(np.zeros((2, 0), np.int64), (np.array([0, 1]), np.array([0, 0]))), [0, 0])


def test_ancestor_on_a_small_tree():
    #     0         5
    #    / \        |
    #   1   2       6
    #   |
    #   3
    #   |
    #   4
    parent = np.array([-1, 0, 0, 1, 3, -1, 5])
    truth = {(a, b): False for a in range(-2, 9) for b in range(-2, 9)}
    for node in range(7):
        x = node
        while x != -1:
            truth[(node, x)] = True
            x = int(parent[x])
    nodes, ancs = np.array(list(truth)).T
    np.testing.assert_array_equal(is_ancestor(parent, nodes, ancs), list(truth.values()))
    # The cases by name, through the language: self, parent, grandparent, non-ancestors, out of range.
    text = ("mask t(x: int = 0, y: int = 0, parent: [int] = [])\nsegments:\n    S = n\nrules:\n"
            "    S -> S   where ancestor(parent, x, y)\n")
    pred = read_program(text).regions[0].pred

    def anc(a, b):
        return bool(evaluate(pred, Env(params={"x": np.int64(a), "y": np.int64(b)}, arrays={"parent": parent})))

    assert anc(4, 4)  # itself
    assert anc(4, 3) and anc(4, 1) and anc(4, 0)  # parent, grandparent, root
    assert not anc(3, 4)  # a descendant is not an ancestor
    assert not anc(2, 1)  # a sibling's branch
    assert not anc(6, 0)  # another tree
    assert anc(6, 5)
    assert not anc(7, 7) and not anc(-1, -1) and not anc(4, -1) and not anc(9, 0)  # out of range


def test_comparisons_chain():
    text = "mask t(x: int = 0, y: int = 0)\nsegments:\n    S = n\nrules:\n    S -> S   where 0 <= x - y < 3\n"
    pred = read_program(text).regions[0].pred
    xs = np.arange(-2, 8)
    got = evaluate(pred, Env(params={"x": xs, "y": np.int64(2)}))
    np.testing.assert_array_equal(got, (0 <= xs - 2) & (xs - 2 < 3))
