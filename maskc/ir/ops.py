"""The IR's operators: one entry per operator, holding everything the compiler knows about it.

An entry says how the operator is written (in a .mask file, and by `ir.show`), what it computes (the exact
evaluation every faster path is tested against), which values it can produce (static ranges, which pick C
types and catch 64-bit overflow; and the planner's rule over boxes), and how the generated kernel and the
standalone host planner spell it. The stages dispatch on the entry (`ir.operation(e)` finds it for a node):
evaluation, static ranges, the planner's intervals and both code generators name no operator, so a new
operator is a new entry here -- plus a grammar rule if it brings a new symbol (a function-style operator
needs none: the checker and lowering take their calls from here). Passes still name the operators their
rewrites are about (`0 - x` is `-x`, `clamp` is a min of a max).

Templates (`show`, `c`, `host`) name the operands `{0}` and `{1}`; `^` takes its exponent, a constant, as
`{1}`. A connective node holds a whole chain, more operands than its template names: what stands between
`{0}` and `{1}` repeats, so "({0} && {1})" over a, b, c reads "(a && b && c)".
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

INT = "int"
BOOL = "bool"
ATOM = 10  # the precedence of a function call: it never needs parentheses


@dataclass(frozen=True)
class Operator:
    name: str  # the IR's spelling (the `op` of Unary, Binary, Compare, Logic; `^` is a Pow node)
    syntax: str  # how a .mask file writes it: a symbol, a keyword, or a function's name
    operands: str  # INT | BOOL: the type every operand has (`^`'s exponent is a constant int)
    result: str  # INT | BOOL
    arity: int  # operands the templates name
    # `ir.show`: how tightly the operator binds (a parent binding tighter wraps it in parentheses), and the
    # precedence each operand is shown at (an operand past the second is shown like the second).
    prec: int
    binds: tuple[int, ...]
    show: str
    # The value, elementwise: numpy arrays, or Python ints where the checker folds literals (so that the
    # result is exact, unbounded, and the checker can refuse what does not fit 64 bits). `//` and `%` round
    # toward negative infinity, as Python and numpy do; a zero divisor raises ZeroDivisionError.
    evaluate: Callable
    # (lo, hi) of the result from the operands' hulls (objects with lo, hi), sound for every operand value:
    # `ir.ranges` uses it on Python ints, unbounded. Where the planner's rule has the same hull, `box` reuses
    # it on int64 arrays.
    interval: Callable
    # The planner's rule (maskc.plan.intervals), vectorised over boxes. An int operand has lo, hi, exact
    # (both ends attained) and contig (every integer between attained); a truth operand has can_true and
    # can_false. An int result is (lo, hi, exact, contig); a comparison's is (can_true, can_false, exact);
    # a connective's is (can_true, can_false), its exactness being the planner's to combine.
    box: Callable
    c: str  # device code, over operands already converted to the result's C type
    host: str  # host C++ of the standalone planner, in 64 bits; `{p}` is the planner's name prefix
    # C's truncating form, used where the dividend is provably non-negative and the divisor positive: there
    # it agrees with flooring, and costs less than the helper.
    c_truncating: str | None = None
    # Where the divisor is a value of the sequence: device code over a Divisor that mask_seq() makes of it once
    # (a multiply and a shift a pair instead of a division; codegen.mask_code's by_divisor says when).
    c_by_divisor: str | None = None
    residue: bool = False  # the result is the dividend's residue: `(a - b) % d == 0` is `a % d == b % d`
    # Connectives: the device code of a long chain, without short-circuits (see codegen.mask_code.render_bool).
    c_eager: str | None = None
    grows: bool = False  # the result can leave 64 bits where the operands fit: `ir.ranges` checks it
    divides: bool = False  # the right operand is a divisor: token-free (checker), non-zero (planner)
    identity: int | bool | None = None  # `x op identity` is x
    commutative: bool = False  # so `identity op x` is x too
    associative: bool = False  # so a chain needs no grouping: one `and` node, min(a, b, c) as a call
    self_inverse: bool = False  # `op op x` is x
    negation: str | None = None  # comparisons: `not (a op b)` is `a negation b`
    converse: str | None = None  # comparisons: `a op b` is `b converse a`


def spell(template: str, operands: Sequence[str], **names: str) -> str:
    """A template with its operands filled in (see the module's docstring for more than two)."""
    if len(operands) <= 2:
        return template.format(*operands, **names)
    head, rest = template.split("{0}")
    between, tail = rest.split("{1}")
    return head.format(**names) + between.format(**names).join(operands) + tail.format(**names)


# ---------------------------------------------------------------------------------------------------
# Rules shared by static ranges (Python ints, unbounded) and the planner (int64 arrays, one per box)
# ---------------------------------------------------------------------------------------------------

# min, max and a conditional over either kind of value: numpy would turn Python ints into int64 and wrap
# the very values the static ranges must see past 64 bits.


def _lowest(*xs):
    return functools.reduce(np.minimum, xs) if any(isinstance(x, np.ndarray) for x in xs) else min(xs)


def _highest(*xs):
    return functools.reduce(np.maximum, xs) if any(isinstance(x, np.ndarray) for x in xs) else max(xs)


def _where(cond, yes, no):
    return np.where(cond, yes, no) if isinstance(cond, np.ndarray) else (yes if cond else no)


def _holds_zero(a):
    return (a.lo <= 0) & (a.hi >= 0)


def _add_range(a, b):
    return a.lo + b.lo, a.hi + b.hi


def _sub_range(a, b):
    return a.lo - b.hi, a.hi - b.lo


def _mul_range(a, b):
    corners = (a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi)
    return _lowest(*corners), _highest(*corners)


def _min_range(a, b):
    return _lowest(a.lo, b.lo), _lowest(a.hi, b.hi)


def _max_range(a, b):
    return _highest(a.lo, b.lo), _highest(a.hi, b.hi)


def _neg_range(a):
    return -a.hi, -a.lo


def _abs_range(a):
    ends = abs(a.lo), abs(a.hi)
    return _where(_holds_zero(a), 0, _lowest(*ends)), _highest(*ends)


def _pow_end(x, n):
    """x**n; past 64 bits, a stand-in just outside them with the right sign (2^64), never an integer of
    thousands of digits (`2^1000000000000` would not finish)."""
    if isinstance(x, int) and n > 64 and abs(x) > 1:
        return (-1 if x < 0 and n % 2 else 1) * 2**64
    return x**n


def _pow_range(a, n):
    ends = _pow_end(a.lo, n), _pow_end(a.hi, n)
    # Odd powers increase; even ones fall to 0 where the base passes 0. (Loose for n = 0, which is 1.)
    return _where(_holds_zero(a) & (n % 2 == 0), 0, _lowest(*ends)), _highest(*ends)


def _truth_range(*_):
    return 0, 1


# Static only: these hold for divisors of any range, so they are loose where the planner, which sees one
# divisor per box, is exact.


def _floordiv_range(a, b):
    # |x // d| <= |x| for every non-zero d; the sign depends on both.
    m = max(abs(a.lo), abs(a.hi))
    if b.lo > 0 and a.lo >= 0:
        return a.lo // b.hi, a.hi // b.lo
    # m is 2^63, past 64 bits, only for x = -2^63, and only d = -1 reaches it (-2^63 // -1): for every other
    # d, x // d lies in [x.lo, x.hi] (d = 1) or within |x| / 2 of 0. So without -1 among the divisors the
    # result fits (`ir.ranges` checks this operator: INT64_MIN // -1 is refused, never wrapped).
    if m > 2**63 - 1 and not b.lo <= -1 <= b.hi:
        return -m, max(a.hi, (m + 1) // 2)
    return -m, m


def _mod_range(a, b):
    m = max(abs(b.lo), abs(b.hi))
    return (0 if b.lo > 0 else -(m - 1)), (m - 1 if b.hi > 0 else 0)


# ---------------------------------------------------------------------------------------------------
# The planner's rules over boxes
# ---------------------------------------------------------------------------------------------------


def _monotone_box(rule):
    """Operators monotone in each operand that keep runs of integers unbroken (+, -, min, max, neg): the
    hull's ends are attained where the operands' are, and every integer between them is."""

    def box(*xs):
        lo, hi = rule(*xs)
        exact = functools.reduce(operator.and_, [x.exact for x in xs])
        return lo, hi, exact, functools.reduce(operator.and_, [x.contig for x in xs])

    return box


def _mul_box(a, b):
    lo, hi = _mul_range(a, b)
    # Scaling by anything but -1, 0 or 1 leaves gaps between the products.
    unit = ((b.lo == b.hi) & (np.abs(b.lo) <= 1)) | ((a.lo == a.hi) & (np.abs(a.lo) <= 1))
    return lo, hi, a.exact & b.exact, unit & a.contig & b.contig


def _divisor(b):
    # Divisors never depend on the tokens (the checker guarantees it), so b is a point in every box. A zero
    # divisor is refused by the planner before it gets here; it is only kept from faulting.
    return np.where(b.lo == 0, 1, b.lo)


def _floordiv_box(a, b):
    d = _divisor(b)
    x, y = np.floor_divide(a.lo, d), np.floor_divide(a.hi, d)
    return np.minimum(x, y), np.maximum(x, y), a.exact & b.exact, a.contig


def _mod_box(a, b):
    d = _divisor(b)
    # Monotone inside one period, the whole residue range once the hull wraps.
    same = np.floor_divide(a.lo, d) == np.floor_divide(a.hi, d)
    lo = np.where(same, np.mod(a.lo, d), np.where(d > 0, 0, d + 1))
    hi = np.where(same, np.mod(a.hi, d), np.where(d > 0, d - 1, 0))
    return lo, hi, a.exact & b.exact & (same | a.contig), a.contig & same


def _even_exact(a):
    """An even function (abs, x^2k) is lowest at 0, which is attained only if the base passes through 0."""
    spans0 = (a.lo < 0) & (a.hi > 0)
    return a.exact & (~spans0 | a.contig)


def _abs_box(a):
    lo, hi = _abs_range(a)
    return lo, hi, _even_exact(a), a.contig


def _pow_box(a, n):
    if n == 0:
        one = np.ones_like(a.lo)
        return one, one, True, True
    if n == 1:
        return a.lo, a.hi, a.exact, a.contig
    lo, hi = _pow_range(a, n)
    if n % 2:
        return lo, hi, a.exact, False  # odd powers skip integers
    return lo, hi, _even_exact(a), a.lo == a.hi


class _Difference:
    """x - y compared with 0 without computing it: both sides of a comparison fit int64 (maskc.ir.ranges
    checks them), their difference need not (`2^63-1 - q < k - (2^63-1)`)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __lt__(self, zero):
        return self.x < self.y

    def __le__(self, zero):
        return self.x <= self.y

    def __gt__(self, zero):
        return self.x > self.y

    def __ge__(self, zero):
        return self.x >= self.y

    def __eq__(self, zero):
        return self.x == self.y

    __hash__ = None


def _comparison_box(can_true, can_false, at_one_point=False):
    """A comparison over boxes: the sign of lhs - rhs decides it, read from the ends of the two sides."""

    def box(a, b):
        lo, hi = _Difference(a.lo, b.hi), _Difference(a.hi, b.lo)
        exact = a.exact & b.exact
        if at_one_point:  # == and != flip at one difference, attained only if no integer is skipped
            exact = exact & a.contig & b.contig
        return can_true(lo, hi), can_false(lo, hi), exact

    return box


def _and_box(*xs):
    return np.logical_and.reduce([x.can_true for x in xs]), np.logical_or.reduce([x.can_false for x in xs])


def _or_box(*xs):
    return np.logical_or.reduce([x.can_true for x in xs]), np.logical_and.reduce([x.can_false for x in xs])


def _not_box(a):
    return a.can_false, a.can_true


# ---------------------------------------------------------------------------------------------------
# Exact evaluation
# ---------------------------------------------------------------------------------------------------


def _floordiv(a, b):
    if np.any(b == 0):
        raise ZeroDivisionError("division by zero")
    return a // b


def _mod(a, b):
    if np.any(b == 0):
        raise ZeroDivisionError("division by zero")
    return a % b


# ---------------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------------


def _arithmetic(name, prec, evaluate, interval, box, c, host=None, **facts) -> Operator:
    """An infix integer operator, left-associative in the language: `a - b - c` is `(a - b) - c`."""
    return Operator(name, name, INT, INT, 2, prec, (prec, prec + 1), f"{{0}} {name} {{1}}", evaluate, interval,
                    box, c, host or c, **facts)


def _call(name, arity, evaluate, interval, box, **facts) -> Operator:
    """An integer operator written as a function, as it is in C (helpers in templates/common/mask.cu.j2)."""
    operands = ", ".join(f"{{{i}}}" for i in range(arity))
    return Operator(name, name, INT, INT, arity, ATOM, (0,) * arity, f"{name}({operands})", evaluate, interval,
                    box, f"i{name}({operands})", f"i{name}({operands})", **facts)


def _comparison(name, evaluate, can_true, can_false, negation, converse, at_one_point=False) -> Operator:
    """A comparison of ints; `can_true` and `can_false` say, from the hull [lo, hi] of lhs - rhs, whether it
    can hold and whether it can fail."""
    return Operator(name, name, INT, BOOL, 2, 4, (5, 5), f"{{0}} {name} {{1}}", evaluate, _truth_range,
                    _comparison_box(can_true, can_false, at_one_point), f"({{0}} {name} {{1}})",
                    f"(long long)({{0}} {name} {{1}})", commutative=converse == name, negation=negation,
                    converse=converse)


def _connective(name, prec, evaluate, box, c, identity) -> Operator:
    """`and`, `or`: one IR node holds all the operands of a chain."""
    return Operator(name, name, BOOL, BOOL, 2, prec, (prec + 1, prec + 1), f"{{0}} {name} {{1}}", evaluate,
                    _truth_range, box, f"({{0}} {c} {{1}})", f"(long long)({{0}} {c} {{1}})", identity=identity,
                    commutative=True, associative=True, c_eager=f"({{0}} {c[0]} {{1}})")


_TABLE = (
    _arithmetic("+", 5, operator.add, _add_range, _monotone_box(_add_range), "({0} + {1})",
                grows=True, identity=0, commutative=True, associative=True),
    _arithmetic("-", 5, operator.sub, _sub_range, _monotone_box(_sub_range), "({0} - {1})", grows=True, identity=0),
    _arithmetic("*", 6, operator.mul, _mul_range, _mul_box, "({0} * {1})",
                grows=True, identity=1, commutative=True, associative=True),
    # |x // d| <= |x|, so it grows only for INT64_MIN // -1 (2^63): `ir.ranges` checks it too.
    _arithmetic("//", 6, _floordiv, _floordiv_range, _floordiv_box, "floordiv({0}, {1})", "{p}_div({0}, {1}, &err)",
                c_truncating="({0} / {1})", c_by_divisor="floordiv_by({0}, {1})", grows=True, divides=True,
                identity=1),
    _arithmetic("%", 6, _mod, _mod_range, _mod_box, "floormod({0}, {1})", "{p}_mod({0}, {1}, &err)",
                c_truncating="({0} % {1})", c_by_divisor="floormod_by({0}, {1})", divides=True,
                residue=True),
    _call("min", 2, np.minimum, _min_range, _monotone_box(_min_range), commutative=True, associative=True),
    _call("max", 2, np.maximum, _max_range, _monotone_box(_max_range), commutative=True, associative=True),
    _call("abs", 1, abs, _abs_range, _abs_box, grows=True),  # abs(-2^63) does not fit
    Operator("neg", syntax="-", operands=INT, result=INT, arity=1, prec=7, binds=(8,), show="-{0}",
             evaluate=operator.neg, interval=_neg_range, box=_monotone_box(_neg_range), c="(-{0})", host="(-{0})",
             grows=True, self_inverse=True),
    # The exponent is a constant (the checker folds it), so it is shown, evaluated and spelled as a number.
    Operator("^", syntax="^", operands=INT, result=INT, arity=2, prec=8, binds=(9,), show="{0}^{1}",
             evaluate=operator.pow, interval=_pow_range, box=_pow_box, c="ipow({0}, {1})", host="ipow({0}, {1})",
             grows=True),
    _comparison("<", np.less, lambda lo, hi: lo < 0, lambda lo, hi: hi >= 0, ">=", ">"),
    _comparison("<=", np.less_equal, lambda lo, hi: lo <= 0, lambda lo, hi: hi > 0, ">", ">="),
    _comparison(">", np.greater, lambda lo, hi: hi > 0, lambda lo, hi: lo <= 0, "<=", "<"),
    _comparison(">=", np.greater_equal, lambda lo, hi: hi >= 0, lambda lo, hi: lo < 0, "<", "<="),
    _comparison("==", np.equal, lambda lo, hi: (lo <= 0) & (hi >= 0), lambda lo, hi: ~((lo == 0) & (hi == 0)),
                "!=", "==", at_one_point=True),
    _comparison("!=", np.not_equal, lambda lo, hi: ~((lo == 0) & (hi == 0)), lambda lo, hi: (lo <= 0) & (hi >= 0),
                "==", "!=", at_one_point=True),
    Operator("not", syntax="not", operands=BOOL, result=BOOL, arity=1, prec=3, binds=(3,), show="not {0}",
             evaluate=np.logical_not, interval=_truth_range, box=_not_box, c="(!{0})", host="(!{0})",
             self_inverse=True),
    _connective("and", 2, lambda *xs: functools.reduce(np.logical_and, xs), _and_box, "&&", True),
    _connective("or", 1, lambda *xs: functools.reduce(np.logical_or, xs), _or_box, "||", False),
)

OPERATORS: dict[str, Operator] = {op.name: op for op in _TABLE}

# The surface syntax, for the checker and lowering: prefix operators, infix operators, function calls.
PREFIX = {op.syntax: op for op in _TABLE if op.arity == 1 and op.prec != ATOM}
INFIX = {op.syntax: op for op in _TABLE if op.arity == 2 and op.prec != ATOM}
CALLS = {op.syntax: op for op in _TABLE if op.prec == ATOM}
