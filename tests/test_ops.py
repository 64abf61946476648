"""The operator table (maskc.ir.ops): every entry is complete, its facets agree with one another on random
small operands (the static and the planner's intervals hold every value the evaluation gives, the C and host
spellings compute it), and the stages that dispatch on the table do not spell operators themselves."""

from __future__ import annotations

import ast
import ctypes
import itertools
import string
from pathlib import Path
from types import SimpleNamespace

import host_mask
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maskc import ir
from maskc.compiler import compile_text
from maskc.front import read_program
from maskc.ir.ops import BOOL, CALLS, INFIX, INT, OPERATORS, PREFIX, spell
from maskc.kernels import KernelOptions, planner_name

ALL = list(OPERATORS.values())
ARITHMETIC = [op for op in ALL if op.result == INT]
COMPARISONS = [op for op in ALL if op.operands == INT and op.result == BOOL]
CONNECTIVES = [op for op in ALL if op.operands == BOOL]
POW = OPERATORS["^"]  # the one operator with a constant operand, the exponent


def by_name(ops):
    return pytest.mark.parametrize("op", ops, ids=[op.name for op in ops])


def node(op, args, consts=()) -> ir.Expr:
    """The IR node applying `op`."""
    if op is POW:
        return ir.Pow(args[0], consts[0])
    if op.operands == INT and op.result == BOOL:
        return ir.Compare(op.name, *args)
    if op.operands == BOOL and op.arity == 2:
        return ir.Logic(op.name, tuple(args))
    return ir.Unary(op.name, args[0]) if op.arity == 1 else ir.Binary(op.name, *args)


# ---------------------------------------------------------------------------------------------------
# Every entry is complete
# ---------------------------------------------------------------------------------------------------


@by_name(ALL)
def test_every_operator_has_every_facet(op):
    assert callable(op.evaluate) and callable(op.interval) and callable(op.box)
    operands = {str(i) for i in range(op.arity)}
    for template in (op.show, op.c, op.host) + ((op.c_truncating,) if op.c_truncating else ()):
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
        assert fields - {"p"} == operands, f"{op.name}: {template!r} names {fields}"
    assert 1 <= len(op.binds) <= op.arity
    assert op.result in (INT, BOOL) and op.operands in (INT, BOOL)
    # Every operator can be written in a .mask file, and the IR finds it again.
    assert op in [*PREFIX.values(), *INFIX.values(), *CALLS.values()]
    args = [ir.Param("a")] * op.arity
    assert ir.operation(node(op, args[:1] if op is POW else args, (2,) if op is POW else ())).op is op
    if op.result == BOOL and op.operands == INT:
        assert OPERATORS[op.negation].result == BOOL and OPERATORS[op.converse].result == BOOL


# ---------------------------------------------------------------------------------------------------
# show: what it prints parses back to the same IR, whatever the nesting (precedences and binds agree with
# the grammar)
# ---------------------------------------------------------------------------------------------------

HEADER = "mask t(a: int = 1, d: int = 1, flag: bool = false)\nsegments:\n    S = n\nrules:\n"
Q, K, A, D, FLAG = ir.Token("q", "index"), ir.Token("k", "index"), ir.Param("a"), ir.Param("d"), ir.Param("flag")


def int_exprs(depth: int):
    leaf = st.sampled_from([Q, K, A, ir.Const(0), ir.Const(3)])
    if depth == 0:
        return leaf
    sub = int_exprs(depth - 1)
    divisor = st.sampled_from([D, ir.Const(3)])  # the language wants divisors free of the tokens
    built = []
    for op in ARITHMETIC:
        if op is POW:
            built.append(st.tuples(sub, st.integers(0, 3)).map(lambda t: node(POW, t[:1], t[1:])))
        elif op.arity == 1:  # (the parser reads `-3` as one literal, so no prefix operator on a literal)
            built.append(sub.filter(lambda x: not isinstance(x, ir.Const)).map(lambda x, op=op: node(op, [x])))
        else:
            built.append(st.tuples(sub, divisor if op.divides else sub).map(lambda t, op=op: node(op, t)))
    return st.one_of(leaf, *built)


