"""Lowering: a checked AST becomes the IR, an `ir.Program`.

Parameters keep their defaults as Python values; segments become `ir.Segment`s; each rule becomes one
`ir.Region` whose sides list segment names in layout order and whose predicate conjoins the shape, the
member equality a repeated index variable implies, and the `where` clause, in that order. Surface
conveniences disappear here: chained comparisons, `clamp`, n-ary `min`/`max`. Every IR node keeps the
span of the text it comes from. `lower` trusts `check`: it is only called on a file that passed.
"""

from __future__ import annotations

from maskc import ir
from maskc.diagnostics import Source, Span
from maskc.front.check import fold_constant, lists_indexed_by
from maskc.front.syntax import (
    AllSegments,
    Attribute,
    BinaryOp,
    BoolLit,
    Call,
    Comparison,
    Expr,
    FamilySegment,
    IntLit,
    ListLit,
    Literal,
    MaskFile,
    Name,
    ParamDef,
    Rule,
    SegmentDef,
    Side,
    SingleSegment,
    Subscript,
    UnaryOp,
    ValueList,
)
from maskc.ir.ops import CALLS, INFIX, PREFIX

# What an index variable stands for where it is used: the member holding the q or the k token (in a
# predicate), or the member whose length is being computed (in a family's length).
IndexVars = dict[str, str]  # name -> "q" | "k" | "family"


def lower(ast: MaskFile, source: Source) -> ir.Program:
    layout = [segment.name.text for segment in ast.segments]
    return ir.Program(
        name=ast.name.text,
        params=tuple(_param(p) for p in ast.params),
        segments=tuple(_segment(s) for s in ast.segments),
        regions=tuple(_region(rule, layout, source) for rule in ast.rules),
        batch=tuple(tuple((a.name.text, _value(a.value)) for a in line.assignments) for line in ast.batch),
        source=source,
        span=ast.name.span,
    )


def _value(literal: Literal) -> int | bool | tuple:
    if isinstance(literal, ListLit):
        return tuple(_value(item) for item in literal.items)
    if isinstance(literal, ValueList):
        return literal.values
    return literal.value


def _param(p: ParamDef) -> ir.ParamDecl:
    default = None if p.default is None else _value(p.default)
    return ir.ParamDecl(p.name.text, ir.ParamType(p.type.elem, p.type.depth), p.const, default, span=p.span)


def _segment(segment: SegmentDef) -> ir.Segment:
    name = segment.name.text
    if isinstance(segment, SingleSegment):
        return ir.Segment(name, "single", length=_expr(segment.length, {}), span=segment.span)
    if isinstance(segment, FamilySegment):
        var = segment.index.text
        if segment.count is not None:
            count = _expr(segment.count, {})
        else:
            # The first list indexed by the variable sets the count; the planner checks any others agree.
            array = lists_indexed_by(segment.length, var)[0].array
            count = ir.ArrayLen(array.text, span=array.span)
        length = _expr(segment.length, {var: "family"})
        return ir.Segment(name, "family", length=length, count=count, span=segment.span)
    dims = tuple(_expr(dim, {}) for dim in segment.dims)
    return ir.Segment(name, "grid", dims=dims, span=segment.span)


def _region(rule: Rule, layout: list[str], source: Source) -> ir.Region:
    q_var, k_var = _bound_var(rule.q), _bound_var(rule.k)
    index_vars: IndexVars = {}
    if k_var is not None:
        index_vars[k_var.text] = "k"
    if q_var is not None:
        index_vars[q_var.text] = "q"  # a variable bound on both sides reads the q member (it equals k's)

    parts: list[ir.Expr] = []
    if rule.shape is not None and rule.shape.text != "full":
        k, q = ir.Token("k", "index", span=rule.shape.span), ir.Token("q", "index", span=rule.shape.span)
        parts.append(ir.Compare("<=" if rule.shape.text == "causal" else "==", k, q, span=rule.shape.span))
    if q_var is not None and k_var is not None and q_var.text == k_var.text:
        same_member = ir.Compare(
            "==", ir.Member("q", span=q_var.span), ir.Member("k", span=k_var.span), span=q_var.span.merge(k_var.span)
        )
        parts.append(same_member)
    if rule.where is not None:
        parts.append(_expr(rule.where, index_vars))
    pred = ir.conjoin(parts, rule.span) if parts else ir.Const(True, span=rule.shape.span)
    q_side, k_side = _side(rule.q, layout), _side(rule.k, layout)
    return ir.Region(q_side, k_side, pred, rule=_rule_text(source, rule.span), span=rule.span)


