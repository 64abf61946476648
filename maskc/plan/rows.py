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
_EMPTY = np.array([_BIG, -_BIG])[:, None, None]  # L and H where no row has keys


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
    # The k side's bounds are applied anyway (segment_constants): the pass's own copies need no evaluating.
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
    pairs: np.ndarray  # int64 [2, pairs]: every pair of regions r1 < r2 whose q sides share a segment (others
    # never meet the rows of one piece together)
    q_bits: np.ndarray  # int64 [R]: RowForm.q_bits of each region
    k_columns: np.ndarray  # int64 [2, R]: the columns of the boundary table where each region's k side begins, ends
    slopes: np.ndarray  # int64 [2, R, 1]: l and h of each region from its constant slopes alone (Const terms)
    terms: tuple[tuple[int, int, np.ufunc, ir.Expr], ...]  # the other terms: (row of L, H, l, h, region, max or min,
    # the term)
    conditions: tuple[tuple[int, ir.Expr], ...]  # (region, row condition) of the regions that have one
    kinds: np.ndarray  # uint32 [3, R]: the kinds of a region's partial, full, partial tiles


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
                          np.array([[f.k_first for f in forms], [f.k_last + 1 for f in forms]], dtype=np.int64),
                          *_terms_of(forms),
                          tuple((r, f.row) for r, f in enumerate(forms) if f.row != ir.TRUE),
                          np.array([[TileKind.rule_bit(r) for r in range(len(forms))], [_FULL] * len(forms),
                                    [TileKind.rule_bit(r) for r in range(len(forms))]], dtype=np.uint32))
    return result


def _terms_of(forms: list[RowForm]):
    """RowForms.slopes and RowForms.terms: the constant slopes folded (and clamped, as every bound is)."""
    slopes = np.array([[-_BIG] * len(forms), [_BIG] * len(forms)], dtype=np.int64)[:, :, None]
    terms = []
    for r, f in enumerate(forms):
        for row, parts, op in ((0, f.lo.constants, np.maximum), (1, f.hi.constants, np.minimum),
                               (2, f.lo.slopes, np.maximum), (3, f.hi.slopes, np.minimum)):
            for e in parts:
                if row >= 2 and isinstance(e, ir.Const):
                    slopes[row - 2, r] = op(slopes[row - 2, r], min(max(int(e.value), -_BIG), _BIG))
                else:
                    terms.append((row, r, op, e))
    return slopes, tuple(terms)


def _reading_lists_as_params(form: RowForm, lists: dict[str, ir.Index]) -> RowForm:
    def read(e: ir.Expr) -> ir.Expr:
        return ir.rewrite(e, lambda node: ir.Param(ir.show(node)) if isinstance(node, ir.Index) else node)

    def bound(b: _Bound) -> _Bound:
        return _Bound(tuple(map(read, b.constants)), tuple(map(read, b.slopes)))

    return RowForm(form.q_bits, form.k_first, form.k_last, read(form.row), bound(form.lo), bound(form.hi))


def _sharing_rows(forms: list[RowForm]) -> np.ndarray:
    """The pairs of regions r1 < r2 whose q sides share a segment, as int64 [2, pairs]."""
    pairs = [(r1, r2) for r1 in range(len(forms)) for r2 in range(r1 + 1, len(forms))
             if forms[r1].q_bits & forms[r2].q_bits]
    return np.array(pairs, dtype=np.int64).reshape(-1, 2).T.copy()


# ---------------------------------------------------------------------------------------------------
# Per concrete segment: each region's L, l, H, h and whether it applies to the segment's rows
# ---------------------------------------------------------------------------------------------------


