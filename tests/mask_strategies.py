"""Grammar-aware random `.mask` programs, as hypothesis strategies, with an oracle of their own.

`cases()` draws the *structure* of a program (parameters, segments, rules, expressions: small Python objects
defined here, not maskc's AST or IR), runtime values for a few sequences, and a seed for the cosmetics.
`render()` writes the structure as source text -- random spaces and tabs, comments at the ends of lines and
inside brackets, line breaks inside ( ) and [ ], blank lines, CRLF, redundant parentheses and the fewest
parentheses precedence allows, integer literals with `_`, random names (keyword-like ones included).
`Oracle` evaluates the same structure directly with numpy: the layout of each sequence and the exact
[n, n] mask. It never looks at what maskc made of the text, so maskc's front end, passes, planner and code
generator are all checked against it.

The subset of the language generated, and the semantics the oracle implements (docs/language.md):

- Parameters: int, bool, [int], [bool], [[int]], [[bool]], a parent list for ancestor(); `const` int and
  bool; defaults or not (then every sequence gives the value); `n` declared or not. Values of a sequence
  are its given values, else the defaults; const values are compiled in.
- Segments, laid out back to back in declaration order: `S = EXPR`; families `R[i] = EXPR(i)` (members
  = entries of the lists the expression indexes with a bare `i`; all such lists must have as many entries
  as there are members, with an explicit count too: maskc's rule, which docs/language.md states only for
  `R[i] = EXPR`) and `R[i < COUNT] = EXPR(i)`; grids `grid(h, w)`, `grid(t, h, w)` (row-major).
  Usually one segment mentions `n`: `n - (the other segments' total)`, sometimes after a segment `n // c`;
  the layout tiles `[0, n)` when the values make every length non-negative. A layout without `n` fixes
  the length: n may be left out, or must equal the total. A negative length or count, a member count
  different from a list's length, a missing value: the values are refused (ValueError), never laid out.
- Tokens: q and k are positions in [0, n); `.pos` is the position inside the token's segment (family
  member); on a grid segment of dims (h, w) / (t, h, w), `x = pos % w`, `y = pos // w % h`,
  `t = pos // (w h)`. Coordinates are used only on a side that is exactly one grid segment.
- A rule `Q -> K [shape] [where P]` makes (q, k) visible when q lies in a segment of Q, k in one of K
  (`*` every segment, `A|B` a union, a family name every member, `R[i]` every member binding `i` to the
  member index of that side's token; the same variable on both sides also needs the two members to be the
  same index), the shape holds (`full`; `causal` k <= q; `diag` k == q) and P holds. The mask is the union
  of the rules.
- Expressions: int literals, `true`/`false`, names (parameters, n, q, k, index variables, `let` names),
  `q.pos` etc., unary `-`, `+ - *`, `//` and `%` rounding toward -inf (divisors never depend on tokens and
  are never 0 for the values drawn), `^` with a constant exponent written with literals, `abs`, `min`,
  `max` (2-3 arguments), `clamp(x, lo, hi) = min(max(x, lo), hi)`, `len` (rows of a table), `sum`,
  `list[e]` and `table[e][f]` (0 / false outside), `ancestor(parent, a, b)` (b == a or b an ancestor of
  a; false when a or b is outside the list), comparisons and chains of them (`a < b <= c` is
  `a < b and b <= c`), `not`, `and`, `or`, `let x = e, y = f in body` (each name visible in later bindings
  and in the body; lexical scoping). Arithmetic is exact: every generated expression has a static bound
  below 2^63 (`Gen` keeps one per node, as loose as maskc's range analysis), so int64 evaluation is exact.

`damaged_cases()` damages a generated program once, in a way the language refuses: in its structure (a bool
where an int is needed and the reverse, unknown and unbound names, coordinates off a grid, a divisor or an
exponent that depends on the tokens, subscripts and list functions on the wrong things, wrong arities,
taken names, bad sides, defaults of the wrong type or range, bad types, const lists, a const without a
value, duplicates, layouts that read the tokens, bad batch lines, 64-bit overflow) or in its tokens (a
required token dropped, a token swapped for one of another kind, literals past 64 bits or malformed, stray
characters, unbalanced brackets, a section header missing), and says on which lines the error must be
reported.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

INT, BOOL = "int", "bool"
INT64_MAX = 2**63 - 1
POS = 2**31  # magnitude bound of positions, n, runtime ints, len() and list elements (maskc's static ranges)
MEMBER = 2**24
SUM_BOUND = 2**62  # maskc's static range of sum(list)

# Precedence levels, loosest first (grammar/mask.lark).
LET, OR, AND, NOT, CMP, SUM, PROD, UNARY, POW, ATOM = range(10)

# ---------------------------------------------------------------------------------------------------
# Expressions
# ---------------------------------------------------------------------------------------------------


class Node:
    typ = INT
    prec = ATOM
    bound = 0
    tokens = False  # depends on q, k, their attributes or index variables

    def children(self) -> list[Node]:
        return []


class Lit(Node):
    def __init__(self, value):
        self.value = value
        self.typ = BOOL if isinstance(value, bool) else INT
        self.prec = UNARY if self.typ == INT and value < 0 else ATOM
        self.bound = 0 if self.typ == BOOL else abs(value)


class Ref(Node):
    """A name: kind 'param', 'n', 'token' (q, k), 'index' (an index variable), 'local' (a let name)."""

    def __init__(self, name: str, typ: str, bound: int, kind: str, tokens: bool = False):
        self.name, self.typ, self.bound, self.kind, self.tokens = name, typ, bound, kind, tokens


class Attr(Node):
    def __init__(self, side: str, attr: str):
        self.side, self.attr = side, attr
        self.bound, self.tokens = POS, True


class Neg(Node):
    prec = UNARY

    def __init__(self, a: Node):
        self.a, self.bound, self.tokens = a, a.bound, a.tokens

    def children(self):
        return [self.a]


class Not(Node):
    typ, prec = BOOL, NOT

    def __init__(self, a: Node):
        self.a, self.tokens = a, a.tokens

    def children(self):
        return [self.a]


class Bin(Node):
    def __init__(self, op: str, a: Node, b: Node):
        self.op, self.a, self.b = op, a, b
        self.prec = SUM if op in "+-" else PROD
        self.bound = {"+": a.bound + b.bound, "-": a.bound + b.bound, "*": a.bound * b.bound,
                      "//": a.bound, "%": b.bound}[op]
        self.tokens = a.tokens or b.tokens

    def children(self):
        return [self.a, self.b]


class Pow(Node):
    prec = POW

    def __init__(self, a: Node, exponent: Node, value: int):
        self.a, self.exponent, self.value = a, exponent, value
        self.bound, self.tokens = a.bound**value, a.tokens

    def children(self):
        return [self.a]


class Call(Node):
    """abs, min, max, clamp."""

    def __init__(self, func: str, args: list[Node]):
        self.func, self.args = func, args
        self.bound = max(a.bound for a in args)
        self.tokens = any(a.tokens for a in args)

    def children(self):
        return list(self.args)


class ListFn(Node):
    """len(list), sum(list)."""

    def __init__(self, func: str, array: str):
        self.func, self.array = func, array
        self.bound = POS if func == "len" else SUM_BOUND


class Sub(Node):
    def __init__(self, array: str, elem: str, indices: list[Node]):
        self.array, self.typ, self.indices = array, elem, indices
        self.bound = POS if elem == INT else 0
        self.tokens = any(i.tokens for i in indices)

    def children(self):
        return list(self.indices)


class Anc(Node):
    typ = BOOL

    def __init__(self, array: str, a: Node, b: Node):
        self.array, self.a, self.b = array, a, b
        self.tokens = a.tokens or b.tokens

    def children(self):
        return [self.a, self.b]


class Chain(Node):
    typ, prec = BOOL, CMP

    def __init__(self, operands: list[Node], ops: list[str]):
        self.operands, self.ops = operands, ops
        self.tokens = any(o.tokens for o in operands)

    def children(self):
        return list(self.operands)


class Logic(Node):
    typ = BOOL

    def __init__(self, op: str, args: list[Node]):
        self.op, self.args = op, args
        self.prec = AND if op == "and" else OR
        self.tokens = any(a.tokens for a in args)

    def children(self):
        return list(self.args)


class Let(Node):
    prec = LET

    def __init__(self, bindings: list[tuple[str, Node]], body: Node):
        self.bindings, self.body = bindings, body
        self.typ, self.bound, self.tokens = body.typ, body.bound, body.tokens

    def children(self):
        return [x for _, x in self.bindings] + [self.body]


def walk(e: Node):
    yield e
    for c in e.children():
        yield from walk(c)


def max_bound(e: Node) -> int:
    """The largest static bound of any int node in `e` (let bindings included)."""
    return max((x.bound for x in walk(e) if x.typ == INT), default=0)


# ---------------------------------------------------------------------------------------------------
# Programs
# ---------------------------------------------------------------------------------------------------


@dataclass
class Param:
    name: str
    elem: str  # INT | BOOL
    depth: int  # 0, 1, 2
    const: bool
    default: object  # Python value or None
    role: str  # what the generator uses it for (see ROLES)
    tree: bool = False


@dataclass
class Segment:
    name: str
    kind: str  # single | family | counted | grid
    length: Node | None = None  # single, family, counted (a family's may use Ref(var, kind='family'))
    var: str | None = None
    count: Node | None = None  # counted
    dims: list[Node] = field(default_factory=list)  # grid
    total: Node | None = None  # an expression for the segment's whole length, or None (then n is not used)
    uses_n: bool = False


@dataclass
class Rule:
    q: list[tuple]  # items: ("*",), ("seg", name), ("idx", name, var)
    k: list[tuple]
    shape: str | None
    where: Node | None


@dataclass
class Program:
    name: str
    params: list[Param]
    segments: list[Segment]
    rules: list[Rule]
    batch: list[dict]  # the batch: section, one dict of given values per line (may be empty)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


@dataclass
class Case:
    program: Program
    consts: dict  # const values given at compile time
    sequences: list[dict]  # given runtime values per sequence (n included when given)
    seed: int  # for the cosmetics of render()

    @property
    def text(self) -> str:
        return render(self.program, random.Random(self.seed))


# ---------------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------------

# Disjoint pools, so that names never clash by accident; keyword-like names test the lexer.
PARAM_NAMES = ["a", "b", "c", "w", "d", "h", "g", "x1", "width", "win", "span", "off", "alpha", "Beta", "_u",
               "u_2", "notes", "order", "android", "lethal", "inner", "grids", "fully", "causal_ok", "mask_w",
               "in2", "letx", "sumx", "lenx", "q0", "k_", "nn", "N", "True", "FALSE", "Int", "bool_", "where_",
               "rules_s", "batch2", "diag1", "z9", "Full", "segments_", "constant", "mins", "ab", "Q", "K"]
SEGMENT_NAMES = ["A", "B", "C", "D", "E", "F", "G", "H", "P", "R", "S", "Z", "Pre", "Suf", "Mid_1", "X", "Y",
                 "Body", "Hist", "Tgt", "T2", "W", "seg_a", "Ab", "GRID", "Causal", "I", "V"]
INDEX_NAMES = ["i", "j", "m", "r", "s", "t", "ii", "jj", "mem", "p", "v", "y", "x"]
LOCAL_NAMES = ["lo", "hi", "mid", "sy", "sx", "o", "e0", "e1", "tmp", "y0", "z", "base", "dq", "kk", "u"]
MASK_NAMES = ["m", "rnd", "fuzz", "causal", "full", "diag", "my_mask", "M2", "test"]
KEYWORDS = set("mask segments rules batch where full causal diag grid and or not true false const int bool "
               "let in".split())

# Parameter roles: (elem, depth, const, values). Layout roles are small and non-negative, so that lengths
# made of them usually are; `d` and `h` are never zero (divisors); wide ones reach the 32-bit limits.
ROLES = {
    "a": (INT, 0, False, "small"), "b": (INT, 0, False, "small"), "w": (INT, 0, False, "wide"),
    "c": (INT, 0, False, "wide"), "d": (INT, 0, False, "divisor"), "h": (INT, 0, True, "dim1"),
    "g": (INT, 0, True, "dim0"), "big": (INT, 0, True, "huge"), "f": (BOOL, 0, False, "bool"),
    "cf": (BOOL, 0, True, "bool"), "L": (INT, 1, False, "small"), "P": (INT, 1, False, "small"),
    "V": (INT, 1, False, "wide"), "M": (BOOL, 1, False, "bool"), "T": (INT, 2, False, "wide"),
    "BT": (BOOL, 2, False, "bool"), "tr": (INT, 1, False, "tree"),
}


def _wide(draw) -> int:
    return draw(st.one_of(st.integers(-40, 60), st.sampled_from([-(2**31), 2**31 - 1, -(2**31) + 1, 2**30, -7919]),
                          st.integers(-(2**31), 2**31 - 1)))


def _scalar(draw, kind: str, elem: str):
    if elem == BOOL:
        return draw(st.booleans())
    return {
        "small": lambda: draw(st.integers(0, 25)),
        "wide": lambda: _wide(draw),
        "divisor": lambda: draw(st.sampled_from([-7, -3, -2, -1, 1, 2, 3, 5, 16, 2**31 - 1, -(2**31)])),
        "dim1": lambda: draw(st.integers(1, 6)),
        "dim0": lambda: draw(st.integers(0, 5)),
        "huge": lambda: draw(st.sampled_from([2**40, -(2**40) + 3, 2**31, -(2**31) - 1, 2**62, -(2**62), 2**63 - 1, -(2**63) + 1, 12, 0])),
    }[kind]()


def _value(draw, role: str):
    elem, depth, _, kind = ROLES[role]
    if kind == "tree":
        size = draw(st.integers(0, 8))
        return [draw(st.integers(-1, x - 1)) for x in range(size)]
    if depth == 0:
        return _scalar(draw, kind, elem)
    if depth == 1:
        return [_scalar(draw, kind, elem) for _ in range(draw(st.integers(0, 4)))]
    rows, cols = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    return [[_scalar(draw, kind, elem) for _ in range(cols)] for _ in range(rows)]


# ---------------------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------------------


class Gen:
    """Draws typed expressions for one program. `roles` maps a role to its Param."""

    def __init__(self, draw, rng: random.Random, roles: dict[str, Param], consts: dict[str, object]):
        self.draw, self.rng, self.roles, self.consts = draw, rng, roles, consts
        self.local_pool = list(LOCAL_NAMES)
        rng.shuffle(self.local_pool)

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def chance(self, p: float) -> bool:
        return self.draw(st.integers(0, 999)) < p * 1000

    def param_ref(self, role: str) -> Ref:
        p = self.roles[role]
        if p.const:
            bound = abs(int(self.consts[p.name])) if p.elem == INT else 0
        else:
            bound = POS if p.elem == INT else 0
        return Ref(p.name, p.elem, bound, "param")

    def has(self, *roles) -> bool:
        return all(r in self.roles for r in roles)

    # -- layout expressions (no tokens) ------------------------------------------------------------

    def small_lit(self, lo=0, hi=12) -> Lit:
        return Lit(self.draw(st.integers(lo, hi)))

    def layout_len(self) -> Node:
        """A usually non-negative length from small parameters and literals."""
        options = ["lit", "lit"]
        options += ["a", "a+", "max-", "mod", "clamp"] if self.has("a") else []
        options += ["a+b//2"] if self.has("a", "b") else []
        options += ["len", "sum", "elem"] if self.has("L") else []
        options += ["h*2"] if self.has("h") else []
        options += ["let"] if self.has("a") else []
        choice = self.pick(options)
        a = self.param_ref("a") if self.has("a") else None
        if choice == "lit":
            return self.small_lit()
        if choice == "a":
            return a
        if choice == "a+":
            return Bin("+", a, self.small_lit(0, 5))
        if choice == "max-":
            return Call("max", [Bin("-", a, self.small_lit(0, 9)), Lit(0)])
        if choice == "mod":
            return Bin("%", a, Lit(self.draw(st.integers(1, 9))))
        if choice == "clamp":
            return Call("clamp", [a, Lit(0), self.small_lit(0, 15)])
        if choice == "a+b//2":
            return Bin("//", Bin("+", a, self.param_ref("b")), Lit(2))
        if choice == "len":
            return ListFn("len", self.roles["L"].name)
        if choice == "sum":
            return ListFn("sum", self.roles["L"].name)
        if choice == "elem":
            return Sub(self.roles["L"].name, INT, [self.small_lit(0, 4)])
        if choice == "h*2":
            return Bin("*", self.param_ref("h"), Lit(2))
        name = self.local_pool[0]
        x = Ref(name, INT, a.bound, "local")
        return Let([(name, a)], Bin("+", x, self.small_lit(0, 3)))

    def dim(self) -> Node:
        options = ["lit"] + (["h", "g"] if self.has("h", "g") else ["h"] if self.has("h") else []) + \
                  (["a%"] if self.has("a") else [])
        choice = self.pick(options)
        if choice == "lit":
            return self.small_lit(0, 5)
        if choice == "a%":
            return Bin("%", self.param_ref("a"), Lit(self.draw(st.integers(1, 5))))
        return self.param_ref(choice)

    # -- predicates ----------------------------------------------------------------------------------

    def int_atom(self, ctx: Ctx) -> Node:
        options = ["q", "k", "q", "k", "lit", "lit", "q.pos", "k.pos", "n"]
        options += [f"{s}.{c}" for s in "qk" for c in ctx.coords[s]] * 2
        options += ["index"] * 2 if ctx.index else []
        options += [r for r in ("a", "b", "w", "c", "d", "h", "g", "big") if r in self.roles]
        options += ["len"] if any(r in self.roles for r in ("L", "V", "M", "T", "BT")) else []
        options += ["local"] * 3 if any(t == INT for _, t, _ in ctx.locals) else []
        choice = self.pick(options)
        if choice in ("q", "k"):
            return Ref(choice, INT, POS, "token", tokens=True)
        if choice == "lit":
            return Lit(self.draw(st.one_of(st.integers(-8, 40), st.sampled_from([2**31 - 1, -(2**31), 2**40]))))
        if "." in choice:
            return Attr(*choice.split("."))
        if choice == "n":
            return Ref("n", INT, POS, "n")
        if choice == "index":
            return Ref(self.pick(sorted(ctx.index)), INT, MEMBER, "index", tokens=True)
        if choice == "len":
            return ListFn("len", self.roles[self.pick([r for r in ("L", "V", "M", "T", "BT") if r in self.roles])].name)
        if choice == "local":
            name, _, node = self.pick([x for x in ctx.locals if x[1] == INT])
            return Ref(name, INT, node.bound, "local", tokens=node.tokens)
        return self.param_ref(choice)

    def divisor(self) -> Node:
        """Never zero, never depends on the tokens."""
        options = ["lit", "lit"] + (["d", "-d"] if self.has("d") else []) + (["h"] if self.has("h") else []) + \
                  (["a+1"] if self.has("a") else [])
        choice = self.pick(options)
        if choice == "lit":
            return Lit(self.pick([-5, -3, -2, -1, 1, 2, 3, 4, 7, 16, 100]))
        if choice == "d":
            return self.param_ref("d")
        if choice == "-d":
            return Neg(self.param_ref("d"))
        if choice == "h":
            return self.param_ref("h")
        return Bin("+", self.param_ref("a"), Lit(1))

    def exponent(self) -> tuple[Node, int]:
        value = self.draw(st.integers(0, 3))
        form = self.draw(st.integers(0, 3))
        if form == 0 and value >= 1:
            return Bin("+", Lit(value - 1), Lit(1)), value
        if form == 1:
            return Bin("-", Lit(value + 2), Lit(2)), value
        return Lit(value), value

    def int_expr(self, ctx: Ctx, depth: int) -> Node:
        if depth <= 0 or self.chance(0.3):
            return self.int_atom(ctx)
        op = self.pick(["+", "-", "*", "//", "%", "neg", "abs", "min", "max", "clamp", "^", "sub", "sum", "let",
                        "+", "-", "table"])
        a = self.int_expr(ctx, depth - 1)
        if op in ("+", "-"):
            out = Bin(op, a, self.int_expr(ctx, depth - 1))
        elif op == "*":
            out = Bin("*", a, self.int_atom(ctx) if self.chance(0.5) else Lit(self.draw(st.integers(-3, 5))))
        elif op in ("//", "%"):
            out = Bin(op, a, self.divisor())
        elif op == "neg":
            out = Neg(a)
        elif op == "abs":
            out = Call("abs", [a])
        elif op in ("min", "max"):
            out = Call(op, [a] + [self.int_expr(ctx, depth - 1) for _ in range(self.draw(st.integers(1, 2)))])
        elif op == "clamp":
            out = Call("clamp", [a, self.int_atom(ctx), self.int_atom(ctx)])
        elif op == "^":
            exponent, value = self.exponent()
            out = Pow(a, exponent, value)
        elif op == "sub" and any(r in self.roles for r in ("L", "P", "V")):
            out = Sub(self.roles[self.pick([r for r in ("L", "P", "V") if r in self.roles])].name, INT, [a])
        elif op == "table" and "T" in self.roles:
            out = Sub(self.roles["T"].name, INT, [a, self.int_expr(ctx, depth - 1)])
        elif op == "sum" and any(r in self.roles for r in ("L", "V")):
            out = Bin(self.pick(["+", "-"]), ListFn("sum", self.roles[self.pick([r for r in ("L", "V") if r in self.roles])].name),
                      self.int_atom(ctx))
        elif op == "let":
            out = self.let(ctx, depth, INT)
        else:
            out = a
        return out if max_bound(out) <= INT64_MAX or ctx.overflow_ok else a

    def comparison(self, ctx: Ctx, depth: int) -> Node:
        out = self._comparison(ctx, depth)
        if max_bound(out) > INT64_MAX and not ctx.overflow_ok:
            return Chain([Ref("k", INT, POS, "token", tokens=True), Ref("q", INT, POS, "token", tokens=True)], ["<="])
        return out

    def _comparison(self, ctx: Ctx, depth: int) -> Node:
        form = self.draw(st.integers(0, 9))
        ops = ["<", "<=", ">", ">=", "==", "!="]
        if form <= 3:
            return Chain([self.int_expr(ctx, depth), self.int_expr(ctx, depth)], [self.pick(ops)])
        if form <= 5:  # a chain of 3 or 4
            count = self.draw(st.integers(3, 4))
            return Chain([self.int_expr(ctx, max(depth - 1, 0)) for _ in range(count)],
                         [self.pick(ops) for _ in range(count - 1)])
        # Row-interval forms: k against a term in q, windows over q - k.
        q = Ref("q", INT, POS, "token", tokens=True)
        k = Ref("k", INT, POS, "token", tokens=True)
        term = self.pick(["q", "q+", "q-w", "q.pos", "lit", "n-"])
        t = {"q": lambda: q, "q+": lambda: Bin("+", q, self.small_lit(0, 30)),
             "q-w": lambda: Bin("-", q, self.int_atom(ctx)), "q.pos": lambda: Attr("q", "pos"),
             "lit": lambda: self.small_lit(0, 60), "n-": lambda: Bin("-", Ref("n", INT, POS, "n"), self.small_lit(0, 9))}[term]()
        if form <= 7:
            return Chain([k, t] if self.chance(0.5) else [t, k], [self.pick(ops[:5])])
        diff = Bin("-", q, k) if self.chance(0.7) else Bin("-", k, q)
        if form == 8:
            return Chain([Lit(self.draw(st.integers(-3, 2))), diff, self.int_atom(ctx)], [self.pick(["<", "<="]), self.pick(["<", "<="])])
        return Chain([diff, self.int_atom(ctx)], [self.pick(ops)])

    def bool_atom(self, ctx: Ctx) -> Node:
        options = ["cmp", "cmp", "cmp", "cmp", "lit"]
        options += [r for r in ("f", "cf") if r in self.roles]
        options += ["M"] if "M" in self.roles else []
        options += ["BT"] if "BT" in self.roles else []
        options += ["anc", "anc"] if "tr" in self.roles else []
        options += ["local"] * 2 if any(t == BOOL for _, t, _ in ctx.locals) else []
        choice = self.pick(options)
        if choice == "cmp":
            return self.comparison(ctx, 2)
        if choice == "lit":
            return Lit(self.draw(st.booleans()))
        if choice in ("f", "cf"):
            return self.param_ref(choice)
        if choice == "M":
            return Sub(self.roles["M"].name, BOOL, [self.int_expr(ctx, 1)])
        if choice == "BT":
            return Sub(self.roles["BT"].name, BOOL, [self.int_expr(ctx, 1), self.int_expr(ctx, 1)])
        if choice == "anc":
            return Anc(self.roles["tr"].name, self.int_expr(ctx, 1), self.int_expr(ctx, 1))
        name, _, node = self.pick([x for x in ctx.locals if x[1] == BOOL])
        return Ref(name, BOOL, 0, "local", tokens=node.tokens)

    def bool_expr(self, ctx: Ctx, depth: int) -> Node:
        if depth <= 0 or self.chance(0.25):
            return self.bool_atom(ctx)
        kind = self.pick(["and", "and", "or", "not", "let", "atom"])
        if kind in ("and", "or"):
            return Logic(kind, [self.bool_expr(ctx, depth - 1) for _ in range(self.draw(st.integers(2, 3)))])
        if kind == "not":
            return Not(self.bool_expr(ctx, depth - 1))
        if kind == "let":
            return self.let(ctx, depth, BOOL)
        return self.bool_atom(ctx)

    def let(self, ctx: Ctx, depth: int, typ: str) -> Node:
        bindings = []
        inner = ctx
        for _ in range(self.draw(st.integers(1, 2))):
            name = self.pick(self.local_pool[:6])  # a few names: nested lets sometimes shadow one
            value = self.int_expr(inner, depth - 1) if self.chance(0.7) else self.bool_expr(inner, depth - 1)
            bindings.append((name, value))
            inner = inner.with_local(name, value)
        body = self.int_expr(inner, depth - 1) if typ == INT else self.bool_expr(inner, depth - 1)
        return Let(bindings, body)


@dataclass
class Ctx:
    """What a predicate may use: grid coordinates per side, bound index variables, let names in scope."""

    coords: dict  # side -> list of attribute names
    index: dict  # var -> "q" | "k" | "both"
    locals: list = field(default_factory=list)  # (name, typ, node)
    overflow_ok: bool = False

    def with_local(self, name: str, node: Node) -> Ctx:
        kept = [x for x in self.locals if x[0] != name]
        return Ctx(self.coords, self.index, kept + [(name, node.typ, node)], self.overflow_ok)


@st.composite
def cases(draw, max_sequences: int = 3, overflow: bool = False) -> Case:
    """A random valid program, compile-time const values and runtime values for 1..max_sequences
    sequences (a few of which the oracle may find inconsistent). With `overflow`, expressions may exceed
    64-bit bounds (maskc must then refuse them with a positioned error)."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed ^ 0x5EED)
    names = list(PARAM_NAMES)
    rng.shuffle(names)
    roles_chosen = draw(st.lists(st.sampled_from(sorted(ROLES)), unique=True, max_size=9))
    params: list[Param] = []
    roles: dict[str, Param] = {}
    consts: dict[str, object] = {}
    for role in roles_chosen:
        elem, depth, const, kind = ROLES[role]
        value = _value(draw, role)
        has_default = draw(st.integers(0, 4)) > 0
        p = Param(names.pop(), elem, depth, const, value if has_default else None, role, tree=kind == "tree")
        if const and (not has_default or draw(st.integers(0, 3)) == 0):  # given at compile time
            consts[p.name] = _value(draw, role)
        params.append(p)
        roles[role] = p
    const_values = {p.name: consts.get(p.name, p.default) for p in params if p.const}
    gen = Gen(draw, rng, roles, const_values)

    # Segments, in layout order.
    seg_names = list(SEGMENT_NAMES)
    rng.shuffle(seg_names)
    segments: list[Segment] = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["single", "single", "family", "counted", "grid"]))
        name = seg_names.pop()
        if kind == "single":
            length = gen.layout_len()
            segments.append(Segment(name, "single", length=length, total=length))
        elif kind == "grid":
            dims = [gen.dim() for _ in range(draw(st.sampled_from([2, 2, 3])))]
            total = dims[0]
            for d in dims[1:]:
                total = Bin("*", total, d)
            segments.append(Segment(name, "grid", dims=dims, total=total))
        else:
            segments.append(_family(draw, gen, name, kind))
    rest_at = draw(st.integers(0, len(segments)))
    opaque = any(s.total is None for s in segments)
    total = None
    if not opaque and draw(st.integers(0, 5)) > 0:
        if draw(st.integers(0, 5)) == 0:  # a fraction of n, the rest after it
            part = Bin("//", Ref("n", INT, POS, "n"), Lit(draw(st.integers(2, 4))))
            segments.insert(draw(st.integers(0, len(segments))),
                            Segment(seg_names.pop(), "single", length=part, total=part, uses_n=True))
        total = Ref("n", INT, POS, "n")
        for s in segments:
            total = Bin("-", total, s.total)
        if max_bound(total) > INT64_MAX:  # maskc refuses it (sum() may reach 2^62): the layout fixes n
            total = None
    if total is not None:
        segments.insert(rest_at, Segment(seg_names.pop(), "single", length=total, uses_n=True))
    if not segments:
        segments.append(Segment(seg_names.pop(), "single", length=Ref("n", INT, POS, "n"), uses_n=True))
    if draw(st.integers(0, 9)) == 0 and roles:  # a segment named like a parameter: separate namespaces
        segments[draw(st.integers(0, len(segments) - 1))].name = draw(st.sampled_from(sorted(p.name for p in params)))
        if len({s.name for s in segments}) != len(segments):
            segments[-1].name = seg_names.pop()

    # Rules.
    families = [s.name for s in segments if s.kind in ("family", "counted")]
    grids = {s.name: len(s.dims) for s in segments if s.kind == "grid"}
    index_pool = [x for x in INDEX_NAMES]
    rng.shuffle(index_pool)
    rules = []
    many = draw(st.integers(0, 9)) == 0  # more than 8 rules: 16-bit tile kinds
    for _ in range(draw(st.integers(6, 10)) if many else draw(st.integers(1, 5))):
        q_side, q_var = _side(draw, segments, families, index_pool[0])
        k_var_name = index_pool[0] if q_var and draw(st.booleans()) else index_pool[1]
        k_side, k_var = _side(draw, segments, families, k_var_name)
        index = {}
        if k_var:
            index[k_var] = "k"
        if q_var:
            index[q_var] = "both" if q_var == k_var else "q"
        coords = {}
        for side, items in (("q", q_side), ("k", k_side)):
            single = len(items) == 1 and items[0][0] == "seg" and items[0][1] in grids
            coords[side] = (["t", "y", "x"] if grids[items[0][1]] == 3 else ["y", "x"]) if single else []
        ctx = Ctx(coords, index, overflow_ok=overflow)
        shape = draw(st.sampled_from([None, None, "full", "causal", "diag"]))
        where = None
        if shape is None or draw(st.integers(0, 2)) > 0:
            where = gen.bool_expr(ctx, draw(st.integers(0, 3)))
        rules.append(Rule(q_side, k_side, shape, where))

    name = draw(st.sampled_from(MASK_NAMES))
    n_param = draw(st.integers(0, 3))  # 0: declare n with a default, 1: without, else not at all
    program = Program(name, params, segments, rules, [])

    # Runtime values, sequence by sequence.
    oracle = Oracle(program, const_values)
    sequences = []
    for _ in range(draw(st.integers(1, max_sequences))):
        given = {}
        for p in params:
            if p.const:
                continue
            if p.default is None or draw(st.integers(0, 2)) == 0:
                given[p.name] = _value(draw, p.role)
        if draw(st.integers(0, 30)) == 0 and given:  # a value left out: refused when it has no default
            given.pop(draw(st.sampled_from(sorted(given))))
        total = oracle.fixed_total(given)
        if total is not None:
            n = total + (draw(st.integers(0, 80)) if oracle.uses_n else 0)
            if sum(x.uses_n for x in segments) > 1:
                n *= 2  # n - n // c is at least n / 2: the rest is not negative
            if draw(st.integers(0, 25)) == 0:
                n += draw(st.sampled_from([-3, -1, 1, 7]))  # inconsistent: refused
            if n >= 0 and (oracle.uses_n or draw(st.booleans())):
                given["n"] = n
        elif oracle.uses_n:
            given["n"] = draw(st.integers(0, 60))
        sequences.append(given)
    if n_param < 2:
        first_n = sequences[0].get("n")
        default = first_n if n_param == 0 and first_n is not None else None
        params.insert(draw(st.integers(0, len(params))), Param("n", INT, 0, False, default, "n"))
        if default is not None and draw(st.booleans()):
            sequences[0].pop("n")
    if draw(st.integers(0, 2)) == 0 and all(sequences):
        program.batch = [dict(s) for s in sequences]
    return Case(program, consts, sequences, seed)


