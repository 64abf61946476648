"""Exact evaluation of IR expressions with numpy: the definition every faster path is tested against.

Values are numpy int64 / bool arrays (or Python scalars) that broadcast against each other, so one call
evaluates a predicate over a whole grid of (q, k) pairs. Integer semantics are the language's (each
operator's is its `evaluate` in maskc.ir.ops: `//` and `%` round toward negative infinity); reads outside a
list give 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from maskc import ir
from maskc.ir.ops import BOOL, INT


@dataclass
class Env:
    """What the names of an expression stand for.

    `tokens` maps (side, attr) and ("member", side) to arrays; `params` holds scalars (or per-element
    arrays); `arrays` holds list parameters as numpy arrays; `family_index` is the member index inside a
    family's length expression.
    """

    params: dict[str, object] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    tokens: Mapping[tuple[str, str], object] = field(default_factory=dict)
    family_index: object = None
    bounds: dict[tuple[str, bool], object] = field(default_factory=dict)  # SegmentBound values


def _int(x):
    return np.asarray(x, dtype=np.int64)


def gather(table: np.ndarray, indices: tuple) -> np.ndarray:
    """table[i][j]... with 0 outside the table, elementwise over broadcast indices."""
    idx = np.broadcast_arrays(*[_int(i) for i in indices])
    shape = table.shape
    inside = np.ones(idx[0].shape, dtype=bool)
    clipped = []
    for axis, i in enumerate(idx):
        extent = shape[axis] if axis < len(shape) else 0
        inside &= (i >= 0) & (i < extent)
        clipped.append(np.clip(i, 0, max(extent - 1, 0)))
    if table.size == 0:
        return np.zeros(idx[0].shape, dtype=np.int64)
    return np.where(inside, table[tuple(clipped)].astype(np.int64), 0)


def is_ancestor(parent: np.ndarray, node, anc) -> np.ndarray:
    """Whether `anc` is `node` or an ancestor of it; parents precede children (checked by the planner)."""
    node, anc = np.broadcast_arrays(_int(node), _int(anc))
    size = len(parent)
    valid = (node >= 0) & (node < size) & (anc >= 0) & (anc < size)
    found = valid & (node == anc)
    cur = np.where(valid, node, -1)
    # Walking up only decreases the index, so a walker below its target can stop.
    while True:
        active = (cur >= 0) & ~found & (cur > anc)
        if not active.any():
            return found
        cur = np.where(active, parent[np.clip(cur, 0, size - 1)], -1)
        found |= active & (cur == anc)


def evaluate(e: ir.Expr, env: Env):
    """The value of `e` under `env`, elementwise."""
    if isinstance(e, ir.Const):
        return e.value if isinstance(e.value, bool) else np.int64(e.value)
    if isinstance(e, ir.Param):
        return env.params[e.name]
    if isinstance(e, ir.Token):
        return env.tokens[(e.side, e.attr)]
    if isinstance(e, ir.Member):
        return env.tokens[("member", e.side)]
    if isinstance(e, ir.FamilyIndex):
        return env.family_index
    if (o := ir.operation(e)) is not None:
        if o.op.associative and o.op.operands == BOOL and len(o.args) > 2:
            # A connective of many terms keeps one running value, not an array per term.
            value = evaluate(o.args[0], env)
            for a in o.args[1:]:
                value = o.op.evaluate(value, evaluate(a, env))
            return value
        values = [evaluate(a, env) for a in o.args]
        if o.op.result == INT:  # arithmetic is int64, as in the kernel, whatever the leaves are
            values = [_int(v) for v in values]
        try:
            return o.op.evaluate(*values, *o.consts)
        except ZeroDivisionError:
            exc = ZeroDivisionError(f"division by zero in {ir.show(e)}")
            exc.span = e.span if e.span.line else o.args[1].span  # where it is written, for diagnostics
            raise exc from None
    if isinstance(e, ir.Index):
        table = env.arrays[e.array]
        value = gather(table, tuple(evaluate(i, env) for i in e.indices))
        return value.astype(bool) if table.dtype == bool else value
    if isinstance(e, ir.ArrayLen):
        return np.int64(len(env.arrays[e.array]))
    if isinstance(e, ir.ArraySum):
        return np.int64(env.arrays[e.array].astype(np.int64).sum())
    if isinstance(e, ir.Ancestor):
        return is_ancestor(env.arrays[e.array], evaluate(e.node, env), evaluate(e.ancestor, env))
    if isinstance(e, ir.SegmentBound):
        return env.bounds[(e.segment, e.end)]
    raise TypeError(f"cannot evaluate {e!r}")