def bool_exprs(depth: int):
    ints = int_exprs(2)
    leaf = st.one_of(st.just(FLAG), *[st.tuples(ints, ints).map(lambda t, op=op: node(op, t)) for op in COMPARISONS])
    if depth == 0:
        return leaf
    sub = bool_exprs(depth - 1)
    built = [sub.map(lambda x, op=op: node(op, [x])) if op.arity == 1 else
             st.lists(sub, min_size=2, max_size=3).map(lambda xs, op=op: node(op, xs)) for op in CONNECTIVES]
    return st.one_of(leaf, *built)


@settings(max_examples=300, deadline=None)
@given(bool_exprs(2))
def test_show_parses_back_to_the_same_expression(e):
    text = ir.show(e)
    program = read_program(HEADER + f"    S -> S   where {text}\n")
    assert program.regions[0].pred == e, text


# ---------------------------------------------------------------------------------------------------
# evaluate, interval and box agree: on operands drawn from small sets of integers, every value lies in the
# static interval and in the planner's box, and what the box claims attained is attained
# ---------------------------------------------------------------------------------------------------

SETS = st.lists(st.integers(-9, 9), min_size=1, max_size=6, unique=True)


def hull(values):
    return SimpleNamespace(lo=min(values), hi=max(values))


def box(values):
    """The planner's view of a set of values in one box: its hull, whose ends it attains (exact), and whether
    it has every integer between them (contig)."""
    lo, hi = min(values), max(values)
    return SimpleNamespace(lo=np.array([lo]), hi=np.array([hi]), exact=True,
                           contig=np.array([len(values) == hi - lo + 1]))


def value(op, *operands) -> int:
    return int(op.evaluate(*[np.int64(x) for x in operands]))


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(ARITHMETIC), SETS, SETS, st.integers(0, 4), st.integers(-9, 9).filter(bool))
def test_intervals_hold_every_value_of_an_arithmetic_operator(op, xs, ys, exponent, divisor):
    if op is POW:
        operand_sets, consts = [xs], (exponent,)
    else:
        if op.divides:
            ys = [y for y in ys if y] or [divisor]
        operand_sets, consts = [xs, ys][:op.arity], ()
    values = {value(op, *combo, *consts) for combo in itertools.product(*operand_sets)}

    lo, hi = op.interval(*map(hull, operand_sets), *consts)
    assert lo <= min(values) and max(values) <= hi
    if not op.grows:  # it cannot leave 64 bits: no value beyond its operands' magnitudes
        assert max(abs(lo), abs(hi)) <= max(abs(v) for s in operand_sets for v in s)

    # The planner sees one divisor per box.
    planner_sets = [xs, [divisor]] if op.divides else operand_sets
    values = {value(op, *combo, *consts) for combo in itertools.product(*planner_sets)}
    lo, hi, exact, contig = (np.asarray(v).item() for v in op.box(*map(box, planner_sets), *consts))
    assert lo <= min(values) and max(values) <= hi
    if exact:
        assert lo in values and hi in values
    if contig:
        assert set(range(lo, hi + 1)) <= values


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(COMPARISONS), SETS, SETS)
def test_a_comparison_can_be_true_or_false_exactly_where_some_pair_is(op, xs, ys):
    truths = {bool(op.evaluate(x, y)) for x, y in itertools.product(xs, ys)}
    can_true, can_false, exact = (np.asarray(v).item() for v in op.box(box(xs), box(ys)))
    assert (True not in truths or can_true) and (False not in truths or can_false)
    if exact:  # xs and ys vary independently, so an exact answer is attained
        assert (can_true == (True in truths)) and (can_false == (False in truths))
    assert op.interval(hull(xs), hull(ys)) == (0, 1)


TRUTHS = st.sampled_from([{True}, {False}, {True, False}])


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(CONNECTIVES), st.lists(TRUTHS, min_size=3, max_size=3))
def test_a_connective_over_independent_operands_is_true_or_false_exactly_where_it_can_be(op, operands):
    operands = operands[:1] if op.arity == 1 else operands
    truths = {bool(op.evaluate(*combo)) for combo in itertools.product(*operands)}
    parts = [SimpleNamespace(can_true=np.array([True in s]), can_false=np.array([False in s])) for s in operands]
    can_true, can_false = (np.asarray(v).item() for v in op.box(*parts))
    assert can_true == (True in truths) and can_false == (False in truths)


# ---------------------------------------------------------------------------------------------------
# The algebraic facts the passes rely on
# ---------------------------------------------------------------------------------------------------

