"""The backward pass on the CPU: the key-side descriptor (`maskc.plan.by_key`) is the exact transpose of the
forward one, and the CPU model of the backward kernels' tile loops (`simulate_backward`) matches the dense
float64 gradients on every example, so the lists, the kinds and the recomputation of P from LSE are right
before any GPU runs them."""

from __future__ import annotations

import numpy as np
import pytest
from small_configs import SMALL
from test_plan import example

from maskc.plan.by_key import LONG_ITEM_SHARES, TAIL_SLACK, by_key, long_items, staggered, tail_heads
from maskc.plan.planner import TileConfig, plan
from maskc.tools.reference import attention, attention_backward, simulate_backward


def check_transpose(desc, key_desc) -> None:
    forward = set()
    for w in range(len(desc.work_seq)):
        for j in range(desc.row_ptr[w], desc.row_ptr[w + 1]):
            forward.add((int(desc.work_seq[w]), int(desc.work_qtile[w]), int(desc.k_tile[j]), int(desc.kind[j])))
    backward = set()
    for w in range(len(key_desc.work_seq)):
        q_tiles = key_desc.q_tile[key_desc.col_ptr[w]:key_desc.col_ptr[w + 1]]
        # ascending, or (staggered) ascending from some query tile on and wrapping around once
        descents = np.flatnonzero(np.diff(q_tiles) <= 0)
        assert len(descents) == 0 or (len(descents) == 1 and q_tiles[-1] < q_tiles[0]), \
            "query tiles ascend inside a key tile's list, from where it starts"
        for j in range(key_desc.col_ptr[w], key_desc.col_ptr[w + 1]):
            backward.add((int(key_desc.work_seq[w]), int(key_desc.q_tile[j]), int(key_desc.work_ktile[w]),
                          int(key_desc.kind[j])))
            item = key_desc.q_item[j]  # where the fused pass sums this query tile's dQ
            assert (desc.work_seq[item], desc.work_qtile[item]) == (key_desc.work_seq[w], key_desc.q_tile[j])
    assert forward == backward and len(key_desc.q_tile) == len(desc.k_tile)
    k_tiles = desc.blocks.tiles("k")
    items = sorted(zip(key_desc.work_seq.tolist(), key_desc.work_ktile.tolist()))
    assert items == [(b, t) for b in range(len(k_tiles)) for t in range(int(k_tiles[b]))], \
        "every key tile of every sequence is one work item, exactly once"
    assert (np.diff(np.diff(key_desc.col_ptr.astype(np.int64))) <= 0).all(), "key tiles with more work come first"


@pytest.mark.parametrize("config", [TileConfig(16, 8), TileConfig(8, 16), TileConfig(128, 64)],
                         ids=lambda c: f"{c.block_q}x{c.block_k}")
@pytest.mark.parametrize("name", sorted(SMALL))
def test_key_descriptor_is_the_transpose(name, config):
    compiled, values, layouts, _ = example(name)
    desc = plan(compiled.program, layouts, values, config)
    check_transpose(desc, by_key(desc))
    check_transpose(desc, by_key(desc, stagger=True))


def first_tiles(key_desc) -> list[int]:
    ptr = key_desc.col_ptr
    return [int(key_desc.q_tile[ptr[w]]) for w in range(len(ptr) - 1) if ptr[w + 1] > ptr[w]]