def _family(draw, gen: Gen, name: str, kind: str) -> Segment:
    var = draw(st.sampled_from(INDEX_NAMES))
    i = Ref(var, INT, MEMBER, "family")
    lists = [r for r in ("L", "P") if r in gen.roles]
    if kind == "family" and lists:
        L = gen.roles[lists[0]].name
        form = draw(st.sampled_from(["plain", "plain", "plus", "times", "two", "opaque", "shifted"]))
        elem = Sub(L, INT, [i])
        if form == "plain":
            return Segment(name, "family", length=elem, var=var, total=ListFn("sum", L))
        if form == "plus":
            c = gen.small_lit(0, 4)
            return Segment(name, "family", length=Bin("+", elem, c), var=var,
                           total=Bin("+", ListFn("sum", L), Bin("*", c, ListFn("len", L))))
        if form == "times":
            c = gen.small_lit(0, 3)
            return Segment(name, "family", length=Bin("*", elem, c), var=var, total=Bin("*", ListFn("sum", L), c))
        if form == "two" and len(lists) == 2:
            P = gen.roles[lists[1]].name
            return Segment(name, "family", length=Bin("+", elem, Sub(P, INT, [i])), var=var,
                           total=Bin("+", ListFn("sum", L), ListFn("sum", P)))
        if form == "shifted":
            return Segment(name, "family", length=Bin("+", elem, Sub(L, INT, [Bin("+", i, Lit(1))])), var=var)
        return Segment(name, "family", length=Call("max", [Bin("-", elem, i), Lit(0)]), var=var)
    count = gen.small_lit(0, 4) if not gen.has("a") or draw(st.booleans()) else Bin("%", gen.param_ref("a"), Lit(5))
    form = draw(st.sampled_from(["const", "index", "mod"]))
    if form == "const":
        length = gen.small_lit(0, 9)
        return Segment(name, "counted", length=length, var=var, count=count, total=Bin("*", count, length))
    if form == "index":
        return Segment(name, "counted", length=i, var=var, count=count,
                       total=Bin("//", Bin("*", count, Bin("-", count, Lit(1))), Lit(2)))
    return Segment(name, "counted", length=Bin("*", Bin("%", i, Lit(2)), gen.small_lit(1, 7)), var=var, count=count)


