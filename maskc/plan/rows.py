"""The planner's fast path for masks made of row intervals: about a hundred numpy calls on small arrays.

The general search (`planner.py`) proves tiles empty or full by interval arithmetic over boxes of tiles; it is
exact and handles every mask, but costs thousands of small numpy calls (3-10 ms for a 32K-token batch). Most
training masks are simpler: every region is, per query row, one interval of keys [lo(q), hi(q)) (causal,
documents, windows, shared prompts; see `passes/row_intervals.py`). For those the answer follows from the
interval bounds in closed form.

Where it applies (`row_forms`): the tiling has runs only (one run block per sequence: q tile t holds tokens
t*bq ..., k tile j tokens j*bk ...), there are at most `MAX_REGIONS` regions, every one has row intervals, its
row condition reads no position of the query (only its segment, member, parameters), and lo is a max and hi a
min of terms that are each either constant along a segment or `q + c` (c constant along a segment):
`max(start(S), q - window + 1)`, `min(end(R), q + 1, q.end)`. Lists are read only at indices constant along a
segment (`prefix[i]`, `is_image[i]`: a family member's own value), and are one-dimensional. Otherwise
`plan_ranges` returns None and the planner searches.

A *piece* is a run of query rows inside one q tile and one concrete segment (family member): the segment's
facts (start, end, member), and so every constant term, are fixed along it. On a piece, per region,
    lo(x) = max(L, x + l),   hi(x) = min(H, x + h)
so both are nondecreasing in steps of 0 or 1, and hi - lo is concave: the rows with a non-empty interval are
one run of the piece, found in closed form, and their intervals meet one run of keys, [lo(first), hi(last)).
Every row of the piece sees [lo(last row), hi(first row)) through the region.

Per (q tile, k tile) the descriptor needs: visited (some region meets the tile in some piece), the kind's bits
(the regions meeting it: exact, as the kernel's standalone classifier defines them), and FULL (every real row
sees every key of the tile, and the tile has no slot past the end of the sequence). A piece covers a k tile
inside one region's all-rows range. A k tile two regions meet in the same piece may be covered only by their
union (`S -> P full` and `S -> S causal` over a tile straddling the end of P): those tiles, at segment
boundaries, are checked on their own (`_covered_by_union`). A tile is FULL when every piece of its q tile
covers it. A q tile of one piece whose regions meet disjoint k tiles, the common case, is written out
directly; the others go through a sweep over range end points. O(pieces x regions^2) work, then O(tiles
visited) to write the CSR.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from maskc import ir
from maskc.ir.evaluate import Env, evaluate
from maskc.kernels.abi import TileKind
from maskc.memo import per_object
from maskc.plan.arrays import distinct, expand, stable_order
from maskc.plan.layout import list_column, scalar_column

MAX_REGIONS = 8  # pairs of regions are compared piece by piece; more regions go to the general search
# Bounds are clamped to +-2^40 (positions are below 2^31): a term past that acts exactly like the clamp on keys
# in [0, n), and sums of two clamped values cannot wrap.
_BIG = 1 << 40
_MOVING = ("index", "pos", "t", "y", "x")  # facts of the query that change along a piece
_NEVER = np.iinfo(np.int64).max  # the first tile of an empty range
_FULL = int(TileKind.FULL)  # (numpy takes an IntEnum member at 2x-4x the cost of an int)


@dataclass(frozen=True)
class _Bound:
    """lo = max(constants..., q + slopes...) (or hi = min(...)); each expression constant along a piece."""

    constants: tuple[ir.Expr, ...]
    slopes: tuple[ir.Expr, ...]


@dataclass(frozen=True)
class RowForm:
    """A region as the fast path reads it."""

    q_bits: int  # bit s: symbolic segment s is on the q side
    k_first: int  # the k side is the run of segments k_first..k_last
    k_last: int
    row: ir.Expr  # the row condition (reads no moving fact)
    lo: _Bound
    hi: _Bound


def _moves(e: ir.Expr) -> bool:
    return any(isinstance(n, ir.Token) and n.side == "q" and n.attr in _MOVING for n in ir.walk(e))


def _combine(op: str, x: ir.Expr, y: ir.Expr) -> ir.Expr:
    """x op y (op: + or -), folding constants, so that `q + 1` leaves the constant 1 to evaluate."""
    if isinstance(x, ir.Const) and isinstance(y, ir.Const):
        return ir.Const(x.value + y.value if op == "+" else x.value - y.value)
    if y == ir.Const(0):
        return x
    if x == ir.Const(0):
        return y if op == "+" else ir.Unary("neg", y)
    return ir.Binary(op, x, y)


def _q_linear(e: ir.Expr) -> tuple[int, ir.Expr] | None:
    """(a, c) with e == a*q + c, c constant along a piece (q.pos is q - q.start), or None."""
    if not _moves(e):
        return 0, e
    if isinstance(e, ir.Token) and e.attr == "index":
        return 1, ir.Const(0)
    if isinstance(e, ir.Token) and e.attr == "pos":
        return 1, ir.Unary("neg", ir.Token("q", "start"))
    if isinstance(e, ir.Unary) and e.op == "neg":
        inner = _q_linear(e.arg)
        return None if inner is None else (-inner[0], _combine("-", ir.Const(0), inner[1]))
    if isinstance(e, ir.Binary) and e.op in ("+", "-"):
        lhs, rhs = _q_linear(e.lhs), _q_linear(e.rhs)
        if lhs is None or rhs is None:
            return None
        sign = 1 if e.op == "+" else -1
        return lhs[0] + sign * rhs[0], _combine(e.op, lhs[1], rhs[1])
    return None


def _terms(e: ir.Expr, op: str) -> list[ir.Expr]:
    """The operands of a tree of `op` (max or min)."""
    if isinstance(e, ir.Binary) and e.op == op:
        return _terms(e.lhs, op) + _terms(e.rhs, op)
    return [e]


def _bound(e: ir.Expr, op: str) -> _Bound | None:
    constants, slopes = [], []
    for term in _terms(e, op):
        linear = _q_linear(term)
        if linear is None or linear[0] not in (0, 1):
            return None
        (slopes if linear[0] else constants).append(linear[1])
    return _Bound(tuple(constants), tuple(slopes))


def _reads_lists_per_segment(program: ir.Program, e: ir.Expr) -> bool:
    """Whether every list `e` reads is one-dimensional and read at an index constant along a segment, and
    computed without reading a list (`L[L[a]]` goes to the general search: each read is one column, made
    from the parameters alone)."""
    for node in ir.walk(e):
        if isinstance(node, (ir.ArrayLen, ir.ArraySum, ir.Ancestor)):
            return False
        if isinstance(node, ir.Index) and (program.param(node.array).type.depth != 1 or _moves(node.indices[0])
                                           or any(isinstance(n, ir.Index) for n in ir.walk(node.indices[0]))):
            return False
    return True


def _row_form(program: ir.Program, region: ir.Region) -> RowForm | None:
    rows = region.rows
    if (rows is None or _moves(rows.row)
            or not all(_reads_lists_per_segment(program, e) for e in (rows.row, rows.lo, rows.hi))):
        return None
    lo, hi = _bound(rows.lo, "max"), _bound(rows.hi, "min")
    if lo is None or hi is None:
        return None
    k = [program.segment_index(s) for s in region.k.segments]
    # The k side's bounds are applied anyway (_segment_constants): the pass's own copies need no evaluating.
    first, last = ir.SegmentBound(region.k.segments[0], False), ir.SegmentBound(region.k.segments[-1], True)
    lo = _Bound(tuple(e for e in lo.constants if e != first), lo.slopes)
    hi = _Bound(tuple(e for e in hi.constants if e != last), hi.slopes)
    return RowForm(sum(1 << program.segment_index(s) for s in region.q.segments), min(k), max(k), rows.row, lo, hi)


@dataclass(frozen=True)
class RowForms:
    """All regions of a program in the fast path's form, and what evaluating them reads."""

    regions: tuple[RowForm, ...]  # list reads in their expressions are parameters named by `lists`
    params: tuple[str, ...]  # scalar parameters the expressions read, besides n
    lists: tuple[tuple[str, ir.Index], ...]  # each list read, and the name it reads as: a column per segment
    bounds: tuple[tuple[str, bool, int], ...]  # SegmentBounds read: (segment, end, column of the boundary table)
    bits: np.ndarray  # uint32 [R]: each region's bit in a partial tile's kind
    pairs: tuple[np.ndarray, np.ndarray]  # every pair of regions r1 < r2 whose q sides share a segment (others
    # never meet the rows of one piece together)
    q_bits: np.ndarray  # int64 [R]: RowForm.q_bits of each region
    k_columns: np.ndarray  # int64 [2, R]: the columns of the boundary table where each region's k side begins, ends


