"""Brute-force definitions: the exact boolean mask, dense reference attention and its gradients, and CPU
models of the kernels' tile loops (forward and backward). Everything faster in maskc is tested against these.
"""

from __future__ import annotations

import numpy as np

from maskc import ir
from maskc.kernels.abi import TileKind
from maskc.plan.exact import pair_env, regions_visible, visible  # noqa: F401  (re-exported for the tests)
from maskc.plan.layout import ConcreteLayout, SequenceValues


def region_visible(program: ir.Program, region: ir.Region, layout: ConcreteLayout, values: SequenceValues,
                   q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Whether `region` makes each pair (q, k) visible; q and k broadcast against each other."""
    return visible(program, layout, values, q, k, regions=[region])


def dense_mask(program: ir.Program, layout: ConcreteLayout, values: SequenceValues) -> np.ndarray:
    """The whole [n, n] boolean mask of one sequence (for small n: tests, `--dump-mask`)."""
    n = layout.n
    out = np.zeros((n, n), dtype=bool)
    rows = max(1, (1 << 22) // max(n, 1))
    k = np.arange(n, dtype=np.int64)[None, :]
    for start in range(0, n, rows):
        q = np.arange(start, min(n, start + rows), dtype=np.int64)[:, None]
        out[start:start + len(q)] = visible(program, layout, values, q, k)
    return out


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float):
    """Masked softmax attention in float64 for one sequence and one head: q [N, D], k/v [N, D].

    Rows with no visible key give zeros and LSE = -inf.
    """
    if len(q) == 0:
        return np.zeros((0, v.shape[1])), np.zeros(0)
    s = (q.astype(np.float64) @ k.astype(np.float64).T) * scale
    s = np.where(mask, s, -np.inf)
    m = s.max(axis=1, keepdims=True)
    empty = ~np.isfinite(m)
    m = np.where(empty, 0.0, m)
    p = np.exp(s - m)
    l_sum = p.sum(axis=1, keepdims=True)
    o = (p @ v.astype(np.float64)) / np.where(l_sum == 0, 1.0, l_sum)
    lse = np.where(empty[:, 0], -np.inf, m[:, 0] + np.log(np.where(l_sum[:, 0] == 0, 1.0, l_sum[:, 0])))
    return np.where(empty, 0.0, o), lse


def simulate(program: ir.Program, desc, layouts: list[ConcreteLayout], values: list[SequenceValues],
             q: list[np.ndarray], k: list[np.ndarray], v: list[np.ndarray], scale: float):
    """A CPU model of the kernel's tile loop, in float32: for each query tile, visit exactly the k tiles the
    descriptor lists, in order, with an online softmax; full tiles apply no mask, partial tiles evaluate only
    the regions their kind names. Per sequence: q/k/v [n, D] -> (O [n, D], LSE [n]).

    If this matches dense attention, the descriptor (lists, kinds, order, tiles' tokens) and the online
    softmax are right.
    """
    outs = [np.zeros((lay.n, v[b].shape[1]), np.float32) for b, lay in enumerate(layouts)]
    lses = [np.full(lay.n, -np.inf, np.float32) for lay in layouts]
    log2e = np.float32(np.log2(np.e))
    for w in range(len(desc.work_seq)):
        b, qt = int(desc.work_seq[w]), int(desc.work_qtile[w])
        lay, val = layouts[b], values[b]
        rows = desc.tokens("q", b, np.array([qt]))[0]
        rows = rows[rows >= 0]
        if len(rows) == 0:
            continue
        m = np.full(len(rows), -np.inf, np.float32)
        l_sum = np.zeros(len(rows), np.float32)
        acc = np.zeros((len(rows), v[b].shape[1]), np.float32)
        qs = q[b][rows].astype(np.float32)
        for j in range(desc.row_ptr[w], desc.row_ptr[w + 1]):
            kt, kind = int(desc.k_tile[j]), int(desc.kind[j])
            cols = desc.tokens("k", b, np.array([kt]))[0]
            inside = cols >= 0
            colc = np.maximum(cols, 0)
            s = (qs @ k[b][colc].astype(np.float32).T) * np.float32(scale * log2e)
            if kind != TileKind.FULL:
                chosen = [program.regions[r] for r in TileKind.rules(kind)]
                vis = visible(program, lay, val, rows[:, None], colc[None, :], regions=chosen)
                s = np.where(vis & inside[None, :], s, -np.inf)
            elif not inside.all():
                raise AssertionError(f"full tile {kt} of sequence {b} has slots without a token")
            new_m = np.maximum(m, s.max(axis=1))
            base = np.where(np.isneginf(new_m), 0, new_m).astype(np.float32)
            corr = np.exp2(m - base)
            p = np.exp2(s - base[:, None])
            l_sum = l_sum * corr + p.sum(axis=1)
            acc = acc * corr[:, None] + p @ np.where(inside[:, None], v[b][colc], 0).astype(np.float32)
            m = new_m
        seen = l_sum > 0
        outs[b][rows] = np.where(seen[:, None], acc / np.where(seen, l_sum, 1)[:, None], 0)
        lses[b][rows] = np.where(seen, (m + np.log2(np.where(seen, l_sum, 1))) / log2e, -np.inf)
    return outs, lses


def attention_backward(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float,
                       d_out: np.ndarray):
    """The gradients of `attention` in float64 for one sequence and one head: (dQ, dK, dV). Rows with no
    visible key contribute nothing (their output is the constant 0)."""
    q64, k64, v64, do64 = (x.astype(np.float64) for x in (q, k, v, d_out))
    s = np.where(mask, (q64 @ k64.T) * scale, -np.inf)
    m = s.max(axis=1, keepdims=True, initial=-np.inf)
    p = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    p /= np.maximum(p.sum(axis=1, keepdims=True), np.finfo(np.float64).tiny)
    d_p = do64 @ v64.T
    d_s = p * (d_p - (p * d_p).sum(axis=1, keepdims=True))
    return (d_s @ k64) * scale, (d_s.T @ q64) * scale, p.T @ do64


def simulate_backward(program: ir.Program, desc, key_desc, layouts: list[ConcreteLayout],
                      values: list[SequenceValues], q, k, v, o, lse, d_out, scale: float, fused: bool = False):
    """A CPU model of the backward kernels' tile loops, in float32, per sequence (lists of [n, D] arrays;
    lse [n] in natural log, -inf for rows that see no key):

    - the dQ kernel: per query tile of `desc`, delta = rowsum(dO * O), then over the listed key tiles
      P = exp2(S * scale * log2 e - LSE * log2 e), dS = P * (dO V^T - delta), dQ += scale * dS K;
    - the dK/dV kernel: per key tile of `key_desc` (the transpose), over the listed query tiles,
      dV += P^T dO and dK += scale * dS^T Q;
    - `fused` (the fused pass): no dQ kernel; the dK/dV loop also adds dS K into the block of the listed
      query tile's forward work item (`key_desc.q_item`), by slot, and a last loop copies each work item's
      block to its tokens' rows (dq_store).

    Full tiles apply no mask, partial tiles only the regions their kind names, as in the forward model.
    If this matches the dense gradients, both lists and the recomputation from LSE are right."""
    log2e = np.float32(np.log2(np.e))
    scale_log2 = np.float32(scale * log2e)
    dqs = [np.zeros(x.shape, np.float32) for x in q]
    dks = [np.zeros(x.shape, np.float32) for x in k]
    dvs = [np.zeros(x.shape, np.float32) for x in v]
    # LSE in the log2 domain; +inf for a row that sees no key, so that its P is 0 everywhere.
    lse2 = [np.where(np.isneginf(x), np.inf, x * log2e).astype(np.float32) for x in lse]
    delta = [(d_out[b].astype(np.float32) * o[b].astype(np.float32)).sum(axis=1) for b in range(len(layouts))]

    def tile_grads(b, q_tile, k_tile, kind):
        """(rows, cols, P, dS, slots) of one tile pair, rows and cols the tokens with a slot, `slots` the
        query slots of `rows`."""
        rows = desc.tokens("q", b, np.array([q_tile]))[0]
        cols = desc.tokens("k", b, np.array([k_tile]))[0]
        slots = np.nonzero(rows >= 0)[0]
        rows, cols = rows[slots], cols[cols >= 0]
        s = (q[b][rows].astype(np.float32) @ k[b][cols].astype(np.float32).T) * scale_log2
        if kind != TileKind.FULL:
            chosen = [program.regions[r] for r in TileKind.rules(kind)]
            s = np.where(visible(program, layouts[b], values[b], rows[:, None], cols[None, :], regions=chosen), s, -np.inf)
        p = np.exp2(s - lse2[b][rows][:, None])
        d_p = d_out[b][rows].astype(np.float32) @ v[b][cols].astype(np.float32).T
        return rows, cols, p, p * (d_p - delta[b][rows][:, None]), slots

    if not fused:  # the dQ kernel (the fused pass sums dQ in the dK/dV loop below)
        for w in range(len(desc.work_seq)):
            b, qt = int(desc.work_seq[w]), int(desc.work_qtile[w])
            for j in range(desc.row_ptr[w], desc.row_ptr[w + 1]):
                rows, cols, _, d_s, _ = tile_grads(b, qt, int(desc.k_tile[j]), int(desc.kind[j]))
                dqs[b][rows] += scale * (d_s @ k[b][cols].astype(np.float32))
    # The fused pass's dq_accum: per forward work item, a block of block_q slots.
    blocks = {}
    for w in range(len(key_desc.work_seq)):
        b, kt = int(key_desc.work_seq[w]), int(key_desc.work_ktile[w])
        for j in range(key_desc.col_ptr[w], key_desc.col_ptr[w + 1]):
            rows, cols, p, d_s, slots = tile_grads(b, int(key_desc.q_tile[j]), kt, int(key_desc.kind[j]))
            dvs[b][cols] += p.T @ d_out[b][rows].astype(np.float32)
            dks[b][cols] += scale * (d_s.T @ q[b][rows].astype(np.float32))
            if fused:
                item = int(key_desc.q_item[j])
                block = blocks.setdefault(item, np.zeros((desc.config.block_q, q[b].shape[1]), np.float32))
                block[slots] += scale * (d_s @ k[b][cols].astype(np.float32))
    for item, block in blocks.items():  # dq_store: the work item's own tile, as the forward descriptor says
        b = int(desc.work_seq[item])
        rows = desc.tokens("q", b, np.array([int(desc.work_qtile[item])]))[0]
        dqs[b][rows[rows >= 0]] = block[rows >= 0]
    return dqs, dks, dvs
