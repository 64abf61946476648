"""The planner: which tiles each query tile must visit, for given runtime values.

For every region and every sequence the planner makes *instances*: a q span times a k span of the
sequence (a run of adjacent segments, or one segment when the predicate looks inside segments). Each
instance is searched tile row by tile row: interval arithmetic over a block of k tiles either proves the
block empty (dropped), fully visible (all its tiles emitted), or neither (the block is halved). That is
O(tiles visited x log) work and never O(N^2) memory. Tiles touched by several instances, or whose
interval bound may be loose, are then classified exactly by evaluating the mask on their pairs (within a
budget; past it a tile stays PARTIAL, which is always correct). A rule that factors over the axes of the tiles
(NATTEN's window, CLEAR's disc, a dilated window, a block-sparse layout) skips the search: plan/factors.py finds
its tiles' exact kinds in closed form.

The result is a `Descriptor`: per query tile, in the order the kernel should run them (most work first),
the list of k tiles to visit and, per k tile, its kind (`maskc.kernels.abi.TileKind`): FULL (no mask code
runs), otherwise the set of regions (bit r = region r) whose predicate the kernel evaluates there.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from maskc import ir
from maskc.diagnostics import value_problem
from maskc.ir.evaluate import Env, evaluate
from maskc.kernels.abi import TileKind
from maskc.memo import per_object
from maskc.plan.arrays import distinct, expand, stable_order
from maskc.plan.exact import pair_env, regions_visible, visible
from maskc.plan.intervals import ArrayTable, IntervalEvaluator, IntRange, RangeExtremes
from maskc.plan.layout import (
    BatchLayouts,
    ConcreteLayout,
    SegmentFacts,
    SequenceValues,
    entries_per_sequence,
    entry_pointers,
    joined,
    joined_grid_dims,
    scalar_column,
    segment_bounds,
    segment_codes,
)
from maskc.plan.factors import factored_forms, search_by_factors
from maskc.plan import native
from maskc.plan.rows import plan_ranges, row_forms, segment_constants
from maskc.plan.tiling import (
    BlockTable,
    TileConfig,
    Tiling,
    block_of,
    block_table,
    complete,
    extent,
    run_tiles,
    segment_boundaries,
    split,
    tile_sizes,
    tile_tokens,
    tiling_for,
)

MAX_DESCRIPTOR_BYTES = 1 << 30
DEFAULT_REFINE_BUDGET = 1 << 18  # (q, k) pairs evaluated exactly per plan
COARSE_QUERY_TILES = 256  # query tiles of the coarse search that refuses a huge request before planning it


class Status(enum.IntEnum):
    """What interval arithmetic proves about one region over a box of (q, k) pairs."""

    FALSE = 0  # no pair is visible: the box is dropped (never recorded)
    TRUE = 1  # every pair of the box (within the instance's spans) is visible
    UNKNOWN = 2  # maybe some, maybe not: recorded for single tiles only


@dataclass
class PlanStats:
    tiles_total: int = 0  # q tiles x k tiles over all sequences
    tiles_full: int = 0
    tiles_partial: int = 0
    tiles_refined: int = 0  # decided by exact evaluation
    tiles_conservative: int = 0  # left PARTIAL because the refinement budget ran out
    seconds: float = 0.0
    fast_path: bool = False  # planned by the row-interval fast path (plan/rows.py), not the general search
    regions_factored: int = 0  # regions the search planned in closed form by their factors (plan/factors.py)
    native: bool = False  # the fast path ran in C++ (plan/native.py), with the same results as numpy's

    @property
    def tiles_visited(self) -> int:
        return self.tiles_full + self.tiles_partial

    @property
    def tiles_empty(self) -> int:
        return self.tiles_total - self.tiles_visited


@dataclass
class Descriptor:
    """CSR of k tiles per q tile, over a batch of sequences, in visiting order. Tile ids are per sequence
    and name tiles of `blocks` (see maskc.tiling)."""

    config: TileConfig
    blocks: BlockTable
    work_seq: np.ndarray  # int32 [W]: the sequence of each work item (one q tile)
    work_qtile: np.ndarray  # int32 [W]: the q tile inside its sequence
    row_ptr: np.ndarray  # int32 [W + 1]
    k_tile: np.ndarray  # int32 [nnz]
    kind: np.ndarray  # uint32 [nnz]: TileKind.FULL, else bit r = region r is evaluated
    stats: PlanStats = field(default_factory=PlanStats)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.work_seq, self.work_qtile, self.row_ptr, self.k_tile, self.kind))

    def longest_equal_run(self) -> tuple[int, int]:
        """The longest run [first, last) of consecutive work items with the same number of key tiles (the first
        such run on a tie; (0, 0) without work items). The Hopper forward visits these items head-major."""
        counts = np.diff(self.row_ptr)
        if len(counts) == 0:
            return 0, 0
        bounds = np.concatenate([[0], np.flatnonzero(np.diff(counts)) + 1, [len(counts)]])
        longest = int(np.argmax(np.diff(bounds)))
        return int(bounds[longest]), int(bounds[longest + 1])

    def tiles_of(self, seq: int, qtile: int) -> tuple[np.ndarray, np.ndarray]:
        """The (k tiles, kinds) visited by one q tile."""
        w = np.nonzero((self.work_seq == seq) & (self.work_qtile == qtile))[0][0]
        lo, hi = self.row_ptr[w], self.row_ptr[w + 1]
        return self.k_tile[lo:hi], self.kind[lo:hi]

    def tokens(self, side: str, seq, tiles) -> np.ndarray:
        """Tokens of the slots of tiles of one sequence (-1: no token)."""
        seq = np.broadcast_to(np.asarray(seq, dtype=np.int64), np.shape(tiles))
        g = block_of(self.blocks, side, seq, tiles)
        return tile_tokens(self.blocks, side, g, tiles)

    def sizes(self, side: str, seq, tiles) -> np.ndarray:
        """How many tokens tiles of one sequence hold (without listing them, as `tokens` does)."""
        seq = np.broadcast_to(np.asarray(seq, dtype=np.int64), np.shape(tiles))
        return tile_sizes(self.blocks, side, block_of(self.blocks, side, seq, tiles), tiles)


class PlanError(ValueError):
    pass


# ---------------------------------------------------------------------------------------------------
# Instances: a region, one sequence, a span of q segments and a span of k segments, each in one block
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


def _cut_by_blocks(pieces: list[tuple[int, int]], tiling: Tiling) -> list[tuple[int, int, int]]:
    """Pieces cut where blocks begin, so each lies in one block: (first, last, block index)."""
    out = []
    for lo, hi in pieces:
        for i, block in enumerate(tiling.blocks):
            a, b = max(lo, block.first), min(hi, block.last)
            if a <= b:
                out.append((a, b, i))
    return out


@dataclass
class _Batch:
    """The concrete layouts of all sequences, concatenated in one global coordinate, and their tiles."""

    layouts: list[ConcreteLayout]
    values: list[SequenceValues]
    blocks: BlockTable
    base: np.ndarray  # int64 [B]: global position of each sequence's token 0
    starts: np.ndarray  # global starts of all concrete segments
    member: np.ndarray
    lengths: np.ndarray
    symbol: np.ndarray
    bounds: np.ndarray  # int64 [B, S + 1]: where each symbolic segment begins in its sequence (tiling.segment_boundaries)

    @staticmethod
    def of(layouts: list[ConcreteLayout], values: list[SequenceValues], tiling: Tiling) -> "_Batch":
        bounds = segment_boundaries(layouts, tiling.blocks[-1].last + 1)
        blocks = block_table(tiling, layouts, bounds)
        if isinstance(layouts, BatchLayouts):  # bound at once: bind_batch made these columns (read-only)
            return _Batch(layouts=layouts, values=values, blocks=blocks, base=layouts.base,
                          starts=layouts.global_starts, member=layouts.member, lengths=layouts.lengths,
                          symbol=layouts.symbol, bounds=bounds)
        base = bounds[:, -1].cumsum() - bounds[:, -1]
        lengths = joined(layouts, "lengths", np.int64)
        # The sequences lie back to back, so the global starts are those of one long layout.
        return _Batch(layouts=layouts, values=values, blocks=blocks, base=base,
                      starts=lengths.cumsum() - lengths, member=joined(layouts, "member", np.int64),
                      lengths=lengths, symbol=joined(layouts, "symbol", np.int64), bounds=bounds)

    @cached_property
    def segment_seq(self) -> np.ndarray:
        """int64 [C]: the sequence of each concrete segment."""
        if isinstance(self.layouts, BatchLayouts):
            return self.layouts.entry_seq
        return np.repeat(np.arange(len(self.layouts)), entries_per_sequence(self.layouts))

    @cached_property
    def grid(self) -> np.ndarray:
        """int64 [C, 3]: (t, y, x) dimensions of the grid a concrete segment is, else (1, 1, 1)."""
        return joined_grid_dims(self.layouts)


def _visible_batch(program: ir.Program, batch: _Batch, seq: np.ndarray, q: np.ndarray, k: np.ndarray,
                   regions: tuple[ir.Region, ...] | None = None) -> np.ndarray:
    """The exact mask at pairs (q, k) of sequences `seq` (all broadcast together), from all regions or the
    given ones, evaluated for every sequence at once; -1 tokens are never visible. Masks that read list
    parameters go sequence by sequence."""
    regions = program.regions if regions is None else regions
    if any(ir.arrays_used(r.pred) for r in program.regions):
        out = np.zeros(np.broadcast_shapes(seq.shape, q.shape, k.shape), dtype=bool)
        seq_b, q_b, k_b = np.broadcast_arrays(seq, q, k)
        for b in distinct(seq_b):
            sel = seq_b == b
            out[sel] = visible(program, batch.layouts[b], batch.values[b], q_b[sel], k_b[sel], regions)
        return out
    ns = batch.bounds[:, -1]
    valid = (q >= 0) & (q < ns[seq]) & (k >= 0) & (k < ns[seq])
    names = set().union(*(ir.params_used(r.pred) for r in program.regions)) - {"n"}
    params = {name: scalar_column(batch.values, name)[seq] for name in names}
    params["n"] = ns[seq]
    # Global positions in the concatenated segment table: one lookup serves every sequence.
    q_facts, k_facts = (SegmentFacts(batch.starts, batch.lengths, batch.symbol, batch.member, batch.grid,
                                     batch.base[seq] + np.maximum(pos, 0), origin=batch.base[seq]) for pos in (q, k))
    env = pair_env(params, {}, q, k, q_facts, k_facts)
    bounds = [segment_bounds([s.name for s in program.segments], lay) for lay in batch.layouts]
    env.bounds = {key: np.array([b[key] for b in bounds])[seq] for key in bounds[0]} if bounds else {}
    shape = np.broadcast_shapes(seq.shape, q.shape, k.shape)
    return regions_visible(program, regions, env, q_facts["symbol"], k_facts["symbol"], shape) & valid


def _instances(program: ir.Program, region: ir.Region, batch: _Batch, tiling: Tiling) -> dict[str, np.ndarray]:
    """Per sequence, every q span times every k span of the region (each a run of its symbolic segments inside one
    block, or one segment where the predicate looks inside segments) that holds tokens: by sequence, then q span,
    then k span; for all sequences at once (a loop over sequences cost ~15 us each)."""
    pieces = {side: _cut_by_blocks(side_pieces(program, getattr(region, side), ir.looks_inside(region.pred, side)),
                                   tiling) for side in "qk"}
    bt = batch.blocks
    count = len(batch.bounds)
    spans = {}
    for side in "qk":
        spans[side] = []
        for lo, hi, blk in pieces[side]:
            a, z = batch.bounds[:, lo], batch.bounds[:, hi + 1]  # (an empty segment begins where the next does)
            g = bt.rows_of_seq[:-1] + blk
            first = bt.first(side)[g]
            if tiling.blocks[blk].grid:
                t0, t1 = first, first + bt.count(side)[g] - 1
            else:
                step = bt.shape(side)[g, 2]
                t0, t1 = first + (a - bt.start[g]) // step, first + (z - 1 - bt.start[g]) // step
            spans[side].append((a, z, np.full(count, lo if lo == hi else -1), g, t0, t1))
    seq = np.arange(count, dtype=np.int64)
    cols = np.array([[seq, qa, qb, ka, kb, qsym, ksym, qg, kg, qt0, qt1, kt0, kt1]
                     for qa, qb, qsym, qg, qt0, qt1 in spans["q"] for ka, kb, ksym, kg, kt0, kt1 in spans["k"]],
                    dtype=np.int64).reshape(-1, 13, count)
    cols = cols.transpose(2, 0, 1).reshape(-1, 13)  # sequence by sequence, then q span, then k span
    cols = cols.compress((cols[:, 1] != cols[:, 2]) & (cols[:, 3] != cols[:, 4]), axis=0)
    names = ("seq", "qa", "qb", "ka", "kb", "qsym", "ksym", "qg", "kg", "qt0", "qt1", "kt0", "kt1")
    return dict(zip(names, cols.T))


# ---------------------------------------------------------------------------------------------------
# Leaves of the interval evaluation for a set of boxes
# ---------------------------------------------------------------------------------------------------


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
                values=np.concatenate([a.reshape(-1) for a in per_seq]) if per_seq else np.zeros(0, np.int64),
                offset=offsets, shape=shapes, ndim=per_seq[0].ndim if per_seq else 1,
                vmin=np.array([a.min() if a.size else 0 for a in per_seq], dtype=np.int64),
                vmax=np.array([a.max() if a.size else 0 for a in per_seq], dtype=np.int64),
                parents=per_seq,
            )
            if self.arrays[name]["ndim"] == 1:  # a per-token or per-member list: hulls of what a box reads
                self.arrays[name]["extremes"] = RangeExtremes(self.arrays[name]["values"])
        # Longest member per (sequence, segment), for segment-relative positions across members.
        self.maxlen = np.zeros((len(batch.layouts), len(program.segments)), dtype=np.int64)
        for b, lay in enumerate(batch.layouts):
            for s in range(len(program.segments)):
                lo, hi = lay.first[s], lay.first[s + 1]
                self.maxlen[b, s] = lay.lengths[lo:hi].max() if hi > lo else 0
        # Which segment-relative leaves each side needs.
        self.used = {side: set() for side in "qk"}
        for node in ir.walk(region.pred):
            if isinstance(node, ir.Token):
                self.used[node.side].add(node.attr)
            elif isinstance(node, ir.Member):
                self.used[node.side].add("member")
        self.grid = {side: any(program.segment(s).kind == "grid" for s in getattr(region, side).segments)
                     for side in "qk"}

    def side(self, side: str, inst: dict, box_inst, t0, t1, track: bool) -> dict:
        """Leaves of one side for boxes made of tiles t0..t1 of the instance's block on that side (only
        those the predicate reads; roots only when tracking exactness)."""
        wanted = self.used[side]
        out: dict = {}
        if not wanted:
            return out
        g = inst[side + "g"][box_inst]
        needs_tokens = bool(wanted & {"index", "pos", "member"})
        ext = extent(self.batch.blocks, side, g, t0, t1, tokens=needs_tokens)
        # On a product of coordinate ranges each coordinate varies on its own; elsewhere the token is one root.
        product = ext["product"]
        if not track:
            whole, coord_roots = {}, {c: {} for c in "tyx"}
        elif self.grid[side]:
            whole = {side: ~product, **{f"{side}.{c}": product for c in "tyx"}}
            coord_roots = {c: {side: ~product, f"{side}.{c}": product} for c in "tyx"}
        else:
            whole, coord_roots = side, {c: side for c in "tyx"}
        for c in "tyx":
            if c in wanted:
                c_lo, c_hi = ext[c]
                tight = product | (c == "t") | ((c == "y") & (ext["t"][0] == ext["t"][1]))
                out[(side, c)] = IntRange.leaf(c_lo, c_hi, coord_roots[c], tight=tight)
        if not needs_tokens:
            return out
        lo = np.maximum(ext["token"][0], inst[side + "a"][box_inst])
        hi = np.minimum(ext["token"][1], inst[side + "b"][box_inst] - 1)
        out[(side, "index")] = IntRange.leaf(lo, hi, whole)
        if self.grid[side]:  # a grid box's tokens are consecutive only inside one row
            out[(side, "index")].contig = (ext["y"][0] == ext["y"][1]) & (ext["t"][0] == ext["t"][1])
        if not wanted & {"pos", "member"}:
            return out
        seq = inst["seq"][box_inst]
        base = self.batch.base[seq]
        c_lo = np.searchsorted(self.batch.starts, base + lo, side="right") - 1
        c_hi = np.searchsorted(self.batch.starts, base + hi, side="right") - 1
        if "member" in wanted:
            m_lo, m_hi = self.batch.member[c_lo], self.batch.member[c_hi]
            out[("member", side)] = IntRange.leaf(m_lo, m_hi, side if track else {}, tight=(m_hi - m_lo) <= 1)
        if "pos" in wanted:
            symc = np.maximum(inst[side + "sym"][box_inst], 0)
            start_lo = self.batch.starts[c_lo] - base
            one = c_lo == c_hi
            p_lo = np.where(one, lo - start_lo, 0)
            p_hi = np.where(one, hi - start_lo,
                            np.maximum(hi - (self.batch.starts[c_hi] - base), self.maxlen[seq, symc] - 1))
            out[(side, "pos")] = IntRange.leaf(p_lo, p_hi, whole, tight=one & (not self.grid[side]))
        return out

    def build(self, inst: dict[str, np.ndarray], box_inst, q_leaves: dict, k0, k1, track: bool) -> IntervalEvaluator:
        """An evaluator over boxes: the given query-side leaves (they do not change as k blocks shrink)
        and the key-side leaves of k tiles k0..k1."""
        seq = inst["seq"][box_inst]
        leaves: dict = dict(q_leaves)
        leaves.update(self.side("k", inst, box_inst, k0, k1, track))
        size = len(box_inst)
        for name, per_seq in self.scalars.items():
            leaves[name] = IntRange.point(per_seq[seq], size)
        tables = {}
        for name, a in self.arrays.items():
            shape = (a["shape"][seq, 0],) if a["ndim"] == 1 else (a["shape"][seq, 0], a["shape"][seq, 1])
            tables[name] = ArrayTable(a["values"], a["offset"][seq], shape, a["vmin"][seq], a["vmax"][seq],
                                      a["parents"], seq, a.get("extremes"))
        for node in self.aggregates:
            per_seq = np.array([len(a) if isinstance(node, ir.ArrayLen) else int(a.astype(np.int64).sum())
                                for a in self.arrays[node.array]["parents"]], dtype=np.int64)
            leaves[ir.show(node)] = IntRange.point(per_seq[seq], size)
        return IntervalEvaluator(size, leaves, tables, track_exact=track)


# ---------------------------------------------------------------------------------------------------
# The search
# ---------------------------------------------------------------------------------------------------


_RANGE_FIELDS = ("seq", "qt", "k0", "k1", "status", "exact", "inst")
_FAN_OUT = 4


def _search_region(program, index: int, batch: _Batch, tiling: Tiling, fast: bool = True):
    """Where region `index` may make pairs visible, as ranges of k tiles per (instance, q tile); a rule that
    factors over the tiles' axes in closed form (plan/factors.py) unless `fast` is off.

    Returns the instances, arrays over ranges: seq, qt, k0, k1 (inclusive), status (Status.TRUE on the
    whole range, Status.UNKNOWN on a single tile), exact (for UNKNOWN: the answer is exact), inst; and whether
    the region was planned in closed form.
    """
    region = program.regions[index]
    inst = _instances(program, region, batch, tiling)
    empty = {k: np.zeros(0, np.int64) for k in _RANGE_FIELDS}
    if len(inst["seq"]) == 0 or region.pred == ir.FALSE:
        return inst, empty, False
    form = factored_forms(program, tiling)[index] if fast else None
    pairs = search_by_factors(form, batch, inst) if form is not None else None
    if pairs is not None:  # a rule that factors over the tiles' axes: exact kinds in closed form (plan/factors.py)
        return inst, dict(seq=inst["seq"].take(pairs["inst"]), qt=pairs["qt"], k0=pairs["kt"], k1=pairs["kt"],
                          status=np.where(pairs["full"], Status.TRUE, Status.UNKNOWN),
                          exact=~pairs["full"], inst=pairs["inst"]), True
    leaves = _Leaves(program, region, batch)

    # One box per (instance, q tile), covering every k tile of the instance's k span. Its query side
    # stays the same as the k block shrinks: its leaves are computed once and gathered by `origin`.
    which, offset = expand(inst["qt1"] - inst["qt0"] + 1)
    box_inst, box_qt = which, inst["qt0"][which] + offset
    box_k0, box_k1 = inst["kt0"][which], inst["kt1"][which]
    q_leaves = leaves.side("q", inst, box_inst, box_qt, box_qt, track=False)
    origin = np.arange(len(box_inst))

    found = []
    pred = region.pred
    while len(box_inst):
        q_now = {key: leaf.take(origin) for key, leaf in q_leaves.items()}
        res = leaves.build(inst, box_inst, q_now, box_k0, box_k1, track=False).bool(pred)
        can_t = np.broadcast_to(res.can_true, box_inst.shape)
        can_f = np.broadcast_to(res.can_false, box_inst.shape)
        all_true = can_t & ~can_f
        single = box_k0 == box_k1
        emit = np.nonzero(all_true | (can_t & single))[0]
        if len(emit):
            found.append((box_inst[emit], box_qt[emit], box_k0[emit], box_k1[emit],
                          np.where(all_true[emit], Status.TRUE, Status.UNKNOWN)))
        idx = np.nonzero(can_t & can_f & ~single)[0]
        # numpy's cost is per call, so each level should cut boxes more than in halves; but every piece of a
        # cut is evaluated, and a wider cut evaluates more that come to nothing. 4 measured fastest: 15% less
        # than 8 on the 2D grids at 32K, the same elsewhere (docs/benchmarks.md, seventh session).
        which, box_k0, box_k1 = split(batch.blocks, "k", inst["kg"][box_inst[idx]], box_k0[idx], box_k1[idx], _FAN_OUT)
        box_inst, box_qt, origin = box_inst[idx][which], box_qt[idx][which], origin[idx][which]

    if not found:
        return inst, empty, False
    r_inst, qt, k0, k1, status = (np.concatenate(parts) for parts in zip(*found))
    # UNKNOWN tiles: ask again, tracking whether the answer is exact.
    exact = np.zeros(len(k0), dtype=bool)
    unknown = np.nonzero(status == Status.UNKNOWN)[0]
    if len(unknown):
        u = r_inst[unknown]
        q_exact = leaves.side("q", inst, u, qt[unknown], qt[unknown], track=True)
        res = leaves.build(inst, u, q_exact, k0[unknown], k0[unknown], track=True).bool(pred)
        exact[unknown] = np.broadcast_to(res.exact & res.can_true & res.can_false, u.shape)
    return inst, dict(seq=inst["seq"][r_inst], qt=qt, k0=k0, k1=k1, status=status, exact=exact, inst=r_inst), False


def _witness_slots(tokens: np.ndarray, other: np.ndarray) -> list[np.ndarray]:
    """Slots worth testing in each tile: first, middle and last slot holding a token, and the slots whose
    token the other tile also holds (the diagonal, where causal-like masks change)."""
    valid = tokens >= 0
    size = tokens.shape[1]
    first = np.argmax(valid, axis=1)
    last = size - 1 - np.argmax(valid[:, ::-1], axis=1)
    lo_other = np.where(other >= 0, other, np.iinfo(np.int64).max).min(axis=1)
    hi_other = other.max(axis=1)
    diag_lo = np.argmax(valid & (tokens >= lo_other[:, None]), axis=1)
    diag_hi = size - 1 - np.argmax((valid & (tokens <= hi_other[:, None]))[:, ::-1], axis=1)
    return [first, (first + last) // 2, last, diag_lo, diag_hi]


def _run_witnesses(first: np.ndarray, count: np.ndarray, other_first: np.ndarray, other_count: np.ndarray,
                   size: int) -> np.ndarray:
    """_witness_slots' tokens for tiles of runs (tokens first .. first + count - 1 in the first slots), in closed
    form: the same slots, without the tiles' [tiles, slots] token arrays (dilated_window's plan: every band tile
    comes here)."""
    last = count - 1
    to_lo, to_hi = other_first - first, other_first + other_count - 1 - first  # the other tile's hull, in slots
    diag_lo = np.where(to_lo <= last, np.maximum(to_lo, 0), 0)  # argmax of no True is slot 0 ...
    diag_hi = np.where(to_hi >= 0, np.minimum(to_hi, last), size - 1)  # ... and from the end, the last slot
    slots = np.stack([np.zeros_like(last), last // 2, last, diag_lo, diag_hi], axis=1)
    return np.where(slots < count[:, None], first[:, None] + slots, -1)


def _witness_tokens(bt, seq, qt, kt) -> tuple[np.ndarray, np.ndarray, Callable, Callable]:
    """Witness rows and columns of each pair of tiles (_witness_slots), and functions giving the tiles' whole
    tokens for a selection of the pairs (for the tiles the witnesses do not settle)."""
    def tokens(side, tiles):
        return lambda sel: tile_tokens(bt, side, block_of(bt, side, seq[sel], tiles[sel]), tiles[sel])

    if bt.runs_only:
        (qf, qc), (kf, kc) = (run_tiles(bt, side, block_of(bt, side, seq, t), t) for side, t in (("q", qt), ("k", kt)))
        rows, cols = _run_witnesses(qf, qc, kf, kc, bt.size_q), _run_witnesses(kf, kc, qf, qc, bt.size_k)
        return rows, cols, tokens("q", qt), tokens("k", kt)
    q = tile_tokens(bt, "q", block_of(bt, "q", seq, qt), qt)
    k = tile_tokens(bt, "k", block_of(bt, "k", seq, kt), kt)
    rows = np.take_along_axis(q, np.stack(_witness_slots(q, k), axis=1), axis=1)
    cols = np.take_along_axis(k, np.stack(_witness_slots(k, q), axis=1), axis=1)
    return rows, cols, (lambda sel: q[sel]), (lambda sel: k[sel])


def _refine(program, batch: _Batch, seq, qt, kt, budget_tiles: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact kinds of the given tiles: TileKind.EMPTY, FULL or PARTIAL (rows without a token do not count).

    A few witness pairs per tile come first: one visible and one hidden pair prove the tile partial, which
    is the usual answer. Tiles the witnesses do not settle are evaluated on every pair, at most
    `budget_tiles` of them; the rest stay partial (correct, only slower). Returns (kinds, evaluated)."""
    rows, cols, q_tokens, k_tokens = _witness_tokens(batch.blocks, seq, qt, kt)
    vis = _visible_batch(program, batch, seq[:, None, None], rows[:, :, None], cols[:, None, :])
    real = (rows >= 0)[:, :, None] & np.ones(cols.shape, bool)[:, None, :]
    settled = vis.any(axis=(1, 2)) & (~vis & real).any(axis=(1, 2))
    result = np.full(len(seq), TileKind.PARTIAL, dtype=np.int64)
    exact = np.nonzero(~settled)[0][:budget_tiles]
    if len(exact):
        qe, ke = q_tokens(exact)[:, :, None], k_tokens(exact)[:, None, :]
        vis = _visible_batch(program, batch, seq[exact][:, None, None], qe, ke)
        any_visible = vis.any(axis=(1, 2))
        hidden = (~vis & (qe >= 0)).any(axis=(1, 2))
        result[exact] = np.where(~any_visible, TileKind.EMPTY, np.where(hidden, TileKind.PARTIAL, TileKind.FULL))
    evaluated = settled.copy()
    evaluated[exact] = True
    return result, evaluated, len(exact)


