"""Row intervals: the keys a query row sees, as one interval [lo(q), hi(q)).

Many regions have that form: a causal band, a window, "all of the prompt", "my own document up to me".
The pass finds it where it exists and records it beside the region (`Region.rows`); the region itself is
unchanged. The kernel then tests a key of a partial tile with two comparisons against bounds computed once
per query row, with no look-up of the key's segment.

A region (q side Q, k side K, predicate P) has the form when
- K is a run of adjacent segments, so "k on the k side" is `start(first) <= k < end(last)`;
- every conjunct of P that reads the key is either `q.member == k.member` with Q and K the same family
  (`k` in q's own member: `q.start <= k < q.end`), or a comparison affine in `k` with coefficient +-1
  (`k <= q`, `q - k < w`, `k == q`, ...), or such an expression's `abs` below a bound (`abs(q - k) <= w`);
- the conjuncts that do not read the key stay as a condition on the row.

Where the key's segment is known from the query's (K one plain segment; or the same family as Q, with
`q.member == k.member`), the key's facts are the query's or that segment's: `k.pos` is `k - q.start` (or
`k - start(K)`), `k.start`, `k.end` and `k.member` likewise, so `k.pos < prefix[i]` is a bound on k too.
Where Q and K are one family, its members lie in order: `k.member < q.member` (`T[i] -> T[j] where j < i`, the
earlier turns of a chat) is `k < q.start`, and `<=`, `>`, `>=` likewise.
"""

from __future__ import annotations

from dataclasses import replace

from maskc import ir
from maskc.diagnostics import MaskError
from maskc.ir.ops import OPERATORS
from maskc.ir.ranges import static_range

from .fold import simplify

_K = ir.Token("k", "index")


def _k_linear(e: ir.Expr, reads_k: set[int]) -> tuple[int, ir.Expr] | None:
    """(a, r) with e == a*k + r and r free of the key, for e built from k, +, - and key-free terms. `reads_k`
    holds the nodes (by identity) that read the key."""
    if e == _K:
        return 1, ir.Const(0)
    if id(e) not in reads_k:
        return 0, e
    if isinstance(e, ir.Unary) and e.op == "neg":
        inner = _k_linear(e.arg, reads_k)
        return None if inner is None else (-inner[0], ir.Unary("neg", inner[1]))
    if isinstance(e, ir.Binary) and e.op in ("+", "-"):
        lhs, rhs = _k_linear(e.lhs, reads_k), _k_linear(e.rhs, reads_k)
        if lhs is None or rhs is None:
            return None
        sign = 1 if e.op == "+" else -1
        return lhs[0] + sign * rhs[0], ir.Binary(e.op, lhs[1], rhs[1])
    return None


def _reading_k(e: ir.Expr) -> set[int]:
    """The nodes of `e` that read the key, by identity: found in one pass, where asking `ir.uses_side` at each
    node would walk each subtree again."""
    out: set[int] = set()
    for node in reversed(list(ir.walk(e))):  # children before their parents
        reads = isinstance(node, (ir.Token, ir.Member)) and node.side == "k"
        if reads or any(id(c) in out for c in ir.children(node)):
            out.add(id(node))
    return out


def _bounds(c: ir.Compare) -> tuple[list[ir.Expr], list[ir.Expr]] | None:
    """Lower and upper (exclusive) bounds on k that the comparison means, or None."""
    difference = ir.Binary("-", c.lhs, c.rhs)
    linear = _k_linear(difference, _reading_k(difference))
    if linear is None or linear[0] not in (1, -1):
        return None
    a, r = linear
    one = ir.Const(1)
    # a*k + r  op  0, i.e. k op' -r (a = 1) or k op'' r with op reversed (a = -1).
    edge = ir.Unary("neg", r) if a == 1 else r
    op = c.op if a == 1 else OPERATORS[c.op].converse
    if op == "<":
        return [], [edge]
    if op == "<=":
        return [], [ir.Binary("+", edge, one)]
    if op == ">":
        return [ir.Binary("+", edge, one)], []
    if op == ">=":
        return [edge], []
    if op == "==":
        return [edge], [ir.Binary("+", edge, one)]
    return None  # != is two intervals


