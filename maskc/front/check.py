"""Static checks of a parsed mask: names, types, and the rules of docs/language.md.

`check` looks at the whole file and reports every problem it finds at once, each pointing at the
offending text, so a file is fixed in one round. Problems that depend on runtime values (a layout that
does not add up to `n`, a zero divisor) are left to the planner, which knows the values.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace

from maskc.diagnostics import Diagnostic, MaskError, Source, Span
from maskc.front.syntax import (
    INT64_MAX,
    INT64_MIN,
    AllSegments,
    Attribute,
    BatchLine,
    BinaryOp,
    BoolLit,
    Call,
    Comparison,
    Expr,
    FamilySegment,
    GridSegment,
    IntLit,
    ListLit,
    Literal,
    MaskFile,
    Name,
    ParamDef,
    Rule,
    SegmentDef,
    SegmentRef,
    Side,
    SingleSegment,
    Subscript,
    UnaryOp,
    ValueList,
    subexpressions,
)
from maskc.ir import ParamType
from maskc.ir.ops import CALLS, INFIX, PREFIX

INT = ParamType("int")
BOOL = ParamType("bool")
INT_LIST = ParamType("int", 1)

MAX_SEGMENT_NAMES = 32
MAX_RULES = 1024  # as written (every ordered pair of 32 segments); at most 31 remain once merged (codegen)
MAX_DIAGNOSTICS = 100  # reported at once; the last one says how many more there are
MAX_LIST_DEPTH = 2
TOKENS = {"q": "query", "k": "key"}
TOKEN_ATTRIBUTES = ("pos", "t", "y", "x")
GRID_COORDINATES = ("t", "y", "x")
# name -> (fewest, most) arguments; None: no upper bound. Operators written as calls take theirs from the
# table (an associative one takes any number); the others are built-ins of their own.
FUNCTIONS = {
    **{op.syntax: (op.arity, None if op.associative else op.arity) for op in CALLS.values()},
    "clamp": (3, 3), "len": (1, 1), "sum": (1, 1), "ancestor": (3, 3),
}  # fmt: skip
# Value ranges, half-open: runtime integers travel to the kernel as int32; `n` is a non-negative int32.
RUNTIME_INT_RANGE = (-(2**31), 2**31, "[-2^31, 2^31)")
N_RANGE = (0, 2**31, "[0, 2^31 - 1]")
CONST_INT_RANGE = (INT64_MIN, INT64_MAX + 1, "64 bits")


def check(ast: MaskFile, source: Source) -> None:
    """Raise one `MaskError` listing every problem in `ast`, in source order; return if there is none."""
    checker = _Checker(ast)
    diagnostics = sorted(checker.run(), key=lambda d: (d.span.line, d.span.col))
    not_shown = checker.not_shown + max(0, len(diagnostics) - MAX_DIAGNOSTICS)
    if not_shown:  # a list of a million bad numbers is not a million messages
        last = diagnostics[MAX_DIAGNOSTICS - 1]
        note = f"{not_shown} more error{'s' if not_shown > 1 else ''} not shown"
        diagnostics[MAX_DIAGNOSTICS - 1:] = [replace(last, notes=(*last.notes, note))]
    if diagnostics:
        raise MaskError(diagnostics, source)


def fold_constant(e: Expr) -> int | None:
    """The value of an integer expression written with literals only (`2`, `(1 + 1) * 3`), or None.

    Raises ValueError, saying why, when it has no 64-bit value (a division by zero, say).
    """
    if isinstance(e, IntLit):
        value = e.value
    elif isinstance(e, (UnaryOp, BinaryOp)):
        op = PREFIX[e.op] if isinstance(e, UnaryOp) else INFIX[e.op]
        if ParamType(op.result) != INT:  # `not`: no integer to fold
            return None
        operands = [fold_constant(x) for x in ((e.arg,) if isinstance(e, UnaryOp) else (e.lhs, e.rhs))]
        if None in operands:
            return None
        if e.op == "^" and operands[1] < 0:
            raise ValueError("it has a negative exponent")
        if e.op == "^" and operands[1] > 64 and abs(operands[0]) > 1:  # certainly outside 64 bits: not computed
            raise ValueError("it does not fit in 64 bits")
        try:
            value = op.evaluate(*operands)  # on Python ints: exact, however large
        except ZeroDivisionError:
            raise ValueError("it divides by zero") from None
    else:
        return None
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError("it does not fit in 64 bits")
    return value


def lists_indexed_by(e: Expr, var: str) -> list[Subscript]:
    """The subscripts in `e` whose first index is the variable `var` itself (`docs[i]`), in source order.
    They give a family `R[i] = EXPR` its member count."""
    return [
        s
        for s in subexpressions(e)
        if isinstance(s, Subscript) and isinstance(s.indices[0], Name) and s.indices[0].text == var
    ]


@dataclass(frozen=True)
class _Scope:
    """What an expression may refer to besides parameters and `n`."""

    what: str  # the expression's role, for messages: "the length of P", "a predicate"
    index_vars: frozenset[str] = frozenset()
    rule: Rule | None = None  # set in a predicate, where q, k and their attributes exist


def _describe(t: ParamType) -> str:
    if t.depth == 0:
        return f"an {t.elem}" if t.elem == "int" else f"a {t.elem}"
    return f"a {'list' if t.depth == 1 else 'table'} {t}"


def _param_type(p: ParamDef) -> ParamType:
    return ParamType(p.type.elem, p.type.depth)


def _item_text(item: AllSegments | SegmentRef) -> str:
    if isinstance(item, AllSegments):
        return "*"
    return item.name.text + (f"[{item.index.text}]" if item.index else "")


def _length(value: ListLit | ValueList) -> int:
    return len(value.values) if isinstance(value, ValueList) else len(value.items)


def _side_text(side: Side) -> str:
    return "|".join(_item_text(item) for item in side.items)


class _Checker:
    def __init__(self, ast: MaskFile):
        self.ast = ast
        self.diagnostics: list[Diagnostic] = []
        self.not_shown = 0  # problems found but not reported (check_values)
        self.params: dict[str, ParamDef] = {}
        self.segments: dict[str, SegmentDef] = {}
        # Every name used as an index variable anywhere, to tell "unbound here" from "unknown".
        self.index_var_names = {s.index.text for s in ast.segments if isinstance(s, FamilySegment)} | {
            item.index.text
            for rule in ast.rules
            for side in (rule.q, rule.k)
            for item in side.items
            if not isinstance(item, AllSegments) and item.index is not None
        }

    def run(self) -> list[Diagnostic]:
        for p in self.ast.params:
            self.check_param(p)
        if not self.ast.segments:
            self.report(self.ast.name.span, f"mask '{self.ast.name.text}' has no segments",
                        "the sequence is cut into at least one, in the segments: section (`S = n`)")
        for segment in self.ast.segments:
            self.check_segment(segment)
        for name in self.ast.local_names:
            self.check_local_name(name)
        for rule in self.ast.rules:
            self.check_rule(rule)
        if len(self.ast.rules) > MAX_RULES:
            self.report(self.ast.rules[MAX_RULES].span, f"too many rules: a mask has at most {MAX_RULES:,} rules",
                        "the passes merge rules with the same predicate; at most 31 may remain")
        for line in self.ast.batch:
            self.check_batch_line(line)
        return self.diagnostics

    def report(self, span: Span, message: str, *notes: str) -> None:
        self.diagnostics.append(Diagnostic(span, message, notes=notes))

    def report_unknown(self, name: Name, kind: str, candidates, *notes: str) -> None:
        close = difflib.get_close_matches(name.text, sorted(candidates), n=1)
        self.report(name.span, f"unknown {kind} '{name.text}'", *(f"did you mean '{c}'?" for c in close), *notes)

    # ---- parameters and values

    def check_param(self, p: ParamDef) -> None:
        name = p.name.text
        first = self.params.setdefault(name, p)
        if first is not p:
            where = f"first declared at line {first.name.span.line}, column {first.name.span.col}"
            self.report(p.name.span, f"duplicate parameter '{name}'", where)
            return
        if name in TOKENS:
            self.report(p.name.span, f"'{name}' is the {TOKENS[name]} token and cannot name a parameter")
        if p.type.depth > MAX_LIST_DEPTH:
            self.report(p.type.span, "lists nest at most two deep: [[int]] or [[bool]]")
        elif name == "n" and (p.const or _param_type(p) != INT):
            self.report(p.span, "'n' is the built-in sequence length: declare it as 'n: int' (a runtime int)")
        elif p.default is not None:
            self.check_value(p.default, name, _param_type(p), p.const, f"the default of '{name}'")

    def check_value(self, value: Literal, name: str, expected: ParamType, const: bool, subject: str) -> None:
        """A default or a batch value: a literal of the parameter's type, within its range."""
        value_range = N_RANGE if name == "n" else CONST_INT_RANGE if const else RUNTIME_INT_RANGE
        self.check_literal(value, expected, subject, value_range)

    def check_literal(self, value: Literal, expected: ParamType, subject: str, value_range) -> None:
        found = {IntLit: INT, BoolLit: BOOL}.get(type(value))
        if expected.depth == 0 or found is not None:
            if found != expected:
                kind = _describe(found) if found else "a list"
                self.report(value.span, f"wrong type in {subject}: expected {_describe(expected)}, found {kind}")
            elif isinstance(value, IntLit) and not value_range[0] <= value.value < value_range[1]:
                self.report(value.span, f"{value.value} is out of range for {subject}: it must lie in {value_range[2]}")
            return
        element = ParamType(expected.elem, expected.depth - 1)
        if isinstance(value, ValueList):
            self.check_values(value, element, subject, value_range)
            return
        for item in value.items:
            self.check_literal(item, element, subject, value_range)
        rows = [(item, _length(item)) for item in value.items if isinstance(item, (ListLit, ValueList))]
        if element.depth == 1 and rows:
            width = rows[0][1]
            for row, length in rows[1:]:
                if length != width:
                    self.report(
                        row.span,
                        f"the rows of {subject} differ in length: this one has {length}, the first {width}",
                    )

    def check_values(self, value: ValueList, element: ParamType, subject: str, value_range) -> None:
        """The elements of a list written flat, as `check_literal` checks those of a `ListLit`. The bad ones are
        found among the plain values; only they become literals (with their positions) for the messages."""
        wanted = {INT: int, BOOL: bool}.get(element)
        lo, hi = value_range[0], value_range[1]
        values = value.values
        if set(map(type, values)) == {wanted} and (wanted is bool or lo <= min(values) <= max(values) < hi):
            return  # the common case, settled at C speed
        bad = [i for i, v in enumerate(values) if type(v) is not wanted or (wanted is int and not lo <= v < hi)]
        shown = set(bad[:MAX_DIAGNOSTICS])  # no more would be shown
        self.not_shown += len(bad) - len(shown)
        for item in value.items(shown):
            self.check_literal(item, element, subject, value_range)

    # ---- segments

    def check_segment(self, segment: SegmentDef) -> None:
        name = segment.name.text
        first = self.segments.setdefault(name, segment)
        if first is not segment:
            where = f"first defined at line {first.name.span.line}"
            self.report(segment.name.span, f"duplicate segment '{name}'", where)
        elif len(self.segments) == MAX_SEGMENT_NAMES + 1:
            self.report(segment.name.span, f"too many segments: a mask has at most {MAX_SEGMENT_NAMES} segment names")

        if isinstance(segment, SingleSegment):
            self.expect(segment.length, INT, _Scope(f"the length of {name}"), "a segment length")
        elif isinstance(segment, FamilySegment):
            var = segment.index.text
            self.check_index_var_name(segment.index)
            if segment.count is not None:
                self.expect(segment.count, INT, _Scope(f"the member count of {name}"), "a member count")
            elif not lists_indexed_by(segment.length, var):
                self.report(
                    segment.index.span,
                    f"cannot tell how many members {name} has: its length indexes no list with '{var}'",
                    f"give the count explicitly: {name}[{var} < COUNT] = ...",
                )
            scope = _Scope(f"the length of {name}", frozenset({var}))
            self.expect(segment.length, INT, scope, "a segment length")
        else:
            if len(segment.dims) not in (2, 3):
                self.report(segment.span, f"a grid has 2 or 3 dimensions, not {len(segment.dims)}")
            for dim in segment.dims:
                self.expect(dim, INT, _Scope(f"the dimensions of {name}"), "a grid dimension")

    def check_local_name(self, name: Name) -> None:
        """A `let` name must not hide another name: inside its `let` every use would mean the local one."""
        text = name.text
        taken = ("a parameter" if text in self.params or text == "n" else
                 "a segment" if text in self.segments else
                 "an index variable" if text in self.index_var_names else
                 f"the {TOKENS[text]} token" if text in TOKENS else
                 "a function" if text in FUNCTIONS else None)
        if taken:
            self.report(name.span, f"local name '{text}' is already {taken}", "choose another name for it")

    def check_index_var_name(self, var: Name) -> None:
        name = var.text
        if name in TOKENS:
            self.report(var.span, f"'{name}' is the {TOKENS[name]} token and cannot name an index variable")
        elif name == "n" or name in self.params:
            what = "the sequence length 'n'" if name == "n" else f"the parameter '{name}'"
            self.report(var.span, f"index variable '{name}' shadows {what}")

    # ---- rules

    def check_rule(self, rule: Rule) -> None:
        bound = {var.text for var in (self.check_side(rule.q), self.check_side(rule.k)) if var is not None}
        if rule.where is not None:
            self.expect(rule.where, BOOL, _Scope("a predicate", frozenset(bound), rule), "a predicate")
        for value in rule.unused_lets:  # a `let` name nothing uses: its expression must still make sense
            self.infer(value, _Scope("a predicate", frozenset(bound), rule))

    def check_side(self, side: Side) -> Name | None:
        """Check one side of a rule; return the index variable it binds, if any."""
        bound = None
        alone = len(side.items) == 1
        for item in side.items:
            if isinstance(item, AllSegments):
                if not alone:
                    self.report(item.span, "'*' already means every segment: it stands alone on its side")
                continue
            segment = self.segments.get(item.name.text)
            if segment is None:
                self.report_unknown(item.name, "segment", self.segments)
            elif item.index is None:
                continue
            elif not isinstance(segment, FamilySegment):
                self.report(item.span, f"'{item.name.text}' is not a family, so it cannot be indexed")
            elif not alone:
                self.report(
                    item.span,
                    f"an indexed family '{_item_text(item)}' stands alone on its side",
                    "write one rule for it and another for the rest of the union",
                )
            else:
                self.check_index_var_name(item.index)
                bound = item.index
        return bound

    # ---- batch

    def check_batch_line(self, line: BatchLine) -> None:
        assigned: set[str] = set()
        for assignment in line.assignments:
            name = assignment.name
            p = self.params.get(name.text)
            if name.text in assigned:
                self.report(name.span, f"'{name.text}' is assigned twice in this batch line")
            elif name.text == "n" and p is None:
                self.check_value(assignment.value, "n", INT, False, "'n'")
            elif p is None:
                runtime = [other.name.text for other in self.params.values() if not other.const]
                self.report_unknown(name, "parameter", [*runtime, "n"])
            elif p.const:
                self.report(
                    name.span,
                    f"'{name.text}' is const: a batch line sets only runtime parameters",
                    "a const parameter is fixed when compiling (maskc compile --param NAME=VALUE)",
                )
            else:
                self.check_value(assignment.value, name.text, _param_type(p), False, f"'{name.text}'")
            assigned.add(name.text)

    # ---- expressions

    def expect(self, e: Expr, expected: ParamType, scope: _Scope, role: str) -> None:
        found = self.infer(e, scope)
        if found is None or found == expected:
            return
        notes = []
        if found.depth and isinstance(e, Name):
            notes.append(f"take an element ({e.text}[...]), len({e.text}) or sum({e.text})")
        elif found == BOOL and expected == INT:
            notes.append("bools and ints do not mix: there is no implicit conversion")
        self.report(e.span, f"{role} must be {_describe(expected)}, not {_describe(found)}", *notes)

    def infer(self, e: Expr, scope: _Scope) -> ParamType | None:
        """The type of `e`, reporting what is wrong inside it; None when it has no sensible type."""
        if isinstance(e, IntLit):
            return INT
        if isinstance(e, BoolLit):
            return BOOL
        if isinstance(e, Name):
            return self.infer_name(e, scope)
        if isinstance(e, Attribute):
            return self.infer_attribute(e, scope)
        if isinstance(e, Subscript):
            return self.infer_subscript(e, scope)
        if isinstance(e, Call):
            return self.infer_call(e, scope)
        if isinstance(e, UnaryOp):
            op = PREFIX[e.op]
            self.expect(e.arg, ParamType(op.operands), scope, f"the operand of '{e.op}'")
            return ParamType(op.result)
        if isinstance(e, BinaryOp):
            return self.infer_arithmetic(e, scope)
        if isinstance(e, Comparison):
            for position, operand in enumerate(e.operands):
                op = e.ops[max(0, position - 1)]
                self.expect(operand, INT, scope, f"an operand of '{op}'")
            return BOOL
        for arg in e.args:  # BoolOp
            self.expect(arg, BOOL, scope, f"an operand of '{e.op}'")
        return BOOL

    def infer_name(self, e: Name, scope: _Scope) -> ParamType | None:
        name = e.text
        if name in scope.index_vars or name == "n":
            return INT
        if name in TOKENS:
            if scope.rule is None:
                self.report(e.span, f"{scope.what} cannot use '{name}': the layout does not depend on the tokens")
                return None
            return INT
        if name in self.params:
            return _param_type(self.params[name])
        if name in self.index_var_names:
            if scope.rule is not None:
                example = self.binding_example(name, scope.rule) or f"R[{name}]"
                message = f"index variable '{name}' is not bound by this rule"
                self.report(e.span, message, f"bind it on a side: {example}")
            else:
                own = [f"its own index variable is '{v}'" for v in scope.index_vars]
                self.report(e.span, f"index variable '{name}' cannot be used in {scope.what}", *own)
            return None
        if name in self.segments:
            self.report(e.span, f"'{name}' is a segment, not a value: segments are named on the sides of a rule")
            return None
        visible = [*self.params, "n", *scope.index_vars, *(TOKENS if scope.rule else ())]
        example = scope.rule and self.binding_example(name, scope.rule)
        hint = [f"if '{name}' is meant as an index variable, bind it on a side: {example}"] if example else []
        self.report_unknown(e, "name", visible, *hint)
        return None

    def binding_example(self, name: str, rule: Rule) -> str | None:
        """`D[name]` for the first family on a side of `rule`: how `name` would become an index variable."""
        families = [
            item.name.text
            for side in (rule.q, rule.k)
            for item in side.items
            if isinstance(item, SegmentRef) and isinstance(self.segments.get(item.name.text), FamilySegment)
        ]
        return f"{families[0]}[{name}]" if families else None

    def infer_attribute(self, e: Attribute, scope: _Scope) -> ParamType | None:
        base, attr = e.base.text, e.attr.text
        if base not in TOKENS:
            self.report(e.span, f"only the tokens q and k have attributes, not '{base}'")
            return None
        if scope.rule is None:
            self.report(e.span, f"{scope.what} cannot use '{base}.{attr}': the layout does not depend on the tokens")
            return None
        if attr not in TOKEN_ATTRIBUTES:
            close = difflib.get_close_matches(attr, TOKEN_ATTRIBUTES, n=1)
            self.report(
                e.attr.span,
                f"unknown attribute '.{attr}'",
                *(f"did you mean '.{c}'?" for c in close),
                "a token has .pos, and on a grid .y .x (2D) or .t .y .x (3D)",
            )
            return None
        if attr in GRID_COORDINATES:
            side = scope.rule.q if base == "q" else scope.rule.k
            grid = self.single_grid(side)
            if grid is None:
                self.report(
                    e.span,
                    f"'{base}.{attr}' is a grid coordinate, but the {base} side '{_side_text(side)}' "
                    "is not exactly one grid segment",
                )
            elif attr == "t" and len(grid.dims) != 3:
                self.report(e.span, f"'{base}.t' needs a 3D grid, but '{grid.name.text}' is {len(grid.dims)}D")
        return INT

    def single_grid(self, side: Side) -> GridSegment | None:
        (item, *others) = side.items
        if others or isinstance(item, AllSegments):
            return None
        segment = self.segments.get(item.name.text)
        return segment if isinstance(segment, GridSegment) else None

    def infer_subscript(self, e: Subscript, scope: _Scope) -> ParamType | None:
        array = self.list_param(e.array, "only a list parameter can be indexed")
        for index in e.indices:
            self.expect(index, INT, scope, "an index")
        if array is None:
            return None
        if len(e.indices) != array.depth:
            self.report(
                e.span,
                f"'{e.array.text}' is {_describe(array)}: it takes {array.depth} "
                f"subscript{'s' if array.depth > 1 else ''}, not {len(e.indices)}",
            )
            return None
        return ParamType(array.elem)

    def list_param(self, name: Name, why: str) -> ParamType | None:
        """The type of the list parameter `name`; None, reporting it, if it is not one."""
        p = self.params.get(name.text)
        if p is not None and p.type.depth > 0:
            return _param_type(p)
        if p is not None or name.text in ("n", *TOKENS, *self.index_var_names, *self.segments):
            self.report(name.span, f"'{name.text}' is not a list: {why}")
        else:
            lists = [other.name.text for other in self.params.values() if other.type.depth > 0]
            self.report_unknown(name, "list", lists)
        return None

    def infer_call(self, e: Call, scope: _Scope) -> ParamType | None:
        func = e.func.text
        if func not in FUNCTIONS:
            self.report_unknown(e.func, "function", FUNCTIONS)
            return None
        fewest, most = FUNCTIONS[func]
        if not fewest <= len(e.args) <= (most or len(e.args)):
            count = f"at least {fewest}" if most is None else str(fewest)
            self.report(e.span, f"{func}() takes {count} argument{'s' if fewest > 1 else ''}, not {len(e.args)}")
            return BOOL if func == "ancestor" else INT
        if func in ("len", "sum", "ancestor"):
            array = self.list_argument(e.args[0], func)
            if array is not None and func != "len" and array != INT_LIST:
                purpose = "adds up" if func == "sum" else "reads the parent indices from"
                message = f"{func}() {purpose} an [int], but '{e.args[0].text}' is {_describe(array)}"
                self.report(e.args[0].span, message)
            for arg in e.args[1:]:
                self.expect(arg, INT, scope, f"an argument of {func}()")
            return BOOL if func == "ancestor" else INT
        for arg in e.args:
            self.expect(arg, INT, scope, f"an argument of {func}()")
        return INT

    def list_argument(self, arg: Expr, func: str) -> ParamType | None:
        if not isinstance(arg, Name):
            self.report(arg.span, f"{func}() takes the name of a list parameter")
            return None
        return self.list_param(arg, f"{func}() takes a list parameter")

    def infer_arithmetic(self, e: BinaryOp, scope: _Scope) -> ParamType:
        if e.op == "^":
            self.expect(e.lhs, INT, scope, "the base of '^'")
            self.check_exponent(e.rhs)
            return INT
        self.expect(e.lhs, INT, scope, f"an operand of '{e.op}'")
        self.expect(e.rhs, INT, scope, f"an operand of '{e.op}'")
        if INFIX[e.op].divides and scope.rule is not None:
            dependence = self.token_dependence(e.rhs, scope)
            if dependence:
                self.report(
                    e.rhs.span,
                    f"the divisor of '{e.op}' depends on the tokens (through '{dependence}')",
                    "a divisor may use parameters and constants, not q, k, their attributes or index variables",
                )
        return INT

    def token_dependence(self, e: Expr, scope: _Scope) -> str | None:
        """The first token value (`q`, `k.y`, an index variable) that `e` depends on, if any."""
        for sub in subexpressions(e):
            if isinstance(sub, Name) and (sub.text in TOKENS or sub.text in scope.index_vars):
                return sub.text
            if isinstance(sub, Attribute):
                return f"{sub.base.text}.{sub.attr.text}"
        return None

    def check_exponent(self, exponent: Expr) -> None:
        try:
            value = fold_constant(exponent)
        except ValueError as why:
            self.report(exponent.span, f"the exponent of '^' has no value: {why}")
            return
        if value is None:
            self.report(
                exponent.span,
                "the exponent of '^' must be a constant",
                "write it with integer literals (x^2); it cannot use parameters or tokens",
            )
        elif value < 0:
            self.report(exponent.span, f"the exponent of '^' must not be negative, but it is {value}")

