"""Soundness of interval arithmetic (maskc.intervals) against brute force.

Random expressions are evaluated over several random boxes at once (as the planner does): small ranges of
q and k, or, on a grid, a product of row and column ranges, with per-box parameters, lists and trees. For
every box, every point value of an int expression lies in the interval; a bool can be true (false) wherever
some point is true (false); and an UNKNOWN answer claimed exact has a true point and a false point."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from maskc import ir
from maskc.ir.evaluate import Env, evaluate
from maskc.plan.intervals import ArrayTable, IntervalEvaluator, IntRange

Q, K = ir.Token("q", "index"), ir.Token("k", "index")
QY, QX = ir.Token("q", "y"), ir.Token("q", "x")


# ---------------------------------------------------------------------------------------------------
# Random expressions over q, k (and q.y, q.x on a grid), parameters a and d (d != 0), lists L (int) and
# M (bool), and a tree P
# ---------------------------------------------------------------------------------------------------


def int_exprs(grid: bool, depth: int = 3):
    atoms = [Q, K, Q, K, ir.Param("a")] + ([QY, QX] if grid else [])
    leaf = st.one_of(st.sampled_from(atoms), st.integers(-6, 12).map(ir.Const))
    if depth == 0:
        return leaf
    sub = int_exprs(grid, depth - 1)
    divisor = st.one_of(st.just(ir.Param("d")), st.sampled_from([-4, -3, -1, 1, 2, 3, 5]).map(ir.Const))
    return st.one_of(
        leaf,
        st.tuples(st.sampled_from(["+", "-", "*", "min", "max"]), sub, sub).map(lambda t: ir.Binary(*t)),
        st.tuples(st.sampled_from(["//", "%"]), sub, divisor).map(lambda t: ir.Binary(*t)),
        st.tuples(st.sampled_from(["neg", "abs"]), sub).map(lambda t: ir.Unary(*t)),
        st.tuples(sub, st.sampled_from([0, 1, 2, 3])).map(lambda t: ir.Pow(*t)),
        sub.map(lambda e: ir.Index("L", (e,))),
    )


def bool_exprs(grid: bool, depth: int = 2):
    ints = int_exprs(grid, 2)
    compare = st.tuples(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), ints, ints).map(lambda t: ir.Compare(*t))
    leaf = st.one_of(compare, compare, compare,
                     int_exprs(grid, 1).map(lambda e: ir.Index("M", (e,))),
                     st.tuples(int_exprs(grid, 1), int_exprs(grid, 1)).map(lambda t: ir.Ancestor("P", *t)))
    if depth == 0:
        return leaf
    sub = bool_exprs(grid, depth - 1)
    return st.one_of(
        leaf,
        st.tuples(st.sampled_from(["and", "or"]), st.lists(sub, min_size=2, max_size=3)).map(
            lambda t: ir.Logic(t[0], tuple(t[1]))),
        sub.map(lambda e: ir.Unary("not", e)),
    )


# ---------------------------------------------------------------------------------------------------
# Boxes
# ---------------------------------------------------------------------------------------------------

W = 5  # grid width
GRID_START = 3  # the grid's first token


@st.composite
def boxes(draw, grid: bool):
    count = draw(st.integers(1, 5))
    out = []
    for _ in range(count):
        box = {}
        if grid:
            y0, x0 = draw(st.integers(0, 4)), draw(st.integers(0, W - 1))
            box["y"] = (y0, y0 + draw(st.integers(0, 2)))
            box["x"] = (x0, draw(st.integers(x0, W - 1)))
        else:
            q0 = draw(st.integers(-10, 40))
            box["q"] = (q0, q0 + draw(st.integers(0, 8)))
        k0 = draw(st.integers(-10, 40))
        box["k"] = (k0, k0 + draw(st.integers(0, 8)))
        box["a"] = draw(st.integers(-10, 10))
        box["d"] = draw(st.sampled_from([-3, -2, -1, 1, 2, 4]))
        box["L"] = np.array(draw(st.lists(st.integers(-5, 5), max_size=6)), dtype=np.int64)
        box["M"] = np.array(draw(st.lists(st.booleans(), max_size=6)), dtype=bool)
        size = draw(st.integers(0, 8))
        box["P"] = np.array([draw(st.integers(-1, x - 1)) for x in range(size)], dtype=np.int64)
        out.append(box)
    return out


def _table(arrays: list[np.ndarray], parents: bool = False) -> ArrayTable:
    sizes = np.array([len(a) for a in arrays], dtype=np.int64)
    return ArrayTable(
        values=np.concatenate([a.astype(np.int64) for a in arrays]),
        offset=np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64),
        shape=(sizes,),
        vmin=np.array([a.min() if len(a) else 0 for a in arrays], dtype=np.int64),
        vmax=np.array([a.max() if len(a) else 0 for a in arrays], dtype=np.int64),
        parents=[a.astype(np.int64) for a in arrays] if parents else None,
        seq=np.arange(len(arrays)) if parents else None,
    )


def evaluator(bxs: list[dict], grid: bool, track: bool) -> IntervalEvaluator:
    """Leaves built the way the planner builds them (maskc.plan._Leaves)."""
    col = {key: np.array([b[key] for b in bxs]) for key in bxs[0] if key not in ("L", "M", "P")}
    size = len(bxs)
    roots = (lambda name: {name: True}) if track else (lambda name: {})
    leaves = {("k", "index"): IntRange.leaf(col["k"][:, 0], col["k"][:, 1], roots("k"))}
    if grid:
        (y0, y1), (x0, x1) = col["y"].T, col["x"].T
        leaves[("q", "y")] = IntRange.leaf(y0, y1, roots("q.y"))
        leaves[("q", "x")] = IntRange.leaf(x0, x1, roots("q.x"))
        index = IntRange.leaf(GRID_START + y0 * W + x0, GRID_START + y1 * W + x1,
                              {"q.y": True, "q.x": True} if track else {})
        index.contig = y0 == y1  # tokens of a grid box are consecutive only inside one row
        leaves[("q", "index")] = index
    else:
        leaves[("q", "index")] = IntRange.leaf(col["q"][:, 0], col["q"][:, 1], roots("q"))
    leaves["a"] = IntRange.point(col["a"], size)
    leaves["d"] = IntRange.point(col["d"], size)
    arrays = {"L": _table([b["L"] for b in bxs]), "M": _table([b["M"] for b in bxs]),
              "P": _table([b["P"] for b in bxs], parents=True)}
    return IntervalEvaluator(size, leaves, arrays, track_exact=track)


def points(box: dict, grid: bool) -> Env:
    """Every (q, k) of a box, as an environment for the exact evaluator."""
    if grid:
        ys, xs, ks = np.meshgrid(np.arange(box["y"][0], box["y"][1] + 1), np.arange(box["x"][0], box["x"][1] + 1),
                                 np.arange(box["k"][0], box["k"][1] + 1), indexing="ij")
        tokens = {("q", "y"): ys.ravel(), ("q", "x"): xs.ravel(), ("q", "index"): GRID_START + (ys * W + xs).ravel(),
                  ("k", "index"): ks.ravel()}
    else:
        qs, ks = np.meshgrid(np.arange(box["q"][0], box["q"][1] + 1), np.arange(box["k"][0], box["k"][1] + 1),
                             indexing="ij")
        tokens = {("q", "index"): qs.ravel(), ("k", "index"): ks.ravel()}
    return Env(params={"a": np.int64(box["a"]), "d": np.int64(box["d"])},
               arrays={"L": box["L"], "M": box["M"], "P": box["P"]}, tokens=tokens)


def exact_values(e: ir.Expr, env: Env) -> np.ndarray:
    n = len(env.tokens[("k", "index")])
    return np.broadcast_to(np.asarray(evaluate(e, env)), (n,))


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(data=st.data(), grid=st.booleans())
def test_int_intervals_contain_every_point_value(data, grid):
    e = data.draw(int_exprs(grid), label="expr")
    bxs = data.draw(boxes(grid), label="boxes")
    track = data.draw(st.booleans(), label="track")
    r = evaluator(bxs, grid, track).int(e)
    lo, hi = np.broadcast_to(r.lo, (len(bxs),)), np.broadcast_to(r.hi, (len(bxs),))
    for i, box in enumerate(bxs):
        v = exact_values(e, points(box, grid))
        assert lo[i] <= v.min() and v.max() <= hi[i], \
            f"{ir.show(e)} on box {i}: values {v.min()}..{v.max()} outside [{lo[i]}, {hi[i]}]"


@SETTINGS
@given(data=st.data(), grid=st.booleans())
def test_bool_intervals_are_sound_and_exact_when_they_say_so(data, grid):
    e = data.draw(bool_exprs(grid), label="expr")
    bxs = data.draw(boxes(grid), label="boxes")
    track = data.draw(st.booleans(), label="track")
    r = evaluator(bxs, grid, track).bool(e)
    size = len(bxs)
    can_t, can_f = np.broadcast_to(r.can_true, (size,)), np.broadcast_to(r.can_false, (size,))
    exact = np.broadcast_to(np.asarray(r.exact), (size,))
    for i, box in enumerate(bxs):
        v = exact_values(e, points(box, grid)).astype(bool)
        where = f"{ir.show(e)} on box {i} {box}"
        assert can_t[i] or not v.any(), f"{where}: true somewhere, but the interval says it cannot be"
        assert can_f[i] or v.all(), f"{where}: false somewhere, but the interval says it cannot be"
        if track and can_t[i] and can_f[i] and exact[i]:
            assert v.any() and not v.all(), f"{where}: claimed exactly UNKNOWN, but it is {'true' if v.all() else 'false'} everywhere"


def test_reads_outside_a_list_widen_every_box_even_when_others_are_scanned():
    """A regression: boxes whose index range is short are scanned element by element; the others use the
    list's hull, which must include the 0 read outside the list."""
    bxs = [{"q": (0, 0), "k": (0, 3), "a": 0, "d": 1, "L": np.array([5, 5, 5]), "M": np.zeros(0, bool),
            "P": np.zeros(0, np.int64)},
           {"q": (0, 0), "k": (0, 40), "a": 0, "d": 1, "L": np.array([5, 5, 5]), "M": np.zeros(0, bool),
            "P": np.zeros(0, np.int64)}]
    r = evaluator(bxs, False, True).bool(ir.Compare(">", ir.Index("L", (K,)), ir.Const(0)))
    assert r.can_false.tolist() == [True, True] and r.can_true.tolist() == [True, True]


