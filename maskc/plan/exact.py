"""The mask at given pairs (q, k), evaluated exactly from the IR: what the planner falls back to when
interval arithmetic cannot decide a tile, and what the brute-force reference (maskc.tools.reference) is
built on.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from maskc import ir
from maskc.ir.evaluate import Env, evaluate
from maskc.plan.layout import ConcreteLayout, SegmentFacts, SequenceValues, segment_bounds, token_info


class _PairTokens(Mapping):
    """Env.tokens at pairs (q, k): each (side, attr) read from the tokens' SegmentFacts when asked for."""

    def __init__(self, q: np.ndarray, k: np.ndarray, q_facts: Mapping, k_facts: Mapping):
        self._index = {"q": q, "k": k}
        self._facts = {"q": q_facts, "k": k_facts}

    def __getitem__(self, key: tuple[str, str]):
        first, second = key
        if first == "member":  # ("member", side)
            return self._facts[second]["member"]
        return self._index[first] if second == "index" else self._facts[first][second]

    def __iter__(self):
        return (key for side in "qk" for key in ((side, "index"), ("member", side), *((side, a) for a in _ATTRS)))

    def __len__(self) -> int:
        return 2 * (2 + len(_ATTRS))


_ATTRS = tuple(f for f in SegmentFacts.FIELDS if f not in ("symbol", "member"))  # (side, attr) keys


def pair_env(params: dict, arrays: dict, q: np.ndarray, k: np.ndarray, q_facts: Mapping, k_facts: Mapping) -> Env:
    """What a predicate's names stand for at pairs (q, k), from the tokens' segment facts."""
    return Env(params=params, arrays=arrays, tokens=_PairTokens(q, k, q_facts, k_facts))


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