@per_object
def row_forms(program: ir.Program) -> RowForms | None:
    """The regions in the fast path's form, or None when the fast path does not apply (found once per
    program)."""
    forms = [_row_form(program, r) for r in program.regions]
    result = None
    if len(forms) <= MAX_REGIONS and all(f is not None for f in forms):
        exprs = [e for f in forms for e in (f.row, *f.lo.constants, *f.lo.slopes, *f.hi.constants, *f.hi.slopes)]
        nodes = [node for e in exprs for node in ir.walk(e)]
        bounds = {(n.segment, n.end): program.segment_index(n.segment) + n.end for n in nodes
                  if isinstance(n, ir.SegmentBound)}
        # A list read constant along a segment is a column like a parameter's: named by its spelling (brackets
        # and all, so no parameter's name), evaluated once per concrete segment.
        lists = {ir.show(n): n for n in nodes if isinstance(n, ir.Index)}
        forms = [_reading_lists_as_params(f, lists) for f in forms] if lists else forms
        result = RowForms(tuple(forms), tuple(sorted({n.name for n in nodes if isinstance(n, ir.Param)} - {"n"})),
                          tuple(lists.items()),
                          tuple((name, end, col) for (name, end), col in bounds.items()),
                          np.array([TileKind.rule_bit(r) for r in range(len(forms))], dtype=np.uint32),
                          _sharing_rows(forms), np.array([f.q_bits for f in forms], dtype=np.int64),
                          np.array([[f.k_first for f in forms], [f.k_last + 1 for f in forms]], dtype=np.int64))
    return result


