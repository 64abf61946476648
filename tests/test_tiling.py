"""How sequences are cut into tiles (maskc.tiling): runs of 1D tiles, 2D/3D tiles for grids whose coordinates
the mask reads; every token in exactly one tile per side; ragged tiles; complete(); extent() hulls and their
product claims; split() pieces."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from small_configs import SMALL

from maskc.compiler import bind_consts, compile_file, compile_text
from maskc.front import read_program
from maskc.passes import run_pipeline
from maskc.plan.tiling import (
    block_of,
    block_table,
    complete,
    extent,
    run_tiles,
    split,
    tile_tokens,
    tiling_for,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CONFIGS = [(128, 64), (16, 8), (8, 16)]


@lru_cache(maxsize=None)
def example(name: str):
    consts, sequences = SMALL[name]
    compiled = compile_file(EXAMPLES / f"{name}.mask", consts=consts)
    values, layouts = compiled.bind(sequences)
    return compiled.program, layouts


def program(text: str, consts=None):
    return run_pipeline(bind_consts(read_program(text), consts or {}))


def test_grids_whose_coordinates_are_read_get_2d_and_3d_tiles():
    t = tiling_for(example("clear")[0], 128, 64)
    assert [(b.grid, b.q_shape, b.k_shape) for b in t.blocks] == [(True, (1, 8, 16), (1, 4, 16))]
    t = tiling_for(example("clear_text")[0], 128, 64)
    assert [(b.first, b.last, b.grid) for b in t.blocks] == [(0, 0, False), (1, 1, True)]
    assert t.blocks[0].q_shape == (1, 1, 128) and t.blocks[0].k_shape == (1, 1, 64)
    t = tiling_for(example("video3d")[0], 128, 64)
    assert [(b.grid, b.q_shape, b.k_shape) for b in t.blocks] == [(True, (2, 8, 8), (1, 8, 8))]


def test_grids_whose_coordinates_are_not_read_are_runs():
    text = ("mask t(const h: int = 8, const w: int = 32, a: int = 3)\nsegments:\n    A = a\n    I = grid(h, w)\n"
            "    B = n - a - h * w\nrules:\n    I -> I   causal where q.pos < 100\n    * -> A   full\n")
    t = tiling_for(program(text), 128, 64)
    assert [(b.first, b.last, b.grid) for b in t.blocks] == [(0, 2, False)]
    # Reading coordinates of a grid in the middle cuts the run around it.
    t = tiling_for(program(text.replace("q.pos < 100", "q.y == k.y")), 128, 64)
    assert [(b.first, b.last, b.grid) for b in t.blocks] == [(0, 0, False), (1, 1, True), (2, 2, False)]


def test_key_box_is_the_grid_blocks_one_key_shape():
    """key_column() reads every key tile through Tiling.key_box: a run's tile too, beside a grid (clear_text),
    a box narrower than a group of 8 columns too, but not grids of two key shapes, nor a tiling without grids."""
    assert tiling_for(example("clear")[0], 128, 64).key_box == (1, 4, 16)
    assert tiling_for(example("clear_text")[0], 128, 128).key_box == (1, 8, 16)
    assert tiling_for(example("causal")[0], 128, 64).key_box is None
    two = ("mask t(const w: int = 4)\nsegments:\n    I = grid(9, w)\n    J = grid(3, 40)\n"
           "rules:\n    I -> I   where abs(q.x - k.x) <= 1\n    J -> J   where abs(q.y - k.y) <= 1\n")
    t = tiling_for(program(two), 128, 64)
    assert [b.k_shape for b in t.blocks] == [(1, 16, 4), (1, 4, 16)] and t.key_box is None
    assert tiling_for(program(two.replace("J = grid(3, 40)", "J = grid(3, 4)")), 128, 64).key_box == (1, 16, 4)
    assert tiling_for(program(two.replace("= 4)", "= 40)")), 128, 64).key_box == (1, 4, 16)


@pytest.mark.parametrize("dims, q_shape, k_shape", [
    ((100, 4), (1, 32, 4), (1, 16, 4)),  # narrow grids give their slots to rows
    ((100, 1), (1, 128, 1), (1, 64, 1)),
    ((3, 300), (1, 8, 16), (1, 4, 16)),
    ((None, None), (1, 8, 16), (1, 4, 16)),  # runtime dimensions: the preferred shapes
])
def test_tile_shapes_follow_const_grid_dimensions(dims, q_shape, k_shape):
    h, w = ("h2", "w2") if dims[0] is None else (str(dims[0]), str(dims[1]))
    text = (f"mask t(h2: int = 5, w2: int = 7)\nsegments:\n    I = grid({h}, {w})\n"
            "rules:\n    I -> I   where abs(q.x - k.x) <= 2\n")
    (block,) = tiling_for(program(text), 128, 64).blocks
    assert (block.q_shape, block.k_shape) == (q_shape, k_shape)


def test_axes_the_rules_pin_get_tiles_one_token_wide():
    """An axis (t or x) along which every rule between the grid's tokens needs q.A == k.A (a dilated window as a
    grid of `d` columns, attention within each frame of a video) gets tiles one token wide there. x stays min_run
    wide where the sequence has a run block too (the Hopper kernels would copy its tiles token by token)."""
    dilated = ("mask t(n: int = 4096, w: int = 64, const d: int = 4)\nsegments:\n    S = grid(n // d, d)\n"
               "rules:\n    S -> S   where q.x == k.x and 0 <= q.y - k.y < w\n")
    for min_run in (1, 8):
        shapes = [(b.q_shape, b.k_shape) for b in tiling_for(program(dilated), 128, 64, min_run).blocks]
        assert shapes == [((1, 128, 1), (1, 64, 1))]
    with_text = dilated.replace("S = grid(n // d, d)\n", "T = 16\n    S = grid(n // d, d)\n") + "    S -> T   full\n"
    assert [(b.q_shape, b.k_shape) for b in tiling_for(program(with_text), 128, 64, min_run=8).blocks][-1] == \
        ((1, 16, 8), (1, 8, 8))
    frames = ("mask t(r: int = 3)\nsegments:\n    V = grid(8, 32, 32)\n"
              "rules:\n    V -> V   where k.t == q.t and abs(q.y - k.y) <= r and abs(q.x - k.x) <= r\n")
    assert [(b.q_shape, b.k_shape) for b in tiling_for(program(frames), 128, 64).blocks] == [((1, 16, 8), (1, 8, 8))]
    # Not y: a tile one row high would be a run of 128 tokens, wider than a step of 64 queries (Tiling.step_box).
    rows = ("mask t()\nsegments:\n    I = grid(16, 256)\nrules:\n    I -> I   where q.y == k.y and q.x >= k.x\n")
    assert [(b.q_shape, b.k_shape) for b in tiling_for(program(rows), 128, 64).blocks] == [((1, 8, 16), (1, 4, 16))]
    # Every rule between the grid's tokens must pin the axis; rules from or to other segments do not count.
    other = dilated.replace("S = grid(n // d, d)\n", "T = 16\n    S = grid(n // d, d)\n") + "    T -> S   full\n"
    assert tiling_for(program(other), 128, 64).blocks[-1].q_shape == (1, 128, 1)
    unpinned = dilated + "    S -> S   where q.y == k.y\n"
    assert tiling_for(program(unpinned), 128, 64).blocks[0].q_shape == (1, 32, 4)


@pytest.mark.parametrize("block_q, block_k", CONFIGS + [(32, 32), (64, 128)])
@pytest.mark.parametrize("name", sorted(SMALL))
def test_tiles_have_as_many_slots_as_the_block_size(name, block_q, block_k):
    for block in tiling_for(example(name)[0], block_q, block_k).blocks:
        assert np.prod(block.q_shape) == block_q and np.prod(block.k_shape) == block_k


def coordinates(bt, g, tokens):
    """(t, y, x) of tokens of block row g."""
    local = tokens - bt.start[g]
    t_dim, y_dim, x_dim = bt.dims[g]
    return local // (y_dim * x_dim), (local // x_dim) % y_dim, local % x_dim


@pytest.mark.parametrize("block_q, block_k", CONFIGS)
@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_token_is_in_exactly_one_tile_per_side(name, block_q, block_k):
    prog, layouts = example(name)
    tiling = tiling_for(prog, block_q, block_k)
    bt = block_table(tiling, layouts)
    for side, size in (("q", block_q), ("k", block_k)):
        tiles_of_seq = bt.tiles(side)
        for b, lay in enumerate(layouts):
            tiles = np.arange(tiles_of_seq[b])
            g = block_of(bt, side, np.full(len(tiles), b), tiles)
            tokens = tile_tokens(bt, side, g, tiles)
            assert tokens.shape == (len(tiles), size)
            real = tokens[tokens >= 0]
            assert np.array_equal(np.sort(real), np.arange(lay.n)), f"{side} tiles of sequence {b}"
            assert (tokens >= -1).all()
            # Ragged tiles: exactly those with a slot that holds no token are not complete.
            assert np.array_equal(complete(bt, side, g, tiles), (tokens >= 0).all(axis=1))
            # Each tile lies in one block, and its tokens are the block's.
            for row in range(bt.rows_of_seq[b], bt.rows_of_seq[b + 1]):
                mine = tokens[g == row]
                mine = mine[mine >= 0]
                lo, span = bt.start[row], int(np.prod(bt.dims[row]))
                assert ((mine >= lo) & (mine < lo + span)).all()


def test_ragged_tiles_hold_minus_one_in_their_empty_slots():
    prog, layouts = example("clear")  # a 13 x 21 grid
    bt = block_table(tiling_for(prog, 128, 64), layouts)
    assert bt.count_q.tolist() == [2 * 2] and bt.count_k.tolist() == [4 * 2]  # 8 x 16 and 4 x 16 tiles
    tokens = tile_tokens(bt, "q", np.zeros(4, np.int64), np.arange(4))
    # Tile 1 holds rows 0..7, columns 16..20: 5 columns of 16, the rest is -1.
    t1 = tokens[1].reshape(8, 16)
    assert (t1[:, :5] == np.arange(8)[:, None] * 21 + 16 + np.arange(5)).all() and (t1[:, 5:] == -1).all()
    # Tile 3 holds rows 8..12, columns 16..20.
    t3 = tokens[3].reshape(8, 16)
    assert (t3[5:] == -1).all() and (t3[:5, 5:] == -1).all() and t3[4, 4] == 12 * 21 + 20
    assert complete(bt, "q", np.zeros(4, np.int64), np.arange(4)).tolist() == [True, False, False, False]
    # Key tiles of 4 x 16: rows 0..3, 4..7, 8..11 are whole on columns 0..15; row 12 stands alone.
    assert complete(bt, "k", np.zeros(8, np.int64), np.arange(8)).tolist() == [True, False] * 3 + [False, False]


@pytest.mark.parametrize("block_q, block_k", CONFIGS)
@pytest.mark.parametrize("name", ["clear", "clear_text", "natten2d", "video3d", "hstu", "document"])
def test_extent_hulls_contain_every_token(name, block_q, block_k):
    prog, layouts = example(name)
    bt = block_table(tiling_for(prog, block_q, block_k), layouts)
    rng = np.random.default_rng(0)
    for side in "qk":
        for row in range(len(bt.seq)):
            first, count = int(bt.first(side)[row]), int(bt.count(side)[row])
            if count == 0:
                continue
            # Every single tile, and random runs of consecutive tiles.
            t0 = np.concatenate([np.arange(first, first + count), rng.integers(first, first + count, 20)])
            t1 = np.concatenate([np.arange(first, first + count), rng.integers(t0[count:], first + count)])
            g = np.full(len(t0), row)
            ext = extent(bt, side, g, t0, t1)
            product = np.broadcast_to(ext["product"], t0.shape)
            for i in range(len(t0)):
                tiles = np.arange(t0[i], t1[i] + 1)
                tokens = tile_tokens(bt, side, np.full(len(tiles), row), tiles)
                tokens = tokens[tokens >= 0]
                assert len(tokens)
                assert ext["token"][0][i] <= tokens.min() and tokens.max() <= ext["token"][1][i]
                tt, yy, xx = coordinates(bt, row, tokens)
                for c, values in zip("tyx", (tt, yy, xx)):
                    lo, hi = np.broadcast_to(ext[c][0], t0.shape)[i], np.broadcast_to(ext[c][1], t0.shape)[i]
                    assert lo <= values.min() and values.max() <= hi, (side, row, t0[i], t1[i], c)
                if product[i]:  # claimed: the tokens are exactly the product of the coordinate hulls
                    hull = [(np.broadcast_to(ext[c][0], t0.shape)[i], np.broadcast_to(ext[c][1], t0.shape)[i])
                            for c in "tyx"]
                    size = np.prod([hi - lo + 1 for lo, hi in hull])
                    assert size == len(tokens) and ext["token"][0][i] == tokens.min() \
                        and ext["token"][1][i] == tokens.max(), (side, row, t0[i], t1[i])


@pytest.mark.parametrize("dims", [(40, 5), (40, 8), (5, 40), (3, 4, 5), (6, 2, 3), (2, 9), (9, 30, 1)])
@pytest.mark.parametrize("parts", [2, 3, 8])
def test_split_cuts_boxes_of_tiles_into_boxes(dims, parts):
    """As the planner's search does: from all tiles of a grid, split again and again down to single tiles.
    Pieces cover their range exactly once, in order, and each is a box of the grid (a product of coordinate
    ranges). A regression: on a grid one tile wide, pieces were row numbers, not tile
    ids."""
    shape = ", ".join(str(d) for d in dims)
    coords = "q.t == k.t" if len(dims) == 3 else "q.y == k.y"
    text = f"mask t(a: int = 0)\nsegments:\n    I = grid({shape})\nrules:\n    I -> I   where {coords}\n"
    compiled = compile_text(text)
    _, layouts = compiled.bind([{}])
    for block_q, block_k in CONFIGS:
        bt = block_table(tiling_for(compiled.program, block_q, block_k), layouts)
        for side in "qk":
            t0, t1 = np.array([0]), np.array([int(bt.count(side)[0]) - 1])
            while len(t0):
                which, lo, hi = split(bt, side, np.zeros(len(t0), np.int64), t0, t1, parts)
                for i in range(len(t0)):
                    mine = np.nonzero(which == i)[0]
                    pieces = list(zip(lo[mine].tolist(), hi[mine].tolist()))
                    assert pieces[0][0] == t0[i] and pieces[-1][1] == t1[i], (side, t0[i], t1[i], pieces)
                    assert all(b + 1 == c for (_, b), (c, _) in zip(pieces, pieces[1:])), pieces
                    assert all(a <= b for a, b in pieces) and min(2, t1[i] - t0[i] + 1) <= len(pieces) <= parts
                for a, b in zip(lo, hi):
                    tokens = tile_tokens(bt, side, np.zeros(b - a + 1, np.int64), np.arange(a, b + 1))
                    tt, yy, xx = coordinates(bt, 0, tokens[tokens >= 0])
                    box = [len(np.unique(c)) for c in (tt, yy, xx)]
                    assert np.prod(box) == len(np.unique(tokens[tokens >= 0])), (side, a, b)
                more = hi > lo
                t0, t1 = lo[more], hi[more]


@pytest.mark.parametrize("block_q, block_k", CONFIGS)
@pytest.mark.parametrize("name", sorted(SMALL))
def test_run_tiles_are_tile_tokens_without_the_array(name, block_q, block_k):
    """run_tiles(): a run's tile holds first, first + 1, ... in its first `count` slots, as tile_tokens says."""
    prog, layouts = example(name)
    bt = block_table(tiling_for(prog, block_q, block_k), layouts)
    if not bt.runs_only:
        pytest.skip("grid tiles are boxes, not runs")
    for side, size in (("q", block_q), ("k", block_k)):
        for b in range(len(layouts)):
            tiles = np.arange(bt.tiles(side)[b])
            g = block_of(bt, side, np.full(len(tiles), b), tiles)
            first, count = run_tiles(bt, side, g, tiles)
            slots = np.arange(size)[None, :]
            want = np.where(slots < count[:, None], first[:, None] + slots, -1)
            assert np.array_equal(tile_tokens(bt, side, g, tiles), want) and (count >= 1).all()