def _side(draw, segments: list[Segment], families: list[str], var: str) -> tuple[list[tuple], str | None]:
    names = [s.name for s in segments]
    form = draw(st.sampled_from(["one", "one", "one", "union", "star", "idx"]))
    if form == "idx" and families:
        return [("idx", draw(st.sampled_from(families)), var)], var
    if form == "star":
        return [("*",)], None
    if form == "union" and len(names) > 1:
        chosen = draw(st.lists(st.sampled_from(names), min_size=2, max_size=3))
        return [("seg", x) for x in chosen], None
    return [("seg", draw(st.sampled_from(names)))], None


# ---------------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------------

WORD = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
COMMENT_TEXTS = ["", "note", "a -> b where q < k", "é — ünïcode →", "# again", "(", "]", "let x = 1 in x", "\t tab"]


def fmt_int(value: int, rng: random.Random) -> str:
    text = str(value)
    digits = text.lstrip("-")
    if len(digits) > 1 and rng.random() < 0.15:
        cut = rng.randrange(1, len(digits))
        digits = digits[:cut] + "_" + digits[cut:]
    elif rng.random() < 0.04:
        digits = "0" + digits
    return ("-" if value < 0 else "") + digits


class Printer:
    def __init__(self, rng: random.Random, parens: float = 0.08):
        self.rng = rng
        self.parens = parens

    def toks(self, e: Node, ctx: int) -> list[str]:
        inner = self.inner(e)
        if e.prec < ctx or self.rng.random() < self.parens:
            return ["(", *inner, ")"]
        return inner

    def inner(self, e: Node) -> list[str]:
        t = self.toks
        if isinstance(e, Lit):
            if e.typ == BOOL:
                return ["true" if e.value else "false"]
            return ["-", fmt_int(-e.value, self.rng)] if e.value < 0 else [fmt_int(e.value, self.rng)]
        if isinstance(e, Ref):
            return [e.name]
        if isinstance(e, Attr):
            return [e.side, ".", e.attr]
        if isinstance(e, Neg):
            return ["-", *t(e.a, UNARY)]
        if isinstance(e, Not):
            return ["not", *t(e.a, NOT)]
        if isinstance(e, Bin):
            return [*t(e.a, e.prec), e.op, *t(e.b, e.prec + 1)]
        if isinstance(e, Pow):
            return [*t(e.a, ATOM), "^", *t(e.exponent, UNARY)]
        if isinstance(e, Call):
            return [e.func, "(", *self.args(e.args), ")"]
        if isinstance(e, ListFn):
            return [e.func, "(", e.array, ")"]
        if isinstance(e, Anc):
            return ["ancestor", "(", e.array, ",", *self.args([e.a, e.b]), ")"]
        if isinstance(e, Sub):
            out = [e.array]
            for i in e.indices:
                out += ["[", *t(i, LET), "]"]
            return out
        if isinstance(e, Chain):
            out = t(e.operands[0], SUM)
            for op, x in zip(e.ops, e.operands[1:]):
                out += [op, *t(x, SUM)]
            return out
        if isinstance(e, Logic):
            out = t(e.args[0], e.prec)
            for x in e.args[1:]:
                out += [e.op, *t(x, e.prec)]
            return out
        if isinstance(e, Let):
            out = ["let"]
            for j, (name, x) in enumerate(e.bindings):
                out += ([","] if j else []) + [name, "=", *t(x, OR)]
            return out + ["in", *t(e.body, LET)]
        raise TypeError(e)

    def args(self, args: list[Node]) -> list[str]:
        out = []
        for j, a in enumerate(args):
            out += ([","] if j else []) + self.toks(a, LET)
        return out


