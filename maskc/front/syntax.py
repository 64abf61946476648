"""The syntax of `.mask` files: the AST, and `parse` to build it.

`grammar/mask.lark` is parsed by Lark (LALR, basic lexer, so keywords are reserved everywhere). The tree
Lark builds is then walked into the frozen dataclasses below, each carrying the `Span` of its source
text. Lark's exceptions never escape: they become `MaskError`s that name the unexpected token in words
and say what would have been accepted.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import re
import sys
from dataclasses import dataclass
from typing import Container, Iterator, Union

import lark
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from maskc import __version__, gcpause
from maskc.cache import cache_dir, read_entry, write_entry
from maskc.diagnostics import Diagnostic, MaskError, Source, Span, error, nested_too_deeply
from maskc.ir import SHORT_CHAIN
from maskc.resources import resource_dir

# What the front end reads at most (docs/language.md, Limits). Past a limit a file is refused at once, with a
# message that names it, before the work that would grow with it: parsing costs some 20 us a token, and each
# later stage some more per expression node.
MAX_FILE_BYTES = 16 * 2**20
MAX_TOKENS = 200_000  # names, numbers, symbols and line ends; a list of numbers or bools written out is one
MAX_NODES = 200_000  # expression nodes in all, a `let` name counted as its expression wherever it is used

KEYWORDS = frozenset(
    "mask segments rules batch where full causal diag grid and or not true false const int bool let in".split()
)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# ---------------------------------------------------------------------------------------------------
# The AST
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Name:
    """An identifier as written: in a declaration, or as a reference in an expression."""

    text: str
    span: Span


@dataclass(frozen=True, slots=True)
class IntLit:
    value: int
    span: Span


@dataclass(frozen=True, slots=True)
class BoolLit:
    value: bool
    span: Span


@dataclass(frozen=True, slots=True)
class ListLit:
    """A list literal, only in defaults and batch lines: `[1, 2]`, `[[true], [false]]`, `[]`."""

    items: tuple["Literal", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class ValueList:
    """A list of numbers and bools written out flat, `[1, -2, 3]` (two or more elements; grammar/mask.lark,
    VALUES). It means what the `ListLit` of the same text means, but the lexer reads it as one token and it
    keeps its elements as plain values: a default of a million numbers costs a tuple of a million ints, not
    a million nodes and two million tokens. `items()` makes the literals, with their positions, when a
    message needs them."""

    values: tuple[int | bool, ...]
    text: str  # as written, from '[' to ']'
    span: Span

    def items(self, wanted: Container[int] | None = None) -> Iterator[IntLit | BoolLit]:
        """The elements (those at the indices `wanted`, or all) as `list_literal` reads them: the same literals,
        and the same errors at the same places."""
        line, line_start = self.span.line, -(self.span.col - 1)  # the offset in `text` of the line's column 1
        scanned = 0
        for i, m in enumerate(_ELEMENT.finditer(self.text)):
            if wanted is not None and i not in wanted:
                continue
            breaks = self.text.count("\n", scanned, m.start())
            if breaks:
                line += breaks
                line_start = self.text.rindex("\n", scanned, m.start()) + 1
            scanned = m.start()
            word = m.group()
            span = Span(line, m.start() - line_start + 1, line, m.end() - line_start + 1)
            if word in _BOOLS:
                yield BoolLit(_BOOLS[word], span)
            else:
                negative = word.startswith("-")
                yield _integer(word[1:] if negative else word, span, negative)


Literal = Union[IntLit, BoolLit, ListLit, ValueList]


@dataclass(frozen=True, slots=True)
class Attribute:
    """`q.pos`, `k.y`: an attribute of a token (the checker makes sure `base` is `q` or `k`)."""

    base: Name
    attr: Name
    span: Span


@dataclass(frozen=True, slots=True)
class Call:
    """A built-in function: `abs min max clamp len sum ancestor`."""

    func: Name
    args: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Subscript:
    """An element of a list parameter: `docs[i]`, `layout[q // 128][k // 128]`."""

    array: Name
    indices: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True, slots=True)
class UnaryOp:
    op: str  # "-" | "not"
    arg: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class BinaryOp:
    op: str  # "+" | "-" | "*" | "//" | "%" | "^"
    lhs: "Expr"
    rhs: "Expr"
    span: Span


@dataclass(frozen=True, slots=True)
class Comparison:
    """A chain `operands[0] ops[0] operands[1] ops[1] operands[2] ...`, at least one operator."""

    operands: tuple["Expr", ...]
    ops: tuple[str, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class BoolOp:
    op: str  # "and" | "or"
    args: tuple["Expr", ...]
    span: Span


Expr = Union[IntLit, BoolLit, Name, Attribute, Call, Subscript, UnaryOp, BinaryOp, Comparison, BoolOp]


def children(e: Expr) -> tuple[Expr, ...]:
    """The expressions directly inside `e`. The list named by a `Subscript` is not an expression of its own;
    a list passed to `len`, `sum` or `ancestor` is."""
    if isinstance(e, (Call, BoolOp)):
        return e.args
    if isinstance(e, Subscript):
        return e.indices
    if isinstance(e, UnaryOp):
        return (e.arg,)
    if isinstance(e, BinaryOp):
        return (e.lhs, e.rhs)
    if isinstance(e, Comparison):
        return e.operands
    return ()


def subexpressions(e: Expr) -> Iterator[Expr]:
    """`e` and every expression inside it, parents first."""
    stack = [e]  # a loop, not a recursion: see ir.walk
    while stack:
        e = stack.pop()
        yield e
        stack.extend(reversed(children(e)))


def tree_size(e: Expr) -> int:
    """The nodes of `e` written out as a tree. A `let` makes every use of a name share its expression, which the
    later stages copy, so each use counts; the count visits each shared subtree once, so it costs the shared size."""
    sizes: dict[int, int] = {}

    def size(x: Expr) -> int:
        n = sizes.get(id(x))
        if n is None:
            n = sizes[id(x)] = 1 + sum(map(size, children(x)))
        return n

    return size(e)


@dataclass(frozen=True, slots=True)
class TypeRef:
    elem: str  # "int" | "bool"
    depth: int  # 0: scalar, 1: list, 2: list of lists (deeper parses, and the checker refuses it)
    span: Span


@dataclass(frozen=True, slots=True)
class ParamDef:
    name: Name
    type: TypeRef
    const: bool
    default: Literal | None
    span: Span


@dataclass(frozen=True, slots=True)
class SingleSegment:
    """`P = n - sum(responses)`."""

    name: Name
    length: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class FamilySegment:
    """`R[i] = responses[i]`, or `B[i < m] = 64` with an explicit member count."""

    name: Name
    index: Name
    count: Expr | None
    length: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class GridSegment:
    """`I = grid(h, w)` or `V = grid(t, h, w)`."""

    name: Name
    dims: tuple[Expr, ...]
    span: Span


SegmentDef = Union[SingleSegment, FamilySegment, GridSegment]


@dataclass(frozen=True, slots=True)
class AllSegments:
    """`*`: every segment."""

    span: Span


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """A segment named on a side: `P`, a whole family `R`, or one member `R[i]`, which binds `i`."""

    name: Name
    index: Name | None
    span: Span


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a rule: the union of its items (`C|H`)."""

    items: tuple[AllSegments | SegmentRef, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Rule:
    q: Side
    k: Side
    shape: Name | None  # "full" | "causal" | "diag"; the grammar requires a shape, a `where`, or both
    where: Expr | None
    span: Span
    unused_lets: tuple[Expr, ...] = ()  # what `let` names in `where` bind but nothing uses: checked all the same


@dataclass(frozen=True, slots=True)
class Assignment:
    name: Name
    value: Literal
    span: Span


@dataclass(frozen=True, slots=True)
class BatchLine:
    assignments: tuple[Assignment, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class MaskFile:
    name: Name
    params: tuple[ParamDef, ...]
    segments: tuple[SegmentDef, ...]
    rules: tuple[Rule, ...]
    batch: tuple[BatchLine, ...]
    span: Span
    local_names: tuple[Name, ...] = ()  # every name a `let` binds (already substituted), for the checker


# ---------------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------------


def parse(text: str, path: str = "<mask>") -> MaskFile:
    """The AST of a `.mask` file; a syntax error raises `MaskError`, reported under `path`."""
    source = Source(path, text)
    if len(text) > MAX_FILE_BYTES:
        raise MaskError(too_large(len(text), "characters"), source)
    try:
        with gcpause.paused():
            tree = _parser().parse(text)
    except UnexpectedInput as e:
        raise _syntax_error(e, text).with_source(source) from None
    except MaskError as e:  # too many tokens (_LineBreaks)
        raise e.with_source(source) from None
    try:
        with gcpause.paused():
            return _Builder().build(tree)
    except MaskError as e:
        raise e.with_source(source) from None
    except RecursionError as e:
        raise nested_too_deeply(e, source) from None


def too_large(size: int, unit: str) -> Diagnostic:
    """The message for a file over MAX_FILE_BYTES (`size` is in `unit`, bytes or characters)."""
    return Diagnostic(Span.unknown(), f"this file is too large: {size:,} {unit}, more than the "
                      f"{MAX_FILE_BYTES // 2**20} MiB a mask file may have", notes=(_RUNTIME_VALUES,))


_RUNTIME_VALUES = ("give long lists as runtime values instead (maskc run --param NAME=[...], or "
                   "attention(q, k, v, NAME=...))")


_LARK_OPTIONS = {"parser": "lalr", "lexer": "basic", "propagate_positions": True, "maybe_placeholders": False}


@functools.cache
def _parser() -> lark.Lark:
    """The LALR parser, its tables kept in maskc's cache: building them is most of a new process's first
    parse. The entry is named by what the tables depend on and checked against its sha256 (maskc.cache),
    so a stale or damaged file is never loaded."""
    grammar = (resource_dir("grammar") / "mask.lark").read_text(encoding="utf-8")
    if sys.version_info < (3, 11):  # possessive repeats (VALUES) are Python 3.11's: a plain one matches the same
        grammar = grammar.replace(")++", ")+")  # lists, with a backtracking stack as long as the list
    key = hashlib.sha256("\0".join([__version__, lark.__version__, repr(_LARK_OPTIONS), grammar]).encode())
    entry = cache_dir() / "front" / f"{key.hexdigest()}.lark"
    saved = read_entry(entry)
    if saved is not None:
        try:
            return lark.Lark.load(io.BytesIO(saved))
        except Exception:  # intact, but saved by other code (the postlexer is pickled by name): build anew
            pass
    parser = lark.Lark(grammar, postlex=_LineBreaks(), **_LARK_OPTIONS)
    tables = io.BytesIO()
    parser.save(tables)
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs time
        write_entry(entry, tables.getvalue())
    return parser


class _LineBreaks:
    """Lark postlexer: keeps a newline token only where it ends a line of the grammar.

    Newlines inside ( ) and [ ] are dropped (a line may be broken there), blank and comment-only lines
    collapse into one, and the last line is ended even when the file is not. A newline token is moved
    right after the token it follows, so "unexpected end of line" points there and not past a comment.
    """

    always_accept = ("_NL",)

    def process(self, stream: Iterator[lark.Token]) -> Iterator[lark.Token]:
        depth = 0
        last = None
        newline_pending = False
        for count, token in enumerate(stream, 1):
            if count > MAX_TOKENS:
                raise error(Span(token.line, token.column, token.end_line, token.end_column),
                            f"this file is too long: a mask has at most {MAX_TOKENS:,} tokens (names, numbers, "
                            "symbols and line ends)", "a list of numbers or bools written out counts as one token",
                            _RUNTIME_VALUES)
            if token.type == "_NL":
                newline_pending = newline_pending or (depth == 0 and last is not None)
                continue
            if newline_pending:
                yield _newline_after(last)
                newline_pending = False
            if token.type in _OPENING:
                depth += 1
            elif token.type in _CLOSING:
                depth = max(0, depth - 1)
            yield token
            last = token
        if last is not None:
            yield _newline_after(last)


_OPENING = {"LPAR": "(", "LSQB": "["}
_CLOSING = {"RPAR": ")", "RSQB": "]"}


def _newline_after(token: lark.Token) -> lark.Token:
    line, col, pos = token.end_line, token.end_column, token.end_pos
    return lark.Token("_NL", "\n", pos, line, col, line, col, pos)


def _span(node: lark.Tree | lark.Token) -> Span:
    """The source extent of a parse-tree node, without parentheses around it."""
    if isinstance(node, lark.Token):
        return Span(node.line, node.column, node.end_line, node.end_column)
    m = node.meta
    return Span(m.line, m.column, m.end_line, m.end_column)


def _operand_span(node: lark.Tree | lark.Token) -> Span:
    """The extent of an operand, including parentheses around it: `(a + b)` in `(a + b) * c`."""
    if isinstance(node, lark.Token) or not hasattr(node.meta, "container_line"):
        return _span(node)
    m = node.meta
    return Span(m.container_line, m.container_column, m.container_end_line, m.container_end_column)


def _name(token: lark.Token) -> Name:
    return Name(str(token), _span(token))


_INTEGER = re.compile(r"[0-9]+(_[0-9]+)*")
_ELEMENT = re.compile(r"-?[A-Za-z0-9_]+")  # an element of a VALUES token: a number, maybe negative, true or false
_BOOLS = {"true": True, "false": False}


def _integer(token: lark.Token, span: Span, negative: bool = False) -> IntLit:
    if not _INTEGER.fullmatch(token):
        hint = "write decimal digits, with '_' only between digits (32_768)"
        raise error(span, f"malformed integer literal '{token}'", hint)
    value = -int(token) if negative else int(token)  # int() accepts the '_' separators
    if not INT64_MIN <= value <= INT64_MAX:
        raise error(span, f"integer literal {'-' if negative else ''}{token} does not fit in 64 bits")
    return IntLit(value, span)


def _value_list(token: lark.Token, span: Span) -> ValueList:
    """A VALUES token as a `ValueList`, without a node per element. A bad element (a malformed number, one
    outside 64 bits) is found among the plain values, then made a literal, which reports it where it is."""
    text = str(token)
    inner = text[1:-1].rstrip()
    inner = inner[:-1] if inner.endswith(",") else inner  # a trailing comma
    values = _plain_values(inner)
    if len(values) == inner.count(",") + 1 and INT64_MIN <= min(values) and max(values) <= INT64_MAX:
        return ValueList(tuple(values), text, span)
    bad = next((i for i, v in enumerate(values) if not INT64_MIN <= v <= INT64_MAX), len(values))
    next(ValueList((), text, span).items({bad}))  # raises the MaskError of that element
    raise AssertionError(f"element {bad} of a list is not bad after all")


def _plain_values(inner: str) -> list[int | bool]:
    """The elements of a VALUES token, up to the first that is not a number, `true` or `false`. int() takes the
    whitespace around a number and '_' between its digits, as `_INTEGER` does."""
    values: list[int | bool] = []
    try:
        for parts in _pieces(inner):
            values.extend(map(int, parts))  # the common case, at C speed
        return values
    except ValueError:  # bools, or a malformed number: element by element
        values = []
    try:
        for parts in _pieces(inner):
            for part in map(str.strip, parts):
                values.append(_BOOLS[part] if part in _BOOLS else int(part))
    except ValueError:
        pass
    return values


def _pieces(inner: str, size: int = 1 << 16) -> Iterator[list[str]]:
    """`inner.split(",")`, a piece at a time: a million strings at once would be most of what a long list costs."""
    start = 0
    while start <= len(inner):
        end = inner.find(",", start + size)
        end = len(inner) if end < 0 else end
        yield inner[start:end].split(",")
        start = end + 1


class _Builder:
    """Walks Lark's parse tree into the AST. One method per rule (or alias) of the grammar."""

    def __init__(self):
        self.local_names: list[Name] = []
        self.unused_lets: list[Expr] = []  # bindings no later binding nor the body uses (substituted), in order
        self.nodes = 0  # in the expressions built so far, against MAX_NODES

    def expression(self, tree) -> Expr:
        """A whole expression (a length, a member count, a grid dimension, a predicate), counted."""
        e = self.build(tree)
        self.nodes += tree_size(e)
        if self.nodes > MAX_NODES:
            raise error(e.span, f"the expressions of this mask are too large: more than {MAX_NODES:,} nodes in all",
                        "a local name (let) counts as its expression wherever it is used")
        return e

    def build(self, tree: lark.Tree):
        return getattr(self, tree.data)(tree)

    def build_all(self, trees) -> tuple:
        return tuple(self.build(t) for t in trees)

    # ---- file structure

    def start(self, tree):
        header, segments, rules, *batch = tree.children
        name_token, *params = header.children
        return MaskFile(
            name=_name(name_token),
            params=self.build_all(params[0].children) if params else (),
            segments=self.build_all(segments.children),
            rules=self.build_all(rules.children),
            batch=self.build_all(batch[0].children) if batch else (),
            span=_span(tree),
            local_names=tuple(self.local_names),
        )

    def param(self, tree):
        children = list(tree.children)
        const = children[0].type == "CONST"
        if const:
            children.pop(0)
        name, type_tree, *default = children
        default_value = self.build(default[0]) if default else None
        return ParamDef(_name(name), self.build(type_tree), const, default_value, _span(tree))

    def int_type(self, tree):
        return TypeRef("int", 0, _span(tree))

    def bool_type(self, tree):
        return TypeRef("bool", 0, _span(tree))

    def list_type(self, tree):
        inner = self.build(tree.children[0])
        return TypeRef(inner.elem, inner.depth + 1, _span(tree))

    def int_literal(self, tree):
        return _integer(tree.children[0], _span(tree))

    def negative_int_literal(self, tree):
        return _integer(tree.children[1], _span(tree), negative=True)

    def true(self, tree):
        return BoolLit(True, _span(tree))

    def false(self, tree):
        return BoolLit(False, _span(tree))

    def list_literal(self, tree):
        return ListLit(self.build_all(tree.children), _span(tree))

    def value_list(self, tree):
        return _value_list(tree.children[0], _span(tree))

    def single_segment(self, tree):
        name, length = tree.children
        return SingleSegment(_name(name), self.expression(length), _span(tree))

    def family_segment(self, tree):
        name, index, length = tree.children
        return FamilySegment(_name(name), _name(index), None, self.expression(length), _span(tree))

    def counted_family_segment(self, tree):
        name, index, _less_than, count, length = tree.children
        return FamilySegment(_name(name), _name(index), self.expression(count), self.expression(length),
                             _span(tree))

    def grid_segment(self, tree):
        name, *dims = tree.children
        return GridSegment(_name(name), tuple(map(self.expression, dims)), _span(tree))

    def rule(self, tree):
        q, k, *rest = tree.children
        shape = next((_name(t.children[0]) for t in rest if t.data == "shape"), None)
        first_unused = len(self.unused_lets)
        where = next((self.expression(t.children[0]) for t in rest if t.data == "where"), None)
        unused = tuple(self.unused_lets[first_unused:])
        del self.unused_lets[first_unused:]
        return Rule(self.build(q), self.build(k), shape, where, _span(tree), unused)

    def side(self, tree):
        return Side(self.build_all(tree.children), _span(tree))

    def all_segments(self, tree):
        return AllSegments(_span(tree))

    def segment_ref(self, tree):
        return SegmentRef(_name(tree.children[0]), None, _span(tree))

    def indexed_ref(self, tree):
        name, index = tree.children
        return SegmentRef(_name(name), _name(index), _span(tree))

    def batch_line(self, tree):
        return BatchLine(self.build_all(tree.children), _span(tree))

    def assignment(self, tree):
        name, value = tree.children
        return Assignment(_name(name), self.build(value), _span(tree))

    # ---- expressions

    def or_expr(self, tree):
        return BoolOp("or", self.build_all(tree.children), _span(tree))

    def and_expr(self, tree):
        return BoolOp("and", self.build_all(tree.children), _span(tree))

    def not_op(self, tree):
        return UnaryOp("not", self.build(tree.children[0]), _span(tree))

    def comparison(self, tree):
        operands, ops = tree.children[0::2], tree.children[1::2]
        return Comparison(self.build_all(operands), tuple(str(op) for op in ops), _span(tree))

    def sum(self, tree):
        return self._left_associative(tree)

    def product(self, tree):
        return self._left_associative(tree)

    def _left_associative(self, tree):
        """`a - b + c` is `(a - b) + c`; each node spans its own operands. A chain longer than `SHORT_CHAIN`
        is grouped as a balanced tree instead, with the same value (see `_balanced`), so that its depth -- and
        every recursion over it, in each stage -- is logarithmic in its length."""
        operands = [(self.build(x), _operand_span(x)) for x in tree.children[0::2]]
        ops = [str(op) for op in tree.children[1::2]]
        if len(operands) > SHORT_CHAIN:
            return _balanced(operands, ops)
        result, span = operands[0]
        for op, (operand, operand_span) in zip(ops, operands[1:]):
            span = span.merge(operand_span)
            result = BinaryOp(op, result, operand, span)
        return result

    def negate(self, tree):
        operand = tree.children[1]
        if isinstance(operand, lark.Tree) and operand.data == "int_literal":
            # `-5` is one literal, so that -2^63 can be written although 2^63 does not fit.
            return _integer(operand.children[0], _span(tree), negative=True)
        return UnaryOp("-", self.build(operand), _span(tree))

    def pow(self, tree):
        base, exponent = tree.children
        return BinaryOp("^", self.build(base), self.build(exponent), _span(tree))

    def name(self, tree):
        return Name(str(tree.children[0]), _span(tree))

    def attribute(self, tree):
        base, attr = tree.children
        return Attribute(_name(base), _name(attr), _span(tree))

    def call(self, tree):
        func, *args = tree.children
        return Call(_name(func), self.build_all(args), _span(tree))

    def subscript(self, tree):
        array, *indices = tree.children
        return Subscript(_name(array), self.build_all(indices), _span(tree))

    def _substitute_unused(self, start: int, end: int, env: dict[str, Expr]) -> None:
        for i in range(start, end):
            self.unused_lets[i] = substitute(self.unused_lets[i], env)

    def let_expr(self, tree):
        """The body with each local name replaced by its definition (which keeps its own span, so that a
        problem inside it is reported where it is written). A binding sees the bindings before it."""
        *bindings, body = tree.children
        names = [str(binding.children[0]) for binding in bindings]
        # Unused bindings of inner lets, recorded while building each value and the body, see the names that
        # value (or the body) sees: substituted below with the bindings before it (or all of them).
        marks, values = [len(self.unused_lets)], []
        for binding in bindings:
            values.append(self.build(binding.children[1]))
            marks.append(len(self.unused_lets))
        body_expr = self.build(body)
        marks.append(len(self.unused_lets))
        env: dict[str, Expr] = {}
        unused = []
        for i, (binding, value) in enumerate(zip(bindings, values)):
            self._substitute_unused(marks[i], marks[i + 1], env)
            self.local_names.append(_name(binding.children[0]))
            env[names[i]] = substitute(value, env)
            if not any(uses(names[i], later) for later in (*values[i + 1:], body_expr)):
                unused.append(env[names[i]])  # substitution drops it: the checker still reads it
        self._substitute_unused(marks[-2], marks[-1], env)
        self.unused_lets.extend(unused)
        result = substitute(body_expr, env)
        # Names used twice in each binding double the result with each: refused here, before anything walks it.
        if tree_size(result) > MAX_NODES:
            raise error(_span(tree), f"this expression is too large: more than {MAX_NODES:,} nodes with its local "
                        "names replaced by their expressions")
        return result


def _balanced(operands: list[tuple[Expr, Span]], ops: list[str]) -> Expr:
    """A long chain `x0 op1 x1 op2 x2 ...` as a balanced tree, operands in their order, with the same value.

    A sum is split in halves, each written relative to the sign of its first operand: `a - b - c + d` is
    `(a - b) - (c - d)`. A product balances each run of `*`, and applies `//` and `%` from the left, since they
    do not associate: `a * b // c * d * e` is `(a * b) // c * (d * e)`. Each node spans its operands."""

    def apply(op: str, lhs: tuple[Expr, Span], rhs: tuple[Expr, Span]) -> tuple[Expr, Span]:
        span = lhs[1].merge(rhs[1])
        return BinaryOp(op, lhs[0], rhs[0], span), span

    if ops[0] in "+-":
        signs = ["+", *ops]

        def grouped(lo: int, hi: int) -> tuple[Expr, Span]:  # operands lo..hi-1, signs relative to signs[lo]
            if hi - lo == 1:
                return operands[lo]
            mid = (lo + hi) // 2
            return apply("+" if signs[mid] == signs[lo] else "-", grouped(lo, mid), grouped(mid, hi))

        return grouped(0, len(operands))[0]

    def product(run: list[tuple[Expr, Span]]) -> tuple[Expr, Span]:
        half = len(run) // 2
        return run[0] if len(run) == 1 else apply("*", product(run[:half]), product(run[half:]))

    runs: list[tuple[str, list[tuple[Expr, Span]]]] = [("", [operands[0]])]  # runs of `*`, after a division
    for op, operand in zip(ops, operands[1:]):
        if op == "*":
            runs[-1][1].append(operand)
        else:
            runs.append((op, [operand]))
    result = product(runs[0][1])
    for op, (divisor, *factors) in runs[1:]:
        result = apply(op, result, divisor)
        if factors:
            result = apply("*", result, product(factors))
    return result[0]


def uses(name: str, e: Expr) -> bool:
    """Whether the value `name` occurs in `e` (as `substitute` would replace it)."""
    stack = [e]
    while stack:
        e = stack.pop()
        if isinstance(e, Name):
            if e.text == name:
                return True
        elif isinstance(e, Call):
            stack.extend(e.args)
        elif isinstance(e, Subscript):
            stack.extend(e.indices)
        elif isinstance(e, UnaryOp):
            stack.append(e.arg)
        elif isinstance(e, BinaryOp):
            stack.extend((e.lhs, e.rhs))
        elif isinstance(e, Comparison):
            stack.extend(e.operands)
        elif isinstance(e, BoolOp):
            stack.extend(e.args)
    return False


def substitute(e: Expr, env: dict[str, Expr]) -> Expr:
    """`e` with every `Name` in `env` replaced by its expression. Only values are names here: the list of a
    subscript and the function of a call are not (a local name may not shadow them: the checker says so)."""
    if not env:
        return e
    if isinstance(e, Name):
        return env.get(e.text, e)
    if isinstance(e, Call):
        return Call(e.func, tuple(substitute(a, env) for a in e.args), e.span)
    if isinstance(e, Subscript):
        return Subscript(e.array, tuple(substitute(i, env) for i in e.indices), e.span)
    if isinstance(e, UnaryOp):
        return UnaryOp(e.op, substitute(e.arg, env), e.span)
    if isinstance(e, BinaryOp):
        return BinaryOp(e.op, substitute(e.lhs, env), substitute(e.rhs, env), e.span)
    if isinstance(e, Comparison):
        return Comparison(tuple(substitute(x, env) for x in e.operands), e.ops, e.span)
    if isinstance(e, BoolOp):
        return BoolOp(e.op, tuple(substitute(a, env) for a in e.args), e.span)
    return e  # literals and token attributes (q.y): nothing to replace


# ---------------------------------------------------------------------------------------------------
# Syntax errors in words
# ---------------------------------------------------------------------------------------------------

# Sets of terminals that read better as one phrase in "expected ...". A group applies when the parser
# accepts all of its `trigger` terminals; it then stands for all of its `covers` terminals.
_EXPRESSION_START = {"NAME", "INT", "LPAR", "MINUS", "TRUE", "FALSE", "NOT", "LET"}
_OPERATORS = {"PLUS", "MINUS", "STAR", "FLOORDIV", "MOD", "CIRCUMFLEX", "LT", "LE", "GT", "GE", "EQ", "NE",
              "AND", "OR", "DOT", "LPAR", "LSQB"}  # fmt: skip
_PHRASES = [
    # (phrase, trigger, covers)
    ("an expression", {"NAME", "INT", "LPAR"}, _EXPRESSION_START),
    ("an operator", {"PLUS", "STAR"}, _OPERATORS),
    ("a shape (full, causal, diag)", {"FULL", "CAUSAL", "DIAG"}, {"FULL", "CAUSAL", "DIAG"}),
    ("a type (int, bool, [int], [[int]], ...)", {"INT_TYPE", "BOOL_TYPE"}, {"INT_TYPE", "BOOL_TYPE", "LSQB"}),
    ("a value (a number, true, false or a list)", {"INT", "TRUE", "LSQB"},
     {"INT", "MINUS", "TRUE", "FALSE", "LSQB", "VALUES"}),
]
_TERMINAL_WORDS = {"NAME": "a name", "INT": "a number", "VALUES": "a list", "_NL": "end of line", "$END": "end of file"}
_MAX_EXPECTED = 5  # beyond this, a list of alternatives helps less than silence


def _syntax_error(e: UnexpectedInput, text: str) -> MaskError:
    if isinstance(e, UnexpectedCharacters):
        char = text[e.pos_in_stream]
        span = Span(e.line, e.column, e.line, e.column + 1)
        notes = ["names are ASCII letters, digits and '_'"] if char.isalpha() else []
        return error(span, f"unexpected character {_quote(char)}", *notes)
    if not isinstance(e, UnexpectedToken):  # Lark's LALR parser reports everything else as a token
        return error(Span(e.line, e.column, e.line, e.column), "unexpected end of file")
    token = e.token
    message = f"unexpected {_describe_token(token)}"
    expected = e.accepts or e.expected
    if expected:
        message += _describe_expected(expected)
    notes = []
    if token in KEYWORDS and "NAME" in expected:
        notes.append(f"'{token}' is a keyword and cannot be used as a name")
    # Inside brackets newlines are ignored, so an unclosed bracket shows up as an error lines later.
    notes += [
        f"the '{bracket}' at line {line}, column {col} is not closed"
        for bracket, line, col in _open_brackets(text, token)
        if line < token.line
    ]
    span = Span(token.line, token.column, token.end_line, token.end_column)
    return error(span, message, *notes)


def _quote(char: str) -> str:
    return f"'{char}'" if char.isprintable() else repr(char)


def _describe_token(token: lark.Token) -> str:
    if token.type == "$END":
        return "end of file"
    if token.type == "_NL":
        return "end of line"
    if token.type == "NAME":
        return f"name '{token}'"
    if token.type == "INT":
        return f"number {token}"
    if token.type == "VALUES":  # however long it is, a list is named by its start
        return f"list '{token}'" if len(token) <= 24 else f"list '{token[:20]}...'"
    if token in KEYWORDS:
        return f"keyword '{token}'"
    return f"'{token}'"


def _describe_expected(terminals: set[str]) -> str:
    remaining = set(terminals)
    phrases = []
    for phrase, trigger, covers in _PHRASES:
        if trigger <= remaining:
            phrases.append(phrase)
            remaining -= covers
    for name in sorted(remaining, key=lambda t: (t in ("_NL", "$END"), t)):
        phrases.append(_TERMINAL_WORDS.get(name) or f"'{_parser().get_terminal(name).pattern.value}'")
    if len(phrases) > _MAX_EXPECTED:
        return ""
    if len(phrases) == 1:
        return f"; expected {phrases[0]}"
    return f"; expected {', '.join(phrases[:-1])} or {phrases[-1]}"


def _open_brackets(text: str, error_token: lark.Token) -> list[tuple[str, int, int]]:
    """The brackets still open where the parser stopped: (bracket, line, column), innermost last."""
    stack = []
    for token in _parser().lex(text):
        if token.type not in ("_NL", "$END") and token.start_pos >= error_token.start_pos:
            break
        if token.type in _OPENING:
            stack.append((_OPENING[token.type], token.line, token.column))
        elif token.type in _CLOSING and stack:
            stack.pop()
    return stack
