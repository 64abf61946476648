"""The intermediate representation: the contract between maskc's stages.

A `Program` is a layout of named segments over one sequence and a list of `Region`s; a (q, k) pair is
visible when any region's q side holds q, its k side holds k, and its predicate is true. Everything is a
frozen, slotted dataclass with tuples for children, so passes cannot mutate what they are given and two
IRs compare by value. Spans are kept for diagnostics but ignored by equality, so a pass can compare
predicates written in different places.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, NamedTuple, Union

from maskc.diagnostics import Source, Span, show_value
from maskc.ir.ops import OPERATORS, Operator, spell

_NOSPAN = field(default=Span.unknown(), compare=False, repr=False, kw_only=True)

# ---------------------------------------------------------------------------------------------------
# Expressions
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Const:
    value: int | bool
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class Param:
    """A scalar parameter, or the built-in sequence length `n`."""

    name: str
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class Token:
    """An attribute of the query or key token.

    attr: `index` (position in the sequence, written `q`), `pos` (position inside its segment, `q.pos`),
    the grid coordinates `t`, `y`, `x` of a token of a grid segment, or `start` / `end`: where the token's
    own segment (its family member) begins and ends. The language has no spelling for the last two; the
    row-intervals analysis introduces them.
    """

    side: str  # "q" | "k"
    attr: str  # "index" | "pos" | "t" | "y" | "x" | "start" | "end"
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class Member:
    """The family index of the segment holding the q (or k) token: `i` in `R[i] -> ...`."""

    side: str
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class FamilyIndex:
    """The member index inside a family's length expression: `i` in `R[i] = responses[i]`."""

    span: Span = _NOSPAN


# The operator nodes: `op` names an entry of maskc.ir.ops.OPERATORS, which says what it means.


@dataclass(frozen=True, slots=True)
class Unary:
    op: str  # "neg" | "not" | "abs"
    arg: "Expr"
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class Binary:
    """Integer arithmetic. `//` and `%` round toward negative infinity, as in Python."""

    op: str  # "+" | "-" | "*" | "//" | "%" | "min" | "max"
    lhs: "Expr"
    rhs: "Expr"
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class Pow:
    base: "Expr"
    exponent: int  # a non-negative constant
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class Compare:
    op: str  # "<" | "<=" | ">" | ">=" | "==" | "!="
    lhs: "Expr"
    rhs: "Expr"
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class Logic:
    op: str  # "and" | "or"
    args: tuple["Expr", ...]
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class Index:
    """An element of a list parameter: `parent[k]`, `layout[q // 64][k // 64]`."""

    array: str
    indices: tuple["Expr", ...]
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class ArrayLen:
    array: str
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class ArraySum:
    array: str
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class SegmentBound:
    """Where a symbolic segment (all members of a family) begins, or ends, in the sequence: a value of the
    sequence alone (introduced by the row-intervals analysis)."""

    segment: str
    end: bool
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class Ancestor:
    """True when `ancestor` is `node` or one of its ancestors in the tree `parent[]` (roots have -1)."""

    array: str
    node: "Expr"
    ancestor: "Expr"
    span: Span = _NOSPAN


Expr = Union[
    Const, Param, Token, Member, FamilyIndex, Unary, Binary, Pow, Compare, Logic, Index, ArrayLen, ArraySum,
    Ancestor, SegmentBound,
]

TRUE = Const(True)
FALSE = Const(False)


def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, (Unary,)):
        return (e.arg,)
    if isinstance(e, (Binary, Compare)):
        return (e.lhs, e.rhs)
    if isinstance(e, Pow):
        return (e.base,)
    if isinstance(e, Logic):
        return e.args
    if isinstance(e, Index):
        return e.indices
    if isinstance(e, Ancestor):
        return (e.node, e.ancestor)
    return ()


def with_children(e: Expr, new: tuple[Expr, ...]) -> Expr:
    if isinstance(e, Unary):
        return replace(e, arg=new[0])
    if isinstance(e, (Binary, Compare)):
        return replace(e, lhs=new[0], rhs=new[1])
    if isinstance(e, Pow):
        return replace(e, base=new[0])
    if isinstance(e, Logic):
        return replace(e, args=tuple(new))
    if isinstance(e, Index):
        return replace(e, indices=tuple(new))
    if isinstance(e, Ancestor):
        return replace(e, node=new[0], ancestor=new[1])
    return e


def clamp(x: Expr, lo: Expr, hi: Expr, span: Span = _NOSPAN) -> Expr:
    """The language's clamp(x, lo, hi): min(max(x, lo), hi)."""
    return Binary("min", Binary("max", x, lo, span=span), hi, span=span)