class Style:
    """The cosmetics of one file."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.newline = "\r\n" if rng.random() < 0.1 else "\n"
        self.breaks = rng.choice([0.0, 0.0, 0.05, 0.2])
        self.comments = rng.choice([0.0, 0.1, 0.3])
        self.indent = rng.choice(["    ", "  ", "\t", "", " \t"])

    def comment(self) -> str:
        return self.rng.choice(["", " ", "  ", "\t"]) + "#" + self.rng.choice(COMMENT_TEXTS)

    def join(self, tokens: list[str]) -> str:
        out, depth, prev = [], 0, None
        for tok in tokens:
            if prev is not None:
                need = prev[-1] in WORD and tok[0] in WORD
                if depth > 0 and self.rng.random() < self.breaks:
                    gap = (self.comment() if self.rng.random() < self.comments else "") + self.newline + \
                          self.rng.choice(["", "  ", "\t\t", "        "])
                else:
                    r = self.rng.random()
                    gap = "" if not need and r < 0.35 else " " if r < 0.9 else self.rng.choice(["  ", "\t", " \t "])
                out.append(gap)
            out.append(tok)
            depth += tok in ("(", "[")
            depth -= tok in (")", "]")
            prev = tok
        return "".join(out)


def type_tokens(p: Param) -> list[str]:
    return ["["] * p.depth + [p.elem] + ["]"] * p.depth


def literal_tokens(value, rng: random.Random) -> list[str]:
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, (int, np.integer)):
        value = int(value)
        return ["-", fmt_int(-value, rng)] if value < 0 else [fmt_int(value, rng)]
    out = ["["]
    for j, item in enumerate(value):
        out += ([","] if j else []) + literal_tokens(item, rng)
    if value and rng.random() < 0.2:
        out.append(",")
    return out + ["]"]


def side_tokens(items: list[tuple]) -> list[str]:
    out = []
    for j, item in enumerate(items):
        out += ["|"] if j else []
        out += ["*"] if item[0] == "*" else [item[1]] if item[0] == "seg" else [item[1], "[", item[2], "]"]
    return out


def program_lines(program: Program, printer: Printer) -> list[tuple[str, list[str]]]:
    """(kind, tokens) per line: kind 'header', 'section', 'param'..."""
    rng = printer.rng
    header = ["mask", program.name, "("]
    for j, p in enumerate(program.params):
        header += [","] if j else []
        header += (["const"] if p.const else []) + [p.name, ":", *type_tokens(p)]
        if p.default is not None:
            header += ["=", *literal_tokens(p.default, rng)]
    if program.params and rng.random() < 0.15:
        header.append(",")
    lines = [("header", header + [")"]), ("section", ["segments", ":"])]
    for s in program.segments:
        if s.kind == "single":
            lines.append(("segment", [s.name, "=", *printer.toks(s.length, LET)]))
        elif s.kind == "family":
            lines.append(("segment", [s.name, "[", s.var, "]", "=", *printer.toks(s.length, LET)]))
        elif s.kind == "counted":
            lines.append(("segment", [s.name, "[", s.var, "<", *printer.toks(s.count, LET), "]", "=",
                                      *printer.toks(s.length, LET)]))
        else:
            lines.append(("segment", [s.name, "=", "grid", "(", *printer.args(s.dims), ")"]))
    lines.append(("section", ["rules", ":"]))
    for r in program.rules:
        toks = [*side_tokens(r.q), "->", *side_tokens(r.k)]
        toks += [r.shape] if r.shape else []
        toks += ["where", *printer.toks(r.where, LET)] if r.where is not None else []
        lines.append(("rule", toks))
    if program.batch:
        lines.append(("section", ["batch", ":"]))
        for given in program.batch:
            toks = []
            for j, (name, value) in enumerate(given.items()):
                toks += ([","] if j else []) + [name, "=", *literal_tokens(value, rng)]
            lines.append(("batch", toks))
    return lines


def render(program: Program, rng: random.Random) -> str:
    return assemble(program_lines(program, Printer(rng)), Style(rng))[0]


def assemble(lines: list[tuple[str, list[str]]], style: Style) -> tuple[str, list[tuple[int, int]]]:
    """The text of the lines, and the first and last line number (1-based) each of them occupies."""
    rng = style.rng
    out: list[str] = []
    spans = []
    if rng.random() < 0.3:
        out.append(style.comment().lstrip())
    for kind, toks in lines:
        if rng.random() < 0.1:
            out.append(rng.choice(["", "   ", style.comment().lstrip()]))
        indent = style.indent if kind in ("segment", "rule", "batch") else ""
        text = indent + style.join(toks)
        if rng.random() < style.comments:
            text += style.comment()
        first = sum(x.count("\n") + 1 for x in out) + 1
        spans.append((first, first + text.count("\n")))
        out.append(text)
    end = style.newline if rng.random() < 0.8 else ""
    return style.newline.join(out) + end, spans


# ---------------------------------------------------------------------------------------------------
# The oracle
# ---------------------------------------------------------------------------------------------------


class Refused(Exception):
    """Values the language refuses (the oracle's prediction of a ValueError)."""


class Env:
    def __init__(self, scalars, arrays, n=None, tokens=None, index=None, local=None, family=None):
        self.scalars, self.arrays, self.n = scalars, arrays, n
        self.tokens = tokens or {}
        self.index = index or {}
        self.local = local or {}
        self.family = family  # the member index, in a family's length

    def with_local(self, name, value) -> Env:
        return Env(self.scalars, self.arrays, self.n, self.tokens, self.index, {**self.local, name: value}, self.family)


def _read(array: np.ndarray, idx: list) -> np.ndarray:
    """array[idx...], 0 / false outside."""
    idx = [np.asarray(i, dtype=np.int64) for i in idx]
    ok = np.ones(np.broadcast_shapes(*(i.shape for i in idx)), dtype=bool)
    clipped = []
    for axis, i in enumerate(idx):
        size = array.shape[axis]
        ok = ok & (i >= 0) & (i < size)
        clipped.append(np.clip(i, 0, max(size - 1, 0)))
    if array.size == 0:
        return np.zeros(ok.shape, dtype=array.dtype)
    return np.where(ok, array[tuple(clipped)], np.zeros((), dtype=array.dtype))


def _ancestors(parent: np.ndarray) -> np.ndarray:
    m = len(parent)
    anc = np.eye(m, dtype=bool)
    for x in range(m):
        y = int(parent[x])
        while y >= 0:
            anc[x, y] = True
            y = int(parent[y])
    return anc


_CMP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal}