def _region_bits(program, batch: _Batch, seq, qt, kt, kinds, budget_tiles: int) -> np.ndarray:
    """The kinds of partial tiles with only the bits of regions that make some pair of the tile visible:
    the search keeps a region wherever its interval bound cannot rule it out, loose for some predicates. A
    witness pair (as in _refine) keeps a bit; the pairs of the tile, evaluated within the budget, drop it;
    past the budget a bit stays (correct, only slower). The row-interval fast path (plan/rows.py) computes
    the same exact bits in closed form."""
    rows, cols, q_tokens, k_tokens = _witness_tokens(batch.blocks, seq, qt, kt)
    kinds = kinds.copy()
    for r, region in enumerate(program.regions):
        bit = TileKind.rule_bit(r)
        has = np.nonzero(kinds & bit)[0]
        if not len(has):
            continue
        seen = _visible_batch(program, batch, seq[has][:, None, None], rows[has][:, :, None], cols[has][:, None, :],
                              (region,)).any(axis=(1, 2))
        check = has[~seen][:max(budget_tiles, 0)]
        budget_tiles -= len(check)
        if len(check):
            seen = _visible_batch(program, batch, seq[check][:, None, None], q_tokens(check)[:, :, None],
                                  k_tokens(check)[:, None, :], (region,)).any(axis=(1, 2))
            kinds[check[~seen]] &= ~np.uint32(bit)
    return kinds  # never 0 (FULL): a partial tile's visible pair comes from one of the regions it names


