"""Constant folding: bake `const` parameters in, then evaluate and simplify what is known."""

from __future__ import annotations

from dataclasses import replace

from maskc import ir
from maskc.diagnostics import MaskError
from maskc.ir.evaluate import Env, evaluate
from maskc.ir.ops import OPERATORS
from maskc.ir.ranges import static_range


def inline_consts(program: ir.Program) -> ir.Program:
    """Replace every `const` parameter by its value for this compile."""
    values = dict(program.consts)
    if not values:
        return program

    def sub(e: ir.Expr) -> ir.Expr:
        if isinstance(e, ir.Param) and e.name in values and not isinstance(values[e.name], (tuple, list)):
            return ir.Const(values[e.name], span=e.span)
        return e

    return _map_exprs(program, lambda e: ir.rewrite(e, sub))


def _map_exprs(program: ir.Program, fn) -> ir.Program:
    segments = tuple(
        replace(s, length=fn(s.length) if s.length is not None else None,
                count=fn(s.count) if s.count is not None else None,
                dims=tuple(fn(d) for d in s.dims))
        for s in program.segments
    )
    regions = tuple(replace(r, pred=fn(r.pred)) for r in program.regions)
    return replace(program, segments=segments, regions=regions)


def _is_const(e: ir.Expr) -> bool:
    return isinstance(e, ir.Const)


def _const_value(e: ir.Expr):
    return e.value if isinstance(e, ir.Const) else None


def simplify(e: ir.Expr) -> ir.Expr:
    """One bottom-up sweep of local rewrites; each keeps the meaning exactly."""

    def step(node: ir.Expr) -> ir.Expr:
        kids = ir.children(node)
        # Anything whose children are all constants (and reads no list) is evaluated now.
        if kids and all(_is_const(c) for c in kids) and not isinstance(node, (ir.Index, ir.Ancestor)):
            try:
                static_range(node, None)  # exact on constants: int64 arithmetic must not wrap here
            except MaskError:
                return node  # reported by check_ranges at its source position
            try:
                value = evaluate(node, Env())
            except ZeroDivisionError:
                return node  # reported by the planner with the values named
            value = bool(value) if isinstance(value, (bool,)) or getattr(value, "dtype", None) == bool else int(value)
            return ir.Const(value, span=node.span)
        if isinstance(node, ir.Logic):
            return _simplify_logic(node)
        if isinstance(node, ir.Unary):
            op, inner = OPERATORS[node.op], node.arg
            if op.self_inverse and isinstance(inner, ir.Unary) and inner.op == node.op:
                return inner.arg
            if node.op == "not" and isinstance(inner, ir.Compare):
                return replace(inner, op=OPERATORS[inner.op].negation)
        if isinstance(node, ir.Binary):
            op = OPERATORS[node.op]
            a, b = _const_value(node.lhs), _const_value(node.rhs)
            if node.op == "-" and a == 0 and not isinstance(node.lhs.value, bool):
                return ir.Unary("neg", node.rhs, span=node.span)
            if op.identity is not None and b == op.identity:
                return node.lhs
            if op.identity is not None and op.commutative and a == op.identity:
                return node.rhs
        if isinstance(node, ir.Compare) and node.lhs == node.rhs:  # expressions are pure
            # A comparison depends only on lhs - rhs, so `x op x` is what `0 op 0` is.
            return ir.Const(bool(OPERATORS[node.op].evaluate(0, 0)), span=node.span)
        return node

    return ir.rewrite(e, step)


def _simplify_logic(node: ir.Logic) -> ir.Expr:
    absorbing = not OPERATORS[node.op].identity  # `true` absorbs an `or`, `false` absorbs an `and`
    args: dict[ir.Expr, None] = {}  # in order, without repeats; a dict keeps a chain of 20,000 terms linear
    for a in node.args:
        flat = a.args if isinstance(a, ir.Logic) and a.op == node.op else (a,)
        for f in flat:
            if isinstance(f, ir.Const):
                if bool(f.value) == absorbing:
                    return ir.Const(absorbing, span=node.span)
                continue  # the neutral element
            args.setdefault(f)
    if not args:
        return ir.Const(not absorbing, span=node.span)
    if len(args) == 1:
        return next(iter(args))
    return replace(node, args=tuple(args))


def fold_constants(program: ir.Program) -> ir.Program:
    return _map_exprs(program, simplify)