def ev(e: Node, env: Env):
    """The value of `e` (numpy int64 / bool, broadcasting over the token arrays in `env`)."""
    if isinstance(e, Lit):
        return np.bool_(e.value) if e.typ == BOOL else np.int64(e.value)
    if isinstance(e, Ref):
        if e.kind == "param":
            return env.scalars[e.name]
        if e.kind == "n":
            return np.int64(env.n)
        if e.kind == "token":
            return env.tokens[(e.name, "index")]
        if e.kind == "index":
            return env.index[e.name]
        if e.kind == "family":
            return env.family
        return env.local[e.name]
    if isinstance(e, Attr):
        return env.tokens[(e.side, e.attr)]
    if isinstance(e, Neg):
        return -ev(e.a, env)
    if isinstance(e, Not):
        return np.logical_not(ev(e.a, env))
    if isinstance(e, Bin):
        a, b = ev(e.a, env), ev(e.b, env)
        return {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide, "%": np.mod}[e.op](a, b)
    if isinstance(e, Pow):
        a = ev(e.a, env)
        out = np.ones_like(a)
        for _ in range(e.value):
            out = out * a
        return out
    if isinstance(e, Call):
        args = [ev(a, env) for a in e.args]
        if e.func == "abs":
            return np.abs(args[0])
        if e.func == "clamp":
            return np.minimum(np.maximum(args[0], args[1]), args[2])
        fn = np.minimum if e.func == "min" else np.maximum
        out = args[0]
        for a in args[1:]:
            out = fn(out, a)
        return out
    if isinstance(e, ListFn):
        array = env.arrays[e.array]
        return np.int64(array.shape[0]) if e.func == "len" else np.int64(array.sum())
    if isinstance(e, Sub):
        return _read(env.arrays[e.array], [ev(i, env) for i in e.indices])
    if isinstance(e, Anc):
        parent = env.arrays[e.array]
        a, b = np.asarray(ev(e.a, env)), np.asarray(ev(e.b, env))
        m = len(parent)
        ok = (a >= 0) & (a < m) & (b >= 0) & (b < m)
        if m == 0:
            return np.zeros(ok.shape, dtype=bool)
        anc = _ancestors(parent)
        return ok & anc[np.clip(a, 0, m - 1), np.clip(b, 0, m - 1)]
    if isinstance(e, Chain):
        values = [ev(x, env) for x in e.operands]
        out = np.bool_(True)
        for op, x, y in zip(e.ops, values, values[1:]):
            out = out & _CMP[op](x, y)
        return out
    if isinstance(e, Logic):
        values = [ev(x, env) for x in e.args]
        out = values[0]
        for v in values[1:]:
            out = (out & v) if e.op == "and" else (out | v)
        return out
    if isinstance(e, Let):
        inner = env
        for name, x in e.bindings:
            inner = inner.with_local(name, ev(x, inner))
        return ev(e.body, inner)
    raise TypeError(e)


def mentions(e: Node, predicate) -> bool:
    """Whether a node that satisfies `predicate` survives in `e` once let names are substituted."""
    def visit(x: Node, env: dict) -> bool:
        if isinstance(x, Let):
            env = dict(env)
            for name, value in x.bindings:
                env[name] = visit(value, env)
            return visit(x.body, env)
        if isinstance(x, Ref) and x.kind == "local":
            return env.get(x.name, False)
        return predicate(x) or any(visit(c, env) for c in x.children())
    return visit(e, {})


def indexed_lists(e: Node, var: str) -> list[str]:
    """The lists a family length reads at its bare index variable, in the order maskc finds them (parents
    first, let names substituted)."""
    out = []

    def visit(x: Node, env: dict):
        if isinstance(x, Let):
            env = dict(env)
            for name, value in x.bindings:
                env[name] = value
            visit(x.body, env)
            return
        if isinstance(x, Ref) and x.kind == "local":
            visit(env[x.name], {})
            return
        if isinstance(x, Sub) and isinstance(x.indices[0], Ref) and x.indices[0].name == var and \
                x.indices[0].kind == "family":
            out.append(x.array)
        for c in x.children():
            visit(c, env)

    visit(e, {})
    return out


@dataclass
class Layout:
    n: int
    starts: list  # per concrete segment
    lengths: list
    symbol: list  # the segment's index in declaration order
    member: list
    dims: dict  # segment index -> grid dims


