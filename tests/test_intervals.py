"""Soundness of interval arithmetic (maskc.intervals) against brute force.

Random expressions are evaluated over several random boxes at once (as the planner does): small ranges of
q and k, or, on a grid, a product of row and column ranges, with per-box parameters, lists and trees. For
every box, every point value of an int expression lies in the interval; a bool can be true (false) wherever
some point is true (false); and an UNKNOWN answer claimed exact has a true point and a false point.

The language's arithmetic is exact, and maskc.ranges rejects a program where an intermediate might pass
64 bits; so interval arithmetic (like the exact evaluator) computes in int64 and is only asked about boxes
where every intermediate's hull fits. Random expressions can leave int64 (`((q^3)^3)^3` at q = 6); such
boxes are outside the language and are skipped (`in_domain`)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from maskc import ir
from maskc.compiler import compile_text
from maskc.diagnostics import MaskError
from maskc.ir.evaluate import Env, evaluate
from maskc.plan.intervals import ArrayTable, IntervalEvaluator, IntRange, RangeExtremes

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
        extremes=RangeExtremes(np.concatenate([a.astype(np.int64) for a in arrays])),
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


INT64 = (-(2**63), 2**63 - 1)


def _hull(e: ir.Expr, box: dict, grid: bool) -> tuple[int, int] | None:
    """The hull of an int expression over a box in Python's unbounded integers, by the rules of
    maskc.ranges; None where it or an intermediate passes int64 (maskc would reject such a program)."""
    def h(x):
        return _hull(x, box, grid)

    if isinstance(e, (ir.Compare, ir.Logic, ir.Ancestor)) or (isinstance(e, ir.Unary) and e.op == "not"):
        return None if None in [h(x) for x in ir.children(e)] else (0, 1)
    if isinstance(e, ir.Const):
        return int(e.value), int(e.value)
    if isinstance(e, ir.Param):
        return box[e.name], box[e.name]
    if isinstance(e, ir.Token):
        if e.attr != "index":
            return box[e.attr]
        if e.side == "q" and grid:
            return GRID_START + box["y"][0] * W + box["x"][0], GRID_START + box["y"][1] * W + box["x"][1]
        return box[e.side]
    if isinstance(e, ir.Index):
        if None in [h(i) for i in e.indices]:
            return None
        values = [int(v) for v in box[e.array]] + [0]  # reads outside the list give 0
        out = min(values), max(values)
    elif isinstance(e, ir.Unary):
        a = h(e.arg)
        if a is None:
            return None
        out = (-a[1], -a[0]) if e.op == "neg" else (0 if a[0] <= 0 <= a[1] else min(map(abs, a)), max(map(abs, a)))
    elif isinstance(e, ir.Pow):
        a = h(e.base)
        if a is None:
            return None
        ends = [a[0] ** e.exponent, a[1] ** e.exponent]
        out = (0 if e.exponent % 2 == 0 and a[0] <= 0 <= a[1] else min(ends)), max(ends)
    elif isinstance(e, ir.Binary):
        a, b = h(e.lhs), h(e.rhs)
        if a is None or b is None:
            return None
        if e.op in ("//", "%"):
            m = max(map(abs, a)) if e.op == "//" else max(map(abs, b)) - 1
            out = -m, m
        else:
            corners = [{"+": x + y, "-": x - y, "*": x * y, "min": min(x, y), "max": max(x, y)}[e.op]
                       for x in a for y in b]
            out = min(corners), max(corners)
    else:
        raise TypeError(f"no hull for {e!r}")
    return out if INT64[0] <= out[0] and out[1] <= INT64[1] else None


def in_domain(e: ir.Expr, box: dict, grid: bool) -> bool:
    """Whether every intermediate of `e` fits int64 over the box: the only boxes the planner is given."""
    return _hull(e, box, grid) is not None


def exact_values(e: ir.Expr, env: Env) -> np.ndarray:
    n = len(env.tokens[("k", "index")])
    return np.broadcast_to(np.asarray(evaluate(e, env)), (n,))


def check_int(e: ir.Expr, bxs: list[dict], grid: bool, track: bool) -> int:
    """Every point value of `e` in each box (inside int64) lies in its interval; returns how many boxes were."""
    r = evaluator(bxs, grid, track).int(e)
    lo, hi = np.broadcast_to(r.lo, (len(bxs),)), np.broadcast_to(r.hi, (len(bxs),))
    checked = 0
    for i, box in enumerate(bxs):
        if not in_domain(e, box, grid):
            continue
        checked += 1
        v = exact_values(e, points(box, grid))
        assert lo[i] <= v.min() and v.max() <= hi[i], \
            f"{ir.show(e)} on box {i}: values {v.min()}..{v.max()} outside [{lo[i]}, {hi[i]}]"
    return checked


def check_bool(e: ir.Expr, bxs: list[dict], grid: bool, track: bool) -> int:
    """Sound in each box (inside int64), and exact where it says so; returns how many boxes were checked."""
    r = evaluator(bxs, grid, track).bool(e)
    size = len(bxs)
    can_t, can_f = np.broadcast_to(r.can_true, (size,)), np.broadcast_to(r.can_false, (size,))
    exact = np.broadcast_to(np.asarray(r.exact), (size,))
    checked = 0
    for i, box in enumerate(bxs):
        if not in_domain(e, box, grid):
            continue
        checked += 1
        v = exact_values(e, points(box, grid)).astype(bool)
        where = f"{ir.show(e)} on box {i} {box}"
        assert can_t[i] or not v.any(), f"{where}: true somewhere, but the interval says it cannot be"
        assert can_f[i] or v.all(), f"{where}: false somewhere, but the interval says it cannot be"
        if track and can_t[i] and can_f[i] and exact[i]:
            assert v.any() and not v.all(), f"{where}: claimed exactly UNKNOWN, but it is {'true' if v.all() else 'false'} everywhere"
    return checked


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(data=st.data(), grid=st.booleans())
def test_int_intervals_contain_every_point_value(data, grid):
    e = data.draw(int_exprs(grid), label="expr")
    bxs = data.draw(boxes(grid), label="boxes")
    track = data.draw(st.booleans(), label="track")
    if check_int(e, bxs, grid, track) < len(bxs):
        event("a box outside int64, skipped")


@SETTINGS
@given(data=st.data(), grid=st.booleans())
def test_bool_intervals_are_sound_and_exact_when_they_say_so(data, grid):
    e = data.draw(bool_exprs(grid), label="expr")
    bxs = data.draw(boxes(grid), label="boxes")
    track = data.draw(st.booleans(), label="track")
    if check_bool(e, bxs, grid, track) < len(bxs):
        event("a box outside int64, skipped")


# Offsets that put a value near either end of int64, where the difference of two no longer fits.
BIG = [0, 2**62, -(2**62), 2**63 - 2**40, -(2**63) + 2**40]


@SETTINGS
@given(data=st.data(), grid=st.booleans())
def test_comparisons_of_values_near_either_end_of_int64(data, grid):
    """Each side of a comparison fits int64 (as the language requires), lhs - rhs may not."""
    def side(label):
        e = data.draw(int_exprs(grid, 2), label=label)
        big = data.draw(st.sampled_from(BIG), label=f"{label} offset")
        return ir.Binary("+", e, ir.Const(big)) if big else e
    e = ir.Compare(data.draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), label="op"), side("lhs"), side("rhs"))
    bxs = data.draw(boxes(grid), label="boxes")
    track = data.draw(st.booleans(), label="track")
    if check_bool(e, bxs, grid, track) < len(bxs):
        event("a box outside int64, skipped")


# ---------------------------------------------------------------------------------------------------
# Values near and past int64
# ---------------------------------------------------------------------------------------------------


def _box(**kw) -> dict:
    base = {"q": (0, 0), "k": (0, 0), "a": 0, "d": 1, "L": np.zeros(0, np.int64), "M": np.zeros(0, bool),
            "P": np.zeros(0, np.int64)}
    return {**base, **kw}


Q27 = ir.Pow(ir.Pow(ir.Pow(Q, 3), 3), 3)  # q^27


def test_a_power_past_int64_is_outside_the_language_and_up_to_it_is_exact():
    """A CI flake: `((q^3)^3)^3` over q in [3, 7] reaches 6^27 and 7^27 > 2^63. Both the intervals and the
    exact evaluator wrapped (to [3^27, 7^27 mod 2^64] and 6^27 mod 2^64), and the test compared the two.
    The language says such a program is an error (its values might pass 64 bits), so the box is skipped;
    up to 5^27 < 2^63 the interval is exact."""
    assert not in_domain(Q27, _box(q=(3, 7)), False)
    with pytest.raises(MaskError, match="overflow 64-bit"):
        compile_text("mask m(n: int = 64)\nsegments:\n    S = n\nrules:\n    S -> S full where ((q^3)^3)^3 > k\n")
    assert check_int(Q27, [_box(q=(3, 7))], False, True) == 0
    assert check_int(Q27, [_box(q=(3, 5)), _box(q=(-5, 2))], False, True) == 2
    r = evaluator([_box(q=(3, 5)), _box(q=(-5, 2))], False, True).int(Q27)
    assert r.lo.tolist() == [3**27, -(5**27)] and r.hi.tolist() == [5**27, 2**27]


@pytest.mark.parametrize("q, fits", [((-8, 7), True), ((-8, 8), False), ((-9, 7), False)])
def test_a_product_up_to_either_end_of_int64(q, fits):
    """q * 2^60 fits int64 for q in [-8, 7]: its interval is exact there; one more step either way does not."""
    e = ir.Binary("*", Q, ir.Const(2**60))
    assert in_domain(e, _box(q=q), False) == fits
    assert check_int(e, [_box(q=q)], False, True) == fits
    if fits:
        r = evaluator([_box(q=q)], False, True).int(e)
        assert (r.lo[0], r.hi[0]) == (-(2**63), 7 * 2**60)


@pytest.mark.parametrize("op, can_true, can_false", [("<", False, True), ("<=", False, True), (">", True, False),
                                                     (">=", True, False), ("==", False, True), ("!=", True, False)])
def test_a_comparison_whose_sides_fit_but_whose_difference_does_not(op, can_true, can_false):
    """`2^63 - 1 - q  op  k - (2^63 - 1)`: each side fits int64 (the language allows it), lhs - rhs does not.
    The comparison used to take the sign of that difference, which wrapped: `<` came out always true."""
    top = ir.Const(2**63 - 1)
    e = ir.Compare(op, ir.Binary("-", top, Q), ir.Binary("-", K, top))
    bxs = [_box(q=(0, 40), k=(0, 40)), _box(q=(5, 5), k=(7, 7))]
    assert check_bool(e, bxs, False, True) == 2
    r = evaluator(bxs, False, True).bool(e)
    assert r.can_true.tolist() == [can_true] * 2 and r.can_false.tolist() == [can_false] * 2


def test_an_index_ranging_over_most_of_int64_is_not_scanned_as_a_short_one():
    """The index `min(k, 1) * c + min(k, 1) * c - min(q, 1) * c` (c = 2^62 - 1) spans 3c > 2^63: hi - lo
    wrapped to a negative width, so the range was scanned as if short, only its first 8 entries (all
    outside the list), and `L[...] > 0` was called impossible though L[0] = 5 is read at q = k = 0."""
    c = ir.Const(2**62 - 1)
    mk, mq = ir.Binary("min", K, ir.Const(1)), ir.Binary("min", Q, ir.Const(1))
    idx = ir.Binary("-", ir.Binary("+", ir.Binary("*", mk, c), ir.Binary("*", mk, c)), ir.Binary("*", mq, c))
    e = ir.Compare(">", ir.Index("L", (idx,)), ir.Const(0))
    box = _box(q=(0, 3), k=(0, 3), L=np.array([5, 5], dtype=np.int64))
    assert check_bool(e, [box], False, True) == 1
    assert evaluator([box], False, True).bool(e).can_true.tolist() == [True]


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


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=300), data=st.data())
def test_range_extremes_are_the_min_and_max_of_each_stretch(values, data):
    values = np.array(values, dtype=np.int64)
    stretches = data.draw(st.lists(st.tuples(st.integers(0, len(values) - 1), st.integers(0, len(values) - 1)),
                                   min_size=1, max_size=20))
    first = np.array([min(s) for s in stretches], dtype=np.int64)
    last = np.array([max(s) for s in stretches], dtype=np.int64)
    lo, hi, known = RangeExtremes(values).query(first, last)
    assert known.all()
    for a, b, x, y in zip(first, last, lo, hi):
        assert (x, y) == (values[a:b + 1].min(), values[a:b + 1].max())


def test_range_extremes_say_which_stretches_are_past_their_levels(monkeypatch):
    monkeypatch.setattr(RangeExtremes, "MAX_BYTES", 3 * 2 * 4 * 100)  # three levels (1, 2, 4) of 100 int32 values
    values = np.arange(100)[::-1]
    lo, hi, known = RangeExtremes(values).query(np.array([0, 10, 0]), np.array([6, 13, 7]))
    assert known.tolist() == [True, True, False]  # up to 7 elements: two windows of 4
    assert (lo[:2].tolist(), hi[:2].tolist()) == ([93, 86], [99, 89])


@pytest.mark.parametrize("index", ["k + k", "2 * k", "k", "k - 1"])
def test_a_list_read_over_a_stretch_claims_both_values_only_where_every_index_is_read(index):
    # M[k + k] over k in [0, 4] reads M[0], M[2], ...: never M[1], so the stretch's true is not attained.
    k = ir.Token("k", "index")
    e = {"k + k": ir.Binary("+", k, k), "2 * k": ir.Binary("*", ir.Const(2), k), "k": k,
         "k - 1": ir.Binary("-", k, ir.Const(1))}[index]
    box = {"q": (0, 0), "k": (0, 12), "a": 0, "d": 1, "L": np.array([], np.int64),
           "M": np.array([False, True, False]), "P": np.array([], np.int64)}
    assert check_bool(ir.Index("M", (e,)), [box], grid=False, track=True) == 1