def test_an_exact_unknown_comparison_on_a_grid_row_and_across_rows():
    """`q == k` over a grid box: exact inside one row (consecutive tokens), not across rows (a gap)."""
    extra = {"a": 0, "d": 1, "L": np.zeros(0, np.int64), "M": np.zeros(0, bool), "P": np.zeros(0, np.int64)}
    one_row = {"y": (1, 1), "x": (0, 4), "k": (10, 10), **extra}  # tokens 8..12
    two_rows = {"y": (0, 1), "x": (1, 2), "k": (7, 7), **extra}  # tokens 4, 5, 9, 10: 7 is in the gap
    r = evaluator([one_row, two_rows], True, True).bool(ir.Compare("==", Q, K))
    assert r.can_true.tolist() == [True, True] and r.can_false.tolist() == [True, True]
    assert np.asarray(r.exact).tolist() == [True, False]


def test_every_combination_of_small_boxes_for_floor_division_and_modulo():
    """Exhaustively, for every q range in [-6, 6] and every divisor, `q // d` and `q % d` stay in their hull."""
    for (lo, hi), d in itertools.product(((a, b) for a in range(-6, 7) for b in range(a, 7)), [-3, -2, -1, 1, 2, 3]):
        box = {"q": (lo, hi), "k": (0, 0), "a": 0, "d": d, "L": np.zeros(0, np.int64), "M": np.zeros(0, bool),
               "P": np.zeros(0, np.int64)}
        ev = evaluator([box], False, True)
        for op in ("//", "%"):
            e = ir.Binary(op, Q, ir.Param("d"))
            r = ev.int(e)
            v = exact_values(e, points(box, False))
            assert r.lo[0] <= v.min() and v.max() <= r.hi[0], (op, lo, hi, d)
            if bool(np.asarray(r.exact)[0] if np.ndim(r.exact) else r.exact):
                assert v.min() == r.lo[0] and v.max() == r.hi[0], (op, lo, hi, d, "ends not attained")