def signed_terms(e: Expr, sign: int = 1) -> list[tuple[int, Expr]]:
    """`sign * e` as a signed sum of terms: the operands of its + and -, and of unary minus, taken apart."""
    if isinstance(e, Binary) and e.op in ("+", "-"):
        return signed_terms(e.lhs, sign) + signed_terms(e.rhs, sign if e.op == "+" else -sign)
    if isinstance(e, Unary) and e.op == "neg":
        return signed_terms(e.arg, -sign)
    return [(sign, e)]


def signed_sum(terms: list[tuple[int, Expr]], span: Span = _NOSPAN) -> Expr:
    """The signed terms added up: the positive ones, less the negative ones (each sum a `fold`, so a long one
    is a balanced tree); 0 for none."""
    plus, minus = ([t for sign, t in terms if (sign > 0) == positive] for positive in (True, False))
    total = fold("+", plus, span) if plus else None
    if not minus:
        return total if total is not None else Const(0, span=span)
    return Binary("-", total if total is not None else Const(0, span=span), fold("+", minus, span), span=span)


def walk(e: Expr) -> Iterator[Expr]:
    """Every node of `e`, parents before children (and children in order). A loop, not a recursion: a
    generator per level would make a walk cost its depth per node."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def rewrite(e: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """Rebuild `e` bottom-up, applying `fn` to every node after its children were rewritten."""
    kids = children(e)
    if kids:
        new = tuple(rewrite(c, fn) for c in kids)
        if new != kids:
            e = with_children(e, new)
    return fn(e)


class Operation(NamedTuple):
    op: Operator
    args: tuple[Expr, ...]  # the operand expressions
    consts: tuple[int, ...]  # constant operands after them: a power's exponent


def operation(e: Expr) -> Operation | None:
    """An operator node as its table entry and operands; None for any other node."""
    if isinstance(e, (Unary, Binary, Compare, Logic)):
        return Operation(OPERATORS[e.op], children(e), ())
    if isinstance(e, Pow):
        return Operation(OPERATORS["^"], (e.base,), (e.exponent,))
    return None


def conjuncts(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Logic) and e.op == "and":
        return tuple(c for a in e.args for c in conjuncts(a))
    if e == TRUE:
        return ()
    return (e,)


def conjoin(parts: tuple[Expr, ...] | list[Expr], span: Span = Span.unknown()) -> Expr:
    parts = tuple(parts)
    if not parts:
        return TRUE
    if len(parts) == 1:
        return parts[0]
    return Logic("and", parts, span=span)


# A chain of an associative operator with at most this many operands nests from the left, as written; a longer one
# is a balanced tree, so that its depth -- and every recursion over it, in each stage -- is logarithmic.
SHORT_CHAIN = 16


def fold(op: str, parts: tuple[Expr, ...] | list[Expr], span: Span = Span.unknown()) -> Expr:
    """`parts[0] op parts[1] op ...` for an associative operator (`min`, `max`): `op(op(a, b), c)` up to
    `SHORT_CHAIN` parts, a balanced tree past that."""
    if len(parts) <= SHORT_CHAIN:
        out = parts[0]
        for p in parts[1:]:
            out = Binary(op, out, p, span=span)
        return out
    half = len(parts) // 2
    return Binary(op, fold(op, parts[:half], span), fold(op, parts[half:], span), span=span)


def arrays_used(e: Expr) -> set[str]:
    return {n.array for n in walk(e) if isinstance(n, (Index, ArrayLen, ArraySum, Ancestor))}


def params_used(e: Expr) -> set[str]:
    return {n.name for n in walk(e) if isinstance(n, Param)}


def token_difference(e: Expr) -> tuple[Token, Token] | None:
    """(a, b) where `e` is `a - b` of the two tokens' positions (`q - k` or `k - q`); else None."""
    if isinstance(e, Binary) and e.op == "-" and {e.lhs, e.rhs} == {Token("q", "index"), Token("k", "index")}:
        return e.lhs, e.rhs
    return None


def uses_side(e: Expr, side: str) -> bool:
    """Whether `e` reads the q (or k) token at all."""
    return any(isinstance(n, (Token, Member)) and n.side == side for n in walk(e))


def looks_inside(e: Expr, side: str) -> bool:
    """Whether `e` uses segment-relative facts of a side: its position in the segment, grid coordinates,
    or family member."""
    for node in walk(e):
        if isinstance(node, Token) and node.side == side and node.attr != "index":
            return True
        if isinstance(node, Member) and node.side == side:
            return True
    return False


# ---------------------------------------------------------------------------------------------------
# Printing (for `maskc explain` and the comments in generated code)
# ---------------------------------------------------------------------------------------------------