INTS = st.integers(-50, 50)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ALL), INTS, INTS, INTS)
def test_algebraic_facts(op, x, y, z):
    if op.operands == BOOL:
        x, y, z = x % 2 == 0, y % 3 == 0, z % 5 == 0
    ev = op.evaluate
    if op.divides:
        with pytest.raises(ZeroDivisionError):
            ev(np.int64(x), np.int64(0))
        y = y or 1
    if op is POW:
        y = abs(y) % 5
    if op.arity == 1:
        assert not op.self_inverse or ev(ev(x)) == x
        return
    # Python ints (the checker folds literals with them) and int64 (evaluate.py) agree on small values.
    assert ev(x, y) == ev(np.int64(x), np.int64(y))
    if op.identity is not None:
        assert ev(x, op.identity) == x
        assert not op.commutative or ev(op.identity, x) == x
    assert not op.commutative or ev(x, y) == ev(y, x)
    assert not op.associative or ev(ev(x, y), z) == ev(x, ev(y, z))
    if op.negation:
        assert OPERATORS[op.negation].evaluate(x, y) == (not ev(x, y))
    if op.converse:
        assert OPERATORS[op.converse].evaluate(y, x) == ev(x, y)


# ---------------------------------------------------------------------------------------------------
# The C spellings, compiled for the host: device code (over int and over long long operands, with the
# truncating form where it applies) and the standalone planner's C++ compute what `evaluate` does
# ---------------------------------------------------------------------------------------------------

needs_cxx = pytest.mark.skipif(host_mask.compiler() is None, reason="needs a C++ compiler")
GRID = np.array(list(itertools.product(range(-7, 8), repeat=3)), dtype=np.int64).T  # x, y, z


def _spellings():
    """(name, op, exponent, C expression over x, y, z) for every spelling of every operator."""
    out = []
    for op in ALL:
        for form in ("c", "c_truncating", "host"):
            template = getattr(op, form)
            if template is None:
                continue
            if op is POW:
                out += [(f"{form}_pow{n}", op, n, spell(template, ["x", str(n)])) for n in range(5)]
            elif op.operands == BOOL:
                names = ["(x != 0)", "(y != 0)", "(z != 0)"][:op.arity]
                out.append((f"{form}_{len(out)}", op, None, spell(template, names, p="P")))
                if op.arity == 2:  # a chain of three in one node
                    out.append((f"{form}_{len(out)}", op, None, spell(template, names + ["(z != 0)"], p="P")))
            else:
                out.append((f"{form}_{len(out)}", op, None, spell(template, ["x", "y"][:op.arity], p="P")))
    return out


def _expected(op, expression, exponent):
    x, y, z = GRID
    if op is POW:
        return op.evaluate(x, exponent), np.ones(len(x), dtype=bool)
    if op.operands == BOOL:
        operands = [x != 0, y != 0, z != 0][:expression.count("!= 0")]
        return op.evaluate(*operands).astype(np.int64), np.ones(len(x), dtype=bool)
    valid = y != 0 if op.divides else np.ones(len(x), dtype=bool)
    safe_y = np.where(valid, y, 1)
    return op.evaluate(*[x, safe_y][:op.arity]).astype(np.int64), valid


@needs_cxx
def test_c_and_host_spellings_compute_what_evaluate_does(tmp_path):
    options = KernelOptions()
    source = compile_text(HEADER + "    S -> S causal\n", options).source
    prefix = planner_name("t", options)
    functions = []
    spellings = _spellings()
    for name, op, _, expression in spellings:
        skip = "if (y == 0) continue;  // a zero divisor is refused before any code runs" if op.divides else ""
        for ctype in ("int", "long long"):
            functions.append(
                f'extern "C" void op_{name}_{ctype[0]}(const long long* xs, const long long* ys, const long long* zs,'
                f' int n, long long* out) {{\n'
                f'    for (int i = 0; i < n; ++i) {{\n'
                f'        const {ctype} x = ({ctype})xs[i], y = ({ctype})ys[i], z = ({ctype})zs[i];\n'
                f'        int err = 0;\n'
                f'        {skip}\n'
                f'        (void)x; (void)y; (void)z; (void)err;\n'
                f'        out[i] = (long long)({expression.replace("P_", prefix + "_")});\n'
                f'    }}\n}}\n')
    lib = host_mask.build(source + "\n" + "".join(functions), tmp_path)

    x, y, z = (np.ascontiguousarray(v) for v in GRID)
    for name, op, exponent, expression in spellings:
        want, valid = _expected(op, expression, exponent)
        if name.startswith("c_truncating"):
            valid = valid & (x >= 0) & (y > 0)  # where mask_code uses it
        for ctype in ("int", "long long"):
            out = np.zeros(len(x), dtype=np.int64)
            pointers = [v.ctypes.data_as(ctypes.c_void_p) for v in (x, y, z, out)]
            getattr(lib, f"op_{name}_{ctype[0]}")(*pointers[:3], ctypes.c_int(len(x)), pointers[3])
            bad = np.nonzero(valid & (out != want))[0]
            assert not len(bad), (f"{op.name} as {expression} over {ctype}: at x={x[bad[0]]}, y={y[bad[0]]}, "
                                  f"z={z[bad[0]]} it gives {out[bad[0]]}, evaluate {want[bad[0]]}")