class Oracle:
    def __init__(self, program: Program, consts: dict):
        self.program, self.consts = program, consts
        self.uses_n = any(s.uses_n for s in program.segments)

    def values(self, given: dict) -> tuple[dict, dict]:
        """(scalars, arrays) of one sequence: given values, else defaults; consts as compiled."""
        scalars, arrays = {}, {}
        for p in self.program.params:
            if p.name == "n":
                continue
            value = self.consts.get(p.name) if p.const else given.get(p.name, p.default)
            if value is None:
                raise Refused(f"no value for '{p.name}'")
            if p.depth == 0:
                scalars[p.name] = np.bool_(value) if p.elem == BOOL else np.int64(value)
            else:
                arr = np.array(value, dtype=bool if p.elem == BOOL else np.int64)
                if arr.size == 0:
                    arr = arr.reshape((0,) * p.depth) if arr.ndim < p.depth else arr
                arrays[p.name] = arr
        return scalars, arrays

    def fixed_total(self, given: dict) -> int | None:
        """The tokens of the segments other than the one with n, or None if the values are refused."""
        try:
            lay = self._lay(given, None)
        except Refused:
            return None
        return sum(lay.lengths)

    def layout(self, given: dict) -> Layout:
        """The concrete layout of one sequence; Refused where maskc must refuse the values."""
        n = given.get("n")
        n_decl = self.program.param("n")
        if n is None and n_decl is not None:
            n = n_decl.default
        if n is None and self.uses_n:
            raise Refused("the layout uses n, which has no value")
        lay = self._lay(given, n)
        total = sum(lay.lengths)
        if n is not None and total != n:
            raise Refused(f"the segments cover {total} tokens, not n = {n}")
        lay.n = total
        return lay

    def _lay(self, given: dict, n) -> Layout:
        scalars, arrays = self.values(given)
        env = Env(scalars, arrays, n)
        lay = Layout(0, [], [], [], [], {})
        position = 0
        for s, seg in enumerate(self.program.segments):
            if seg.uses_n and n is None:
                continue  # fixed_total(): everything but the segment of n
            if seg.kind == "single":
                lengths = [int(ev(seg.length, env))]
            elif seg.kind == "grid":
                dims = [int(ev(d, env)) for d in seg.dims]
                if min(dims) < 0:
                    raise Refused(f"negative grid dimensions {dims}")
                lay.dims[s] = dims
                lengths = [int(np.prod(dims))]
            else:
                lists = indexed_lists(seg.length, seg.var)
                count = int(ev(seg.count, env)) if seg.kind == "counted" else len(arrays[lists[0]])
                if count < 0:
                    raise Refused("negative member count")
                if any(len(arrays[x]) != count for x in lists):
                    raise Refused("a list indexed by the family's variable has another length than its count")
                lengths = [int(ev(seg.length, Env(scalars, arrays, n, family=np.int64(i)))) for i in range(count)]
            if any(x < 0 for x in lengths):
                raise Refused(f"negative length in segment {seg.name}")
            for m, x in enumerate(lengths):
                lay.starts.append(position)
                lay.lengths.append(x)
                lay.symbol.append(s)
                lay.member.append(m)
                position += x
        return lay

    def mask(self, given: dict, lay: Layout) -> np.ndarray:
        """The exact [n, n] mask of one sequence."""
        n = lay.n
        scalars, arrays = self.values(given)
        seg_of = np.zeros(n, dtype=np.int64)
        member = np.zeros(n, dtype=np.int64)
        pos = np.zeros(n, dtype=np.int64)
        coords = {c: np.zeros(n, dtype=np.int64) for c in "tyx"}
        for start, length, s, m in zip(lay.starts, lay.lengths, lay.symbol, lay.member):
            sl = slice(start, start + length)
            seg_of[sl], member[sl] = s, m
            pos[sl] = np.arange(length)
            if s in lay.dims:
                dims = lay.dims[s]
                w = dims[-1]
                h = dims[-2]
                p = np.arange(length)
                coords["x"][sl] = p % w
                coords["y"][sl] = (p // w) % h
                if len(dims) == 3:
                    coords["t"][sl] = p // (w * h)
        index = {s.name: i for i, s in enumerate(self.program.segments)}
        q = np.arange(n, dtype=np.int64)[:, None]
        k = np.arange(n, dtype=np.int64)[None, :]
        tokens = {("q", "index"): q, ("k", "index"): k, ("q", "pos"): pos[:, None], ("k", "pos"): pos[None, :]}
        for c in "tyx":
            tokens[("q", c)] = coords[c][:, None]
            tokens[("k", c)] = coords[c][None, :]
        out = np.zeros((n, n), dtype=bool)
        for rule in self.program.rules:
            on = [np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)]
            binds = {}
            for side, items in enumerate((rule.q, rule.k)):
                for item in items:
                    if item[0] == "*":
                        on[side][:] = True
                    else:
                        on[side] |= seg_of == index[item[1]]
                    if item[0] == "idx":
                        binds.setdefault(item[2], []).append(side)
            visible = on[0][:, None] & on[1][None, :]
            if rule.shape == "causal":
                visible &= k <= q
            elif rule.shape == "diag":
                visible &= k == q
            env_index = {}
            for var, sides in binds.items():
                env_index[var] = member[:, None] if 0 in sides else member[None, :]
                if len(sides) == 2:
                    visible &= member[:, None] == member[None, :]
            if rule.where is not None:
                env = Env(scalars, arrays, n, tokens, env_index)
                visible &= np.broadcast_to(np.asarray(ev(rule.where, env), dtype=bool), (n, n))
            out |= visible
        return out


def const_values(case: Case) -> dict:
    """The program's const values as compiled: the case's, else the defaults."""
    return {p.name: case.consts.get(p.name, p.default) for p in case.program.params if p.const}


def split_sequences(case: Case, oracle: Oracle):
    """(values, oracle layout) of the sequences the oracle accepts, and (values, reason) of the others."""
    ok, refused = [], []
    for seq in case.sequences:
        try:
            ok.append((seq, oracle.layout(seq)))
        except Refused as why:
            refused.append((seq, str(why)))
    return ok, refused


# ---------------------------------------------------------------------------------------------------
# Damage: programs that are wrong at the level of the grammar, the names or the types
# ---------------------------------------------------------------------------------------------------


def raw(cls, **attrs) -> Node:
    """A node built without its constructor's checks (arity errors, negative exponents)."""
    node = cls.__new__(cls)
    node.__dict__.update(attrs)
    return node


def slots(root_owner, attr: str):
    """(owner, attr, index, node) for every place in the expression at `root_owner.attr` that the checker
    sees: let bindings (which vanish when unused) and exponents are left out."""
    out = []

    def visit(owner, name, index):
        node = getattr(owner, name) if index is None else getattr(owner, name)[index]
        out.append((owner, name, index, node))
        if isinstance(node, (Neg, Not)):
            visit(node, "a", None)
        elif isinstance(node, (Bin, Anc)):
            visit(node, "a", None)
            visit(node, "b", None)
        elif isinstance(node, Pow):
            visit(node, "a", None)
        elif isinstance(node, Let):
            visit(node, "body", None)
        else:
            for list_name in ("args", "indices", "operands"):
                if isinstance(getattr(node, list_name, None), list):
                    for i in range(len(getattr(node, list_name))):
                        visit(node, list_name, i)

    visit(root_owner, attr, None)
    return out


def put(owner, attr: str, index, node: Node) -> None:
    if index is None:
        setattr(owner, attr, node)
    else:
        getattr(owner, attr)[index] = node


Q = lambda: Ref("q", INT, POS, "token", tokens=True)  # noqa: E731


def _grid_side(program: Program, items) -> bool:
    return len(items) == 1 and items[0][0] == "seg" and \
        any(s.name == items[0][1] and s.kind == "grid" for s in program.segments)