def _reading_lists_as_params(form: RowForm, lists: dict[str, ir.Index]) -> RowForm:
    def read(e: ir.Expr) -> ir.Expr:
        return ir.rewrite(e, lambda node: ir.Param(ir.show(node)) if isinstance(node, ir.Index) else node)

    def bound(b: _Bound) -> _Bound:
        return _Bound(tuple(map(read, b.constants)), tuple(map(read, b.slopes)))

    return RowForm(form.q_bits, form.k_first, form.k_last, read(form.row), bound(form.lo), bound(form.hi))


def _sharing_rows(forms: list[RowForm]) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of regions r1 < r2 whose q sides share a segment, as two arrays."""
    pairs = [(r1, r2) for r1 in range(len(forms)) for r2 in range(r1 + 1, len(forms))
             if forms[r1].q_bits & forms[r2].q_bits]
    return tuple(np.array([p[side] for p in pairs], dtype=np.int64) for side in (0, 1))


# ---------------------------------------------------------------------------------------------------
# Per concrete segment: each region's L, l, H, h and whether it applies to the segment's rows
# ---------------------------------------------------------------------------------------------------


def _segment_constants(forms: RowForms, batch, bk: int) -> np.ndarray | None:
    """int64 [6, R, C] over the concrete segments of the whole batch: ok, L, l, H, h, Hf, with L, l, H, h as
    in the module docstring (the k side's own span folded into L and H, so intervals never leave it), ok = 1
    where the region applies to the segment's rows and some row may have keys (H > L and h > l), and Hf = H
    cut to the last k tile without a ragged slot. None when an expression divides by zero for these values
    (the general search then reports or handles it)."""
    seq = batch.segment_seq
    bounds = batch.bounds[seq]  # [C, S + 1]: where each symbolic segment of c's sequence begins (the last: n)
    params = {name: scalar_column(batch.values, name)[seq] for name in forms.params}
    params["n"] = bounds[:, -1]
    start = batch.starts - batch.base[seq]
    env = Env(params=params, tokens={("q", "start"): start, ("q", "end"): start + batch.lengths,
                                     ("member", "q"): batch.member},
              bounds={(name, end): bounds[:, col] for name, end, col in forms.bounds})
    try:
        for name, read in forms.lists:
            env.params[name] = _list_read(read, env, batch, seq)
    except ZeroDivisionError:
        return None

    # One array for all six, filled in place: each region's row of L, l, H, h starts from the k side's span.
    out = np.empty((6, len(forms.regions), len(seq)), dtype=np.int64)
    applies, L, l, H, h, Hf = out
    L[:], H[:] = bounds[:, forms.k_columns[0]].T, bounds[:, forms.k_columns[1]].T
    l.fill(-_BIG)
    h.fill(_BIG)
    on_side = ((forms.q_bits[:, None] >> batch.symbol) & 1).astype(bool)
    try:
        for r, f in enumerate(forms.regions):
            if f.row != ir.TRUE:
                on_side[r] &= np.asarray(evaluate(f.row, env), dtype=bool)
            for parts, bound, op in ((f.lo.constants, L, np.maximum), (f.lo.slopes, l, np.maximum),
                                     (f.hi.constants, H, np.minimum), (f.hi.slopes, h, np.minimum)):
                for e in parts:
                    op(bound[r], evaluate(e, env), out=bound[r])
    except ZeroDivisionError:
        return None
    bounds4 = out[1:5]
    np.minimum(np.maximum(bounds4, -_BIG, out=bounds4), _BIG, out=bounds4)  # (np.clip costs 10x more)
    applies[:] = on_side & (H > L) & (h > l)
    np.minimum(H, bounds[:, -1] // bk * bk, out=Hf)
    return out


def _list_read(read: ir.Index, env: Env, batch, seq: np.ndarray) -> np.ndarray:
    """A one-dimensional list read at an index constant along a segment, for every concrete segment: its own
    sequence's entry, 0 outside the list (as everywhere)."""
    flat, starts, counts = list_column(batch.values, read.array)
    index = np.broadcast_to(np.asarray(evaluate(read.indices[0], env), dtype=np.int64), seq.shape)
    inside = (index >= 0) & (index < counts.take(seq))
    at = np.where(inside, starts.take(seq) + index, 0)
    return np.where(inside, flat.take(at) if len(flat) else 0, 0)


# ---------------------------------------------------------------------------------------------------
# Pieces, and a sweep over range end points
# ---------------------------------------------------------------------------------------------------


@dataclass
class _Pieces:
    """Runs of rows inside one q tile and one concrete segment, over the whole batch, in row order."""

    gq: np.ndarray  # [P] global q tile
    seg: np.ndarray  # [P] concrete segment (index into the batch's tables)
    seq: np.ndarray  # [P] sequence
    a: np.ndarray  # [P] first row, in the sequence
    b: np.ndarray  # [P] one past the last row
    per_tile: np.ndarray  # [total q tiles] pieces of each q tile


def _pieces(batch, ns: np.ndarray, bq: int) -> _Pieces:
    counts = -(-ns // bq)  # q tiles per sequence
    first_tile = counts.cumsum() - counts
    tiles = int(counts.sum())
    tile_start = (batch.base - first_tile * bq).repeat(counts) + np.arange(tiles) * bq  # global, ascending
    nonempty = (batch.lengths > 0).nonzero()[0]
    seg_start = batch.starts.take(nonempty)
    cuts = distinct(np.concatenate((tile_start, seg_start)))
    # Each cut lies in the last segment begun at or before it, and so in that segment's sequence and tile.
    seg = nonempty.take(seg_start.searchsorted(cuts, side="right") - 1)
    seq = batch.segment_seq.take(seg)
    base = batch.base.take(seq)
    b = np.empty_like(cuts)
    b[:-1] = cuts[1:]
    b[-1:] = ns.sum()
    gq = first_tile.take(seq) + (cuts - base) // bq
    return _Pieces(gq=gq, seg=seg, seq=seq, a=cuts - base, b=b - base, per_tile=np.bincount(gq, minlength=tiles))


def _sweep(key: np.ndarray, first: np.ndarray, last: np.ndarray, values: np.ndarray, keys: int):
    """Ranges first..last (inclusive) of k tiles, each of one key (a q tile, below `keys`), with values [m, E]: the
    elementary segments [start, end) between consecutive range end points of a key, and the sums of the
    values of the ranges covering each ([m, S]). Returns (key, start, end, sums)."""
    pos = np.concatenate((first, last + 1))
    stride = int(pos.max(initial=0)) + 1
    # Each event as one number, key * stride + position: sorted once, and compared once.
    point = np.concatenate((key, key))
    point *= stride
    point += pos
    order = stable_order(point, keys * stride)
    point = point.take(order)
    sums = np.concatenate((values, -values), axis=1).take(order, axis=1).cumsum(axis=1)
    # Ranges open and close inside their key, so the running sums start every key at zero. Keep the sums
    # after the last event at each (key, position).
    last_event = np.empty(len(point), dtype=bool)
    last_event[-1:] = True
    np.not_equal(point[1:], point[:-1], out=last_event[:-1])
    point, sums = point.compress(last_event), sums.compress(last_event, axis=1)
    key, pos = np.divmod(point, stride)
    seg = (key[:-1] == key[1:]).nonzero()[0]
    return key.take(seg), pos.take(seg), pos.take(seg + 1), sums.take(seg, axis=1)


# ---------------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------------


@dataclass
class _Met:
    """Per (region, piece) [R, P]: whether the region meets the piece's rows, the k tiles it meets, m0..m1,
    and those it covers for every row, f0..f1 (empty: f0 = m1 + 1, f1 = m1); per (pair of regions, piece)
    [R(R-1)/2, P] the k tiles both meet, lo..hi (empty: lo > hi)."""

    met: np.ndarray
    m0: np.ndarray
    m1: np.ndarray
    covers: np.ndarray
    f0: np.ndarray
    f1: np.ndarray
    pair_lo: np.ndarray
    pair_hi: np.ndarray


def plan_ranges(program: ir.Program, batch, tiling) -> tuple | None:
    """Visited tiles as ranges (global q tile, first k tile, last k tile, kind), or None when the fast path
    does not apply (then the planner searches)."""
    forms = row_forms(program)
    if forms is None or not batch.blocks.runs_only:
        return None
    bq, bk = tiling.block_q, tiling.block_k
    seg = _segment_constants(forms, batch, bk)
    if seg is None:
        return None
    p = _pieces(batch, batch.bounds[:, -1], bq)
    a, b = p.a, p.b

    # The rows with a non-empty interval are xa .. xb - 1 (hi - lo is concave).
    ok, L, l, H, h, Hf = seg.take(p.seg, axis=2)
    xa = np.maximum(a, L - h + 1)
    xb = np.minimum(b, H - l)
    met = (ok != 0) & (xa < xb)
    m0 = np.maximum(L, xa + l) // bk  # k tiles met: from lo at the first non-empty row ...
    m1 = (np.minimum(H, xb + h - 1) - 1) // bk  # ... to hi at the last
    # Keys every row of the piece sees, when every row has keys: [lo(b - 1), hi(a)), in whole k tiles.
    f0 = -(np.minimum(-L, 1 - b - l) // bk)
    f1 = np.minimum(Hf, a + h) // bk - 1
    covers = met & (xa == a) & (xb == b) & (f0 <= f1)
    f0, f1 = np.where(covers, f0, m1 + 1), np.where(covers, f1, m1)  # empty where nothing is covered
    r1, r2 = forms.pairs
    if len(r1):
        m = _Met(met, m0, m1, covers, f0, f1, np.where(met[r1] & met[r2], np.maximum(m0[r1], m0[r2]), _NEVER),
                 np.minimum(m1[r1], m1[r2]))
        overlap = (m.pair_lo <= m.pair_hi).any(axis=0)
    else:  # no two regions share rows
        none = np.zeros((0, len(a)), dtype=np.int64)
        m = _Met(met, m0, m1, covers, f0, f1, none, none)
        overlap = np.zeros(len(a), dtype=bool)

    # A q tile of one piece where no two regions meet a common k tile (the common case): each region's tiles
    # are partial, then full, then partial. The other q tiles go through a sweep. (The ranges may come in any
    # order: the descriptor sorts them.)
    alone = (p.per_tile.take(p.gq) == 1) & ~overlap
    flat = (met & alone).ravel().nonzero()[0]  # (region, piece) r * P + i
    gq = p.gq.take(flat % len(p.gq))
    gq = np.concatenate((gq, gq, gq))
    lo = np.array((m0, f0, f1 + 1)).reshape(3, -1).take(flat, axis=1).ravel()
    hi = np.array((f0 - 1, f1, m1)).reshape(3, -1).take(flat, axis=1).ravel()
    bits = forms.bits.take(flat // len(p.gq))
    kind = np.concatenate((bits, np.zeros(len(flat), np.uint32), bits))
    if not alone.all():
        gq, lo, hi, kind = (np.concatenate(x) for x in zip((gq, lo, hi, kind),
                                                             _swept(seg, p, ~alone, overlap, m, forms, bq, bk)))
    keep = lo <= hi
    return gq.compress(keep), lo.compress(keep), hi.compress(keep), kind.compress(keep)


def _swept(seg, p: _Pieces, chosen, overlap, m: _Met, forms: RowForms, bq, bk):
    """Ranges of the q tiles of the `chosen` pieces: per k tile, the regions meeting it in some piece, and
    FULL where every piece of the q tile covers it."""
    regions, pieces = len(forms.bits), len(p.gq)
    # Counts per region (a region meets a k tile where its count > 0), then of the pieces covering the tile:
    # a region covering the tile alone, one per piece unless two regions meet the tile there (corrected below).
    # Events: (met or covers, region, piece), as flat indices c * R * P + r * P + i into [2, R, P] (c: covers);
    # in any order, as the sweep only reads sums.
    events = np.flatnonzero(np.array((m.met, m.covers)) & chosen)
    first, last = np.array((m.m0, m.f0)).take(events), np.array((m.m1, m.f1)).take(events)
    row = np.minimum(events // pieces, regions)  # the region met, or `regions` for a cover
    weight = np.ones(len(row), dtype=np.int64)
    key = p.gq.take(events % pieces)
    if (overlap & chosen).any():
        piece, tile, delta = _union_fixes(seg, p, overlap & chosen, m, bq, bk)
        key, first, last = np.concatenate((key, p.gq.take(piece))), np.concatenate((first, tile)), \
            np.concatenate((last, tile))
        row = np.concatenate((row, np.full(len(piece), regions)))
        weight = np.concatenate((weight, delta))
    q, start, end, sums = _sweep(key, first, last, (np.arange(regions + 1)[:, None] == row) * weight,
                                 len(p.per_tile))
    kind = forms.bits @ (sums[:regions] > 0)  # the bits of the regions meeting the tile: a sum of distinct bits
    visited = kind != 0
    kind = np.where(sums[regions] == p.per_tile.take(q), _FULL, kind).astype(np.uint32)
    return q.compress(visited), start.compress(visited), end.compress(visited) - 1, kind.compress(visited)


def _union_fixes(seg, p: _Pieces, chosen, m: _Met, bq, bk):
    """The k tiles two regions meet inside one of the `chosen` pieces, where only the union of a row's
    intervals may cover the tile: (piece, tile, correction) with correction = covered (0 or 1) minus the
    number of regions whose all-rows range counted the tile as covered already."""
    shared = (m.pair_lo <= m.pair_hi) & chosen
    flat = np.flatnonzero(shared)  # (pair, piece) as pair * P + piece
    i, pair_lo = flat % shared.shape[1], m.pair_lo.take(flat)
    size = m.pair_hi.take(flat) - pair_lo + 1
    if int(size.max(initial=1)) == 1:  # one tile each (the common case: the tile where two spans meet)
        piece, tile = i, pair_lo
    else:
        w, off = expand(size)
        piece, tile = i.take(w), pair_lo.take(w) + off
    if len(shared) > 1 and (shared.sum(axis=0) > 1).any():  # a piece where several pairs overlap: each tile once
        stride = int(tile.max()) + 1
        key = distinct(piece * stride + tile)
        piece, tile = key // stride, key % stride
    alone = ((m.f0.take(piece, axis=1) <= tile) & (tile <= m.f1.take(piece, axis=1))).sum(axis=0)
    return piece, tile, _covered_by_union(seg, p, piece, tile, bq, bk).astype(np.int64) - alone


def _reach(applies, lo, hi, first):
    """How far [first, reach) extends through a union of intervals [lo, hi) (axis 0: the regions): each round
    follows one more interval of a chain, so after as many rounds as usable intervals all of them are."""
    usable = applies & (lo < hi)
    reach = first
    for _ in range(int(usable.sum(axis=0).max(initial=0))):  # a chain has at most as many links as intervals
        reach = np.maximum(reach, np.where(usable & (lo <= reach), hi, reach).max(axis=0))
    return reach


def _covered_by_union(seg, p: _Pieces, piece, tile, bq, bk) -> np.ndarray:
    """Whether every row of each piece sees every key of k tile `tile` through the union of its regions'
    intervals. Three pseudo-rows first: the first and the last row (if either is not covered, the piece is
    not), and the intervals every row of the piece contains, [lo(last), hi(first)) (if those cover, every
    row does). Only pieces neither settles go row by row."""
    ok, L, l, H, h, Hf = seg.take(p.seg.take(piece), axis=2)[..., None]
    applies = ok != 0
    first, end = tile[:, None] * bk, (tile[:, None] + 1) * bk
    a, z = p.a.take(piece)[:, None], p.b.take(piece)[:, None] - 1
    lo = np.maximum(L, np.concatenate((a, z, z), axis=1) + l)
    hi = np.minimum(H, np.concatenate((a, z, a), axis=1) + h)
    covered = _reach(applies, lo, hi, first) >= end
    result = covered[:, 2] | (covered[:, 0] & covered[:, 1])
    todo = (covered[:, 0] & covered[:, 1] & ~covered[:, 2]).nonzero()[0]
    if len(todo):
        x = a[todo] + np.arange(bq)[None, :]
        lo, hi = np.maximum(L[:, todo], x + l[:, todo]), np.minimum(H[:, todo], x + h[:, todo])
        result[todo] = ((_reach(applies[:, todo], lo, hi, first[todo]) >= end[todo]) | (x > z[todo])).all(axis=1)
    # No ragged slot: a covered tile ends at or before some region's H, and so its Hf (H cut to the last whole
    # k tile) when the tile is whole, never when it is not.
    return result & (end[:, 0] <= Hf.max(axis=0)[:, 0])