def _covered_pieces(r: dict[str, np.ndarray], inst: dict[str, np.ndarray], batch: _Batch, tiling: Tiling):
    """Which tiles of each range its instance makes fully visible: TRUE there, every real query row of the
    tile inside the q span, and every slot of the k tile a token inside the k span. Returns pieces
    (index of the source range, first tile, last tile, covered)."""
    bt = batch.blocks
    i = r["inst"]
    qg, kg = inst["qg"][i], inst["kg"][i]
    true = r["status"] == Status.TRUE
    grid_k = np.array([b.grid for b in tiling.blocks], dtype=bool)[bt.block[kg]] if len(kg) else np.zeros(0, bool)
    # Query side: the real tokens of the tile must lie in [qa, qb). (For grid blocks the span is the grid.)
    q_ext = extent(bt, "q", qg, r["qt"], r["qt"])
    rows_ok = (q_ext["token"][0] >= inst["qa"][i]) & (q_ext["token"][1] < inst["qb"][i])
    # Key side of a run: tiles starting at or after ka and ending at or before kb, a contiguous middle.
    size_k = bt.k_shape[kg, 2]
    rel_a = inst["ka"][i] - bt.start[kg]
    rel_b = inst["kb"][i] - bt.start[kg]
    c0 = np.maximum(r["k0"], bt.first_k[kg] - (-rel_a // size_k))
    c1 = np.minimum(r["k1"], bt.first_k[kg] + rel_b // size_k - 1)
    middle = true & rows_ok & ~grid_k & (c0 <= c1)
    c0 = np.where(middle, c0, r["k1"] + 1)
    c1 = np.where(middle, c1, r["k1"])
    idx = np.arange(len(r["k0"]))
    run = ~grid_k
    pieces = [(idx[run], r["k0"][run], (c0 - 1)[run], np.zeros(run.sum(), bool)),
              (idx[run], c0[run], c1[run], np.ones(run.sum(), bool)),
              (idx[run], (c1 + 1)[run], r["k1"][run], np.zeros(run.sum(), bool))]
    # Key side of a grid: tile by tile, covered where TRUE and complete (no ragged slot).
    grid = np.nonzero(grid_k)[0]
    if len(grid):
        w, off = expand(r["k1"][grid] - r["k0"][grid] + 1)
        src = grid[w]
        kt = r["k0"][src] + off
        cov = true[src] & rows_ok[src] & complete(bt, "k", kg[src], kt)
        pieces.append((src, kt, kt, cov))
    src = np.concatenate([p[0] for p in pieces])
    lo = np.concatenate([p[1] for p in pieces])
    hi = np.concatenate([p[2] for p in pieces])
    covered = np.concatenate([p[3] for p in pieces])
    keep = lo <= hi
    return src[keep], lo[keep], hi[keep], covered[keep]


def plan(program: ir.Program, layouts: list[ConcreteLayout], values: list[SequenceValues],
         config: TileConfig = TileConfig(), refine_budget: int = DEFAULT_REFINE_BUDGET,
         tiling: Tiling | None = None, fast: bool = True) -> Descriptor:
    """The descriptor for these sequences. Masks made of row intervals take the fast path (`plan/rows.py`,
    exact without a refinement budget), rules that factor over the tiles' axes theirs (`plan/factors.py`, exact too);
    `fast=False` forces the general search everywhere (the tests compare them)."""
    start = time.perf_counter()
    tiling = tiling or _tiling(program, config)
    batch = _Batch.of(layouts, values, tiling)
    bt = batch.blocks
    qtile_base = bt.tile_base("q")
    stats = PlanStats(tiles_total=int(np.dot(bt.tiles("q"), bt.tiles("k"))))
    work_items = int(qtile_base[-1])
    if _descriptor_bytes(work_items, stats.tiles_total) > MAX_DESCRIPTOR_BYTES:  # else even a dense one fits
        # Refuse at once what must exceed the limit: the fast path and the search take memory per query tile
        # and per visited tile before the descriptor's size is known (gigabytes for a sequence of 2^31 tokens).
        floor = visited_tiles_floor(program, layouts, values, config)
        nbytes = _descriptor_bytes(work_items, floor)
        if nbytes > MAX_DESCRIPTOR_BYTES:
            listed = f"at least {floor:,} tiles" if floor else f"{work_items:,} query tiles"  # (what the bytes are)
            raise PlanError(f"the descriptor would list {listed} ({nbytes / 2**30:.1f} GiB), more than the 1 GiB "
                            "limit; use fewer or shorter sequences")
    if not layouts:  # an empty batch: nothing to search
        empty = np.zeros(0, np.int64)
        ranges = (empty, empty, empty, np.zeros(0, np.uint32))
    else:
        if fast and (desc := _native_descriptor(program, batch, tiling, config, stats, start)) is not None:
            return desc
        ranges = plan_ranges(program, batch, tiling) if fast else None
    stats.fast_path = ranges is not None
    if ranges is None:
        ranges = _search(program, batch, tiling, config, refine_budget, qtile_base, stats, fast)
    return _descriptor(config, bt, qtile_base, *ranges, stats, start)


def _native_descriptor(program: ir.Program, batch: _Batch, tiling: Tiling, config: TileConfig, stats: PlanStats,
                       start: float) -> Descriptor | None:
    """The fast path's descriptor from the C++ planner (plan/native.py), or None where it is not built (yet) or
    the fast path does not apply (then rows.py and the search plan, as without it)."""
    lib = native.library()
    forms = row_forms(program) if lib is not None else None
    if forms is None or not batch.blocks.runs_only:
        return None
    consts = segment_constants(forms, batch, tiling.block_k)
    made = None if consts is None else native.descriptor(lib, consts, batch, forms.bits, tiling.block_q,
                                                         tiling.block_k, _check_size)
    if made is None:
        return None
    work_seq, work_qtile, row_ptr, k_tile, kind, full = made
    visited = len(k_tile)
    stats.fast_path = stats.native = True
    stats.tiles_full, stats.tiles_partial = full, visited - full
    desc = Descriptor(config, batch.blocks, work_seq, work_qtile, row_ptr, k_tile, kind, stats)
    stats.seconds = time.perf_counter() - start
    return desc


@per_object
def _tiling(program: ir.Program, config: TileConfig) -> Tiling:
    """tiling_for(), kept per program: it walks every predicate."""
    return tiling_for(program, config.block_q, config.block_k, config.min_run)


def _search(program: ir.Program, batch: _Batch, tiling: Tiling, config: TileConfig, refine_budget: int,
            qtile_base: np.ndarray, stats: PlanStats, fast: bool = True):
    """The general search: visited tiles as ranges (global q tile, first k tile, last k tile, kind)."""
    # Entries of the descriptor before ordering: (gq, first k tile, last k tile, kind, needs exact check),
    # gq being the global query tile. Query tiles whose ranges never overlap (one instance answers for
    # each tile, the common case) are decided range by range; the others are merged tile by tile.
    parts = []
    for index, region in enumerate(program.regions):
        inst, r, factored = _search_region(program, index, batch, tiling, fast)
        stats.regions_factored += factored
        src, lo, hi, covered = _covered_pieces(r, inst, batch, tiling)
        i = r["inst"][src]
        status = r["status"][src]
        parts.append(dict(
            gq=qtile_base[r["seq"][src]] + r["qt"][src], lo=lo, hi=hi,
            kind=np.where(covered, TileKind.FULL, TileKind.rule_bit(index)).astype(np.uint32),
            # A TRUE range is decided (covered, or partly outside its instance); an UNKNOWN tile if exact.
            todo=(status == Status.UNKNOWN) & ~r["exact"][src],
            true=status == Status.TRUE, seq=r["seq"][src], qt=r["qt"][src],
            qg=inst["qg"][i], kg=inst["kg"][i], qa=inst["qa"][i], qb=inst["qb"][i], ka=inst["ka"][i], kb=inst["kb"][i]))
    e = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]} if parts else \
        {name: np.zeros(0, np.int64) for name in ("gq", "lo", "hi", "kind", "todo")}
    e["kind"] = e["kind"].astype(np.uint32)
    e["todo"] = e["todo"].astype(bool)
    order = np.lexsort((e["lo"], e["gq"]))
    e = {name: a[order] for name, a in e.items()}
    overlap = (e["gq"][1:] == e["gq"][:-1]) & (e["lo"][1:] <= e["hi"][:-1])
    if overlap.any():
        shared = np.zeros(int(qtile_base[-1]) + 1, dtype=bool)
        shared[e["gq"][1:][overlap]] = True
        e = _merge_overlaps(e, shared[e["gq"]], batch, tiling)
    gq, lo, hi, kinds, todo = e["gq"], e["lo"], e["hi"], e["kind"], e["todo"]

    # Tiles whose interval answer may be loose, or that several instances touch, are evaluated exactly.
    keep = np.ones(len(gq), dtype=bool)
    todo = np.nonzero(todo)[0]  # always single tiles
    if len(todo):
        seq = np.searchsorted(qtile_base, gq[todo], side="right") - 1
        budget = refine_budget // (config.block_q * config.block_k)
        exact_kind, evaluated, used = _refine(program, batch, seq, gq[todo] - qtile_base[seq], lo[todo], budget)
        keep[todo] = exact_kind != TileKind.EMPTY
        kinds[todo] = np.where(exact_kind == TileKind.FULL, TileKind.FULL, kinds[todo])
        stats.tiles_refined = int(evaluated.sum())
        stats.tiles_conservative = len(todo) - stats.tiles_refined
        # Partial tiles several regions may reach: keep the bits of those that do (a single bit is exact).
        several = (exact_kind == TileKind.PARTIAL) & (np.bitwise_count(kinds[todo]) >= 2)
        if several.any():
            t = np.nonzero(several)[0]
            kinds[todo[t]] = _region_bits(program, batch, seq[t], gq[todo[t]] - qtile_base[seq[t]], lo[todo[t]],
                                          kinds[todo[t]], budget - used)
    return gq[keep], lo[keep], hi[keep], kinds[keep]


def _visiting_order(seq: np.ndarray, gq: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                    counts: np.ndarray) -> np.ndarray:
    """The work items (global q tiles) in visiting order: grouped by the keys they read, longest first.

    Items whose key tile ranges overlap, directly or through a chain, share keys: they form one group (a packed
    document, a sequence of a jagged batch, a sample with its prompt). Ranges that meet in one tile do not
    chain (documents that do not start on a tile boundary share the tile where one ends and the next begins),
    but items that start on the same tile always do. Groups go longest first, and inside a
    group its items longest first, so that the CTAs running at once read the K and V of few groups and find
    them in L2 (forward on the H200: document 423 -> 460, hstu_jagged 383 -> 454 TFLOP/s), while the order
    stays close to longest first, which the Hopper forward's dynamic scheduler hands out greedily (the static
    assignment it had then paid 5-8% imbalance for the grouping). Causal, full and sliding masks are one group:
    their order is plain longest first. Ties keep the q tiles' order. `seq`: the sequence of each global q tile."""
    total_q = len(counts)
    none = int(hi.max(initial=0)) + 1  # past every tile: items without tiles, one group per sequence, last
    first = np.full(total_q, none, dtype=np.int64)
    last = np.full(total_q, -1, dtype=np.int64)
    np.minimum.at(first, gq, lo)
    np.maximum.at(last, gq, hi)
    np.maximum(last, first, out=last)
    # Key tiles of different sequences never meet: place each sequence's on its own stretch of one axis.
    offset = seq * (none + 1)
    first += offset
    last += offset
    by_keys = stable_order(first, (int(seq[-1]) + 1) * (none + 1) if total_q else 0)  # (seq ascends)
    reach = np.maximum.accumulate(last.take(by_keys))
    key_first = first.take(by_keys)
    starts = np.empty(total_q, dtype=bool)
    starts[:1] = True
    np.greater_equal(key_first[1:], reach[:-1], out=starts[1:])
    starts[1:] &= key_first[1:] != key_first[:-1]
    group = np.empty(total_q, dtype=np.int64)
    group[by_keys] = starts.cumsum() - 1
    longest = np.zeros(int(group.max(initial=-1)) + 1, dtype=np.int64)
    np.maximum.at(longest, group, counts)
    # Groups longest first (ties: in group order), then items longest first (ties: in q tile order): one stable
    # sort of one key (a lexsort of the three keys costs twice as much).
    rank = np.empty(len(longest), dtype=np.int64)
    rank[(-longest).argsort(kind="stable")] = np.arange(len(longest))
    most = int(counts.max(initial=0))
    return stable_order(rank.take(group) * (most + 1) + (most - counts), len(longest) * (most + 1))


# TileKind.FULL as a plain int: numpy compares an array with an IntEnum member at 4x the cost of an int (2 us).
_FULL = int(TileKind.FULL)


def _descriptor(config: TileConfig, bt: BlockTable, qtile_base: np.ndarray, gq: np.ndarray, lo: np.ndarray,
                hi: np.ndarray, kinds: np.ndarray, stats: PlanStats, start: float) -> Descriptor:
    """The CSR of visited ranges (global q tile, first and last k tile, kind), in visiting order."""
    # CSR in visiting order (_visiting_order), k tiles ascending inside each work item.
    total_q = int(qtile_base[-1])
    lengths = hi - lo + 1
    counts = np.bincount(gq, weights=lengths, minlength=total_q).astype(np.int64)
    seq = np.arange(len(qtile_base) - 1).repeat(qtile_base[1:] - qtile_base[:-1])  # of each global q tile
    visit = _visiting_order(seq, gq, lo, hi, counts)
    rank = np.empty(total_q, dtype=np.int64)
    rank[visit] = np.arange(total_q)
    visited = int(lengths.sum())
    _check_size(total_q, visited)
    # Ranges by (rank of their q tile, first k tile), one sort of one key; then written out tile by tile: the
    # kinds by a repeat, the k tiles by one running sum of steps (1 inside a range, a jump to lo[i] where range
    # i begins), which makes one array where an arange less a repeat made three (5x faster on 100K tiles).
    stride = int(lo.max(initial=0)) + 1
    order = stable_order(rank.take(gq) * stride + lo, total_q * stride)
    lo, lengths, kinds = lo.take(order), lengths.take(order), kinds.take(order)
    # k_tile and kind share one allocation: made as two fresh arrays (half a megabyte each for full at 32K),
    # glibc handed their pages back to the OS at every other call and faulted them in again (0.25 of 0.7 ms).
    tiles = np.empty(2 * visited, dtype=np.int32)
    k_tile, kind = tiles[:visited], tiles[visited:].view(np.uint32)
    kind[:] = kinds.repeat(lengths)
    stats.tiles_full = int(lengths.compress(kinds == _FULL).sum())
    stats.tiles_partial = visited - stats.tiles_full
    some = lengths > 0
    lo, lengths = lo.compress(some), lengths.compress(some)
    k_tile.fill(1)
    jump = lo.astype(np.int32)
    jump[1:] -= (lo[:-1] + lengths[:-1] - 1).astype(np.int32)
    k_tile[lengths.cumsum() - lengths] = jump
    k_tile.cumsum(out=k_tile)
    row_ptr = np.zeros(total_q + 1, dtype=np.int32)
    row_ptr[1:] = counts.take(visit).cumsum()
    work_seq = seq.take(visit)
    work_qtile = (visit - qtile_base.take(work_seq)).astype(np.int32)
    work_seq = work_seq.astype(np.int32)
    desc = Descriptor(config, bt, work_seq, work_qtile, row_ptr, k_tile, kind, stats)
    stats.seconds = time.perf_counter() - start
    return desc


def _check_size(work_items: int, visited: int) -> None:
    """Refuses, before the tiles are written, a descriptor past MAX_DESCRIPTOR_BYTES."""
    nbytes = _descriptor_bytes(work_items, visited)
    if nbytes > MAX_DESCRIPTOR_BYTES:
        raise PlanError(f"the descriptor would list {visited:,} tiles ({nbytes / 2**30:.1f} GiB), "
                        "more than the 1 GiB limit; use fewer or shorter sequences")


def _descriptor_bytes(work_items: int, tiles: int) -> int:
    """Descriptor.nbytes: per work item its sequence, q tile and row pointer (int32, one more pointer in all),
    per listed tile its k tile (int32) and kind (uint32)."""
    return 12 * work_items + 4 + 8 * tiles


def visited_tiles_floor(program: ir.Program, layouts: list[ConcreteLayout], values: list[SequenceValues],
                        config: TileConfig = TileConfig()) -> int:
    """At least how many tiles the descriptor of these sequences lists, found without planning them.

    The search itself runs on a coarse tiling, about COARSE_QUERY_TILES query tiles for the whole batch, so that
    it costs milliseconds whatever n. Its interval arithmetic proves boxes of pairs visible; every visible pair
    lies in a tile the descriptor lists, and a tile holds at most block_q x block_k pairs, so the pairs proven
    over that are a floor. Regions may share pairs: each sequence counts its largest region only. Where no
    coarse box is proven visible (sequences shorter than a coarse tile, or a predicate such as
    (q - k) % 2 == 0 that holds nowhere on a whole box), the floor is 0 and the plan goes ahead."""
    tokens = sum(lay.n for lay in layouts)
    factor = 1
    while tokens > COARSE_QUERY_TILES * config.block_q * factor:
        factor *= 2
    tiling = tiling_for(program, config.block_q * factor, config.block_k * factor, config.min_run)
    batch = _Batch.of(layouts, values, tiling)
    proven = np.zeros((len(program.regions), len(layouts)), dtype=np.int64)  # visible pairs, per region and sequence
    for index, region in enumerate(program.regions):
        inst, r, _ = _search_region(program, index, batch, tiling)
        true = np.nonzero(r["status"] == Status.TRUE)[0]
        i = r["inst"][true]
        q = _tokens_in(batch.blocks, tiling, "q", inst["qg"][i], r["qt"][true], r["qt"][true], inst["qa"][i], inst["qb"][i])
        k = _tokens_in(batch.blocks, tiling, "k", inst["kg"][i], r["k0"][true], r["k1"][true], inst["ka"][i], inst["kb"][i])
        np.add.at(proven[index], r["seq"][true], q * k)
    pairs_per_tile = config.block_q * config.block_k
    return sum(-(-pairs // pairs_per_tile) for pairs in proven.max(axis=0, initial=0).tolist())


def _tokens_in(bt: BlockTable, tiling: Tiling, side: str, g: np.ndarray, t0: np.ndarray, t1: np.ndarray,
               a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many tokens tiles t0..t1 of block rows g hold in [a, b). A run's tiles hold consecutive tokens; a grid
    block is one segment, so the span [a, b) of an instance there is the whole grid: its tiles count whole."""
    grid = np.array([blk.grid for blk in tiling.blocks], dtype=bool)[bt.block[g]]
    counts = np.zeros(len(g), dtype=np.int64)
    run = np.nonzero(~grid)[0]
    lo, hi = extent(bt, side, g[run], t0[run], t1[run])["token"]
    counts[run] = np.maximum(np.minimum(hi + 1, b[run]) - np.maximum(lo, a[run]), 0)
    if grid.any():
        rows = np.nonzero(grid)[0]
        which, offset = expand(t1[rows] - t0[rows] + 1)
        tile = t0[rows][which] + offset
        np.add.at(counts, rows[which], tile_sizes(bt, side, g[rows][which], tile))
    return counts


def _merge_overlaps(e: dict, mixed: np.ndarray, batch: _Batch, tiling: Tiling) -> dict:
    """Where entries of one query tile overlap, go tile by tile: OR the region bits; FULL if an entry
    covers the tile. A tile that two entries share along a boundary between segments is decided from
    their spans: when their rows (or their columns) inside the tile do not overlap, each pair of the tile
    is decided by one instance alone. The rest is left for the exact check."""
    keep = ~mixed
    idx = np.nonzero(mixed)[0]
    w, off = expand(e["hi"][idx] - e["lo"][idx] + 1)
    src = idx[w]
    kt = e["lo"][src] + off
    stride = int(kt.max()) + 1
    key = e["gq"][src] * stride + kt
    order = np.argsort(key, kind="stable")
    key, src, kt = key[order], src[order], kt[order]
    starts = np.nonzero(np.concatenate([[True], key[1:] != key[:-1]]))[0]
    count = np.diff(np.append(starts, len(key)))
    full = np.logical_or.reduceat(e["kind"][src] == TileKind.FULL, starts)
    bits = np.bitwise_or.reduceat(e["kind"][src], starts)
    decided = full | ((count == 1) & ~e["todo"][src[starts]])

    # Two entries of run blocks meeting at a boundary: the tile's rows (or columns) split between them.
    pair = np.nonzero(~decided & (count == 2))[0]
    runs = np.array([not b.grid for b in tiling.blocks], dtype=bool)
    if len(pair):
        a, b = src[starts[pair]], src[starts[pair] + 1]
        bt = batch.blocks
        ok = runs[bt.block[e["qg"][a]]] & runs[bt.block[e["kg"][a]]] & runs[bt.block[e["qg"][b]]] & runs[bt.block[e["kg"][b]]]
        t = kt[starts[pair]]
        q_ext = extent(bt, "q", e["qg"][a], e["qt"][a], e["qt"][a])["token"]
        k_ext = extent(bt, "k", e["kg"][a], t, t)["token"]
        k_whole = complete(bt, "k", e["kg"][a], t)

        def clip(lo_span, hi_span, tile):
            return np.maximum(lo_span, tile[0]), np.minimum(hi_span - 1, tile[1])

        (qa0, qa1), (qb0, qb1) = clip(e["qa"][a], e["qb"][a], q_ext), clip(e["qa"][b], e["qb"][b], q_ext)
        (ka0, ka1), (kb0, kb1) = clip(e["ka"][a], e["kb"][a], k_ext), clip(e["ka"][b], e["kb"][b], k_ext)
        rows = q_ext[1] - q_ext[0] + 1
        cols = k_ext[1] - k_ext[0] + 1
        split_rows = (qa1 < qb0) | (qb1 < qa0)
        split_cols = (ka1 < kb0) | (kb1 < ka0)
        both_true = e["true"][a] & e["true"][b]
        covers_rows = split_rows & ((qa1 - qa0 + 1) + (qb1 - qb0 + 1) == rows) & \
            (ka1 - ka0 + 1 == cols) & (kb1 - kb0 + 1 == cols) & k_whole
        covers_cols = split_cols & ((ka1 - ka0 + 1) + (kb1 - kb0 + 1) == cols) & k_whole & \
            (qa1 - qa0 + 1 == rows) & (qb1 - qb0 + 1 == rows)
        now_full = ok & both_true & (covers_rows | covers_cols)
        # Not full, and each part decided alone: a TRUE part, or an UNKNOWN part whose answer is exact.
        now_partial = ok & ~now_full & (split_rows | split_cols) & ~e["todo"][a] & ~e["todo"][b]
        full[pair] |= now_full
        decided[pair] |= now_full | now_partial

    m_gq, m_kt = key[starts] // stride, key[starts] % stride
    merged = dict(gq=m_gq, lo=m_kt, hi=m_kt, kind=np.where(full, TileKind.FULL, bits).astype(np.uint32), todo=~decided)
    out = {name: np.concatenate([e[name][keep], merged[name]]) for name in merged}
    order = np.lexsort((out["lo"], out["gq"]))
    return {name: a[order] for name, a in out.items()}


# ---------------------------------------------------------------------------------------------------
# Tables the kernel reads (documented at the top of every generated .cu)
# ---------------------------------------------------------------------------------------------------


@dataclass
class KernelTables:
    work: np.ndarray  # int32 [W, 2]
    row_ptr: np.ndarray  # int32 [W + 1]
    k_tiles: np.ndarray  # int32 [nnz]
    kinds: np.ndarray  # uint8/16/32 [nnz]: Descriptor.kind, narrowed to the kernel's kind_t
    seq_table: np.ndarray  # int64 [B, F]
    seg_start: np.ndarray  # int32
    seg_code: np.ndarray  # int32: symbol | member << 5
    arrays: np.ndarray  # int32

    def arrays_in_order(self) -> tuple[np.ndarray, ...]:
        return (self.work, self.row_ptr, self.k_tiles, self.kinds, self.seq_table, self.seg_start, self.seg_code,
                self.arrays)


@per_object
def _seq_value_sources(code) -> tuple[int | str | None, ...]:
    """Per sequence value of `code`, where it comes from: the column of the segment boundary table when it is a
    segment's start or end (read as it is), "lists" when it reads a list parameter (evaluated sequence by
    sequence), else None (evaluated for all sequences at once). Found once per MaskCode."""
    return tuple(code.segment_names.index(sv.expr.segment) + sv.expr.end if isinstance(sv.expr, ir.SegmentBound)
                   else "lists" if ir.arrays_used(sv.expr) else None for sv in code.seq_values)


def kernel_tables(code, desc: Descriptor, layouts: list[ConcreteLayout], values: list[SequenceValues],
                  token_offsets: np.ndarray) -> KernelTables:
    """Everything besides Q, K, V the kernel needs, for the sequences of one launch. `code` is the
    `codegen.MaskCode` the kernel was generated from (it names the per-sequence values)."""
    batch = len(layouts)
    table = code.seq_table
    seq_table = np.zeros((batch, table.width), dtype=np.int64)
    bounds = segment_boundaries(layouts, len(code.segment_names))
    entry_ptr = entry_pointers(layouts)
    ns = bounds[:, -1]
    fixed = (np.asarray(token_offsets, dtype=np.int64), ns, entry_ptr[:-1], entry_ptr[1:] - entry_ptr[:-1])
    for name, value in zip(table.FIXED, fixed):
        seq_table[:, table.fixed(name)] = value
    # Every sequence has a row per block of the tiling: the block fields of sequence b are rows b*blocks ...
    bt = desc.blocks
    blocks = np.empty((len(bt.start), 6), dtype=np.int64)  # fields in table.BLOCK order
    blocks[:, 0], blocks[:, 1:4], blocks[:, 4], blocks[:, 5] = bt.start, bt.dims, bt.first_q, bt.first_k
    blocks = blocks.reshape(batch, len(blocks) // max(batch, 1) * len(table.BLOCK))
    seq_table[:, table.block(0):table.block(0) + blocks.shape[1]] = blocks
    array_parts, array_offset = [], 0
    for b, val in enumerate(values if code.arrays else ()):
        for slot, info in enumerate(code.arrays):
            a = val.arrays[info.name]
            rows, cols = (1, a.shape[0]) if a.ndim == 1 else a.shape
            for name, value in zip(table.ARRAY, (array_offset, rows, cols)):
                seq_table[b, table.array(slot, name)] = value
            array_parts.append(a.reshape(-1).astype(np.int32))
            array_offset += a.size
    # The sequence values, each evaluated for all sequences at once (sequence by sequence if it reads a list,
    # or to name the sequence that divides by zero). An empty batch has none (nor the parameters they read).
    sources = _seq_value_sources(code) if batch else ()
    if None in sources:
        env = Env(params={name: scalar_column(values, name) for name in (values[0].scalars if values else ())},
                  bounds={(name, end): bounds[:, s + end] for s, name in enumerate(code.segment_names) for end in (False, True)})
        env.params["n"] = ns
    for i, (sv, source) in enumerate(zip(code.seq_values, sources)):
        if isinstance(source, int):
            seq_table[:, table.value(i)] = bounds[:, source]
            continue
        try:
            if source == "lists":
                raise ZeroDivisionError  # lists differ per sequence: go sequence by sequence
            seq_table[:, table.value(i)] = np.asarray(evaluate(sv.expr, env)).astype(np.int64)
        except ZeroDivisionError:
            for b, (lay, val) in enumerate(zip(layouts, values)):
                one = Env(params={k: (v if isinstance(v, bool) else np.int64(v)) for k, v in val.scalars.items()} |
                          {"n": np.int64(lay.n)}, arrays=val.arrays, bounds=segment_bounds(code.segment_names, lay))
                try:
                    seq_table[b, table.value(i)] = int(evaluate(sv.expr, one))
                except ZeroDivisionError:
                    # (validate_values refuses such values first; this names the expression all the same)
                    raise value_problem(sv.expr.span, f"sequence {b}: {sv.text} divides by zero for these "
                                        "parameter values") from None
    # The descriptor's arrays as they are where the types already agree (the tables are copied to the device).
    work = np.empty((len(desc.work_seq), 2), dtype=np.int32)
    work[:, 0], work[:, 1] = desc.work_seq, desc.work_qtile
    return KernelTables(
        work=work,
        row_ptr=desc.row_ptr.astype(np.int32, copy=False),
        k_tiles=desc.k_tile.astype(np.int32, copy=False),
        kinds=desc.kind.astype({8: np.uint8, 16: np.uint16, 32: np.uint32}[code.kind_bits], copy=False),
        seq_table=seq_table,
        seg_start=joined(layouts, "starts", np.int32),
        seg_code=segment_codes(layouts),
        arrays=np.concatenate(array_parts) if array_parts else np.zeros(1, np.int32),
    )
