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
            if {node.lhs, node.rhs} != {_K, _Q}:
                return node
            # A comparison of the two tokens depends only on which comes first: any two values in that
            # order decide it.
            lhs_first = (node.lhs == _K) == (order == "k<q")
            value = OPERATORS[node.op].evaluate(*((0, 1) if lhs_first else (1, 0)))
            return ir.Const(bool(value), span=node.span)

        regions.append(replace(region, pred=simplify(ir.rewrite(region.pred, decide))))
    return replace(program, regions=tuple(regions))