def segment_constants(forms: RowForms, batch, bk: int) -> np.ndarray | None:
    """int64 [5, R, C] over the concrete segments of the whole batch: L, H, l, h, Hf, with L, l, H, h as in the
    module docstring (the k side's own span folded into L and H, so intervals never leave it) and Hf = H cut
    to the last k tile without a ragged slot. Where the region does not apply to the segment's rows, or no
    row has keys (H <= L or h <= l), L = +BIG and H = -BIG: then no row's interval, nor any range made from
    them, holds a key. None when an expression divides by zero for these values (the general search then
    reports or handles it)."""
    seq = batch.segment_seq
    bounds = batch.bounds.take(seq, axis=0)  # [C, S + 1]: where each symbolic segment of c's sequence begins (n last)
    params = {name: scalar_column(batch.values, name)[seq] for name in forms.params}
    params["n"] = bounds[:, -1]
    start = batch.starts - batch.base.take(seq)
    env = Env(params=params, tokens={("q", "start"): start, ("q", "end"): start + batch.lengths,
                                     ("member", "q"): batch.member},
              bounds={(name, end): bounds[:, col] for name, end, col in forms.bounds})
    try:
        for name, read in forms.lists:
            env.params[name] = _list_read(read, env, batch, seq)
    except ZeroDivisionError:
        return None

    # One array for all five, filled in place: L and H start from the k side's span, l and h from the constant
    # slopes.
    out = np.empty((5, len(forms.regions), len(seq)), dtype=np.int64)
    L, H, l, h, Hf = out
    out[:2] = bounds.take(forms.k_columns, axis=1).transpose(1, 2, 0)
    out[2:4] = forms.slopes
    on_side = ((forms.q_bits[:, None] >> batch.symbol) & 1).astype(bool)
    try:
        for r, row in forms.conditions:
            on_side[r] &= np.asarray(evaluate(row, env), dtype=bool)
        for row, r, op, e in forms.terms:
            op(out[row, r], evaluate(e, env), out=out[row, r])
    except ZeroDivisionError:
        return None
    bounds4 = out[:4]
    np.minimum(np.maximum(bounds4, -_BIG, out=bounds4), _BIG, out=bounds4)  # (np.clip costs 10x more)
    np.copyto(out[:2], _EMPTY, where=~(on_side & (H > L) & (h > l)))
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
    a: np.ndarray  # [P] first row, in the sequence
    b: np.ndarray  # [P] one past the last row
    per_tile: np.ndarray  # [total q tiles] pieces of each q tile


def _pieces(batch, ns: np.ndarray, bq: int) -> _Pieces:
    counts = (ns + (bq - 1)) // bq  # q tiles per sequence
    first_tile = counts.cumsum()
    tiles = int(first_tile[-1])
    first_tile -= counts
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
    b[-1:] = batch.base[-1] + ns[-1]
    a = cuts - base
    gq = first_tile.take(seq) + a // bq
    return _Pieces(gq=gq, seg=seg, a=a, b=b - base, per_tile=np.bincount(gq, minlength=tiles))


# ---------------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------------


@dataclass
class _Met:
    """Per (region, piece) [R, P]: `spans` [2, R, P], whether the region meets the piece's rows and whether it
    covers some k tile for every row, and `edges` [4, R, P], m0 <= f0 <= f1 <= m1: it meets k tiles m0 .. m1 - 1
    and covers f0 .. f1 - 1 (f0 = f1 = m1 where it covers none). Per (pair of regions, piece) [R(R-1)/2, P]:
    where both meet a common k tile (`shared`), the k tiles both meet, pair_lo .. pair_hi - 1."""

    spans: np.ndarray
    edges: np.ndarray
    shared: np.ndarray
    pair_lo: np.ndarray
    pair_hi: np.ndarray


