"""The planner: which tiles each query tile must visit, for given runtime values.

For every region and every sequence the planner makes *instances*: a q span times a k span of the
sequence (a run of adjacent segments, or one segment when the predicate looks inside segments). Each
instance is searched tile row by tile row: interval arithmetic over a block of k tiles either proves the
block empty (dropped), fully visible (all its tiles emitted), or neither (the block is halved). That is
O(tiles visited x log) work and never O(N^2) memory. Tiles touched by several instances, or whose
interval bound may be loose, are then classified exactly by evaluating the mask on their pairs (within a
budget; past it a tile stays PARTIAL, which is always correct).

The result is a `Descriptor`: per query tile, in the order the kernel should run them (most work first),
the list of k tiles to visit and, per k tile, its kind: 0 for FULL (no mask code runs), otherwise the set of
regions (bit r = region r) whose predicate the kernel evaluates there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from . import ir
from .intervals import ArrayTable, IntervalEvaluator, IntRange
from .layout import ConcreteLayout, SequenceValues
from .reference import visible

MAX_DESCRIPTOR_BYTES = 1 << 30
DEFAULT_REFINE_BUDGET = 1 << 18  # (q, k) pairs evaluated exactly per plan


@dataclass(frozen=True)
class TileConfig:
    block_q: int = 128
    block_k: int = 64


@dataclass
class PlanStats:
    tiles_total: int = 0  # q tiles x k tiles over all sequences
    tiles_full: int = 0
    tiles_partial: int = 0
    tiles_refined: int = 0  # decided by exact evaluation
    tiles_conservative: int = 0  # left PARTIAL because the refinement budget ran out
    seconds: float = 0.0

    @property
    def tiles_visited(self) -> int:
        return self.tiles_full + self.tiles_partial

    @property
    def tiles_empty(self) -> int:
        return self.tiles_total - self.tiles_visited


@dataclass
class Descriptor:
    """CSR of k tiles per q tile, over a batch of sequences, in visiting order."""

    config: TileConfig
    seq_lens: np.ndarray  # int64 [B]
    qtile_base: np.ndarray  # int64 [B + 1]: global q tile ids of sequence b are qtile_base[b]:qtile_base[b+1]
    work_seq: np.ndarray  # int32 [W]: the sequence of each work item (one q tile)
    work_qtile: np.ndarray  # int32 [W]: the q tile inside its sequence
    row_ptr: np.ndarray  # int32 [W + 1]
    k_tile: np.ndarray  # int32 [nnz]
    kind: np.ndarray  # uint32 [nnz]: 0 = full, else bit r = region r is evaluated
    stats: PlanStats = field(default_factory=PlanStats)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.work_seq, self.work_qtile, self.row_ptr, self.k_tile, self.kind))

    def tiles_of(self, seq: int, qtile: int) -> tuple[np.ndarray, np.ndarray]:
        """The (k tiles, kinds) visited by one q tile."""
        w = np.nonzero((self.work_seq == seq) & (self.work_qtile == qtile))[0][0]
        lo, hi = self.row_ptr[w], self.row_ptr[w + 1]
        return self.k_tile[lo:hi], self.kind[lo:hi]


class PlanError(ValueError):
    pass


# ---------------------------------------------------------------------------------------------------
# Instances
# ---------------------------------------------------------------------------------------------------


def side_pieces(program: ir.Program, side: ir.Side, split: bool) -> list[tuple[int, int]]:
    """Symbolic segment ranges [first, last] that become instance spans: each segment alone when the
    predicate looks inside segments, otherwise maximal runs of adjacent segments."""
    symbols = sorted(program.segment_index(s) for s in side.segments)
    if split:
        return [(s, s) for s in symbols]
    runs: list[tuple[int, int]] = []
    for s in symbols:
        if runs and runs[-1][1] == s - 1:
            runs[-1] = (runs[-1][0], s)
        else:
            runs.append((s, s))
    return runs


@dataclass
class _Batch:
    """The concrete layouts of all sequences, concatenated in one global coordinate."""

    layouts: list[ConcreteLayout]
    values: list[SequenceValues]
    base: np.ndarray  # int64 [B]: global position of each sequence's token 0
    starts: np.ndarray  # global starts of all concrete segments
    member: np.ndarray
    lengths: np.ndarray
    first: np.ndarray  # int64 [B, S + 1]: global concrete index ranges per symbolic segment

    @staticmethod
    def of(layouts: list[ConcreteLayout], values: list[SequenceValues]) -> "_Batch":
        ns = np.array([lay.n for lay in layouts], dtype=np.int64)
        base = np.concatenate([[0], np.cumsum(ns)[:-1]]).astype(np.int64)
        offsets = np.cumsum([0] + [len(lay.starts) for lay in layouts])
        return _Batch(
            layouts=layouts,
            values=values,
            base=base,
            starts=np.concatenate([lay.starts + b for lay, b in zip(layouts, base)]),
            member=np.concatenate([lay.member for lay in layouts]).astype(np.int64),
            lengths=np.concatenate([lay.lengths for lay in layouts]),
            first=np.stack([lay.first + o for lay, o in zip(layouts, offsets[:-1])]),
        )


def _instances(program: ir.Program, region: ir.Region, batch: _Batch) -> dict[str, np.ndarray]:
    q_pieces = side_pieces(program, region.q, ir.looks_inside(region.pred, "q"))
    k_pieces = side_pieces(program, region.k, ir.looks_inside(region.pred, "k"))
    rows = []
    for b, lay in enumerate(batch.layouts):
        for qs in q_pieces:
            qa, qb = lay.span(qs[0])[0], lay.span(qs[1])[1]
            if qa == qb:
                continue
            for ks in k_pieces:
                ka, kb = lay.span(ks[0])[0], lay.span(ks[1])[1]
                if ka == kb:
                    continue
                rows.append((b, qa, qb, ka, kb, qs[0] if qs[0] == qs[1] else -1, ks[0] if ks[0] == ks[1] else -1))
    cols = np.array(rows, dtype=np.int64).reshape(-1, 7)
    return dict(zip(("seq", "qa", "qb", "ka", "kb", "qsym", "ksym"), cols.T))


# ---------------------------------------------------------------------------------------------------
# Leaves of the interval evaluation for a set of boxes
# ---------------------------------------------------------------------------------------------------


def _mod_range(lo, hi, m):
    """x % m over [lo, hi] for m > 0: the hull, whose ends are always attained."""
    m = np.maximum(m, 1)
    same = (lo // m) == (hi // m)
    contig = same | (hi - lo + 1 >= m)
    return np.where(same, lo % m, 0), np.where(same, hi % m, m - 1), contig


class _Leaves:
    """Builds the interval leaves (token attributes, parameters, lists) for boxes of one region."""

    def __init__(self, program: ir.Program, region: ir.Region, batch: _Batch):
        self.program = program
        self.batch = batch
        self.scalar_names = sorted({p for p in ir.params_used(region.pred)})
        self.array_names = sorted(ir.arrays_used(region.pred))
        self.aggregates = [n for n in ir.walk(region.pred) if isinstance(n, (ir.ArrayLen, ir.ArraySum))]
        values = batch.values
        self.scalars = {
            name: np.array([int(v.scalars[name]) if name != "n" else lay.n for v, lay in zip(values, batch.layouts)],
                           dtype=np.int64)
            for name in self.scalar_names
        }
        self.arrays = {}
        for name in self.array_names:
            per_seq = [v.arrays[name].astype(np.int64) for v in values]
            sizes = np.array([a.size for a in per_seq], dtype=np.int64)
            offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            shapes = np.array([a.shape if a.ndim == 2 else (a.shape[0], 1) for a in per_seq], dtype=np.int64)
            self.arrays[name] = dict(
                values=np.concatenate(per_seq).reshape(-1) if per_seq else np.zeros(0, np.int64),
                offset=offsets, shape=shapes, ndim=per_seq[0].ndim if per_seq else 1,
                vmin=np.array([a.min() if a.size else 0 for a in per_seq], dtype=np.int64),
                vmax=np.array([a.max() if a.size else 0 for a in per_seq], dtype=np.int64),
                parents=per_seq,
            )
        # Longest member per (sequence, family), for segment-relative positions across members.
        self.maxlen = np.zeros(batch.first.shape, dtype=np.int64)
        for b, lay in enumerate(batch.layouts):
            for s in range(len(program.segments)):
                lo, hi = lay.first[s], lay.first[s + 1]
                self.maxlen[b, s] = lay.lengths[lo:hi].max() if hi > lo else 0
        # Which segment-relative leaves each side needs; grids of one side all have the same rank.
        self.used = {side: set() for side in "qk"}
        for node in ir.walk(region.pred):
            if isinstance(node, ir.Token) and node.attr != "index":
                self.used[node.side].add(node.attr)
            elif isinstance(node, ir.Member):
                self.used[node.side].add("member")
        self.three_d = {
            side: any(program.segment(s).kind == "grid" and len(program.segment(s).dims) == 3
                      for s in getattr(region, side).segments)
            for side in "qk"
        }
        self.dims = np.zeros(batch.first.shape + (3,), dtype=np.int64)
        for b, lay in enumerate(batch.layouts):
            for s, dims in lay.grid_dims.items():
                self.dims[b, s, 3 - len(dims):] = dims

    def side(self, out: dict, side: str, seq, sym, lo, hi) -> None:
        out[(side, "index")] = IntRange.leaf(lo, hi, side)
        wanted = self.used[side]
        if not wanted:
            return
        symc = np.maximum(sym, 0)
        base = self.batch.base[seq]
        c_lo = np.searchsorted(self.batch.starts, base + lo, side="right") - 1
        c_hi = np.searchsorted(self.batch.starts, base + hi, side="right") - 1
        if "member" in wanted:
            m_lo, m_hi = self.batch.member[c_lo], self.batch.member[c_hi]
            out[("member", side)] = IntRange.leaf(m_lo, m_hi, side, tight=(m_hi - m_lo) <= 1)
        if not wanted & {"pos", "t", "y", "x"}:
            return
        start_lo = self.batch.starts[c_lo] - base
        one = c_lo == c_hi
        p_lo = np.where(one, lo - start_lo, 0)
        p_hi = np.where(one, hi - start_lo,
                        np.maximum(hi - (self.batch.starts[c_hi] - base), self.maxlen[seq, symc] - 1))
        out[(side, "pos")] = IntRange.leaf(p_lo, p_hi, side, tight=one)
        if not wanted & {"t", "y", "x"}:
            return
        t_dim, h_dim, w_dim = (self.dims[seq, symc, i] for i in range(3))
        w = np.maximum(w_dim, 1)
        rows_lo, rows_hi = p_lo // w, p_hi // w
        if "x" in wanted:
            x_lo, x_hi, x_contig = _mod_range(p_lo, p_hi, w)
            out[(side, "x")] = self._attr_leaf(side, x_lo, x_hi, x_contig & one)
        if "y" in wanted:
            if self.three_d[side]:
                y_lo, y_hi, y_contig = _mod_range(rows_lo, rows_hi, np.maximum(h_dim, 1))
            else:
                y_lo, y_hi, y_contig = rows_lo, rows_hi, True
            out[(side, "y")] = self._attr_leaf(side, y_lo, y_hi, y_contig & one)
        if "t" in wanted:
            hw = np.maximum(h_dim * w_dim, 1)
            out[(side, "t")] = self._attr_leaf(side, p_lo // hw, p_hi // hw, one)

    @staticmethod
    def _attr_leaf(side, lo, hi, contig) -> IntRange:
        r = IntRange.leaf(lo, hi, side)
        r.contig = contig
        return r

    def build(self, inst: dict[str, np.ndarray], box_inst, q_lo, q_hi, k_lo, k_hi, track: bool) -> IntervalEvaluator:
        seq = inst["seq"][box_inst]
        leaves: dict = {}
        self.side(leaves, "q", seq, inst["qsym"][box_inst], q_lo, q_hi)
        self.side(leaves, "k", seq, inst["ksym"][box_inst], k_lo, k_hi)
        size = len(box_inst)
        for name, per_seq in self.scalars.items():
            leaves[name] = IntRange.point(per_seq[seq], size)
        tables = {}
        for name, a in self.arrays.items():
            shape = (a["shape"][seq, 0],) if a["ndim"] == 1 else (a["shape"][seq, 0], a["shape"][seq, 1])
            tables[name] = ArrayTable(a["values"], a["offset"][seq], shape, a["vmin"][seq], a["vmax"][seq],
                                      a["parents"], seq)
        for node in self.aggregates:
            per_seq = np.array([len(a) if isinstance(node, ir.ArrayLen) else int(a.astype(np.int64).sum())
                                for a in self.arrays[node.array]["parents"]], dtype=np.int64)
            leaves[ir.show(node)] = IntRange.point(per_seq[seq], size)
        return IntervalEvaluator(size, leaves, tables, track_exact=track)


# ---------------------------------------------------------------------------------------------------
# The search
# ---------------------------------------------------------------------------------------------------


def _expand(count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges of the given sizes: (which range, offset inside it) of every element."""
    total = int(count.sum())
    which = np.repeat(np.arange(len(count)), count)
    offset = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
    return which, offset