class Damage:
    """One way to damage a program. `apply` changes the program (structure) or returns a function that
    changes its lines (tokens); it returns the (kind, index) of the logical line the error must be reported
    on, or None where the position is elsewhere (an unclosed bracket), or False when it does not apply."""

    def __init__(self, draw, program: Program, consts: dict):
        self.draw, self.program, self.consts = draw, program, consts
        self.token_edit = None  # (line kind, index, fn(tokens) -> tokens)
        self.form = ""  # which variant, for messages

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def rule_slot(self, typ: str | None, root: bool = True):
        """A random slot of some rule's `where` holding a node of type `typ` (any if None); adds a `where`
        to a rule that has none."""
        r = self.draw(st.integers(0, len(self.program.rules) - 1))
        rule = self.program.rules[r]
        if rule.where is None:
            rule.where = Lit(True)
        candidates = [s for s in slots(rule, "where") if (typ is None or s[3].typ == typ) and (root or s[0] is not rule)]
        if not candidates:
            return None
        return r, candidates[self.draw(st.integers(0, len(candidates) - 1))]

    def replace_in_rule(self, typ, make, root=True):
        found = self.rule_slot(typ, root)
        if found is None:
            return False
        r, (owner, attr, index, node) = found
        put(owner, attr, index, make(node, r))
        return ("rule", r)

    # -- types and names in predicates

    def bool_for_int(self):
        bools = [Lit(True), Lit(False)] + [Ref(p.name, BOOL, 0, "param") for p in self.program.params
                                           if p.elem == BOOL and p.depth == 0]
        return self.replace_in_rule(INT, lambda node, r: self.pick(bools))

    def int_for_bool(self):
        return self.replace_in_rule(BOOL, lambda node, r: self.pick([Lit(3), Q(), Bin("+", Q(), Lit(1))]))

    def unknown_name(self):
        return self.replace_in_rule(None, lambda node, r: Ref(self.pick(["nope", "zz_unknown", "qq", "kk_"]),
                                                              node.typ, 0, "param"))

    def unbound_index(self):
        names = {s.var for s in self.program.segments if s.var} | \
                {item[2] for rule in self.program.rules for side in (rule.q, rule.k) for item in side if item[0] == "idx"}
        r = self.draw(st.integers(0, len(self.program.rules) - 1))
        rule = self.program.rules[r]
        bound = {item[2] for side in (rule.q, rule.k) for item in side if item[0] == "idx"}
        free = sorted(names - bound)
        if not free:
            return False
        if rule.where is None:
            rule.where = Lit(True)
        var = self.pick(free)
        rule.where = Logic("and", [rule.where, Chain([Ref(var, INT, MEMBER, "index"), Lit(0)], [">="])])
        return ("rule", r)

    def coordinate_off_grid(self):
        rules = [r for r, rule in enumerate(self.program.rules) if not _grid_side(self.program, rule.q)]
        if not rules:
            return False
        r = self.pick(rules)
        rule = self.program.rules[r]
        attr = Attr("q", self.pick(["y", "x", "t"]))
        rule.where = Chain([attr, Lit(0)], [">="]) if rule.where is None else Logic("and", [rule.where, Chain([attr, Lit(0)], [">="])])
        return ("rule", r)

    def token_divisor(self):
        return self.replace_in_rule(INT, lambda node, r: Bin(self.pick(["//", "%"]), node,
                                                              self.pick([Q(), Attr("k", "pos"), Bin("+", Q(), Lit(1))])))

    def exponent_not_constant(self):
        exponents = [Q(), Ref("n", INT, POS, "n")] + [Ref(p.name, INT, POS, "param") for p in self.program.params
                                                      if p.elem == INT and p.depth == 0 and p.name != "n"]
        return self.replace_in_rule(INT, lambda node, r: raw(Pow, a=node, exponent=self.pick(exponents), value=2))

    def exponent_negative(self):
        return self.replace_in_rule(INT, lambda node, r: raw(Pow, a=node, exponent=Neg(Lit(self.draw(st.integers(1, 3)))),
                                                             value=-1))

    def subscript_not_list(self):
        scalars = ["n", "q", "k"] + [p.name for p in self.program.params if p.depth == 0 and p.name != "n"]
        return self.replace_in_rule(INT, lambda node, r: Sub(self.pick(scalars), INT, [Lit(0)]))

    def subscript_count(self):
        lists = [p for p in self.program.params if p.depth and p.elem == INT and not p.const]
        if not lists:
            return False
        p = self.pick(lists)
        indices = [Lit(0)] * (2 if p.depth == 1 else self.pick([1, 3]))
        return self.replace_in_rule(INT, lambda node, r: Sub(p.name, INT, list(indices)))

    def list_as_value(self):
        lists = [p.name for p in self.program.params if p.depth]
        if not lists:
            return False
        return self.replace_in_rule(INT, lambda node, r: Ref(self.pick(lists), INT, 0, "param"))

    def list_function(self):
        wrong = [("sum", p.name) for p in self.program.params if p.depth and (p.elem == BOOL or p.depth == 2)]
        wrong += [(f, x) for f in ("len", "sum") for x in ["n", "q"] + [p.name for p in self.program.params if p.depth == 0]]
        func, name = self.pick(wrong)
        return self.replace_in_rule(INT, lambda node, r: ListFn(func, name))

    def ancestor_of_wrong_list(self):
        wrong = [p.name for p in self.program.params if p.depth and (p.elem == BOOL or p.depth == 2)] + ["n"]
        return self.replace_in_rule(BOOL, lambda node, r: Anc(self.pick(wrong), Q(), Lit(0)))

    def call_arity(self):
        def make(node, r):
            func, args = self.pick([("clamp", [node, Lit(0)]), ("abs", [node, node]), ("min", [node]), ("max", []),
                                    ("clamp", [node, node, node, node]), ("len", []), ("abs", [])])
            return raw(Call, func=func, args=args, typ=INT, bound=0, tokens=False)
        return self.replace_in_rule(INT, make)

    def unknown_function(self):
        return self.replace_in_rule(INT, lambda node, r: raw(Call, func=self.pick(["abss", "mod", "pow", "floor", "Min"]),
                                                             args=[node], typ=INT, bound=0, tokens=False))

    def local_name_taken(self):
        taken = ["q", "k", "n", "min", "len", "ancestor", "clamp", "abs"] + [p.name for p in self.program.params] + \
                [s.name for s in self.program.segments] + [s.var for s in self.program.segments if s.var]
        name = self.pick(taken)
        return self.replace_in_rule(INT, lambda node, r: Let([(name, Lit(1))], node))

    def overflow(self):
        r = self.draw(st.integers(0, len(self.program.rules) - 1))
        rule = self.program.rules[r]
        e = self.pick([Pow(Q(), Lit(3), 3), Bin("*", Bin("*", Q(), Attr("k", "pos")), Ref("n", INT, POS, "n")),
                       Pow(Bin("+", Q(), Lit(2)), Lit(70), 70), Bin("*", Lit(2**62), Bin("+", Q(), Lit(2)))])
        rule.q, rule.k, rule.shape = [("*",)], [("*",)], None
        rule.where = Chain([e, Lit(0)], [self.pick(["<", ">", "=="])])
        # Alone: a rule that shows every pair would absorb it when the passes merge rules, and maskc checks
        # ranges after the passes.
        self.program.rules = [rule]
        return ("rule", 0)

    # -- sides

    def bad_side(self):
        program = self.program
        families = [s.name for s in program.segments if s.kind in ("family", "counted")]
        plain = [s.name for s in program.segments if s.kind not in ("family", "counted")]
        forms = ["star_union", "unknown"] + (["indexed_union"] if families else []) + (["index_plain"] if plain else [])
        form = self.pick(forms)
        r = self.draw(st.integers(0, len(program.rules) - 1))
        rule = program.rules[r]
        name = self.pick([s.name for s in program.segments])
        side = {"star_union": [("*",), ("seg", name)], "unknown": [("seg", "Nowhere")],
                "indexed_union": [("idx", families[0], "i_x"), ("seg", name)] if families else None,
                "index_plain": [("idx", plain[0], "i_x")] if plain else None}[form]
        if self.draw(st.booleans()):
            rule.q = side
        else:
            rule.k = side
        return ("rule", r)

    def index_variable_taken(self):
        families = [s.name for s in self.program.segments if s.kind in ("family", "counted")]
        if not families:
            return False
        r = self.draw(st.integers(0, len(self.program.rules) - 1))
        rule = self.program.rules[r]
        name = self.pick(["q", "k", "n"] + [p.name for p in self.program.params])
        rule.q = [("idx", self.pick(families), name)]
        return ("rule", r)

    # -- parameters

    def header_param(self, param: Param) -> None:
        self.program.params.insert(self.draw(st.integers(0, len(self.program.params))), param)

    def duplicate_param(self):
        if not self.program.params:
            self.header_param(Param("x_dup", INT, 0, False, 1, "a"))
        p = self.pick(self.program.params)
        self.header_param(Param(p.name, self.pick([INT, BOOL]), 0, False, None, "a"))
        return ("header", 0)

    def default_of_wrong_type(self):
        elem, depth = self.pick([(INT, 0), (BOOL, 0), (INT, 1), (BOOL, 1), (INT, 2)])
        wrong = {(INT, 0): [True, [1]], (BOOL, 0): [3, [True]], (INT, 1): [5, [True], [[1]]], (BOOL, 1): [[1], False],
                 (INT, 2): [[1, 2], 7, [[True]], [[1], [2, 3]]]}[(elem, depth)]
        self.header_param(Param("x_bad", elem, depth, False, self.pick(wrong), "a"))
        return ("header", 0)

    def default_out_of_range(self):
        name, elem, depth, const, value = self.pick([
            ("x_big", INT, 0, False, 2**31), ("x_big", INT, 0, False, -(2**31) - 1), ("x_big", INT, 1, False, [0, 2**31]),
            ("n", INT, 0, False, -1), ("n", INT, 0, False, 2**31), ("x_big", INT, 2, False, [[-(2**31) - 5]])])
        if name == "n":
            self.program.params = [p for p in self.program.params if p.name != "n"]
        self.header_param(Param(name, elem, depth, const, value, "a"))
        return ("header", 0)

    def bad_type(self):
        name, elem, depth, const = self.pick([("x_deep", INT, 3, False), ("x_deep", BOOL, 3, False), ("n", BOOL, 0, False),
                                              ("n", INT, 0, True), ("n", INT, 1, False), ("q", INT, 0, False),
                                              ("k", BOOL, 0, False)])
        self.program.params = [p for p in self.program.params if p.name != name]
        self.header_param(Param(name, elem, depth, const, None, "a"))
        return ("header", 0)

    def const_list(self):
        self.header_param(Param("x_list", self.pick([INT, BOOL]), self.pick([1, 2]), True, None, "a"))
        self.consts["x_list"] = []
        return ("header", 0)

    def const_without_value(self):
        consts = [p for p in self.program.params if p.const]
        if consts:
            p = self.pick(consts)
            p.default = None
            self.consts.pop(p.name, None)
        else:
            self.header_param(Param("x_const", self.pick([INT, BOOL]), 0, True, None, "h"))
        return ("header", 0)

    # -- segments

    def segment_line(self, kinds) -> int | None:
        found = [j for j, s in enumerate(self.program.segments) if s.kind in kinds]
        return self.pick(found) if found else None

    def duplicate_segment(self):
        s = self.pick(self.program.segments)
        at = self.draw(st.integers(0, len(self.program.segments)))
        first = min(at, self.program.segments.index(s))
        self.program.segments.insert(at, Segment(s.name, "single", length=Lit(0)))
        later = at if at > first else self.program.segments.index(s, at + 1)
        return ("segment", later)

    def family_without_list(self):
        j = self.segment_line(["family"])
        if j is None:
            return False
        self.program.segments[j].length = self.pick([Lit(3), Ref(self.program.segments[j].var, INT, MEMBER, "family")])
        return ("segment", j)

    def bool_in_layout(self):
        j = self.draw(st.integers(0, len(self.program.segments) - 1))
        s = self.program.segments[j]
        bools = [Lit(True), Chain([Lit(1), Lit(2)], ["<"])] + [Ref(p.name, BOOL, 0, "param") for p in self.program.params
                                                               if p.elem == BOOL and p.depth == 0]
        if s.kind == "grid":
            s.dims[self.draw(st.integers(0, len(s.dims) - 1))] = self.pick(bools)
        elif s.kind == "counted" and self.draw(st.booleans()):
            s.count = self.pick(bools)
        else:
            s.length = self.pick(bools)
        return ("segment", j)

    def tokens_in_layout(self):
        j = self.draw(st.integers(0, len(self.program.segments) - 1))
        s = self.program.segments[j]
        token = self.pick([Q(), Ref("k", INT, POS, "token", tokens=True), Attr("q", "pos")])
        if s.kind == "grid":
            s.dims[0] = Bin("+", s.dims[0], token)
        else:
            s.length = Bin("+", s.length, token)
        return ("segment", j)

    # -- batch lines

    def bad_batch(self):
        runtime = [p for p in self.program.params if not p.const and p.name != "n"]
        consts = [p for p in self.program.params if p.const]
        forms = ["unknown", "n_range"] + (["const"] if consts else []) + (["type"] if runtime else [])
        form = self.pick(forms)
        line = {"unknown": {"zz_nope": 1}, "n_range": {"n": -5},
                "const": {consts[0].name: 1} if consts else None,
                "type": {runtime[0].name: True if runtime[0].elem == INT else 2} if runtime else None}[form]
        self.program.batch = list(self.program.batch) + [line]
        return ("batch", len(self.program.batch) - 1)

    # -- tokens

    def edit(self, kind: str, index: int, fn):
        self.token_edit = (kind, index, fn)
        return (kind, index)

    def drop_token(self):
        """A required token dropped: the arrow, a segment's '=', the colon of a section, a predicate, a comma
        between parameters, the 'in' of a let."""
        form = self.form = self.pick(["arrow", "equals", "colon", "predicate", "shape_and_where", "comma", "in"])
        rules = len(self.program.rules)
        r = self.draw(st.integers(0, rules - 1))
        if form == "arrow":
            return self.edit("rule", r, lambda t: [x for x in t if x != "->"])
        if form == "equals":
            j = self.draw(st.integers(0, len(self.program.segments) - 1))
            return self.edit("segment", j, lambda t: t[:t.index("=")] + t[t.index("=") + 1:])
        if form == "colon":
            j = self.draw(st.integers(0, 1))
            return self.edit("section", j, lambda t: [t[0]])
        if form == "predicate":
            rule = self.program.rules[r]
            if rule.where is None:
                return self.edit("rule", r, lambda t: t + ["where"])
            return self.edit("rule", r, lambda t: t[:t.index("where") + 1])
        if form == "shape_and_where":
            rule = self.program.rules[r]
            end = len(side_tokens(rule.q)) + 1 + len(side_tokens(rule.k))
            return self.edit("rule", r, lambda t: t[:end])
        if form == "comma" and len(self.program.params) >= 2:
            def no_comma(t):
                depth, cut = 0, None
                for j, x in enumerate(t):
                    depth += x in ("(", "[")
                    depth -= x in (")", "]")
                    if x == "," and depth == 1 and cut is None and t[j + 1] != ")":
                        cut = j
                return t[:cut] + t[cut + 1:] if cut is not None else t + ["@"]
            return self.edit("header", 0, no_comma)
        lets = [j for j, rule in enumerate(self.program.rules) if rule.where is not None and
                any(isinstance(x, Let) for x in walk(rule.where))]
        if form == "in" and lets:
            j = self.pick(lets)
            return self.edit("rule", j, lambda t: t[:t.index("in")] + t[t.index("in") + 1:])
        return self.edit("rule", r, lambda t: [x for x in t if x != "->"])

    def swap_token(self):
        """A token replaced by one of another kind."""
        form = self.form = self.pick(["shape", "side", "operator", "double", "arrow", "where", "type",
                                      "keyword_param", "keyword_segment", "trailing"])
        r = self.draw(st.integers(0, len(self.program.rules) - 1))
        rule = self.program.rules[r]
        sides = len(side_tokens(rule.q)) + 1 + len(side_tokens(rule.k))
        if form == "shape":
            word = self.pick(["partial", "causals", "Full", "3", "->"])
            return self.edit("rule", r, lambda t: t[:sides] + [word] + t[sides + (1 if rule.shape else 0):])
        if form == "side":
            word = self.pick(["3", "true", "where", "grid", "(", "-"])
            names = [j for j, x in enumerate(side_tokens(rule.q)) if x not in ("|", "*", "[", "]")]
            j = self.pick(names) if names else 0
            return self.edit("rule", r, lambda t: t[:j] + [word] + t[j + 1:])
        if form in ("operator", "double"):
            wheres = [j for j, rr in enumerate(self.program.rules) if rr.where is not None]
            ops = ["<", "<=", ">", ">=", "==", "!=", "*", "//", "%", "^", "+"]
            if wheres:
                r = self.pick(wheres)
                rule = self.program.rules[r]
                past = len(side_tokens(rule.q)) + 1 + len(side_tokens(rule.k))  # operators of the predicate

                def change(t, double=form == "double"):
                    at = [j for j, x in enumerate(t) if x in ops and j > past]
                    if not at:
                        return t + ["=", "1"]
                    j = at[self.draw(st.integers(0, len(at) - 1))]
                    if double:
                        return t[:j + 1] + [t[j]] + t[j + 1:]
                    return t[:j] + [self.pick(["=", "->", ":", "=>"])] + t[j + 1:]
                return self.edit("rule", r, change)
        if form == "arrow":
            word = self.pick(["=>", "<-", "-", "=", "->->", "to"])
            return self.edit("rule", r, lambda t: [word if x == "->" else x for x in t])
        if form == "where" and rule.where is not None:
            word = self.pick(["when", "if", "Where", ":"])
            return self.edit("rule", r, lambda t: [word if x == "where" else x for x in t])
        if form == "type" and self.program.params:
            word = self.pick(["float", "integer", "Int", "list", "[int", "true"])

            def change_type(t):
                j = [j for j, x in enumerate(t) if x in ("int", "bool")]
                return t[:j[0]] + [word] + t[j[0] + 1:] if j else t + ["@"]
            return self.edit("header", 0, change_type)
        if form == "keyword_param" and any(p.name != "n" for p in self.program.params):
            p = self.pick([p for p in self.program.params if p.name != "n"])
            p.name = self.pick(sorted(KEYWORDS - {"const"}))
            return ("header", 0)
        if form == "keyword_segment":
            j = self.draw(st.integers(0, len(self.program.segments) - 1))
            self.program.segments[j].name = self.pick(sorted(KEYWORDS - {"segments"}))
            return ("segment", j)
        word = self.pick(["full", "x", "3", "where", "|", ","])
        return self.edit("rule", r, lambda t: t + ([word] if rule.where is None else [")"]))

    def bad_literal(self):
        """An integer literal that does not fit in 64 bits, or is malformed."""
        word = self.pick(["9223372036854775809", "99999999999999999999999", "12ab", "1__0", "0x1F", "1_", "3e5"])
        candidates = [("header", 0)] + [("segment", j) for j in range(len(self.program.segments))] + \
                     [("rule", j) for j in range(len(self.program.rules))] + \
                     [("batch", j) for j in range(len(self.program.batch))]
        kind, index = self.pick(candidates)

        def change(t):
            at = [j for j, x in enumerate(t) if x[0].isdigit()]
            if not at:
                return t + [word]
            j = at[self.draw(st.integers(0, len(at) - 1))]
            return t[:j] + [word] + t[j + 1:]
        return self.edit(kind, index, change)

    def stray_character(self):
        char = self.pick(["$", "@", "é", "?", "&", "{", "`", "'", '"', "!", ";", "~"])
        kinds = [("header", 0), ("rule", self.draw(st.integers(0, len(self.program.rules) - 1))),
                 ("segment", self.draw(st.integers(0, len(self.program.segments) - 1)))]
        kind, index = self.pick(kinds)
        at = self.draw(st.integers(0, 40))
        return self.edit(kind, index, lambda t: t[:min(at, len(t))] + [char] + t[min(at, len(t)):])

    def brackets(self):
        """An extra ')' or a dropped '(': reported on the line; a dropped ')': reported where the parser
        notices (maybe lines later), so no line is checked."""
        r = self.draw(st.integers(0, len(self.program.rules) - 1))
        rule = self.program.rules[r]
        sides = len(side_tokens(rule.q)) + 1 + len(side_tokens(rule.k))
        form = self.pick(["extra", "drop_open", "drop_close"])
        at = self.draw(st.integers(0, 60))

        def change(t):
            opens = [j for j, x in enumerate(t) if x == "(" and j > sides]
            closes = [j for j, x in enumerate(t) if x == ")" and j > sides]
            if form == "extra" or not opens:
                j = sides + 1 + min(at, len(t) - sides - 1)
                return t[:j] + [")"] + t[j:]
            j = opens[at % len(opens)] if form == "drop_open" else closes[at % len(closes)]
            return t[:j] + t[j + 1:]
        self.edit("rule", r, change)
        return None if form == "drop_close" else ("rule", r)

    def missing_section(self):
        j = self.draw(st.integers(0, 1))
        self.token_edit = ("section", j, None)
        return ("drop_line", j)


