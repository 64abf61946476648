"""The descriptor checked against the brute-force mask: sound (no visible pair is skipped, a full tile is
really full) and exact (nothing empty is listed, a partial tile is really partial), tile by tile, plus the
structure of the CSR (every query tile once, in visiting order, k tiles ascending)."""

from __future__ import annotations

import numpy as np

from maskc.kernels.abi import TileKind
from maskc.tools.reference import dense_mask, region_visible


def _gather(mask: np.ndarray, q_tokens: np.ndarray, k_tokens: np.ndarray) -> np.ndarray:
    """mask at every (q slot, k slot) of every tile pair: [Tq, bq, Tk, bk]; slots without a token (-1) read
    false (the padded last row and column)."""
    n = mask.shape[0]
    padded = np.zeros((n + 1, n + 1), dtype=bool)
    padded[:n, :n] = mask
    return padded[q_tokens[:, :, None, None], k_tokens[None, None, :, :]]


def check_structure(desc) -> None:
    bt = desc.blocks
    q_tiles = bt.tiles("q")
    work = list(zip(desc.work_seq.tolist(), desc.work_qtile.tolist()))
    expected = [(b, t) for b in range(len(q_tiles)) for t in range(int(q_tiles[b]))]
    assert sorted(work) == expected, "every query tile of every sequence must be one work item, exactly once"
    assert desc.row_ptr[0] == 0 and desc.row_ptr[-1] == len(desc.k_tile) == len(desc.kind)
    counts = np.diff(desc.row_ptr.astype(np.int64))
    assert (counts >= 0).all()
    _check_visiting_order(desc, counts)
    for w in range(len(work)):
        kts = desc.k_tile[desc.row_ptr[w]:desc.row_ptr[w + 1]]
        assert (np.diff(kts) > 0).all(), f"work item {work[w]}: k tiles not strictly ascending: {kts}"
    assert desc.stats.tiles_visited == len(desc.k_tile)
    assert desc.stats.tiles_full == int(np.count_nonzero(desc.kind == TileKind.FULL))


def _key_groups(desc, counts: np.ndarray) -> list[int]:
    """Per work item, its group, by the rule of plan/planner.py's _visiting_order written as a plain loop: in
    order of (sequence, first key tile), an item joins the group before it when it starts on the same tile as the
    item before it or before that group's last key tile (ranges that meet in one tile stay apart); items without
    tiles form one group per sequence."""
    items = len(counts)
    first = [int(desc.k_tile[desc.row_ptr[w]]) if counts[w] else None for w in range(items)]
    last = [int(desc.k_tile[desc.row_ptr[w + 1] - 1]) if counts[w] else None for w in range(items)]
    group, current, reach, previous = [0] * items, -1, -1, None
    for w in sorted(range(items), key=lambda w: (int(desc.work_seq[w]), first[w] is None, first[w] or 0)):
        start = (int(desc.work_seq[w]), first[w])  # first is None: no tiles
        if previous is None or start != previous and (start[0] != previous[0] or first[w] is None
                                                       or previous[1] is None or first[w] >= reach):
            current, reach = current + 1, -1
        if last[w] is not None:
            reach = max(reach, last[w])
        group[w], previous = current, start
    return group


def _check_visiting_order(desc, counts: np.ndarray) -> None:
    """Items grouped by the keys they read, groups with the longest item first, each group longest first."""
    if len(counts) == 0:
        return
    group = np.array(_key_groups(desc, counts))
    starts = np.r_[True, group[1:] != group[:-1]]
    assert len(np.unique(group)) == int(starts.sum()), "the items of a key group must be visited together"
    assert (np.diff(counts)[~starts[1:]] <= 0).all(), "inside a group, items with more k tiles come first"
    assert (np.diff(counts[starts]) <= 0).all(), "groups with longer items come first"