def _abs_bounds(c: ir.Compare) -> tuple[list[ir.Expr], list[ir.Expr]] | None:
    """The bounds of `abs(E) < R` or `abs(E) <= R` (either way round, R free of the key): those of `E op R` and
    of `-E op R` together, so a symmetric window `abs(q - k) <= w` is one interval too."""
    for lhs, op, rhs in ((c.lhs, c.op, c.rhs), (c.rhs, OPERATORS[c.op].converse, c.lhs)):
        if isinstance(lhs, ir.Unary) and lhs.op == "abs" and op in ("<", "<=") and not ir.uses_side(rhs, "k"):
            halves = [_bounds(ir.Compare(op, e, rhs)) for e in (lhs.arg, ir.Unary("neg", lhs.arg))]
            if None in halves:
                return None
            return halves[0][0] + halves[1][0], halves[0][1] + halves[1][1]
    return None


def _same_member(c: ir.Expr) -> bool:
    return isinstance(c, ir.Compare) and c.op == "==" and {c.lhs, c.rhs} == {ir.Member("q"), ir.Member("k")}


def _member_order(c: ir.Expr) -> tuple[list[ir.Expr], list[ir.Expr]] | None:
    """The bounds on k of `k.member op q.member` (either way round), members lying in order; None otherwise."""
    if not isinstance(c, ir.Compare) or c.op not in ("<", "<=", ">", ">="):
        return None
    if (c.lhs, c.rhs) == (ir.Member("k"), ir.Member("q")):
        op = c.op
    elif (c.lhs, c.rhs) == (ir.Member("q"), ir.Member("k")):
        op = OPERATORS[c.op].converse
    else:
        return None
    start, end = ir.Token("q", "start"), ir.Token("q", "end")
    return {"<": ([], [start]), "<=": ([], [end]), ">": ([end], []), ">=": ([start], [])}[op]


def _fold(op: str, parts: list[ir.Expr]) -> ir.Expr:
    return simplify(ir.fold(op, parts))


def _key_bounds(c: ir.Compare) -> tuple[list[ir.Expr], list[ir.Expr]] | None:
    return _bounds(c) or _abs_bounds(c)


def _known_key_facts(program: ir.Program, region: ir.Region, c: ir.Compare, own_member: bool) -> ir.Compare:
    """`c` with the key's facts other than its index written as the query's or its segment's, where the key's
    segment is known: the query's own member (`own_member`), or the k side's one plain segment."""
    if own_member:
        start, end, member = ir.Token("q", "start"), ir.Token("q", "end"), ir.Member("q")
    elif len(region.k.segments) == 1 and program.segment(region.k.segments[0]).kind != "family":
        name = region.k.segments[0]
        start, end, member = ir.SegmentBound(name, False), ir.SegmentBound(name, True), None
    else:
        return c
    facts = {ir.Token("k", "start"): start, ir.Token("k", "end"): end,
             ir.Token("k", "pos"): ir.Binary("-", _K, start)}
    if member is not None:
        facts[ir.Member("k")] = member

    def known(node: ir.Expr) -> ir.Expr:
        return facts.get(node, node) if isinstance(node, (ir.Token, ir.Member)) else node
    return ir.rewrite(c, known)


def row_intervals(program: ir.Program, region: ir.Region) -> ir.RowIntervals | None:
    symbols = [program.segment_index(s) for s in region.k.segments]
    if symbols != list(range(symbols[0], symbols[-1] + 1)):
        return None  # the k side is not one run of adjacent segments
    lows: list[ir.Expr] = [ir.SegmentBound(region.k.segments[0], False)]
    highs: list[ir.Expr] = [ir.SegmentBound(region.k.segments[-1], True)]
    row: list[ir.Expr] = []
    conjuncts = ir.conjuncts(region.pred)
    single_family = (region.q.segments == region.k.segments and len(region.k.segments) == 1
                     and program.segment(region.k.segments[0]).kind == "family")
    own_member = single_family and any(_same_member(c) for c in conjuncts)
    for c in conjuncts:
        if not ir.uses_side(c, "k"):
            row.append(c)
        elif _same_member(c):
            if not single_family:
                return None
            lows.append(ir.Token("q", "start"))
            highs.append(ir.Token("q", "end"))
        elif single_family and (b := _member_order(c)) is not None:
            lows.extend(b[0])
            highs.extend(b[1])
        elif isinstance(c, ir.Compare) and (b := _key_bounds(_known_key_facts(program, region, c, own_member))):
            lows.extend(b[0])
            highs.extend(b[1])
        else:
            return None
    lo, hi = _fold("max", lows), _fold("min", highs)
    try:  # moving terms across a comparison can leave 64 bits where the original did not
        static_range(lo, program, region), static_range(hi, program, region)
    except MaskError:
        return None
    return ir.RowIntervals(ir.conjoin(row), lo, hi)


def annotate_row_intervals(program: ir.Program) -> ir.Program:
    return replace(program, regions=tuple(replace(r, rows=row_intervals(program, r)) for r in program.regions))