def plan_ranges(program: ir.Program, batch, tiling) -> tuple | None:
    """Visited tiles as ranges (global q tile, first k tile, last k tile, kind), or None when the fast path
    does not apply (then the planner searches)."""
    forms = row_forms(program)
    if forms is None or not batch.blocks.runs_only:
        return None
    bq, bk = tiling.block_q, tiling.block_k
    seg = segment_constants(forms, batch, bk)
    if seg is None:
        return None
    p = _pieces(batch, batch.bounds[:, -1], bq)
    a, b = p.a, p.b
    consts = seg.take(p.seg, axis=2)  # [5, R, P]
    L, H, l, h, Hf = consts

    # The rows with a non-empty interval are xa .. xb - 1 (hi - lo is concave).
    xa = np.maximum(a, L - h + 1)
    xb = np.minimum(b, H - l)
    spans = np.empty((2, *L.shape), dtype=bool)
    met, covers = spans
    np.less(xa, xb, out=met)
    edges = np.empty((4, *L.shape), dtype=np.int64)
    m0, f0, f1, m1 = edges
    # k tiles met: from lo at the first non-empty row to hi at the last (ceil(x / bk) as (x + bk - 1) // bk) ...
    np.floor_divide(np.maximum(L, xa + l), bk, out=m0)
    np.floor_divide(np.minimum(H + (bk - 1), xb + h + (bk - 2)), bk, out=m1)
    # ... and keys every row of the piece sees, when every row has keys: [lo(b - 1), hi(a)), in whole k tiles.
    np.floor_divide(np.maximum(L + (bk - 1), l + (b + bk - 2)), bk, out=f0)
    np.floor_divide(np.minimum(Hf, a + h), bk, out=f1)
    # Where f0 < f1, lo(b - 1) < hi(a): every row has keys, and the region covers those tiles.
    np.less(f0, f1, out=covers)
    np.copyto(edges[1:3], m1, where=~covers)  # empty where nothing is covered
    if forms.pairs.shape[1]:
        pair_lo = np.where(met, m0, _NEVER).take(forms.pairs, axis=0).max(axis=0)
        pair_hi = m1.take(forms.pairs, axis=0).min(axis=0)
        shared = pair_lo < pair_hi
    else:  # no two regions share rows
        pair_lo = pair_hi = np.zeros((0, len(a)), dtype=np.int64)
        shared = np.zeros((0, len(a)), dtype=bool)
    m = _Met(spans, edges, shared, pair_lo, pair_hi)
    overlap = shared.any(axis=0)

    # A q tile of one piece where no two regions meet a common k tile (the common case): each region's tiles
    # are partial, then full, then partial, the ranges edges[i] .. edges[i + 1] - 1 (some empty). The other q
    # tiles go through a sweep. (The ranges may come in any order: the descriptor sorts them.)
    chosen = (p.per_tile.take(p.gq) > 1) | overlap
    flat = ((edges[:3] < edges[1:]) & (met & ~chosen)).ravel().nonzero()[0]  # (range, region, piece)
    pieces = len(a)
    gq, lo = p.gq.take(flat % pieces), edges[:3].reshape(-1).take(flat)
    hi, kind = edges[1:].reshape(-1).take(flat) - 1, forms.kinds.take(flat // pieces)
    if chosen.any():
        gq, lo, hi, kind = (np.concatenate(x) for x in zip((gq, lo, hi, kind),
                                                             _swept(consts, p, chosen, overlap, m, forms, bq, bk)))
    return gq, lo, hi, kind


_STEP = np.array([1, -1], dtype=np.int32)[:, None]  # where a range opens, where it ends


def _swept(consts, p: _Pieces, chosen, overlap, m: _Met, forms: RowForms, bq, bk):
    """Ranges of the q tiles of the `chosen` pieces: per k tile, the regions meeting it in some piece, and
    FULL where every piece of the q tile covers it. A sweep over range end points: per region a count of the
    ranges meeting the tile (it meets the tile where its count > 0), and a count of the pieces covering the
    tile: a region covering the tile alone, one per piece unless two regions meet the tile there (corrected
    by `_union_fixes`). Each range steps its count up where it opens and down where it ends; the counts
    between two consecutive end points of a q tile are running sums over the steps sorted by (q tile,
    position). (Counts stay below the pieces of a q tile: int32 holds them.)"""
    regions, pieces = len(forms.bits), len(p.gq)
    # Ranges: (met or covers, region, piece) as flat indices c * R * P + r * P + i into [2, R, P].
    ranges = (m.spans & chosen).ravel().nonzero()[0]
    first = m.edges[:2].reshape(-1).take(ranges)  # m0 or f0
    end = m.edges[:1:-1].reshape(-1).take(ranges)  # m1 or f1
    counter = np.minimum(ranges // pieces, regions)  # the region met, or `regions` for a cover
    steps = ((np.arange(regions + 1)[:, None, None] == counter) * _STEP).reshape(regions + 1, -1)  # [R + 1, 2E]
    # Each step as one number, q tile * stride + position: sorted once, and compared once.
    stride = int(end.max(initial=0)) + 1
    key = p.gq.take(ranges % pieces) * stride
    point = np.concatenate((first + key, end + key))
    if overlap.any():
        piece, tile, delta = _union_fixes(consts, p, m, bq, bk)
        fix = np.zeros((regions + 1, 2, len(piece)), dtype=np.int32)
        fix[regions, 0] = delta
        np.negative(delta, out=fix[regions, 1])
        at = p.gq.take(piece) * stride + tile
        point = np.concatenate((point, at, at + 1))
        steps = np.concatenate((steps, fix.reshape(regions + 1, -1)), axis=1)
    order = stable_order(point, len(p.per_tile) * stride)
    point = point.take(order)
    sums = steps.take(order, axis=1).cumsum(axis=1, dtype=np.int32)
    # Step j's sums hold from its point to the next: complete at the last step at a point, and zero for every
    # count past the last step of a q tile (each range opens and closes inside it), so no region meets that.
    kind = forms.bits @ (sums[:regions, :-1] > 0)  # the bits of the regions meeting the tile: a sum of distinct bits
    j = ((kind != 0) & (point[1:] != point[:-1])).nonzero()[0]
    q, start = np.divmod(point.take(j), stride)
    last = (point[1:].take(j) - 1) % stride
    full = sums[regions].take(j) == p.per_tile.take(q)
    return q, start, last, np.where(full, _FULL, kind.take(j)).astype(np.uint32, copy=False)


def _union_fixes(consts, p: _Pieces, m: _Met, bq, bk):
    """The k tiles two regions meet inside one piece, where only the union of a row's intervals may cover the
    tile: (piece, tile, correction) with correction = covered (0 or 1) minus the number of regions whose
    all-rows range counted the tile as covered already."""
    flat = m.shared.ravel().nonzero()[0]  # (pair, piece) as pair * P + piece
    piece, tile = flat % m.shared.shape[1], m.pair_lo.take(flat)
    size = m.pair_hi.take(flat) - tile
    if int(size.max()) > 1:  # (the common case: one tile, the one where two spans meet)
        w, off = expand(size)
        piece, tile = piece.take(w), tile.take(w) + off
    if len(m.shared) > 1 and (m.shared.sum(axis=0) > 1).any():  # a piece where several pairs overlap: each tile once
        stride = int(tile.max()) + 1
        key = distinct(piece * stride + tile)
        piece, tile = key // stride, key % stride
    f0, f1 = m.edges[1:3].take(piece, axis=2)
    alone = np.add.reduce((f0 <= tile) & (tile < f1), axis=0, dtype=np.int64)  # (bool.sum(axis) is 2x slower)
    return piece, tile, _covered_by_union(consts, p, piece, tile, bq, bk) - alone


def _reach(usable, lo, hi, first):
    """How far [first, reach) extends through a union of intervals [lo, hi) (axis 0: the regions): each round
    follows one more interval of a chain, so after as many rounds as usable intervals all of them are."""
    reach = first
    # A chain has at most as many links as intervals (and one round at least gives reach the rows' shape).
    rounds = max(int(np.add.reduce(usable, axis=0, dtype=np.int8).max(initial=0)), 1)
    lo = np.where(usable, lo, _NEVER)
    for _ in range(rounds):
        reach = np.maximum(reach, np.where(lo <= reach, hi, reach).max(axis=0))
    return reach


def _covered_by_union(consts, p: _Pieces, piece, tile, bq, bk) -> np.ndarray:
    """Whether every row of each piece sees every key of k tile `tile` through the union of its regions'
    intervals, and the tile has no ragged slot. Three pseudo-rows first: the first and the last row (if either
    is not covered, the piece is not), and the intervals every row of the piece contains, [lo(last), hi(first))
    (if those cover, every row does). Only pieces neither settles go row by row. Intervals are cut at Hf
    (H cut to the last whole k tile): they cover the same keys below it, and none past it."""
    L, H, l, h, Hf = consts.take(piece, axis=2)[:, :, None]  # [R, 1, n]
    first = tile * bk
    end = first + bk
    a, z = p.a.take(piece), p.b.take(piece) - 1
    # [R, 3, n] (the rows last: numpy's loops run fast along a long last axis, not a short one)
    lo = np.maximum(L, np.concatenate((a, z, z)).reshape(3, -1) + l)
    hi = np.minimum(Hf, np.concatenate((a, z, a)).reshape(3, -1) + h)
    covered = _reach(lo < hi, lo, hi, first) >= end
    ends = covered[0] & covered[1]
    result = covered[2] | ends
    todo = (ends > covered[2]).nonzero()[0]  # (ends and not covered[2])
    if len(todo):
        L, l, h, Hf = (x[:, 0, todo, None] for x in (L, l, h, Hf))  # [R, todo, 1]
        x = a[todo, None] + np.arange(bq)  # [todo, bq]
        lo, hi = np.maximum(L, x + l), np.minimum(Hf, x + h)
        covered = _reach(lo < hi, lo, hi, first[todo, None]) >= end[todo, None]
        result[todo] = (covered | (x > z[todo, None])).all(axis=1)
    return result
