"""The descriptor checked against the brute-force mask: sound (no visible pair is skipped, a full tile is
really full) and exact (nothing empty is listed, a partial tile is really partial), tile by tile, plus the
structure of the CSR (every query tile once, most work first, k tiles ascending)."""

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
    assert (np.diff(counts) <= 0).all(), "query tiles with more k tiles must come first"
    for w in range(len(work)):
        kts = desc.k_tile[desc.row_ptr[w]:desc.row_ptr[w + 1]]
        assert (np.diff(kts) > 0).all(), f"work item {work[w]}: k tiles not strictly ascending: {kts}"
    assert desc.stats.tiles_visited == len(desc.k_tile)
    assert desc.stats.tiles_full == int(np.count_nonzero(desc.kind == TileKind.FULL))


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