def _search_region(program, region: ir.Region, batch: _Batch, config: TileConfig) -> dict[str, np.ndarray]:
    """Where one region may make pairs visible, as ranges of k tiles per (instance, q tile).

    Returns arrays over ranges: seq, qt, k0, k1 (inclusive), status (1: TRUE on the whole range,
    2: UNKNOWN on a single tile), exact (for UNKNOWN: the answer is exact), and the instance's spans
    qa, qb, ka, kb, so that callers can tell which tiles it covers entirely.
    """
    inst = _instances(program, region, batch)
    if len(inst["seq"]) == 0 or region.pred == ir.FALSE:
        return {k: np.zeros(0, np.int64) for k in _RANGE_FIELDS}
    bq, bk = config.block_q, config.block_k
    leaves = _Leaves(program, region, batch)

    # One box per (instance, q tile), covering every k tile of the instance's k span.
    qt_first, qt_last = inst["qa"] // bq, (inst["qb"] - 1) // bq
    which, offset = _expand(qt_last - qt_first + 1)
    box_inst = which
    box_qt = qt_first[which] + offset
    box_k0 = inst["ka"][which] // bk
    box_k1 = (inst["kb"][which] - 1) // bk

    found = []
    pred = region.pred
    while len(box_inst):
        q_lo = np.maximum(box_qt * bq, inst["qa"][box_inst])
        q_hi = np.minimum(box_qt * bq + bq, inst["qb"][box_inst]) - 1
        k_lo = np.maximum(box_k0 * bk, inst["ka"][box_inst])
        k_hi = np.minimum(box_k1 * bk + bk, inst["kb"][box_inst]) - 1
        res = leaves.build(inst, box_inst, q_lo, q_hi, k_lo, k_hi, track=False).bool(pred)
        can_t = np.broadcast_to(res.can_true, box_inst.shape)
        can_f = np.broadcast_to(res.can_false, box_inst.shape)
        all_true = can_t & ~can_f
        single = box_k0 == box_k1
        emit = np.nonzero(all_true | (can_t & single))[0]
        if len(emit):
            found.append((box_inst[emit], box_qt[emit], box_k0[emit], box_k1[emit], np.where(all_true[emit], 1, 2)))
        idx = np.nonzero(can_t & can_f & ~single)[0]
        mid = (box_k0[idx] + box_k1[idx]) // 2
        box_inst = np.concatenate([box_inst[idx], box_inst[idx]])
        box_qt = np.concatenate([box_qt[idx], box_qt[idx]])
        box_k0, box_k1 = np.concatenate([box_k0[idx], mid + 1]), np.concatenate([mid, box_k1[idx]])

    if not found:
        return {k: np.zeros(0, np.int64) for k in _RANGE_FIELDS}
    r_inst, qt, k0, k1, status = (np.concatenate(parts) for parts in zip(*found))
    # UNKNOWN tiles: ask again, tracking whether the answer is exact.
    exact = np.zeros(len(k0), dtype=bool)
    unknown = np.nonzero(status == 2)[0]
    if len(unknown):
        u = r_inst[unknown]
        q_lo = np.maximum(qt[unknown] * bq, inst["qa"][u])
        q_hi = np.minimum(qt[unknown] * bq + bq, inst["qb"][u]) - 1
        k_lo = np.maximum(k0[unknown] * bk, inst["ka"][u])
        k_hi = np.minimum(k0[unknown] * bk + bk, inst["kb"][u]) - 1
        res = leaves.build(inst, u, q_lo, q_hi, k_lo, k_hi, track=True).bool(pred)
        exact[unknown] = np.broadcast_to(res.exact & res.can_true & res.can_false, u.shape)
    return dict(seq=inst["seq"][r_inst], qt=qt, k0=k0, k1=k1, status=status, exact=exact,
                qa=inst["qa"][r_inst], qb=inst["qb"][r_inst], ka=inst["ka"][r_inst], kb=inst["kb"][r_inst])


