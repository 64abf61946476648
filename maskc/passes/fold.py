"""Constant folding: bake `const` parameters in, then evaluate and simplify what is known."""

from __future__ import annotations

from dataclasses import replace

from maskc import ir
from maskc.diagnostics import MaskError
from maskc.ir.evaluate import Env, evaluate
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
        if isinstance(node, ir.Unary) and node.op == "not":
            inner = node.arg
            if isinstance(inner, ir.Unary) and inner.op == "not":
                return inner.arg
            if isinstance(inner, ir.Compare):
                flipped = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}[inner.op]
                return replace(inner, op=flipped)
        if isinstance(node, ir.Unary) and node.op == "neg" and isinstance(node.arg, ir.Unary) and node.arg.op == "neg":
            return node.arg.arg
        if isinstance(node, ir.Binary):
            a, b = _const_value(node.lhs), _const_value(node.rhs)
            if node.op == "-" and a == 0 and not isinstance(node.lhs.value, bool):
                return ir.Unary("neg", node.rhs, span=node.span)
            if node.op == "+" and b == 0 or node.op == "-" and b == 0 or node.op == "*" and b == 1:
                return node.lhs
            if node.op == "+" and a == 0 or node.op == "*" and a == 1:
                return node.rhs
            if node.op == "//" and b == 1:
                return node.lhs
        if isinstance(node, ir.Compare) and node.lhs == node.rhs:  # expressions are pure
            return ir.Const(node.op in ("<=", ">=", "=="), span=node.span)
        return node

    return ir.rewrite(e, step)


def _simplify_logic(node: ir.Logic) -> ir.Expr:
    absorbing = node.op == "or"  # `true` absorbs an `or`, `false` absorbs an `and`
    args: list[ir.Expr] = []
    for a in node.args:
        flat = a.args if isinstance(a, ir.Logic) and a.op == node.op else (a,)
        for f in flat:
            if isinstance(f, ir.Const):
                if bool(f.value) == absorbing:
                    return ir.Const(absorbing, span=node.span)
                continue  # the neutral element
            if f not in args:
                args.append(f)
    if not args:
        return ir.Const(not absorbing, span=node.span)
    if len(args) == 1:
        return args[0]
    return replace(node, args=tuple(args))


def fold_constants(program: ir.Program) -> ir.Program:
    return _map_exprs(program, simplify)
