"""Interval arithmetic over boxes of (q, k) pairs, vectorised with numpy.

The planner asks, for many boxes at once (a q tile times a block of k tiles), whether a predicate can be
true somewhere in the box and whether it can be false somewhere. The answers are sound: "cannot be true"
and "cannot be false" are proofs. "Both" (UNKNOWN) may be loose, so each UNKNOWN also says whether it is
exact, i.e. whether the predicate really is true at one pair and false at another. It is exact when every
comparison sees each token (q or k) through at most one varying leaf, the hulls it compares are attained,
and connectives combine at most one UNKNOWN per token. The planner refines inexact UNKNOWN tiles.

Integer values carry: `lo`, `hi` (the hull), `exact` (both ends are attained), `contig` (every integer in
the hull is attained), and `roots`: for each independent source of variation, how many varying leaves
depend on it. A token is one root; on a grid box (a product of coordinate ranges) each coordinate of the
token is its own root, since it varies independently of the others.
Boolean values carry `can_true`, `can_false`, `exact`, and the roots they depend on.

Each operator's own rule is its `box` in maskc.ir.ops; this module evaluates leaves, list reads and
ancestor(), and combines roots and exactness across operators.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from maskc import ir
from maskc.ir.ops import BOOL, INT, Operator
from maskc.plan.arrays import distinct

Roots = dict  # root name -> count (or flag) per box


def _add_roots(a: Roots, b: Roots) -> Roots:
    out = dict(a)
    for name, v in b.items():
        out[name] = out[name] + v if name in out else v
    return out


@dataclass
class IntRange:
    lo: np.ndarray
    hi: np.ndarray
    exact: np.ndarray | bool = True
    contig: np.ndarray | bool = True
    roots: Roots = field(default_factory=dict)

    @staticmethod
    def point(value, size: int) -> "IntRange":
        v = np.broadcast_to(np.asarray(value, dtype=np.int64), (size,))
        return IntRange(v, v)

    def take(self, idx: np.ndarray) -> "IntRange":
        """The values of the boxes `idx`."""
        def pick(x):
            return x[idx] if isinstance(x, np.ndarray) and x.ndim else x
        return IntRange(self.lo[idx], self.hi[idx], pick(self.exact), pick(self.contig),
                        {k: pick(v) for k, v in self.roots.items()})

    @staticmethod
    def leaf(lo, hi, roots: dict[str, np.ndarray | bool] | str, tight=True) -> "IntRange":
        """A varying input; `roots` names what it varies with (a token, or coordinates of one)."""
        lo = np.asarray(lo, dtype=np.int64)
        hi = np.asarray(hi, dtype=np.int64)
        if isinstance(roots, str):
            roots = {roots: True}
        if not roots:
            return IntRange(lo, hi, tight, tight, {})
        varying = hi > lo
        counts = {name: (varying & np.asarray(on)).astype(np.int64) for name, on in roots.items()}
        return IntRange(lo, hi, tight, tight, counts)


@dataclass
class BoolRange:
    can_true: np.ndarray
    can_false: np.ndarray
    exact: np.ndarray | bool = True
    deps: Roots = field(default_factory=dict)  # root name -> bool per box

    @property
    def unknown(self) -> np.ndarray:
        return self.can_true & self.can_false


class RangeExtremes:
    """The min and max of any stretch of a flat array, two look-ups each (a sparse table: level j holds the
    extremes of the 2^j elements from each position). A per-token list read over a box of tokens (`doc[q]` over
    a tile) then has the hull of the elements it reads, not of the whole list: what proves `doc[q] == doc[k]`
    true or false on the tiles of one or two documents. Levels stop at MAX_BYTES; a longer stretch is answered
    as unknown. The table is made at the first query (a list read only at single indices never needs it)."""

    MAX_BYTES = 64 << 20

    def __init__(self, values: np.ndarray):
        self._values = values

    @cached_property
    def _levels(self) -> tuple[np.ndarray, np.ndarray]:
        """(mins, maxs), each [level, position], so that a query reads every stretch's level in one gather."""
        values = np.asarray(self._values, dtype=np.int64)
        narrow = values.size == 0 or (values.min() >= -2**31 and values.max() < 2**31)
        dtype = np.int32 if narrow else np.int64
        per_level = 2 * values.size * np.dtype(dtype).itemsize
        levels = 1
        while (1 << levels) <= values.size and (levels + 1) * per_level <= self.MAX_BYTES:
            levels += 1
        mins = np.empty((levels, values.size), dtype=dtype)
        maxs = np.empty((levels, values.size), dtype=dtype)
        mins[0] = maxs[0] = values
        for j in range(1, levels):
            half = 1 << (j - 1)
            np.minimum(mins[j - 1], np.concatenate((mins[j - 1][half:], mins[j - 1][-half:])), out=mins[j])
            np.maximum(maxs[j - 1], np.concatenate((maxs[j - 1][half:], maxs[j - 1][-half:])), out=maxs[j])
        return mins, maxs

    def query(self, first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(min, max, known) of values[first..last] (inclusive, first <= last) for each pair; `known` False
        where the stretch is longer than the levels reach (min and max are then meaningless)."""
        mins, maxs = self._levels
        length = last - first + 1
        level = np.zeros(len(length), dtype=np.int64)
        np.log2(np.maximum(length, 1), out=level, casting="unsafe")  # floor(log2) for lengths below 2^53
        known = level < len(mins)
        np.minimum(level, len(mins) - 1, out=level)
        second = np.maximum(last - (1 << level) + 1, first)
        lo = np.minimum(mins[level, first], mins[level, second]).astype(np.int64)
        hi = np.maximum(maxs[level, first], maxs[level, second]).astype(np.int64)
        return lo, hi, known


@dataclass
class ArrayTable:
    """A list parameter for every box: per-box offset into a flat value array, its shape, min and max."""

    values: np.ndarray  # int64, all sequences concatenated
    offset: np.ndarray  # per box
    shape: tuple[np.ndarray, ...]  # per box: (len,) or (rows, cols)
    vmin: np.ndarray  # per box: min over the sequence's array (0 when empty)
    vmax: np.ndarray
    parents: list[np.ndarray] | None = None  # per sequence, for ancestor()
    seq: np.ndarray | None = None  # per box sequence id
    extremes: RangeExtremes | None = None  # of `values`, for a 1-D list read over a stretch of indices


# How far a varying index is scanned element by element before falling back to the array's hull.
_SCAN = 8


class IntervalEvaluator:
    """Evaluates expressions over `size` boxes; `env` maps leaves to IntRange / ArrayTable."""

    def __init__(self, size: int, leaves: dict, arrays: dict[str, ArrayTable], track_exact: bool = True):
        self.size = size
        self.leaves = leaves
        self.arrays = arrays
        self.track = track_exact

    # -- integers ---------------------------------------------------------------------------------

    def int(self, e: ir.Expr) -> IntRange:
        o = ir.operation(e)
        if isinstance(e, ir.Ancestor) or (o is not None and o.op.result == BOOL):
            b = self.bool(e)  # a bool compared with a bool: false is 0, true is 1
            return IntRange(np.where(b.can_false, 0, 1), np.where(b.can_true, 1, 0), b.exact, True,
                            {name: np.asarray(d).astype(np.int64) for name, d in b.deps.items()})
        if isinstance(e, ir.Const):
            return IntRange.point(int(e.value), self.size)
        if isinstance(e, ir.Param):
            return self.leaves[e.name]
        if isinstance(e, ir.Token):
            return self.leaves[(e.side, e.attr)]
        if isinstance(e, ir.Member):
            return self.leaves[("member", e.side)]
        if isinstance(e, (ir.ArrayLen, ir.ArraySum)):
            return self.leaves[ir.show(e)]
        if isinstance(e, ir.Pow) and e.exponent == 0:
            return IntRange.point(1, self.size)  # x^0 varies with nothing: it carries no roots
        if o is not None:
            args = [self.int(a) for a in o.args]
            lo, hi, exact, contig = o.op.box(*args, *o.consts)
            roots: Roots = {}
            for a in args:
                roots = _add_roots(roots, a.roots)
            return IntRange(lo, hi, exact if self.track else True, contig, roots)
        if isinstance(e, ir.Index):
            return self._index(e)
        raise TypeError(f"not an integer expression: {ir.show(e)}")

    def _index(self, e: ir.Index) -> IntRange:
        table = self.arrays[e.array]
        idx = [self.int(i) for i in e.indices]
        point = np.ones(self.size, dtype=bool)
        for r in idx:
            point &= r.lo == r.hi
        # Outside reads give 0, so a hull over the whole array must include it.
        lo = np.minimum(table.vmin, 0)
        hi = np.maximum(table.vmax, 0)
        # Where every index is a point, read the element; where the ranges are short, scan them. An index may
        # range over most of int64, so its span hi - lo is taken unsigned (exact below 2^64) and capped.
        width = np.ones(self.size, dtype=np.int64)
        for r in idx:
            span = np.asarray(r.hi).astype(np.uint64) - np.asarray(r.lo).astype(np.uint64)
            width *= np.minimum(span, _SCAN).astype(np.int64) + 1
        scan = width <= _SCAN
        if scan.any():
            s_lo = np.full(self.size, np.iinfo(np.int64).max)
            s_hi = np.full(self.size, np.iinfo(np.int64).min)
            for combo in np.ndindex(*([_SCAN] * len(idx))):
                coords = [r.lo + c for r, c in zip(idx, combo)]
                ok = scan.copy()
                for r, c in zip(idx, coords):
                    ok &= (c >= r.lo) & (c <= r.hi)  # c < lo: lo + offset wrapped past int64
                if not ok.any():
                    continue
                v = self._read(table, coords)
                s_lo = np.where(ok, np.minimum(s_lo, v), s_lo)
                s_hi = np.where(ok, np.maximum(s_hi, v), s_hi)
            lo = np.where(scan, s_lo, lo)
            hi = np.where(scan, s_hi, hi)
        exact = point
        if table.extremes is not None and not scan.all():
            lo, hi, attained = self._stretch(table, idx[0], ~scan, lo, hi)
            exact = point | attained
        roots: Roots = {}
        for r in idx:
            roots = _add_roots(roots, r.roots)
        return IntRange(lo, hi, exact, point, {name: np.where(point, 0, v) for name, v in roots.items()})

    @staticmethod
    def _stretch(table: ArrayTable, r: IntRange, wide: np.ndarray, lo: np.ndarray, hi: np.ndarray):
        """The hull of a 1-D list read over a wide index range (`wide`): the extremes of the elements inside the
        list, and 0 where the range reaches outside it (reads there give 0). Also where both ends are attained:
        the index takes every value of its range (exact and contiguous), so every element of the stretch is read."""
        length = table.shape[0]
        first, last = np.maximum(r.lo, 0), np.minimum(r.hi, length - 1)
        at = (wide & (first <= last)).nonzero()[0]
        e_lo, e_hi, known = table.extremes.query(table.offset[at] + first[at], table.offset[at] + last[at])
        at, e_lo, e_hi = at[known], e_lo[known], e_hi[known]
        outside = (r.lo[at] < 0) | (r.hi[at] >= length[at])
        lo, hi = lo.copy(), hi.copy()
        lo[at] = np.where(outside, np.minimum(e_lo, 0), e_lo)
        hi[at] = np.where(outside, np.maximum(e_hi, 0), e_hi)
        attained = np.zeros(len(lo), dtype=bool)
        # (Contiguous as an interval is not enough where a token varies through two leaves: `k + k` skips the odd
        # indices. One leaf per token, then.)
        every_index = np.asarray(r.exact) & np.asarray(r.contig)
        for count in r.roots.values():
            every_index = every_index & (np.asarray(count) <= 1)
        every_index = np.broadcast_to(every_index, attained.shape)
        attained[at] = every_index[at]  # (reads outside the list attain 0 as well: a read there gives it)
        nowhere = wide & (first > last)  # every read outside the list: 0
        lo[nowhere], hi[nowhere] = 0, 0
        attained |= nowhere & every_index
        return lo, hi, attained

    @staticmethod
    def _read(table: ArrayTable, coords: list[np.ndarray]) -> np.ndarray:
        inside = np.ones(len(coords[0]), dtype=bool)
        flat = np.zeros(len(coords[0]), dtype=np.int64)
        for axis, c in enumerate(coords):
            extent = table.shape[axis]
            inside &= (c >= 0) & (c < extent)
            flat = flat * extent + np.clip(c, 0, np.maximum(extent - 1, 0))
        pos = np.where(inside, table.offset + flat, 0)
        if len(table.values) == 0:
            return np.zeros(len(flat), dtype=np.int64)
        return np.where(inside, table.values[np.minimum(pos, len(table.values) - 1)], 0)

    # -- booleans ---------------------------------------------------------------------------------

    def bool(self, e: ir.Expr) -> BoolRange:
        n = self.size
        if isinstance(e, ir.Const):
            v = bool(e.value)
            return BoolRange(np.full(n, v), np.full(n, not v))
        if isinstance(e, ir.Param):
            r = self.leaves[e.name]
            return BoolRange(r.hi > 0, r.lo == 0)
        o = ir.operation(e)
        if o is not None and o.op.operands == INT:
            return self._compare(o.op, *o.args)
        if o is not None:  # a connective
            parts = [self.bool(a) for a in o.args]
            can_t, can_f = o.op.box(*parts)
            if len(parts) == 1:  # `not`: exactly as exact as its operand
                return BoolRange(can_t, can_f, parts[0].exact, parts[0].deps)
            return self._connective(can_t, can_f, parts)
        if isinstance(e, ir.Index):
            r = self._index(e)
            return BoolRange(r.hi > 0, r.lo == 0, r.exact, {n: np.asarray(v) > 0 for n, v in r.roots.items()})
        if isinstance(e, ir.Ancestor):
            return self._ancestor(e)
        raise TypeError(f"not a boolean expression: {ir.show(e)}")

    def _compare(self, op: Operator, lhs: ir.Expr, rhs: ir.Expr) -> BoolRange:
        a, b = self.int(lhs), self.int(rhs)
        can_t, can_f, exact = op.box(a, b)
        if not self.track:
            return BoolRange(can_t, can_f)
        # Exact only if no root reaches the comparison through two varying leaves (they might not vary
        # together the way the hull assumes).
        roots = _add_roots(a.roots, b.roots)
        exact = np.asarray(exact)
        for count in roots.values():
            exact = exact & (np.asarray(count) <= 1)
        return BoolRange(can_t, can_f, exact, {n: np.asarray(v) > 0 for n, v in roots.items()})

    def _connective(self, can_t, can_f, parts: list[BoolRange]) -> BoolRange:
        if not self.track:
            return BoolRange(can_t, can_f)
        # UNKNOWN parts decide the result; it is exact when each is exact and no two depend on the same
        # root (then a true pair and a false pair can be chosen independently).
        exact = np.ones(self.size, dtype=bool)
        seen: Roots = {}
        deps: Roots = {}
        for p in parts:
            u = p.unknown & can_t & can_f
            exact &= ~u | np.asarray(p.exact)
            for name, d in p.deps.items():
                uses = u & np.asarray(d)
                if name in seen:
                    exact &= ~(uses & seen[name])
                    seen[name] = seen[name] | uses
                else:
                    seen[name] = uses
                deps[name] = deps[name] | np.asarray(d) if name in deps else np.asarray(d)
        return BoolRange(can_t, can_f, exact, deps)

    def _ancestor(self, e: ir.Ancestor) -> BoolRange:
        node, anc = self.int(e.node), self.int(e.ancestor)
        # An ancestor never comes after its descendant.
        can_t = anc.lo <= node.hi
        can_f = np.ones(self.size, dtype=bool)
        point = (node.lo == node.hi) & (anc.lo == anc.hi)
        table = self.arrays[e.array]
        if point.any() and table.parents is not None:
            from maskc.ir.evaluate import is_ancestor

            idx = np.nonzero(point)[0]
            for s in distinct(table.seq[idx]):
                sel = idx[table.seq[idx] == s]
                hit = is_ancestor(table.parents[s], node.lo[sel], anc.lo[sel])
                can_t[sel] = hit
                can_f[sel] = ~hit
        roots = _add_roots(node.roots, anc.roots)
        return BoolRange(can_t, can_f, point, {n: np.asarray(v) > 0 for n, v in roots.items()})