def check_descriptor(program, desc, layouts, values, masks=None, exact: bool = True) -> None:
    """Assert that `desc` lists exactly the tiles with a visible pair, with exact kinds, and that the region
    bits of every partial tile suffice. With `exact=False` (the planner ran out of refinement budget), only
    soundness: every tile with a visible pair is listed, and every full tile is full."""
    check_structure(desc)
    regions = len(program.regions)
    bt = desc.blocks
    q_tiles, k_tiles = bt.tiles("q"), bt.tiles("k")
    for b, (lay, val) in enumerate(zip(layouts, values)):
        n = lay.n
        mask = dense_mask(program, lay, val) if masks is None else masks[b]
        q_tok = desc.tokens("q", b, np.arange(q_tiles[b]))
        k_tok = desc.tokens("k", b, np.arange(k_tiles[b]))
        for side, tok in (("q", q_tok), ("k", k_tok)):
            real = np.sort(tok[tok >= 0])
            assert np.array_equal(real, np.arange(n)), f"sequence {b}: {side} tiles do not hold every token once"
        vis = _gather(mask, q_tok, k_tok)
        real_q = (q_tok >= 0)[:, :, None, None]
        visible = vis.sum(axis=(1, 3))
        hidden = (~vis & real_q).sum(axis=(1, 3))  # a k slot without a token counts as hidden
        listed = np.full((len(q_tok), len(k_tok)), -1, dtype=np.int64)
        for w in np.nonzero(desc.work_seq == b)[0]:
            qt = int(desc.work_qtile[w])
            for j in range(desc.row_ptr[w], desc.row_ptr[w + 1]):
                kt = int(desc.k_tile[j])
                assert 0 <= kt < len(k_tok), f"sequence {b}: k tile {kt} out of range"
                assert listed[qt, kt] == -1, f"sequence {b}: tile ({qt}, {kt}) listed twice"
                listed[qt, kt] = int(desc.kind[j])
        where = f"sequence {b} (n = {n}, tiles {desc.config}, stats {desc.stats})"
        skipped = np.argwhere((listed < 0) & (visible > 0))
        assert not len(skipped), f"{where}: tiles with visible pairs not listed (q tile, k tile): {skipped[:5].tolist()}"
        empty = np.argwhere((listed >= 0) & (visible == 0))
        assert not (exact and len(empty)), f"{where}: listed tiles without a visible pair: {empty[:5].tolist()}"
        full = listed == TileKind.FULL
        not_full = np.argwhere(full & (hidden > 0))
        assert not len(not_full), f"{where}: 'full' tiles with hidden pairs: {not_full[:5].tolist()}"
        ragged = np.argwhere(full & (k_tok < 0).any(axis=1)[None, :])
        assert not len(ragged), f"{where}: 'full' tiles with k slots without a token: {ragged[:5].tolist()}"
        partial = np.argwhere((listed >= 0) & (listed != TileKind.FULL))
        really_full = partial[hidden[partial[:, 0], partial[:, 1]] == 0]
        assert not (exact and len(really_full)), f"{where}: 'partial' tiles that are full: {really_full[:5].tolist()}"
        assert (listed < (1 << regions)).all(), f"{where}: kinds name regions that do not exist"
        if len(partial):
            # The regions a partial tile names give the same visible set as all regions.
            kinds = listed[partial[:, 0], partial[:, 1]]
            qs = q_tok[partial[:, 0]][:, :, None]
            ks = k_tok[partial[:, 1]][:, None, :]
            inside = (qs >= 0) & (ks >= 0)
            qc, kc = np.maximum(qs, 0), np.maximum(ks, 0)
            named = np.zeros(inside.shape, dtype=bool)
            for r, region in enumerate(program.regions):
                on = (kinds & TileKind.rule_bit(r)) != 0
                if on.any():
                    named[on] |= region_visible(program, region, lay, val, qc[on], kc[on])
            want = vis[partial[:, 0], :, partial[:, 1], :]
            bad = np.nonzero(((named & inside) != want).any(axis=(1, 2)))[0]
            assert not len(bad), f"{where}: the region bits of partial tiles miss pairs: {partial[bad][:5].tolist()}"
