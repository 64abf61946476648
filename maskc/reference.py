"""Brute-force definitions: the exact boolean mask, dense reference attention, and a CPU model of the
kernel's tile loop. Everything faster in maskc is tested against these.
"""

from __future__ import annotations

import numpy as np

from . import ir
from .evaluate import Env, evaluate
from .layout import ConcreteLayout, SequenceValues, segment_bounds, token_info


def pair_env(params: dict, arrays: dict, q: np.ndarray, k: np.ndarray, q_facts: dict, k_facts: dict) -> Env:
    """What a predicate's names stand for at pairs (q, k), from the tokens' segment facts."""
    tokens = {}
    for side, pos, facts in (("q", q, q_facts), ("k", k, k_facts)):
        tokens[(side, "index")] = pos
        tokens[("member", side)] = facts["member"]
        for attr in ("pos", "start", "end", "t", "y", "x"):
            tokens[(side, attr)] = facts[attr]
    return Env(params=params, arrays=arrays, tokens=tokens)


def regions_visible(program: ir.Program, regions, env: Env, q_symbol: np.ndarray, k_symbol: np.ndarray,
                    shape: tuple) -> np.ndarray:
    """Whether any of `regions` makes each pair visible: its sides hold the tokens' segments (bit masks over
    segment symbols; np.isin is slow at these sizes) and its predicate holds."""
    out = np.zeros(shape, dtype=bool)
    for region in regions:
        q_bits = sum(1 << program.segment_index(s) for s in region.q.segments)
        k_bits = sum(1 << program.segment_index(s) for s in region.k.segments)
        inside = ((q_bits >> q_symbol) & 1).astype(bool) & ((k_bits >> k_symbol) & 1).astype(bool)
        if inside.any():
            out |= inside & np.asarray(evaluate(region.pred, env), dtype=bool)
    return out


def visible(program: ir.Program, layout: ConcreteLayout, values: SequenceValues, q, k, regions=None) -> np.ndarray:
    """The mask at pairs (q, k) (broadcast) of one sequence, from all regions or the given ones; positions
    outside [0, n) are never visible."""
    q = np.asarray(q, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    shape = np.broadcast_shapes(q.shape, k.shape)
    if layout.n == 0:
        return np.zeros(shape, dtype=bool)
    valid = (q >= 0) & (q < layout.n) & (k >= 0) & (k < layout.n)
    qc = np.clip(q, 0, layout.n - 1)
    kc = np.clip(k, 0, layout.n - 1)
    q_facts, k_facts = token_info(program, layout, qc), token_info(program, layout, kc)
    params = {name: (v if isinstance(v, bool) else np.int64(v)) for name, v in values.scalars.items()}
    params["n"] = np.int64(layout.n)
    env = pair_env(params, values.arrays, qc, kc, q_facts, k_facts)
    env.bounds = segment_bounds([s.name for s in program.segments], layout)
    chosen = program.regions if regions is None else regions
    return regions_visible(program, chosen, env, q_facts["symbol"], k_facts["symbol"], shape) & valid


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
            if kind != 0:
                chosen = [region for r, region in enumerate(program.regions) if kind >> r & 1]
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