def show(e: Expr, parent: int = 0) -> str:
    """The expression in the language's own syntax, parenthesised only where needed."""
    if isinstance(e, Const):
        return show_value(e.value)
    if isinstance(e, Param):
        return e.name
    if isinstance(e, Token):
        return e.side if e.attr == "index" else f"{e.side}.{e.attr}"
    if isinstance(e, Member):
        return f"{e.side}.member"
    if isinstance(e, FamilyIndex):
        return "i"
    if (o := operation(e)) is not None:
        op = o.op
        texts = [show(a, op.binds[min(i, len(op.binds) - 1)]) for i, a in enumerate(o.args)]
        text = spell(op.show, texts + [str(c) for c in o.consts])
        return f"({text})" if op.prec < parent else text
    if isinstance(e, Index):
        return e.array + "".join(f"[{show(i)}]" for i in e.indices)
    if isinstance(e, ArrayLen):
        return f"len({e.array})"
    if isinstance(e, ArraySum):
        return f"sum({e.array})"
    if isinstance(e, Ancestor):
        return f"ancestor({e.array}, {show(e.node)}, {show(e.ancestor)})"
    if isinstance(e, SegmentBound):
        return f"{'end' if e.end else 'start'}({e.segment})"
    raise TypeError(f"not an expression: {e!r}")


# ---------------------------------------------------------------------------------------------------
# Program structure
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParamType:
    elem: str  # "int" | "bool"
    depth: int = 0  # 0: scalar, 1: list, 2: list of lists

    def __str__(self) -> str:
        return "[" * self.depth + self.elem + "]" * self.depth


@dataclass(frozen=True, slots=True)
class ParamDecl:
    name: str
    type: ParamType
    const: bool = False
    default: object = None  # int | bool | tuple (lists are tuples) | None
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class Segment:
    """One entry of the layout. Segments are laid out in declaration order and tile [0, n) exactly.

    kind "single": `length` tokens. kind "family": `count` members, member i has `length` tokens
    (an expression in `FamilyIndex`), laid out back to back. kind "grid": `dims` = (h, w) or (t, h, w),
    row-major, `h*w` (or `t*h*w`) tokens with coordinates.
    """

    name: str
    kind: str
    length: Expr | None = None
    count: Expr | None = None
    dims: tuple[Expr, ...] = ()
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class Side:
    """The segments one side of a region covers, in layout order."""

    segments: tuple[str, ...]
    span: Span = _NOSPAN


@dataclass(frozen=True, slots=True)
class RowIntervals:
    """A region as intervals of keys per query row: (q, k) is visible iff q is on the region's q side,
    `row` holds (it reads q's side only) and lo <= k < hi, where lo and hi depend on q and the sequence only.
    Equivalent to the region's sides and predicate; the kernel tests a key with two comparisons."""

    row: Expr
    lo: Expr
    hi: Expr


@dataclass(frozen=True, slots=True)
class Region:
    q: Side
    k: Side
    pred: Expr
    rule: str = field(default="", compare=False)  # the source rule(s), for comments and `explain`
    span: Span = _NOSPAN
    rows: RowIntervals | None = None  # set by the row-intervals pass where the region has that form


@dataclass(frozen=True, slots=True)
class Program:
    name: str
    params: tuple[ParamDecl, ...]
    segments: tuple[Segment, ...]
    regions: tuple[Region, ...]
    batch: tuple[tuple[tuple[str, object], ...], ...] = ()  # default jagged batch: per sequence (name, value)
    consts: tuple[tuple[str, object], ...] = ()  # values bound to `const` parameters for this compile
    source: Source | None = field(default=None, compare=False, repr=False)
    span: Span = _NOSPAN  # the mask's name in its header, where the implicit `n` is reported when it has no declaration

    def param(self, name: str) -> ParamDecl | None:
        return next((p for p in self.params if p.name == name), None)

    def segment(self, name: str) -> Segment:
        return next(s for s in self.segments if s.name == name)

    def segment_index(self, name: str) -> int:
        return next(i for i, s in enumerate(self.segments) if s.name == name)

    @property
    def runtime_params(self) -> tuple[ParamDecl, ...]:
        return tuple(p for p in self.params if not p.const and p.name != "n")


def is_row_remainder(program: Program, segment: int) -> bool:
    """Whether segment `segment` is the partial last row of the 2D grid before it: `L % W` after
    `grid(L // W, W)`, fewer tokens than one row (as passes/residue_grid.py lays out a segment whose length is
    not known to be whole rows)."""
    seg = program.segments[segment]
    if segment == 0 or seg.kind != "single" or not (isinstance(seg.length, Binary) and seg.length.op == "%"):
        return False
    grid = program.segments[segment - 1]
    whole, width = seg.length.lhs, seg.length.rhs
    return grid.kind == "grid" and grid.dims == (Binary("//", whole, width), width)


# The largest family a layout may expand to (a limit of the language, checked when values are bound).
MAX_FAMILY_MEMBERS = 2**24


def layout_uses_n(program: Program) -> bool:
    """Whether the layout reads `n` (else it fixes the length itself, and `n` may be left out)."""
    exprs = [e for s in program.segments for e in (s.length, s.count, *s.dims) if e is not None]
    return any("n" in params_used(e) for e in exprs)
