"""How a sequence is cut into query tiles and key tiles.

A sequence is a list of *blocks* in token order. A block is either a run of consecutive segments, tiled
into 1D tiles of `block_q` / `block_k` consecutive tokens, or a grid segment whose coordinates the mask
reads, tiled into 2D or 3D boxes (8 x 16 tokens for a 2D grid, queries and keys alike) so that a tile holds
tokens that are close on the grid, where a 2D neighbourhood keeps tiles dense. Both are described the
same way: a run of L tokens is a (1, 1, L) grid tiled by (1, 1, block). A tile may have slots past the
end of its block (a ragged edge); those slots hold no token.

The structure (which blocks, which tile shapes) is decided at compile time from the IR; the sizes come
from the runtime layout of each sequence.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from maskc import ir

if TYPE_CHECKING:  # code generation imports this module; the runtime layouts stay out of it
    from maskc.plan.layout import ConcreteLayout


@dataclass(frozen=True)
class TileConfig:
    """Query and key tile sizes in tokens, and the narrowest x extent a grid tile may have."""

    block_q: int = 128
    block_k: int = 64
    min_run: int = 1


@dataclass(frozen=True)
class Block:
    """Segments first..last (symbol indices) tiled together; `grid` when they are one tiled grid."""

    first: int
    last: int
    grid: bool
    q_shape: tuple[int, int, int]  # (t, y, x) extent of a query tile
    k_shape: tuple[int, int, int]

    def shape(self, side: str) -> tuple[int, int, int]:
        return self.q_shape if side == "q" else self.k_shape


@dataclass(frozen=True)
class Tiling:
    block_q: int
    block_k: int
    blocks: tuple[Block, ...]

    @property
    def has_grids(self) -> bool:
        return any(b.grid for b in self.blocks)

    @property
    def tiles_are_runs(self) -> bool:
        """Every tile is a run of consecutive tokens (slot j holds token first + j): one block, not a grid."""
        return len(self.blocks) == 1 and not self.blocks[0].grid

    @property
    def box_block(self) -> int | None:
        """The block whose tiles the Hopper kernels copy whole (every tile of both sides, or a step of 64
        queries of one), one box per 64 columns, through tensor maps that see the grid's rows and frames: the
        first grid block; None when no block is a grid."""
        return next((i for i, b in enumerate(self.blocks) if b.grid), None)

    @property
    def key_box(self) -> tuple[int, int, int] | None:
        """The (t, y, x) box through which the kernels read every key tile's columns (key_column() in
        common/mask.cu.j2), or None: the grid blocks' one key-tile shape (a box narrower than 8 columns too:
        then a group of 8 columns spans several of its rows). A run block's tile is read through the same box
        (its slots are consecutive, so any box of block_k slots holds them in order), so mixed tilings
        (clear_text's text run and image grid) qualify too; grids with different key shapes do not."""
        shapes = {b.k_shape for b in self.blocks if b.grid}
        if len(shapes) != 1:
            return None
        (shape,) = shapes
        return shape if shape[0] * shape[1] * shape[2] == self.block_k else None

    def step_box(self, side: str, slots: int) -> tuple[int, int, int]:
        """The (t, y, x) shape of `slots` consecutive slots of a `side` tile of the box block (the whole tile
        when `slots` is its size): whole rows of the tile, then whole frames (tile extents are powers of two),
        so that a tile, or a step of one, is one box."""
        tt, th, tw = self.blocks[self.box_block].shape(side)
        return (max(1, slots // (th * tw)), min(th, max(1, slots // tw)), tw)

    def run(self, side: str) -> int:
        """Consecutive tokens that every tile of `side` holds in each of its rows (slots run*j ... run*j +
        run - 1 are consecutive tokens): what one bulk copy can move. A grid tile's row is its x extent."""
        return min(b.shape(side)[2] for b in self.blocks)


_AXES = ("t", "y", "x")


def _grid_shape(dims: tuple[int | None, ...], preferred: tuple[int, int, int], min_run: int = 1,
                pinned: frozenset[str] = frozenset()) -> tuple[int, int, int]:
    """The preferred (t, y, x) tile shape, one token wide along the `pinned` axes (their slots go to the next
    slower free axis of the grid, else the next faster), then narrowed along an axis the grid is known to be
    narrower than (its slots go to the next slower axis), so that small grids do not waste slots; x stays at
    least `min_run` wide (a kernel that copies rows of `min_run` consecutive tokens needs that)."""
    shape = list(preferred)
    own = range(3 - len(dims), 3)  # the grid's axes: y and x for a 2D grid
    narrowest = (1, 1, max(1, min_run))
    for axis in (2, 1, 0):
        free = [a for a in own if a != axis and _AXES[a] not in pinned]
        if _AXES[axis] not in pinned or shape[axis] <= narrowest[axis] or not free:
            continue
        to = max((a for a in free if a < axis), default=min(free))
        shape[to] *= shape[axis] // narrowest[axis]
        shape[axis] = narrowest[axis]
    tt, th, tw = shape
    _, h_dim, w_dim = ((None,) * (3 - len(dims)) + tuple(dims))[-3:]
    while w_dim is not None and tw > max(1, min_run) and tw // 2 >= w_dim and "y" not in pinned:
        tw, th = tw // 2, th * 2
    while len(dims) == 3 and h_dim is not None and th > 1 and th // 2 >= h_dim and "t" not in pinned:
        th, tt = th // 2, tt * 2
    return (tt, th, tw)


# Preferred tile shapes: square-ish neighbourhoods, x (the contiguous axis) widest.
_SHAPES = {(2, "q"): (1, 8, 16), (2, "k"): (1, 8, 16), (3, "q"): (2, 8, 8), (3, "k"): (1, 8, 8)}


def grids_tiled_by_coordinates(program: ir.Program) -> set[int]:
    """Grid segments whose coordinates some rule reads: those get 2D/3D tiles."""
    out = set()
    for region in program.regions:
        for node in ir.walk(region.pred):
            if isinstance(node, ir.Token) and node.attr in ("t", "y", "x"):
                side = region.q if node.side == "q" else region.k
                out.add(program.segment_index(side.segments[0]))
    return out


def pinned_axes(program: ir.Program, segment: int) -> frozenset[str]:
    """The axes of grid segment `segment` along which every rule between its tokens holds only where q and k
    share the coordinate (a conjunct `q.A == k.A`): a tile more than one token wide along such an axis is
    mostly hidden (a dilated window written as a grid of `dilation` columns, attention within each frame of a
    video), so the tiles are one token wide there. Only t and x: a tile one row high is a run of a whole row,
    wider than the Hopper dK/dV kernel's steps of 64 queries copy as one box (Tiling.step_box). Empty when no
    rule joins the grid to itself."""
    name = program.segments[segment].name
    pinned = None
    for region in program.regions:
        if name not in region.q.segments or name not in region.k.segments:
            continue
        axes = {a for c in ir.conjuncts(region.pred) for a in ("t", "x") if _equates(c, a)}
        pinned = axes if pinned is None else pinned & axes
    return frozenset(pinned or ())


def _equates(e: ir.Expr, axis: str) -> bool:
    """Whether `e` is `q.A == k.A` (either way round) for axis A."""
    if not (isinstance(e, ir.Compare) and e.op == "=="):
        return False
    sides = {(t.side, t.attr) for t in (e.lhs, e.rhs) if isinstance(t, ir.Token)}
    return sides == {("q", axis), ("k", axis)}


def _scaled(shape: tuple[int, int, int], size: int) -> tuple[int, int, int]:
    """A preferred shape resized (along y) to hold `size` slots."""
    tt, th, tw = shape
    return (tt, max(1, size // (tt * tw)), tw) if size >= tt * tw else (1, 1, size)


def tiling_for(program: ir.Program, block_q: int, block_k: int, min_run: int = 1) -> Tiling:
    grids = grids_tiled_by_coordinates(program)
    # Where every segment is a grid tiled as boxes (or a grid's partial last row), no run block's copies would
    # be split up by a one-token x: there a pinned x is one token wide on every family (the Hopper kernels copy
    # grid tiles as boxes).
    all_grids = all(s in grids or ir.is_row_remainder(program, s) for s in range(len(program.segments)))
    blocks: list[Block] = []
    run_start = None
    for s, seg in enumerate(program.segments):
        if s in grids:
            if run_start is not None:
                blocks.append(Block(run_start, s - 1, False, (1, 1, block_q), (1, 1, block_k)))
                run_start = None
            dims = tuple(int(d.value) if isinstance(d, ir.Const) else None for d in seg.dims)
            pinned = pinned_axes(program, s)
            run = 1 if "x" in pinned and all_grids else min_run
            q_shape = _grid_shape(dims, _scaled(_SHAPES[(len(dims), "q")], block_q), run, pinned)
            k_shape = _grid_shape(dims, _scaled(_SHAPES[(len(dims), "k")], block_k), run, pinned)
            blocks.append(Block(s, s, True, q_shape, k_shape))
        elif run_start is None:
            run_start = s
    if run_start is not None or not blocks:
        blocks.append(Block(run_start or 0, len(program.segments) - 1, False, (1, 1, block_q), (1, 1, block_k)))
    return Tiling(block_q, block_k, tuple(blocks))


@dataclass(frozen=True)
class BlockTable:
    """The blocks of every sequence of a batch, one row per (sequence, block), in order. Tile ids are
    per sequence: the query tiles of block row g are first_q[g] ... first_q[g] + count_q[g] - 1."""

    seq: np.ndarray  # int64 [G]
    block: np.ndarray  # which Tiling.blocks entry
    start: np.ndarray  # first token (in the sequence)
    dims: np.ndarray  # int64 [G, 3]: (t, y, x) extent; a run of L tokens is (1, 1, L)
    first_q: np.ndarray
    count_q: np.ndarray
    first_k: np.ndarray
    count_k: np.ndarray
    q_shape: np.ndarray  # int64 [G, 3]
    k_shape: np.ndarray
    rows_of_seq: np.ndarray  # int64 [B + 1]: rows of sequence b are rows_of_seq[b]:rows_of_seq[b + 1]
    size_q: int
    size_k: int
    runs_only: bool  # no grid blocks: every tile is a run of consecutive tokens

    def first(self, side: str) -> np.ndarray:
        return self.first_q if side == "q" else self.first_k

    def count(self, side: str) -> np.ndarray:
        return self.count_q if side == "q" else self.count_k

    def shape(self, side: str) -> np.ndarray:
        return self.q_shape if side == "q" else self.k_shape

    def tiles(self, side: str) -> np.ndarray:
        """How many tiles each sequence has."""
        if len(self.seq) == len(self.rows_of_seq) - 1:  # one block per sequence (a tiling of runs)
            return self.count(side).copy()
        return np.bincount(self.seq, weights=self.count(side), minlength=len(self.rows_of_seq) - 1).astype(np.int64)

    def tile_base(self, side: str) -> np.ndarray:
        """int64 [B + 1], read-only: the tiles of the batch numbered sequence by sequence, the number of each
        sequence's tile 0 (the last entry: all tiles). The planner and the key descriptor both need it."""
        return self._tile_bases[side]

    @cached_property
    def _tile_bases(self) -> dict[str, np.ndarray]:
        bases = {}
        for side in "qk":
            base = np.zeros(len(self.rows_of_seq), dtype=np.int64)
            np.cumsum(self.tiles(side), out=base[1:])
            base.flags.writeable = False
            bases[side] = base
        return bases


def tiles_per_block(dims: np.ndarray, shape: np.ndarray) -> np.ndarray:
    return np.prod(-(-dims // shape), axis=-1)


def segment_boundaries(layouts: list[ConcreteLayout], segments: int) -> np.ndarray:
    """int64 [B, segments + 1]: where each symbolic segment begins in each sequence (the last column: n), so
    segment s spans [bounds[b, s], bounds[b, s + 1]) (an empty segment begins where the next does); for all
    sequences at once."""
    table = getattr(layouts, "bounds", None)  # plan/layout.py's BatchLayouts has them as one array already
    if table is not None:
        return table
    return np.array([lay.bounds for lay in layouts], dtype=np.int64).reshape(len(layouts), segments + 1)


def block_table(tiling: Tiling, layouts: list[ConcreteLayout], bounds: np.ndarray | None = None) -> BlockTable:
    """The block rows of every sequence, built for all sequences at once (the planner builds one per call);
    `bounds`: segment_boundaries() of the layouts, when known."""
    batch, count = len(layouts), len(tiling.blocks)
    bounds = segment_boundaries(layouts, tiling.blocks[-1].last + 1) if bounds is None else bounds
    rows = _block_rows(tiling, batch)
    if tiling.tiles_are_runs:  # one run per sequence, [0, n) (a few numpy calls: the planner's usual case)
        n = bounds[:, -1]
        dims = np.ones((batch, 3), dtype=np.int64)
        dims[:, 2] = n
        count_q = (n + (tiling.block_q - 1)) // tiling.block_q
        count_k = (n + (tiling.block_k - 1)) // tiling.block_k
        return BlockTable(seq=rows.seq, block=rows.block, start=rows.zeros, dims=dims, first_q=rows.zeros,
                          count_q=count_q, first_k=rows.zeros, count_k=count_k, q_shape=rows.q_shape,
                          k_shape=rows.k_shape, rows_of_seq=rows.rows_of_seq, size_q=tiling.block_q,
                          size_k=tiling.block_k, runs_only=True)
    lo = bounds[:, rows.first_segment]  # [B, blocks]
    dims = np.ones((batch, count, 3), dtype=np.int64)
    dims[:, :, 2] = bounds[:, rows.end_segment] - lo
    for i, blk in enumerate(tiling.blocks):
        if blk.grid:
            for b, lay in enumerate(layouts):
                d = lay.grid_dims[blk.first]
                dims[b, i] = (1,) * (3 - len(d)) + tuple(d)
    if tiling.has_grids:
        counts = {side: tiles_per_block(dims, rows.shapes[side]) for side in "qk"}  # [B, blocks]
    else:  # runs of L tokens, (1, 1, L), in tiles of (1, 1, block): the same count, in one call per side
        counts = {"q": -(-dims[:, :, 2] // tiling.block_q), "k": -(-dims[:, :, 2] // tiling.block_k)}
    firsts = {side: np.cumsum(counts[side], axis=1) - counts[side] if count > 1 else np.zeros_like(counts[side])
              for side in "qk"}
    return BlockTable(seq=rows.seq, block=rows.block,
                      start=lo.reshape(-1), dims=dims.reshape(-1, 3), first_q=firsts["q"].reshape(-1),
                      count_q=counts["q"].reshape(-1), first_k=firsts["k"].reshape(-1), count_k=counts["k"].reshape(-1),
                      q_shape=rows.q_shape, k_shape=rows.k_shape, rows_of_seq=rows.rows_of_seq,
                      size_q=tiling.block_q, size_k=tiling.block_k, runs_only=not tiling.has_grids)


@dataclass(frozen=True)
class _BlockRows:
    """The columns of a block table that depend only on the tiling and the number of sequences."""

    shapes: dict[str, np.ndarray]  # int64 [blocks, 3] per side
    seq: np.ndarray
    block: np.ndarray
    q_shape: np.ndarray
    k_shape: np.ndarray
    rows_of_seq: np.ndarray
    first_segment: np.ndarray  # int64 [blocks]: each block's first symbolic segment
    end_segment: np.ndarray  # ... and the one after its last
    zeros: np.ndarray  # int64 [B]: a sequence's one run block starts at token 0, at tile 0 on both sides


@functools.lru_cache(maxsize=256)
def _block_rows(tiling: Tiling, batch: int) -> _BlockRows:
    """Made once per (tiling, batch size), read-only: a plan for new runtime values reuses them."""
    count = len(tiling.blocks)
    shapes = {side: np.array([blk.shape(side) for blk in tiling.blocks], dtype=np.int64) for side in "qk"}
    rows = _BlockRows(shapes, np.repeat(np.arange(batch, dtype=np.int64), count),
                      np.tile(np.arange(count, dtype=np.int64), batch),
                      np.repeat(shapes["q"][None], batch, axis=0).reshape(-1, 3),
                      np.repeat(shapes["k"][None], batch, axis=0).reshape(-1, 3),
                      np.arange(0, batch * count + 1, count, dtype=np.int64),
                      np.array([blk.first for blk in tiling.blocks], dtype=np.int64),
                      np.array([blk.last + 1 for blk in tiling.blocks], dtype=np.int64), np.zeros(batch, dtype=np.int64))
    for a in (*shapes.values(), rows.seq, rows.block, rows.q_shape, rows.k_shape, rows.rows_of_seq, rows.first_segment,
              rows.end_segment, rows.zeros):
        a.flags.writeable = False
    return rows


def block_of(bt: BlockTable, side: str, seq: np.ndarray, tiles: np.ndarray) -> np.ndarray:
    """The block row holding each (sequence, tile)."""
    seq = np.asarray(seq, dtype=np.int64)
    tiles = np.asarray(tiles, dtype=np.int64)
    # Block rows are ordered by sequence, then by first tile: search a combined key.
    span = int(bt.tiles(side).max(initial=0)) + 1
    keys = bt.seq * span + bt.first(side)
    return np.searchsorted(keys, seq * span + tiles, side="right") - 1


def _per_block(bt: BlockTable, side: str, g: np.ndarray):
    """Shape, dims and tile-grid width/height of the block rows g: scalars when all boxes share one block
    (the usual case, and far cheaper than gathering), else arrays."""
    g = np.asarray(g, dtype=np.int64)
    if len(g) == 0 or g.min() == g.max():
        one = int(g[0]) if len(g) else 0
        shape, dims = bt.shape(side)[one], bt.dims[one]
        first, start = bt.first(side)[one], bt.start[one]
    else:
        shape, dims = bt.shape(side)[g].T, bt.dims[g].T
        first, start = bt.first(side)[g], bt.start[g]
    ny = -(-dims[1] // shape[1])
    nx = -(-dims[2] // shape[2])
    return shape, dims, first, start, ny, nx


def _frame_row_column(local, ny, nx):
    """(t, y, x) of the tiles numbered `local` in a block of ny rows of nx tiles per frame. Without numpy's %:
    on int64 it costs three floor divisions, and the planner's search takes these for many thousand boxes."""
    row = local // nx
    t = row // ny  # (local // nx) // ny == local // (ny * nx)
    return t, row - t * ny, local - row * nx


def _coordinates(bt: BlockTable, side: str, g: np.ndarray, tiles: np.ndarray):
    shape, dims, first, start, ny, nx = _per_block(bt, side, g)
    return *_frame_row_column(tiles - first, ny, nx), shape, dims


def tile_tokens(bt: BlockTable, side: str, g: np.ndarray, tiles: np.ndarray) -> np.ndarray:
    """Token of every slot of the given tiles (of block rows g), [len(tiles), slots]; -1 for no token."""
    g = np.asarray(g, dtype=np.int64)
    tiles = np.asarray(tiles, dtype=np.int64)
    size = bt.size_q if side == "q" else bt.size_k
    shape, dims, first, start, ny, nx = _per_block(bt, side, g)
    if np.ndim(first) == 0:  # one block: every tile's slots lie at the same offsets from its first slot
        slot = np.arange(size, dtype=np.int64)
        st, sy, sx = (int(v) for v in shape)
        ot, oy, ox = slot // (sy * sx), (slot // sx) % sy, slot % sx
        ct, cy, cx, _, _ = _coordinates(bt, side, g, tiles)
        t0, y0, x0 = ct * st, cy * sy, cx * sx
        token = (start + (t0 * dims[1] + y0) * dims[2] + x0)[:, None] + ((ot * dims[1] + oy) * dims[2] + ox)[None, :]
        whole = (t0 + st <= dims[0]) & (y0 + sy <= dims[1]) & (x0 + sx <= dims[2])
        if whole.all():
            return token
        valid = (ot[None, :] < (dims[0] - t0)[:, None]) & (oy[None, :] < (dims[1] - y0)[:, None]) & \
            (ox[None, :] < (dims[2] - x0)[:, None])
        return np.where(valid, token, -1)
    shape, dims = [np.asarray(x)[..., None] for x in shape], [np.asarray(x)[..., None] for x in dims]
    local = (tiles - first)[:, None]
    ct, cy, cx = local // (np.asarray(ny)[..., None] * np.asarray(nx)[..., None]), \
        (local // np.asarray(nx)[..., None]) % np.asarray(ny)[..., None], local % np.asarray(nx)[..., None]
    slot = np.arange(size, dtype=np.int64)[None, :]
    t = ct * shape[0] + slot // (shape[1] * shape[2])
    y = cy * shape[1] + (slot // shape[2]) % shape[1]
    x = cx * shape[2] + slot % shape[2]
    valid = (t < dims[0]) & (y < dims[1]) & (x < dims[2])
    token = np.asarray(start)[..., None] + (t * dims[1] + y) * dims[2] + x
    return np.where(valid, token, -1)


def run_tiles(bt: BlockTable, side: str, g: np.ndarray, tiles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For tilings of runs only (`bt.runs_only`): each tile's first token and how many tokens it holds (its
    slots are first, first + 1, ...; the rest are empty): tile_tokens() without the [tiles, slots] array."""
    size = bt.size_q if side == "q" else bt.size_k
    _, dims, first, start, _, _ = _per_block(bt, side, np.asarray(g, dtype=np.int64))
    offset = (np.asarray(tiles, dtype=np.int64) - first) * size
    return start + offset, np.minimum(size, dims[2] - offset)


def complete(bt: BlockTable, side: str, g: np.ndarray, tiles: np.ndarray) -> np.ndarray:
    """Whether every slot of each tile holds a token."""
    ct, cy, cx, shape, dims = _coordinates(bt, side, np.asarray(g), np.asarray(tiles))
    return ((ct + 1) * shape[0] <= dims[0]) & ((cy + 1) * shape[1] <= dims[1]) & ((cx + 1) * shape[2] <= dims[2])


def extent(bt: BlockTable, side: str, g: np.ndarray, t0: np.ndarray, t1: np.ndarray, tokens: bool = True) -> dict:
    """For consecutive tiles t0..t1 of block row g: hulls of the coordinates (t, y, x) of their tokens,
    the hull of the tokens, and whether the coordinates form a product of ranges (then each coordinate
    varies independently of the others)."""
    if bt.runs_only:  # the common case, kept cheap: tiles of consecutive tokens
        size = bt.size_q if side == "q" else bt.size_k
        _, dims, first, start, _, _ = _per_block(bt, side, g)
        lo = (t0 - first) * size
        hi = np.minimum((t1 - first + 1) * size, dims[2]) - 1
        zero = np.zeros_like(lo)
        return dict(t=(zero, zero), y=(zero, zero), x=(lo, hi), product=True, token=(start + lo, start + hi))
    shape, dims, first, start, ny, nx = _per_block(bt, side, g)
    (a_t, a_y, a_x), (b_t, b_y, b_x) = _frame_row_column(t0 - first, ny, nx), _frame_row_column(t1 - first, ny, nx)
    same_t = a_t == b_t
    same_y = same_t & (a_y == b_y)
    t_lo, t_hi = a_t * shape[0], np.minimum(b_t * shape[0] + shape[0], dims[0]) - 1
    y_lo = np.where(same_t, a_y * shape[1], 0)
    y_hi = np.where(same_t, np.minimum(b_y * shape[1] + shape[1], dims[1]), dims[1]) - 1
    x_lo = np.where(same_y, a_x * shape[2], 0)
    x_hi = np.where(same_y, np.minimum(b_x * shape[2] + shape[2], dims[2]), dims[2]) - 1
    out = dict(t=(t_lo, t_hi), y=(y_lo, y_hi), x=(x_lo, x_hi), product=same_y)
    if tokens:
        out["token"] = (start + (t_lo * dims[1] + y_lo) * dims[2] + x_lo, start + (t_hi * dims[1] + y_hi) * dims[2] + x_hi)
    return out


def tile_sizes(bt: BlockTable, side: str, g: np.ndarray, tiles: np.ndarray) -> np.ndarray:
    """How many tokens each tile of block rows g holds: its slots less those past the edge of its block. A
    single tile is a box of the block (a product of coordinate ranges), so this is the product of its extents."""
    tiles = np.asarray(tiles, dtype=np.int64)
    ext = extent(bt, side, np.asarray(g, dtype=np.int64), tiles, tiles, tokens=False)
    return np.prod([ext[c][1] - ext[c][0] + 1 for c in "tyx"], axis=0)


def split(bt: BlockTable, side: str, g: np.ndarray, t0: np.ndarray, t1: np.ndarray, parts: int):
    """Cut blocks of tiles t0..t1 into up to `parts` consecutive pieces: (which block, first, last) per
    piece. A grid block is cut between frames first, then between rows of tiles, and only then along x,
    so that every piece stays a box of the grid (a product of coordinate ranges) and bounds stay tight."""
    if bt.runs_only:
        lo, hi = t0, t1
    else:
        shape, dims, first, start, ny, nx = _per_block(bt, side, g)
        (a_t, a_y, _), (b_t, b_y, _) = _frame_row_column(t0 - first, ny, nx), _frame_row_column(t1 - first, ny, nx)
        # Cut in units of frames, rows of tiles or tiles: (first unit, last unit, tiles per unit).
        by_frame, by_row = a_t != b_t, (a_t == b_t) & (a_y != b_y)
        unit = np.where(by_frame, ny * nx, np.where(by_row, nx, 1))
        base = np.where(by_frame, first, np.where(by_row, first + a_t * ny * nx, 0))
        lo = np.where(by_frame, a_t, np.where(by_row, a_y, t0))
        hi = np.where(by_frame, b_t, np.where(by_row, b_y, t1))
    count = hi - lo + 1
    piece = np.arange(parts)[None, :]
    p_lo = lo[:, None] + (count[:, None] * piece) // parts
    p_hi = lo[:, None] + (count[:, None] * (piece + 1)) // parts - 1
    which = np.broadcast_to(np.arange(len(t0))[:, None], p_lo.shape)
    keep = p_lo <= p_hi
    which, p_lo, p_hi = which[keep], p_lo[keep], p_hi[keep]
    if not bt.runs_only:
        # Back from units to tile ids (a unit of one tile has base 0: the ids are tile ids already).
        u, z = unit[which], base[which]
        p_lo = z + p_lo * u
        p_hi = z + p_hi * u + u - 1
    return which, p_lo, p_hi
