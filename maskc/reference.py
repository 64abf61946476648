"""Brute-force definitions: the exact boolean mask, dense reference attention, and a CPU model of the
kernel's tile loop. Everything faster in maskc is tested against these.
"""

from __future__ import annotations

import numpy as np

from . import ir
from .evaluate import Env, evaluate
from .layout import ConcreteLayout, SequenceValues, token_info


def _token_env(program: ir.Program, layout: ConcreteLayout, values: SequenceValues, q, k) -> Env:
    qi = token_info(program, layout, q)
    ki = token_info(program, layout, k)
    params = {name: (v if isinstance(v, bool) else np.int64(v)) for name, v in values.scalars.items()}
    params["n"] = np.int64(layout.n)
    tokens = {}
    for side, pos, info in (("q", q, qi), ("k", k, ki)):
        tokens[(side, "index")] = pos
        tokens[("member", side)] = info["member"]
        for attr in ("pos", "t", "y", "x"):
            tokens[(side, attr)] = info[attr]
    return Env(params=params, arrays=values.arrays, tokens=tokens), qi, ki


def region_visible(program: ir.Program, region: ir.Region, layout: ConcreteLayout, values: SequenceValues,
                   q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Whether `region` makes each pair (q, k) visible; q and k broadcast against each other."""
    q = np.asarray(q, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    env, qi, ki = _token_env(program, layout, values, q, k)
    q_syms = [program.segment_index(s) for s in region.q.segments]
    k_syms = [program.segment_index(s) for s in region.k.segments]
    inside = np.isin(qi["symbol"], q_syms) & np.isin(ki["symbol"], k_syms)
    shape = np.broadcast_shapes(q.shape, k.shape)
    if not inside.any():
        return np.zeros(shape, dtype=bool)
    return np.broadcast_to(inside & np.asarray(evaluate(region.pred, env), dtype=bool), shape)


def visible(program: ir.Program, layout: ConcreteLayout, values: SequenceValues, q, k) -> np.ndarray:
    """The mask at pairs (q, k) (broadcast); positions outside [0, n) are never visible."""
    q = np.asarray(q, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    valid = (q >= 0) & (q < layout.n) & (k >= 0) & (k < layout.n)
    qc = np.clip(q, 0, max(layout.n - 1, 0))
    kc = np.clip(k, 0, max(layout.n - 1, 0))
    out = np.zeros(np.broadcast_shapes(q.shape, k.shape), dtype=bool)
    if layout.n == 0:
        return out
    for region in program.regions:
        out |= region_visible(program, region, layout, values, qc, kc)
    return out & valid


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