# ---------------------------------------------------------------------------------------------------
# The table is the only place the stages learn what an operator is: the modules that dispatch on it hold
# no operator's name as a string (they may still say "//" in a comment)
# ---------------------------------------------------------------------------------------------------

DISPATCHERS = ["maskc/ir/evaluate.py", "maskc/ir/ranges.py", "maskc/plan/intervals.py",
               "maskc/codegen/mask_code.py", "maskc/codegen/host_code.py"]


@pytest.mark.parametrize("path", DISPATCHERS)
def test_dispatchers_do_not_spell_operators(path):
    root = Path(__file__).resolve().parent.parent
    names = {op.name for op in ALL} | {op.syntax for op in ALL}
    tree = ast.parse((root / path).read_text())
    spelled = sorted({(n.lineno, n.value.strip()) for n in ast.walk(tree)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.strip() in names})
    assert not spelled, f"{path} spells operators (line, name): {spelled}; take them from maskc.ir.ops"


@needs_cxx
def test_division_by_a_divisor_of_the_sequence(tmp_path):
    """c_by_divisor (a multiply and a shift by mask_seq()'s Divisor) floors as evaluate does, for every int
    dividend but INT_MIN (mask_code.by_divisor keeps the helper there) and every non-zero int divisor."""
    source = compile_text(HEADER + "    S -> S causal\n", KernelOptions()).source
    ops = [op for op in ALL if op.c_by_divisor is not None]
    assert {op.show for op in ops} == {"{0} // {1}", "{0} % {1}"}
    functions = [
        f'extern "C" void by_divisor_{i}(const long long* xs, const long long* ys, int n, long long* out) {{\n'
        f'    for (int i = 0; i < n; ++i) {{\n'
        f'        const Divisor d = make_divisor((int)ys[i]);\n'
        f'        out[i] = {spell(op.c_by_divisor, ["(int)xs[i]", "d"])};\n'
        f'    }}\n}}\n' for i, op in enumerate(ops)]
    lib = host_mask.build(source + "\n" + "".join(functions), tmp_path)
    rng = np.random.default_rng(0)
    edges = [1, 2, 3, 5, 7, 10, 127, 128, 129, 1000, 2**16 - 1, 2**16 + 1, 2**30 - 1, 2**30, 2**30 + 1, 2**31 - 1]
    divisors = np.array(edges + [-e for e in edges] + [-(2**31)] + list(rng.integers(-(2**31), 2**31, 200)))
    divisors = divisors[divisors != 0]
    dividends = np.array([0, 1, -1, 2**31 - 1, -(2**31) + 1, 2**30, -(2**30)] + list(rng.integers(-(2**31) + 1, 2**31, 300)))
    x, y = (np.ascontiguousarray(a.reshape(-1).astype(np.int64)) for a in np.meshgrid(dividends, divisors))
    for i, op in enumerate(ops):
        out = np.zeros(len(x), dtype=np.int64)
        getattr(lib, f"by_divisor_{i}")(x.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p),
                                        ctypes.c_int(len(x)), out.ctypes.data_as(ctypes.c_void_p))
        want = op.evaluate(x, y)
        bad = np.nonzero(out != want)[0]
        assert not len(bad), f"{op.name} by a Divisor: {x[bad[0]]} and {y[bad[0]]} give {out[bad[0]]}, not {want[bad[0]]}"
