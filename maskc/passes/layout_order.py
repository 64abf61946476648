"""Decide comparisons of q and k that the layout's order settles.

Segments are laid out in declaration order whatever their runtime lengths, so when every segment of a
region's q side comes after every segment of its k side, every visible pair has k < q: `causal` between
them is `full` and `diag` is impossible. (Empty segments change nothing: they hold no pair.)
"""

from __future__ import annotations

from dataclasses import replace

from maskc import ir
from maskc.ir.ops import OPERATORS

from .fold import simplify

_Q = ir.Token("q", "index")
_K = ir.Token("k", "index")


def _order(program: ir.Program, region: ir.Region) -> str | None:
    q = [program.segment_index(s) for s in region.q.segments]
    k = [program.segment_index(s) for s in region.k.segments]
    if min(q) > max(k):
        return "k<q"
    if max(q) < min(k):
        return "k>q"
    return None


def _token_pair(node: ir.Compare) -> tuple[ir.Expr, ir.Expr] | None:
    """(a, b) where `node` compares the tokens a and b (q and k, either way round) as `a OP b`, or as
    `a - b OP 0` or `0 OP b - a`, which order them the same way; else None."""
    lhs, rhs = node.lhs, node.rhs
    if {lhs, rhs} == {_K, _Q}:
        return lhs, rhs
    zero = ir.Const(0)
    if rhs == zero and (pair := ir.token_difference(lhs)):
        return pair
    if lhs == zero and (pair := ir.token_difference(rhs)):
        return pair[::-1]
    return None


def decide_by_layout_order(program: ir.Program) -> ir.Program:
    regions = []
    for region in program.regions:
        order = _order(program, region)
        if order is None:
            regions.append(region)
            continue

        def decide(node: ir.Expr, order=order) -> ir.Expr:
            if not isinstance(node, ir.Compare):
                return node
            # A comparison of the two tokens, or of their difference with 0 (`0 <= q - k`), depends only on
            # which comes first: any two values in that order decide it.
            pair = _token_pair(node)
            if pair is None:
                return node
            lhs, rhs = pair
            lhs_first = (lhs == _K) == (order == "k<q")
            value = OPERATORS[node.op].evaluate(*((0, 1) if lhs_first else (1, 0)))
            return ir.Const(bool(value), span=node.span)

        regions.append(replace(region, pred=simplify(ir.rewrite(region.pred, decide))))
    return replace(program, regions=tuple(regions))