def test_stagger_spreads_lists_that_start_together():
    # full attention: every key tile's list holds every query tile; staggered, each starts at its diagonal
    compiled, values, layouts, _ = example("full")
    desc = plan(compiled.program, layouts[:1], values[:1], TileConfig(16, 8))  # n = 100: 7 query tiles, 13 key tiles
    assert first_tiles(by_key(desc)) == [0] * 13
    assert first_tiles(by_key(desc, stagger=True)) == [k * 8 // 16 for k in range(13)]
    # prefix_lm: only the prefix's key tiles (seen by every query from the first on) are rotated
    compiled, values, layouts, _ = example("prefix_lm")
    desc = plan(compiled.program, layouts, values, TileConfig(16, 16))  # n = 300, prefix 45: 3 prefix key tiles
    plain, spread = by_key(desc), by_key(desc, stagger=True)
    assert first_tiles(plain)[:3] == [0, 0, 0] and first_tiles(spread)[:3] == [0, 1, 2]
    assert first_tiles(spread)[3:] == first_tiles(plain)[3:]
    # causal on square tiles (the Hopper backward's): each list starts at its own diagonal already; nothing changes
    compiled, values, layouts, _ = example("causal")
    desc = plan(compiled.program, layouts, values, TileConfig(16, 16))
    same = by_key(desc)
    assert staggered(same, desc.config) is same


@pytest.mark.parametrize("fused", [False, True], ids=["pair", "fused"])
@pytest.mark.parametrize("name", sorted(SMALL))
def test_simulated_backward_matches_dense_gradients(name, fused):
    compiled, values, layouts, masks = example(name)
    desc = plan(compiled.program, layouts, values, TileConfig(16, 8))
    rng = np.random.default_rng(sorted(SMALL).index(name))
    d = 8
    q, k, v, d_out = ([rng.standard_normal((lay.n, d)).astype(np.float32) for lay in layouts] for _ in range(4))
    scale = 1 / np.sqrt(d)
    forward = [attention(q[b], k[b], v[b], masks[b], scale) for b in range(len(layouts))]
    o = [f[0].astype(np.float32) for f in forward]
    lse = [f[1] for f in forward]
    dq, dk, dv = simulate_backward(compiled.program, desc, by_key(desc), layouts, values, q, k, v, o, lse, d_out, scale,
                                   fused=fused)
    for b, mask in enumerate(masks):
        want = attention_backward(q[b], k[b], v[b], mask, scale, d_out[b])
        for got, ref, what in zip((dq[b], dk[b], dv[b]), want, ("dQ", "dK", "dV")):
            assert np.abs(got - ref).max(initial=0) < 1e-4 * max(1.0, np.abs(ref).max(initial=0)), \
                f"sequence {b}: {what} differs"
        assert (dq[b][~mask.any(axis=1)] == 0).all(), "rows that see no key get no gradient"
        assert (dk[b][~mask.any(axis=0)] == 0).all() and (dv[b][~mask.any(axis=0)] == 0).all()


def test_dense_gradients_match_finite_differences():
    """The float64 reference itself, against central differences of the forward reference."""
    rng = np.random.default_rng(7)
    n, d, scale = 6, 4, 0.5
    mask = np.tril(np.ones((n, n), dtype=bool))
    mask[2] = False  # a row that sees nothing
    q, k, v, d_out = (rng.standard_normal((n, d)) for _ in range(4))
    grads = attention_backward(q, k, v, mask, scale, d_out)

    def loss(q_, k_, v_):
        return (attention(q_, k_, v_, mask, scale)[0] * d_out).sum()

    eps = 1e-6
    for i, x in enumerate((q, k, v)):
        numeric = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            hi, lo = [a.copy() for a in (q, k, v)], [a.copy() for a in (q, k, v)]
            hi[i][idx] += eps
            lo[i][idx] -= eps
            numeric[idx] = (loss(*hi) - loss(*lo)) / (2 * eps)
        assert np.abs(numeric - grads[i]).max() < 1e-6


def test_tail_heads_fit_the_longest_remaining_item_into_their_shares_of_the_gpu():
    """`tail_heads`: the fewest last heads whose shares of the GPU hold the longest item after the long ones
    (less TAIL_SLACK of a share), 1 where the items are short."""
    assert TAIL_SLACK == 0.25
    ptr = np.concatenate([[0], np.cumsum([40, 12, 10, 10, 6, 2])]).astype(np.int32)  # 80 tiles in all
    # 40 tiles against 80 / m a share: 0.5 shares at m = 1, 2.0 at 4, 8.5 less the slack at 17
    assert [tail_heads(ptr, 0, m) for m in (1, 2, 3, 4, 5, 17)] == [1, 1, 2, 2, 3, 9]
    # after the first (long) item: 12 of 40 tiles, 0.3 shares a multiprocessor
    assert [tail_heads(ptr, 1, m) for m in (1, 4, 5, 132)] == [1, 1, 2, 40]
    assert tail_heads(np.zeros(1, np.int32), 0, 132) == 1
    assert tail_heads(ptr, 6, 132) == 1  # nothing after the long items


def test_long_items_lead_and_are_longer_than_twice_a_heads_share_of_the_gpu():
    """`long_items`: the leading work items with more tiles than LONG_ITEM_SHARES (2) times one head's whole work
    spread over the multiprocessors, which the Hopper backward kernels take in a pass before the rest."""
    assert LONG_ITEM_SHARES == 2
    ptr = np.concatenate([[0], np.cumsum([40, 12, 10, 10, 6, 2])]).astype(np.int32)  # 80 tiles in all
    assert [long_items(ptr, m) for m in (1, 4, 5, 14, 16, 17, 132)] == [0, 0, 1, 2, 2, 4, 6]
    later = np.concatenate([[0], np.cumsum([6, 40, 12, 10, 10, 2])]).astype(np.int32)  # only a leading run counts
    assert long_items(later, 132) == 6 and long_items(later, 16) == 0
    assert long_items(np.zeros(1, np.int32), 132) == 0