_RANGE_FIELDS = ("seq", "qt", "k0", "k1", "status", "exact", "qa", "qb", "ka", "kb")


def _refine(program, batch: _Batch, config: TileConfig, seq, qt, kt) -> np.ndarray:
    """Exact kinds of the given tiles: 0 empty, 1 full, 2 partial."""
    bq, bk = config.block_q, config.block_k
    result = np.zeros(len(seq), dtype=np.int64)
    rows = np.arange(bq, dtype=np.int64)
    cols = np.arange(bk, dtype=np.int64)
    for b in np.unique(seq):
        sel = np.nonzero(seq == b)[0]
        lay, values = batch.layouts[b], batch.values[b]
        q = qt[sel][:, None, None] * bq + rows[None, :, None]
        k = kt[sel][:, None, None] * bk + cols[None, None, :]
        vis = visible(program, lay, values, q, k)
        any_visible = vis.any(axis=(1, 2))
        hidden = (~vis & (q < lay.n)).any(axis=(1, 2))
        result[sel] = np.where(~any_visible, 0, np.where(hidden, 2, 1))
    return result


def _split_true_ranges(r: dict[str, np.ndarray], config: TileConfig, n_of: np.ndarray):
    """A TRUE range of an instance covers the tiles that lie entirely inside the instance's spans (rows past
    the sequence end do not matter): cut each range into its uncovered left part, covered middle and
    uncovered right part. Returns (index of the source range, first tile, last tile, covered)."""
    bq, bk = config.block_q, config.block_k
    rows_ok = (r["qt"] * bq >= r["qa"]) & (np.minimum(r["qt"] * bq + bq, n_of[r["seq"]]) <= r["qb"])
    c0 = np.maximum(r["k0"], -(-r["ka"] // bk))
    c1 = np.minimum(r["k1"], r["kb"] // bk - 1)
    has_middle = rows_ok & (c0 <= c1) & (r["status"] == 1)
    c0 = np.where(has_middle, c0, r["k1"] + 1)
    c1 = np.where(has_middle, c1, r["k1"])
    idx = np.arange(len(r["k0"]))
    pieces = [(idx, r["k0"], c0 - 1, False), (idx, c0, c1, True), (idx, c1 + 1, r["k1"], False)]
    src = np.concatenate([p[0] for p in pieces])
    lo = np.concatenate([p[1] for p in pieces])
    hi = np.concatenate([p[2] for p in pieces])
    covered = np.concatenate([np.full(len(idx), p[3]) for p in pieces])
    keep = lo <= hi
    return src[keep], lo[keep], hi[keep], covered[keep]


def plan(program: ir.Program, layouts: list[ConcreteLayout], values: list[SequenceValues],
         config: TileConfig = TileConfig(), refine_budget: int = DEFAULT_REFINE_BUDGET) -> Descriptor:
    start = time.perf_counter()
    bq, bk = config.block_q, config.block_k
    batch = _Batch.of(layouts, values)
    ns = np.array([lay.n for lay in layouts], dtype=np.int64)
    q_tiles = -(-ns // bq)
    k_tiles = -(-ns // bk)
    qtile_base = np.concatenate([[0], np.cumsum(q_tiles)]).astype(np.int64)
    stats = PlanStats(tiles_total=int((q_tiles * k_tiles).sum()))

    parts = [_search_region(program, region, batch, config) for region in program.regions]
    r = {name: np.concatenate([p[name] for p in parts]) if parts else np.zeros(0, np.int64) for name in _RANGE_FIELDS}
    r["bit"] = np.concatenate([np.full(len(p["k0"]), 1 << i, dtype=np.uint32) for i, p in enumerate(parts)]) \
        if parts else np.zeros(0, np.uint32)
    r["gq"] = qtile_base[r["seq"]] + r["qt"]
    order = np.lexsort((r["k0"], r["gq"]))
    r = {name: a[order] for name, a in r.items()}

    # Entries of the descriptor before ordering: (gq, first k tile, last k tile, kind, needs exact check).
    # Query tiles whose ranges never overlap (one instance answers for each tile, the common case) are
    # decided range by range; the others are merged tile by tile.
    overlap = (r["gq"][1:] == r["gq"][:-1]) & (r["k0"][1:] <= r["k1"][:-1])
    mixed = np.isin(r["gq"], r["gq"][1:][overlap]) if overlap.any() else np.zeros(len(r["gq"]), dtype=bool)

    clean = {name: a[~mixed] for name, a in r.items()}
    src, lo, hi, covered = _split_true_ranges(clean, config, ns)
    status, exact = clean["status"][src], clean["exact"][src]
    e_gq, e_lo, e_hi = [clean["gq"][src]], [lo], [hi]
    e_kind = [np.where(covered, 0, clean["bit"][src]).astype(np.uint32)]
    e_todo = [(status == 2) & ~exact]  # a TRUE range is decided: covered, or partly outside its instance

    if mixed.any():
        m = {name: a[mixed] for name, a in r.items()}
        src, lo, hi, covered = _split_true_ranges(m, config, ns)
        w, off = _expand(hi - lo + 1)
        tile_src, kt, tile_covered = src[w], lo[w] + off, covered[w]
        stride = int(k_tiles.max())
        key = m["gq"][tile_src] * stride + kt
        order = np.argsort(key, kind="stable")
        key, tile_src, tile_covered = key[order], tile_src[order], tile_covered[order]
        starts = np.nonzero(np.concatenate([[True], key[1:] != key[:-1]]))[0]
        bits = np.bitwise_or.reduceat(m["bit"][tile_src], starts)
        full = np.logical_or.reduceat(tile_covered, starts)
        count = np.diff(np.append(starts, len(key)))
        first = tile_src[starts]
        decided = full | ((count == 1) & (((m["status"][first] == 2) & m["exact"][first]) | (m["status"][first] == 1)))
        e_gq.append(key[starts] // stride)
        e_lo.append(key[starts] % stride)
        e_hi.append(key[starts] % stride)
        e_kind.append(np.where(full, 0, bits).astype(np.uint32))
        e_todo.append(~decided)

    gq, lo, hi, kinds, todo = (np.concatenate(x) for x in (e_gq, e_lo, e_hi, e_kind, e_todo))

    # Tiles whose interval answer may be loose, or that several instances touch, are evaluated exactly.
    keep = np.ones(len(gq), dtype=bool)
    todo = np.nonzero(todo)[0]  # always single tiles
    if len(todo):
        affordable = todo[: max(0, refine_budget // (bq * bk))]
        stats.tiles_conservative = len(todo) - len(affordable)
        if len(affordable):
            seq = np.searchsorted(qtile_base, gq[affordable], side="right") - 1
            exact_kind = _refine(program, batch, config, seq, gq[affordable] - qtile_base[seq], lo[affordable])
            keep[affordable] = exact_kind != 0
            kinds[affordable] = np.where(exact_kind == 1, 0, kinds[affordable])
            stats.tiles_refined = len(affordable)
    gq, lo, hi, kinds = gq[keep], lo[keep], hi[keep], kinds[keep]

    # CSR in visiting order: query tiles with the most work first, k tiles ascending inside each.
    total_q = int(qtile_base[-1])
    lengths = hi - lo + 1
    counts = np.bincount(gq, weights=lengths, minlength=total_q).astype(np.int64)
    visit = np.argsort(-counts, kind="stable")
    rank = np.empty(total_q, dtype=np.int64)
    rank[visit] = np.arange(total_q)
    order = np.lexsort((lo, rank[gq]))
    lo, lengths, kinds = lo[order], lengths[order], kinds[order]
    w, off = _expand(lengths)
    k_tile = (lo[w] + off).astype(np.int32)
    kind = kinds[w]
    row_ptr = np.concatenate([[0], np.cumsum(counts[visit])]).astype(np.int64)
    work_seq = (np.searchsorted(qtile_base, visit, side="right") - 1).astype(np.int32)
    work_qtile = (visit - qtile_base[work_seq]).astype(np.int32)

    stats.tiles_full = int(np.count_nonzero(kind == 0))
    stats.tiles_partial = len(kind) - stats.tiles_full
    desc = Descriptor(config, ns, qtile_base, work_seq, work_qtile, row_ptr.astype(np.int32), k_tile, kind, stats)
    if desc.nbytes > MAX_DESCRIPTOR_BYTES:
        raise PlanError(f"the descriptor would take {desc.nbytes / 2**30:.1f} GiB, more than the 1 GiB limit")
    stats.seconds = time.perf_counter() - start
    return desc


# ---------------------------------------------------------------------------------------------------
# Tables the kernel reads (documented at the top of every generated .cu)
# ---------------------------------------------------------------------------------------------------


@dataclass
class KernelTables:
    work: np.ndarray  # int32 [W, 2]
    row_ptr: np.ndarray  # int32 [W + 1]
    k_tiles: np.ndarray  # int32 [nnz]
    kinds: np.ndarray  # uint8/16/32 [nnz]
    seq_table: np.ndarray  # int64 [B, F]
    seg_start: np.ndarray  # int32
    seg_code: np.ndarray  # int32: symbol | member << 5
    arrays: np.ndarray  # int32

    def arrays_in_order(self) -> tuple[np.ndarray, ...]:
        return (self.work, self.row_ptr, self.k_tiles, self.kinds, self.seq_table, self.seg_start, self.seg_code,
                self.arrays)


def kernel_tables(code, desc: Descriptor, layouts: list[ConcreteLayout], values: list[SequenceValues],
                  token_offsets: np.ndarray) -> KernelTables:
    """Everything besides Q, K, V the kernel needs, for the sequences of one launch. `code` is the
    `codegen.MaskCode` the kernel was generated from (it names the per-sequence values)."""
    from .evaluate import Env, evaluate

    batch = len(layouts)
    seq_table = np.zeros((batch, code.seq_fields), dtype=np.int64)
    seg_begin = np.concatenate([[0], np.cumsum([len(lay.starts) for lay in layouts])]).astype(np.int64)
    array_parts, array_offset = [], 0
    fixed = len(code.SEQ_FIXED)
    for b, (lay, val) in enumerate(zip(layouts, values)):
        seq_table[b, :fixed] = (token_offsets[b], lay.n, seg_begin[b], len(lay.starts))
        for slot, info in enumerate(code.arrays):
            a = val.arrays[info.name]
            rows, cols = (1, a.shape[0]) if a.ndim == 1 else a.shape
            seq_table[b, fixed + 3 * slot: fixed + 3 * slot + 3] = (array_offset, rows, cols)
            array_parts.append(a.reshape(-1).astype(np.int32))
            array_offset += a.size
        env = Env(params={k: (v if isinstance(v, bool) else np.int64(v)) for k, v in val.scalars.items()} | {"n": np.int64(lay.n)},
                  arrays=val.arrays)
        for i, sv in enumerate(code.seq_values):
            try:
                seq_table[b, fixed + 3 * len(code.arrays) + i] = int(evaluate(sv.expr, env))
            except ZeroDivisionError:
                raise PlanError(f"sequence {b}: {sv.text} divides by zero for these parameter values") from None
    kinds = desc.kind.astype({8: np.uint8, 16: np.uint16, 32: np.uint32}[code.kind_bits])
    return KernelTables(
        work=np.stack([desc.work_seq, desc.work_qtile], axis=1).astype(np.int32).reshape(-1, 2),
        row_ptr=desc.row_ptr.astype(np.int32),
        k_tiles=desc.k_tile.astype(np.int32),
        kinds=kinds,
        seq_table=seq_table,
        seg_start=np.concatenate([lay.starts for lay in layouts]).astype(np.int32) if layouts else np.zeros(0, np.int32),
        seg_code=np.concatenate([lay.symbol.astype(np.int64) | (lay.member.astype(np.int64) << 5) for lay in layouts]).astype(np.int32)
        if layouts else np.zeros(0, np.int32),
        arrays=np.concatenate(array_parts) if array_parts else np.zeros(1, np.int32),
    )
