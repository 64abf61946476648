"""The planner's fast path for grid rules that read only differences of coordinates: `search_by_offsets`.

Neighbourhood masks on images and videos (CLEAR's disc, windows written as |q.x - k.x| <= w) say whether a key is
visible from where it lies relative to the query: the rule reads `q.y - k.y`, `q.x - k.x` (and `q.t - k.t`),
or compares `q.c` with `k.c`, and otherwise only parameters. Such a rule is translation invariant, so the pairs
of two tiles (boxes of the grid: products of coordinate ranges) are visible exactly where their differences are:
the differences of a q box [a, a + m) and a k box [b, b + l) along an axis are every value of the *window*
[a - (b + l - 1), a + m - 1 - b], and every combination of the axes' values is some pair of tokens. So the rule is
evaluated once per sequence's values over the grid of differences, and a tile pair is EMPTY where its window holds
no visible difference, FULL where every difference in it is visible, else PARTIAL: a count over the window, from a
table of running sums (a summed-area table). Only k tiles whose window can meet a visible difference are looked at.

The general search (`planner.py`) reaches the same kinds by interval arithmetic over boxes of tiles, in four or five
rounds of halving with a few hundred numpy calls each: 4-7 ms for a 32K-token image on the dev VM, where this
path takes well under one. It is exact, so the tiles need no refinement afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from maskc import ir
from maskc.ir.evaluate import Env, evaluate
from maskc.memo import per_object
from maskc.plan.arrays import expand
from maskc.plan.layout import scalar_column
from maskc.plan.tiling import Tiling

_AXES = ("t", "y", "x")
# Past these the general search takes over: the rule's evaluation over the grid of differences (cells), or the
# tile pairs looked at, would cost more than its interval arithmetic (a grid of 2^31 tokens, a half-plane rule on
# a grid of a million tokens).
MAX_DIFFERENCES = 1 << 24
MAX_PAIRS = 1 << 22
_UNREAD = (ir.Token, ir.Member, ir.FamilyIndex, ir.Index, ir.ArrayLen, ir.ArraySum, ir.Ancestor, ir.SegmentBound)


@dataclass(frozen=True)
class OffsetForm:
    """A region whose q side is one grid segment and k side one grid segment, both tiled as grids, and whose rule
    reads the coordinates only as differences: `params` are the parameters it reads (n among them)."""

    params: tuple[str, ...]


def _coordinate_pair(a: ir.Expr, b: ir.Expr) -> bool:
    """q.c against k.c (either order), the same coordinate c."""
    return (isinstance(a, ir.Token) and isinstance(b, ir.Token) and a.attr == b.attr and a.attr in _AXES
            and {a.side, b.side} == {"q", "k"})


def _differences_only(e: ir.Expr) -> bool:
    """Whether `e` reads the tokens only through `q.c - k.c`, `k.c - q.c` or a comparison of q.c with k.c, and reads
    no list: then, evaluated with q.c = d_c and k.c = 0, it gives its value at every pair whose differences are d."""
    if isinstance(e, (ir.Binary, ir.Compare)) and (isinstance(e, ir.Compare) or e.op == "-") \
            and _coordinate_pair(e.lhs, e.rhs):
        return True
    if isinstance(e, _UNREAD):
        return False
    return all(_differences_only(child) for child in ir.children(e))


@per_object
def offset_forms(program: ir.Program, tiling: Tiling) -> tuple[OffsetForm | None, ...]:
    """Each region in this path's form, or None where the path does not apply (found once per program)."""
    grid_segments = {b.first for b in tiling.blocks if b.grid}
    return tuple(_offset_form(program, region, grid_segments) for region in program.regions)


def _offset_form(program: ir.Program, region: ir.Region, grid_segments: set[int]) -> OffsetForm | None:
    for side in (region.q, region.k):
        if len(side.segments) != 1 or program.segment_index(side.segments[0]) not in grid_segments:
            return None
    reads_coordinates = any(isinstance(n, ir.Token) for n in ir.walk(region.pred))
    if not reads_coordinates or not _differences_only(region.pred):
        return None
    return OffsetForm(tuple(sorted(ir.params_used(region.pred))))