def _bound_var(side: Side) -> Name | None:
    return next((item.index for item in side.items if not isinstance(item, AllSegments) and item.index), None)


def _side(side: Side, layout: list[str]) -> ir.Side:
    covered = set()
    for item in side.items:
        covered |= set(layout) if isinstance(item, AllSegments) else {item.name.text}
    return ir.Side(tuple(name for name in layout if name in covered), span=side.span)


def _rule_text(source: Source, span: Span) -> str:
    """The rule as written, on one line: comments dropped, whitespace runs made single spaces."""
    lines = source.text.split("\n")[span.line - 1 : span.end_line]
    lines[-1] = lines[-1][: span.end_col - 1]
    lines[0] = lines[0][span.col - 1 :]
    return " ".join(word for line in lines for word in line.split("#", 1)[0].split())


def _expr(e: Expr, index_vars: IndexVars) -> ir.Expr:
    span = e.span
    if isinstance(e, (IntLit, BoolLit)):
        return ir.Const(e.value, span=span)
    if isinstance(e, Name):
        role = index_vars.get(e.text)
        if role == "family":
            return ir.FamilyIndex(span=span)
        if role is not None:
            return ir.Member(role, span=span)
        if e.text in ("q", "k"):
            return ir.Token(e.text, "index", span=span)
        return ir.Param(e.text, span=span)
    if isinstance(e, Attribute):
        return ir.Token(e.base.text, e.attr.text, span=span)
    if isinstance(e, Subscript):
        return ir.Index(e.array.text, tuple(_expr(i, index_vars) for i in e.indices), span=span)
    if isinstance(e, Call):
        return _call(e, index_vars)
    if isinstance(e, UnaryOp):
        return ir.Unary(PREFIX[e.op].name, _expr(e.arg, index_vars), span=span)
    if isinstance(e, BinaryOp):
        if e.op == "^":
            return ir.Pow(_expr(e.lhs, index_vars), fold_constant(e.rhs), span=span)
        return ir.Binary(INFIX[e.op].name, _expr(e.lhs, index_vars), _expr(e.rhs, index_vars), span=span)
    if isinstance(e, Comparison):
        operands = [_expr(o, index_vars) for o in e.operands]
        pairs = tuple(
            ir.Compare(INFIX[op].name, operands[i], operands[i + 1],
                       span=e.operands[i].span.merge(e.operands[i + 1].span))
            for i, op in enumerate(e.ops)
        )
        return pairs[0] if len(pairs) == 1 else ir.Logic("and", pairs, span=span)
    return ir.Logic(INFIX[e.op].name, tuple(_expr(a, index_vars) for a in e.args), span=span)  # BoolOp


def _call(e: Call, index_vars: IndexVars) -> ir.Expr:
    func, span = e.func.text, e.span
    if func == "len":
        return ir.ArrayLen(e.args[0].text, span=span)
    if func == "sum":
        return ir.ArraySum(e.args[0].text, span=span)
    if func == "ancestor":
        parent, node, ancestor = e.args
        return ir.Ancestor(parent.text, _expr(node, index_vars), _expr(ancestor, index_vars), span=span)
    args = [_expr(a, index_vars) for a in e.args]
    if func == "clamp":
        return ir.clamp(*args, span=span)
    op = CALLS[func]
    if op.arity == 1:
        return ir.Unary(op.name, args[0], span=span)
    # An associative operator of several arguments: min(a, b, c) = min(min(a, b), c)
    return ir.fold(op.name, args, span)