STRUCTURE_DAMAGE = ["bool_for_int", "int_for_bool", "unknown_name", "unbound_index", "coordinate_off_grid",
                    "token_divisor", "exponent_not_constant", "exponent_negative", "subscript_not_list",
                    "subscript_count", "list_as_value", "list_function", "ancestor_of_wrong_list", "call_arity",
                    "unknown_function", "local_name_taken", "overflow", "bad_side", "index_variable_taken",
                    "duplicate_param", "default_of_wrong_type", "default_out_of_range", "bad_type", "const_list",
                    "const_without_value", "duplicate_segment", "family_without_list", "bool_in_layout",
                    "tokens_in_layout", "bad_batch"]
TOKEN_DAMAGE = ["drop_token", "swap_token", "bad_literal", "stray_character", "brackets", "missing_section"]


@st.composite
def damaged_cases(draw, kinds: list[str] | None = None):
    """(text, consts, (first, last) line the error must be reported on or None, what was done): a valid
    program from cases(), damaged once."""
    case = draw(cases(max_sequences=1))
    program = copy.deepcopy(case.program)
    program.batch = [dict(x) for x in program.batch]
    consts = dict(case.consts)
    damage = Damage(draw, program, consts)
    for _ in range(20):
        what = draw(st.sampled_from(kinds or STRUCTURE_DAMAGE + TOKEN_DAMAGE * 3))
        target = getattr(damage, what)()
        if target is not False:
            break
    else:
        raise AssertionError("no damage applies")
    rng = random.Random(case.seed)
    lines = program_lines(program, Printer(rng))
    kind_index = [(kind, sum(1 for k, _ in lines[:j] if k == kind)) for j, (kind, _) in enumerate(lines)]
    if damage.token_edit is not None:
        kind, index, fn = damage.token_edit
        j = kind_index.index((kind, index))
        if fn is None:  # a whole line dropped: reported on the next one
            del lines[j]
            del kind_index[j]
            target = kind_index[j] if j < len(kind_index) else None
        else:
            lines[j] = (kind, fn(list(lines[j][1])))
    text, spans = assemble(lines, Style(rng))
    where = spans[kind_index.index(target)] if target is not None else None
    return text, consts, where, f"{what} {damage.form}".strip()