def _visible_differences(pred: ir.Expr, params: dict[str, np.ndarray], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """bool [groups, t, y, x]: the rule at every difference d (lo <= d <= hi per axis) for each group of parameter
    values (`params`: an array of one value per group, each)."""
    groups = len(next(iter(params.values()))) if params else 1
    d = [np.arange(lo[a], hi[a] + 1, dtype=np.int64).reshape([1] + [-1 if b == a else 1 for b in range(3)])
         for a in range(3)]
    tokens = {("q", c): d[a] for a, c in enumerate(_AXES)} | {("k", c): 0 for c in _AXES}
    value = evaluate(pred, Env(params={n: v.reshape(-1, 1, 1, 1) for n, v in params.items()}, tokens=tokens))
    return np.broadcast_to(np.asarray(value, dtype=bool), (groups, *(int(h - l + 1) for l, h in zip(lo, hi))))


def _count(sums: np.ndarray, group: np.ndarray, lo: list[np.ndarray], hi: list[np.ndarray]) -> np.ndarray:
    """Visible differences in the boxes [lo, hi] (inclusive, indices into the table's cells) of each group's table
    (_box_sums), 0 where a box is empty."""
    empty = (lo[0] > hi[0]) | (lo[1] > hi[1]) | (lo[2] > hi[2])
    ends = [[np.where(empty, 0, lo[a]), np.where(empty, 0, hi[a] + 1)] for a in range(3)]
    total = np.zeros(len(group), dtype=np.int64)
    for corner in range(8):  # inclusion and exclusion over the box's eight corners
        index = tuple(ends[a][0 if corner >> a & 1 else 1] for a in range(3))
        if bin(corner).count("1") % 2:
            total -= sums[(group, *index)]
        else:
            total += sums[(group, *index)]
    return total


def _box_sums(visible: np.ndarray) -> np.ndarray:
    """int64 running sums per group, with a zero border: sums[g, i, j, k] = visible[g, :i, :j, :k].sum()."""
    sums = np.zeros((visible.shape[0], *(s + 1 for s in visible.shape[1:])), dtype=np.int64)
    sums[:, 1:, 1:, 1:] = visible.cumsum(axis=1).cumsum(axis=2).cumsum(axis=3)
    return sums


def search_by_offsets(form: OffsetForm, region: ir.Region, batch, inst: dict[str, np.ndarray]) -> dict | None:
    """The tile pairs this region makes some pair of visible, for every instance (one per sequence: the grid
    against the grid): arrays `inst`, `qt` (q tile, in its sequence), `kt` (k tile) and `full` (every pair of the
    two tiles visible); or None past MAX_DIFFERENCES or MAX_PAIRS. Sequences with the same values of the
    parameters the rule reads share one evaluation of it."""
    bt = batch.blocks
    qg, kg = inst["qg"], inst["kg"]
    q_dims, k_dims = bt.dims[qg], bt.dims[kg]  # [I, 3]
    values = np.stack([batch.bounds[:, -1] if name == "n" else scalar_column(batch.values, name).astype(np.int64)
                       for name in form.params] or [np.zeros(len(batch.bounds), np.int64)], axis=1)
    values = values.take(inst["seq"], axis=0)
    if (values == values[:1]).all():  # (the usual case, where np.unique costs ~0.1 ms)
        keys, group = values[:1], np.zeros(len(values), dtype=np.int64)
    else:
        keys, group = np.unique(values, axis=0, return_inverse=True)
        group = group.reshape(-1)
    # Differences d = q.c - k.c lie in [-(k dim - 1), q dim - 1]: one table over the widest grids.
    lo, hi = 1 - k_dims.max(axis=0), q_dims.max(axis=0) - 1
    if len(keys) * np.prod((hi - lo + 1).astype(float)) > MAX_DIFFERENCES:
        return None
    visible = _visible_differences(region.pred, {name: keys[:, j] for j, name in enumerate(form.params)}, lo, hi)
    # Each group's visible differences lie in [s_lo, s_hi] per axis (empty: s_lo > s_hi), all of them in the
    # part of the table [u_lo, u_hi] that is summed.
    s_lo, s_hi = np.empty((len(keys), 3), np.int64), np.empty((len(keys), 3), np.int64)
    for a in range(3):
        seen = visible.any(axis=tuple(b + 1 for b in range(3) if b != a))  # [groups, cells along a]
        s_lo[:, a] = np.where(seen.any(axis=1), seen.argmax(axis=1), seen.shape[1]) + lo[a]
        s_hi[:, a] = seen.shape[1] - 1 - seen[:, ::-1].argmax(axis=1) + lo[a]
    if not (s_lo <= s_hi).all(axis=1).any():
        none = np.zeros(0, np.int64)
        return dict(inst=none, qt=none, kt=none, full=np.zeros(0, bool))
    u_lo, u_hi = s_lo.min(axis=0), s_hi.max(axis=0)
    sums = _box_sums(visible[(slice(None), *(slice(l - o, h - o + 1) for l, h, o in zip(u_lo, u_hi, lo)))])

    # Every q tile of every instance: its box [q_lo, q_hi] per axis.
    q_shape, k_shape = bt.q_shape[qg], bt.k_shape[kg]
    q_tiles = -(-q_dims // q_shape)  # tiles per axis
    k_tiles = -(-k_dims // k_shape)
    which, local = expand(np.prod(q_tiles, axis=1))
    qt = _axes_of(local, q_tiles[which])
    q_lo = qt * q_shape[which]
    q_hi = np.minimum(q_lo + q_shape[which], q_dims[which]) - 1
    # The k tiles whose window can meet a visible difference: k.c in [q_lo - s_hi, q_hi - s_lo].
    ks, g = k_shape[which], group[which]
    first = np.clip((q_lo - s_hi[g]) // ks, 0, k_tiles[which] - 1)
    last = np.clip((q_hi - s_lo[g]) // ks, -1, k_tiles[which] - 1)
    span = np.maximum(last - first + 1, 0)
    candidates = np.prod(span, axis=1)
    if candidates.sum() > MAX_PAIRS:
        return None
    pair, offset = expand(candidates)
    kt = first[pair] + _axes_of(offset, span[pair])
    k_lo = kt * ks[pair]
    k_hi = np.minimum(k_lo + ks[pair], k_dims[which][pair]) - 1
    w_lo, w_hi = q_lo[pair] - k_hi, q_hi[pair] - k_lo  # the window of differences, per axis
    size = np.prod(w_hi - w_lo + 1, axis=1)
    count = _count(sums, g[pair], [np.maximum(w_lo[:, a], u_lo[a]) - u_lo[a] for a in range(3)],
                   [np.minimum(w_hi[:, a], u_hi[a]) - u_lo[a] for a in range(3)])
    keep = count > 0
    i = which[pair].compress(keep)
    return dict(inst=i,
                qt=bt.first_q[qg].take(i) + _tile_id(qt[pair].compress(keep, axis=0), q_tiles.take(i, axis=0)),
                kt=bt.first_k[kg].take(i) + _tile_id(kt.compress(keep, axis=0), k_tiles.take(i, axis=0)),
                full=count.compress(keep) == size.compress(keep))


def _axes_of(local: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """int64 [P, 3]: (t, y, x) of position `local` in a row-major [t, y, x] arrangement of counts per axis."""
    x = local % counts[:, 2]
    rest = local // counts[:, 2]
    return np.stack([rest // counts[:, 1], rest % counts[:, 1], x], axis=1)


def _tile_id(axes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The tile number of (t, y, x) in a block with `counts` tiles per axis (tiling.py's frames, rows, columns)."""
    return (axes[:, 0] * counts[:, 1] + axes[:, 1]) * counts[:, 2] + axes[:, 2]
