"""The mask as generated code, split by what each piece depends on.

The mask reaches the kernel as generated code, split by what each piece depends on, so that the inner loop
does as little as possible:

- values of the sequence alone (parameters and arithmetic on them) are computed on the host by the planner
  and read once per CTA (`MaskSeq`);
- values of the query token alone are computed once per query row when the CTA starts (`MaskRow`);
- values of the key token alone once per key column of a partial tile (`MaskCol`);
- only what needs both is evaluated per (q, k) element (`mask_visible`), and only in partial tiles, and only
  for the regions the descriptor says may apply there. Full tiles run no mask code at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from maskc import ir
from maskc.diagnostics import MaskError, error
from maskc.ir.ops import BOOL, INT, OPERATORS, spell
from maskc.ir.ranges import INT32, INT64, Range, static_range
from maskc.kernels.abi import SeqTable

# At most 31 rules: a tile's kind keeps one bit per rule, and the standalone classifier's CLASS_FULL is bit 31.
MAX_REGIONS = 31

# Up to this many rules, mask_visible() evaluates every rule of a pair and combines them with & and |, branch-free,
# whatever the tile's kind. Testing the kind's rules one by one (&& ||, a return per rule) made ptxas branch
# twice per rule and pair: clear_text's Hopper forward spent 17-20 instructions a pair on its three rules where
# clear spends ~6 on its one. Past this many, a pair costs every rule's test, most of them outside its tile's
# kind, and the branches are the cheaper way.
EAGER_RULES = 4


@dataclass(frozen=True)
class SeqValue:
    """A value of the sequence alone, computed by the planner and stored in the sequence table."""

    expr: ir.Expr
    ctype: str
    is_bool: bool

    @property
    def text(self) -> str:
        return ir.show(self.expr)


@dataclass(frozen=True)
class Field:
    name: str
    ctype: str
    code: str
    comment: str = ""


@dataclass(frozen=True)
class RegionCode:
    index: int
    rule: str
    row_on: str
    col_on: str
    elem: str
    # Evaluated whatever the tile's kind, with the other rules (EAGER_RULES); not for a rule that walks a tree.
    eager: bool
    # A region by rows: its keys [lo, hi) per row, as MaskRow fields (`elem` tests them); None otherwise.
    lo: str | None = None
    hi: str | None = None


@dataclass(frozen=True)
class ArrayInfo:
    name: str
    ndim: int


@dataclass
class MaskCode:
    """The generated mask, as data for the templates (and for the planner's sequence table)."""

    seq_values: list[SeqValue] = field(default_factory=list)
    divisors: list[int] = field(default_factory=list)  # seq_values that divide: each a Divisor in MaskSeq
    arrays: list[ArrayInfo] = field(default_factory=list)
    row_fields: list[Field] = field(default_factory=list)
    col_fields: list[Field] = field(default_factory=list)
    regions: list[RegionCode] = field(default_factory=list)
    lookup_q: bool = False
    lookup_k: bool = False
    segment_names: list[str] = field(default_factory=list)  # in layout order (for SegmentBound values)
    # Token facts the mask reads, per side: "pos", "member", "start", "end", "grid:NAME" (its coordinates).
    token_fields: dict[str, set[str]] = field(default_factory=lambda: {"q": set(), "k": set()})

    @property
    def kind_type(self) -> str:
        n = len(self.regions)
        return "unsigned char" if n <= 8 else "unsigned short" if n <= 16 else "unsigned int"

    @property
    def rules_are_key_intervals(self) -> bool:
        """Every rule is an interval of keys per row, with no test on the key's side: a row's visible keys are a
        union of intervals (the kernels can then mask a partial tile by ranges instead of pair by pair)."""
        return bool(self.regions) and not self.lookup_k and all(r.lo is not None for r in self.regions)

    @property
    def kind_bits(self) -> int:
        n = len(self.regions)
        return 8 if n <= 8 else 16 if n <= 16 else 32

    blocks: int = 1  # blocks of tiles per sequence (maskc.plan.tiling)

    @property
    def seq_table(self) -> SeqTable:
        """The layout of the per-sequence table for this mask (see maskc.kernels.abi.SeqTable)."""
        return SeqTable(self.blocks, len(self.arrays), len(self.seq_values))


# ---------------------------------------------------------------------------------------------------
# Building the mask code
# ---------------------------------------------------------------------------------------------------


def _is_truth_op(e: ir.Expr) -> bool:
    """A comparison, a connective or ancestor(): a C bool whatever its operands are."""
    o = ir.operation(e)
    return isinstance(e, ir.Ancestor) or (o is not None and o.op.result == BOOL)


class _Builder:
    def __init__(self, program: ir.Program):
        self.program = program
        self.code = MaskCode()
        self.arrays_seen: dict[str, int] = {}
        self.row_hoisted: dict[tuple, str] = {}
        self.col_hoisted: dict[tuple, str] = {}
        self.token_fields = self.code.token_fields
        # By node identity (the program holds every node): `render` asks at each node about the tree below it.
        self.deps_memo: dict[int, frozenset[str]] = {}
        self.range_memo: dict[int, dict[int, Range]] = {}  # per region
        self.clamped: dict[tuple, ir.Expr] = {}  # narrowed(): the clamped sequence values made so far
        self.pair_tests: dict[int, ir.Expr] = {}  # pair_comparison(), by the comparison's identity
        self.made: list[ir.Expr] = []  # nodes made here, kept alive: the memos above go by identity

    def deps(self, e: ir.Expr) -> frozenset[str]:
        """Which tokens an expression depends on: {} (the sequence), {'q'}, {'k'} or both."""
        hit = self.deps_memo.get(id(e))
        if hit is None:
            if isinstance(e, (ir.Token, ir.Member)):
                hit = frozenset({e.side})
            else:
                hit = frozenset().union(*(self.deps(c) for c in ir.children(e)))
            self.deps_memo[id(e)] = hit
        return hit

    def range(self, e: ir.Expr, region: ir.Region) -> Range:
        return static_range(e, self.program, region, self.range_memo.setdefault(id(region), {}))

    def is_bool(self, e: ir.Expr) -> bool:
        if _is_truth_op(e):
            return True
        if isinstance(e, ir.Const):
            return isinstance(e.value, bool)
        if isinstance(e, ir.Param):
            d = self.program.param(e.name)
            return d is not None and d.type.elem == "bool"
        if isinstance(e, ir.Index):
            d = self.program.param(e.array)
            return d is not None and d.type.elem == "bool"
        return False

    def seq_index(self, e: ir.Expr, region: ir.Region) -> int:
        """Where the value of the sequence `e` lies in MaskSeq (`s.v<index>`), added if new."""
        for i, sv in enumerate(self.code.seq_values):
            if sv.expr == e:
                return i
        ctype = "int" if self.is_bool(e) else self.range(e, region).ctype
        self.code.seq_values.append(SeqValue(e, ctype, self.is_bool(e)))
        return len(self.code.seq_values) - 1

    def seq_value(self, e: ir.Expr, region: ir.Region) -> str:
        i = self.seq_index(e, region)
        return f"(s.v{i} != 0)" if self.code.seq_values[i].is_bool else f"s.v{i}"

    def array(self, name: str) -> int:
        if name not in self.arrays_seen:
            decl = self.program.param(name)
            self.arrays_seen[name] = len(self.code.arrays)
            self.code.arrays.append(ArrayInfo(name, decl.type.depth))
        return self.arrays_seen[name]

    # -- rendering ----------------------------------------------------------------------------------

    def render(self, e: ir.Expr, r: int, region: ir.Region, where: str) -> tuple[str, str]:
        """C code and C type of `e` inside `where` ('row', 'col' or 'elem'); hoists what it can."""
        deps = self.deps(e)
        if isinstance(e, ir.Const):
            if isinstance(e.value, bool):
                return ("true" if e.value else "false"), "bool"
            rng = Range(int(e.value), int(e.value))
            return c_literal(int(e.value), rng.fits_int32), rng.ctype
        if not deps:
            return self.seq_value(e, region), ("bool" if self.is_bool(e) else self.range(e, region).ctype)
        if where == "elem" and len(deps) == 1 and not isinstance(e, (ir.Token, ir.Member)):
            return self.hoist(e, r, region, next(iter(deps)))
        if isinstance(e, ir.Token):
            prefix = {"row": "t", "col": "t", "elem": e.side}[where]
            return f"{prefix}.{self.token_field(e, r, region)}", "int"
        if isinstance(e, ir.Member):
            prefix = {"row": "t", "col": "t", "elem": e.side}[where]
            self.token_fields[e.side].add("member")
            return f"{prefix}.member", "int"
        return self.render_op(e, r, region, where)

    def token_field(self, e: ir.Token, r: int, region: ir.Region) -> str:
        if e.attr == "index":
            return "index"
        if e.attr in ("pos", "start", "end"):
            self.token_fields[e.side].add(e.attr)
            return e.attr
        grid = getattr(region, e.side).segments[0]
        self.token_fields[e.side].add(f"grid:{grid}")
        return f"{grid}_{e.attr}"

    def hoist(self, e: ir.Expr, r: int, region: ir.Region, side: str) -> tuple[str, str]:
        table = self.row_hoisted if side == "q" else self.col_hoisted
        fields = self.code.row_fields if side == "q" else self.code.col_fields
        key = (e,)
        ctype = "bool" if self.is_bool(e) else self.range(e, region).ctype
        if key not in table:
            code, _ = self.render(e, r, region, "row" if side == "q" else "col")
            name = f"h{len(fields)}"
            fields.append(Field(name, ctype, code, ir.show(e)))
            table[key] = name
        return f"{side}.{table[key]}", ctype

    def render_op(self, e: ir.Expr, r: int, region: ir.Region, where: str) -> tuple[str, str]:
        sub = lambda x: self.render(x, r, region, where)  # noqa: E731
        o = ir.operation(e)
        if o is not None and o.op.result == BOOL:
            if o.op.operands == INT:
                o = ir.operation(self.pair_comparison(e, region))
            args = [self.narrowed(a, other, region) for a, other in zip(o.args, reversed(o.args))] \
                if o.op.operands == INT else o.args
            rendered = [sub(a) for a in args]
            if o.op.operands == INT:  # a comparison: both sides in one type
                types = [t for _, t in rendered]
                t = "long long" if "long long" in types else types[0] if types[0] == types[1] else "int"
                rendered = [(_cast(a, ta, t), t) for a, ta in rendered]
            return spell(o.op.c, [a for a, _ in rendered]), "bool"
        if o is not None:
            t = self.range(e, region).ctype
            if (by_divisor := self.by_divisor(e, r, region, where)) is not None:
                return by_divisor, t
            rendered = [sub(a) for a in o.args]
            # The operation runs in a type that holds every operand as well as the result: a result may fit
            # 32 bits where an operand does not (`min(q + w, 100)`, `max(start, q - w)`, `(q + w) % 7`), and
            # converting that operand down first would wrap it. The result then converts exactly.
            wide = "long long" if "long long" in [t] + [ta for _, ta in rendered] else t
            operands = [_cast(a, ta, wide) for a, ta in rendered] + [str(c) for c in o.consts]
            template = o.op.c
            # C's division truncates: it agrees with flooring for a non-negative dividend and a positive divisor.
            if o.op.c_truncating and self.range(o.args[0], region).lo >= 0 \
                    and self.range(o.args[1], region).lo > 0:
                template = o.op.c_truncating
            return _cast(spell(template, operands), wide, t), t
        if isinstance(e, ir.Index):
            t = self.range(e, region).ctype
            slot = self.array(e.array)
            idx = [_cast(*sub(i), "long long") for i in e.indices]
            if len(idx) == 1:
                idx.append("0LL")
                idx.reverse()  # a list is a table with one row
            # array_read returns a 64-bit value; give it the type its range was given (else overloads clash)
            return _cast(f"array_read(s, {slot}, {idx[0]}, {idx[1]})", "long long", t), t
        raise TypeError(f"cannot render {e!r}")

    def by_divisor(self, e: ir.Expr, r: int, region: ir.Region, where: str) -> str | None:
        """`a // d` or `a % d` with `d` a value of the sequence and `a` of tokens, in 32 bits, as a multiply and a
        shift by the Divisor mask_seq() makes of `d` once (mask.cu.j2's floordiv_by); None where that does
        not apply: a literal divisor (the C compiler does this itself), 64-bit operands or result, or a
        dividend that may be INT_MIN (negated for a negative divisor)."""
        o = ir.operation(e)
        if o.op.c_by_divisor is None:
            return None
        a, d = o.args
        if not self.deps(a) or self.deps(d) or isinstance(d, ir.Const):
            return None
        ra, rd = self.range(a, region), self.range(d, region)
        if not (ra.fits_int32 and ra.lo > INT32[0] and rd.fits_int32 and self.range(e, region).fits_int32):
            return None
        index = self.seq_index(d, region)
        if index not in self.code.divisors:
            self.code.divisors.append(index)
        code, ctype = self.render(a, r, region, where)
        return spell(o.op.c_by_divisor, [_cast(code, ctype, "int"), f"s.d{index}"])

    def pair_comparison(self, e: ir.Expr, region: ir.Region) -> ir.Expr:
        """A comparison of query and key tokens as the pair tests it: same_residue()'s or separated()'s form,
        where one applies, so that what depends on one token is computed once per row or column; else `e`."""
        if id(e) not in self.pair_tests:
            both = isinstance(e, ir.Compare) and self.deps(e) == frozenset("qk")
            new = both and (self.same_residue(e, region) or self.separated(e, region))
            self.pair_tests[id(e)] = new or e
            self.made.append(e)
        return self.pair_tests[id(e)]

    def separated(self, e: ir.Compare, region: ir.Region) -> ir.Expr | None:
        """A comparison of both tokens that would run in 64 bits, as `K op W` with K a sum of terms of one token
        (the key's, else the query's) whose range fits 32 bits and W the rest, moved across: natten2d's `0 <=
        k.y // d - sy < kernel` (sy a clamp with runtime values: 64-bit) becomes `k.y // d >= sy` and `k.y // d
        < sy + kernel`. W depends on the other token and the sequence only, so narrowed() clamps it to K's
        range once per row (or column) and the pair compares in 32 bits. Exact: only + and - move, and W's
        range is checked to fit 64 bits. None where no such split exists."""
        if self.range(e.lhs, region).fits_int32 and self.range(e.rhs, region).fits_int32:
            return None
        terms = [(sign, t) for sign, t in ir.signed_terms(e.lhs) + ir.signed_terms(e.rhs, -1)  # lhs - rhs
                 if t != ir.Const(0)]
        if any(len(self.deps(t)) > 1 for _, t in terms):
            return None
        for side in "kq":
            own = [(sign, t) for sign, t in terms if self.deps(t) == {side}]
            rest = [(-sign, t) for sign, t in terms if self.deps(t) != {side}]  # lhs - rhs op 0: own op -rest
            if not own:
                continue
            op = e.op
            if all(sign < 0 for sign, _ in own):  # -K op W is K converse -W
                own, rest, op = [(-a, t) for a, t in own], [(-a, t) for a, t in rest], OPERATORS[op].converse
            split = ir.Compare(op, ir.signed_sum(own, e.span), ir.signed_sum(rest, e.span), span=e.span)
            self.made.append(split)
            try:
                ranges = [self.range(x, region) for x in (split.lhs, split.rhs)]
            except MaskError:  # a sum moved across may leave 64 bits where the original did not
                continue
            if ranges[0].fits_int32 and INT64[0] <= ranges[1].lo and ranges[1].hi <= INT64[1]:
                return split
        return None

    def same_residue(self, e: ir.Compare, region: ir.Region) -> ir.Expr | None:
        """`(Q - K) % d == 0` (or `!=`) with Q of the query (and the sequence), K of the key and d of the sequence,
        as `Q % d == K % d`: d divides Q - K exactly when both leave one residue. Each side is then computed
        once per row or column and a pair compares two ints (dilated_window's `(q - k) % dilation == 0`)."""
        if not OPERATORS[e.op].commutative:  # == and != only
            return None
        zero = ir.Const(0)
        rem = e.rhs if e.lhs == zero else e.lhs if e.rhs == zero else None
        if not (isinstance(rem, ir.Binary) and OPERATORS[rem.op].residue) or self.deps(rem.rhs):
            return None
        terms = ir.signed_terms(rem.lhs)
        if any(len(self.deps(t)) > 1 for _, t in terms):
            return None
        query = ir.signed_sum([(sign, t) for sign, t in terms if "k" not in self.deps(t)], e.span)
        key = ir.signed_sum([(-sign, t) for sign, t in terms if "k" in self.deps(t)], e.span)  # Q - K: K is -(terms)
        new = ir.Compare(e.op, ir.Binary(rem.op, query, rem.rhs, span=e.span),
                         ir.Binary(rem.op, key, rem.rhs, span=e.span), span=e.span)
        self.made.append(new)
        try:
            self.range(new.lhs, region), self.range(new.rhs, region)
        except MaskError:  # a side that may leave 64 bits where the dividend did not
            return None
        return new

    def narrowed(self, e: ir.Expr, other: ir.Expr, region: ir.Region) -> ir.Expr:
        """`e`, one side of a comparison, or in its place the same value clamped to one past the range of
        `other`, where that makes the comparison 32-bit: `other` OP e and `other` OP clamp(e, lo - 1, hi + 1)
        agree for every `other` in [lo, hi] and each of < <= > >= == !=. `e` is a value of the sequence, or of
        one token where `other` is of the other (separated() makes such sides): computed once per sequence,
        row or column. So clear's `(q.y - k.y)^2 + (q.x - k.x)^2 <= r^2` compares in 32 bits, once per pair of
        a partial tile, where r^2 (a runtime value) would make it 64-bit."""
        if self.deps(e) & self.deps(other) or not self.deps(other) or self.is_bool(e) \
                or self.range(e, region).fits_int32:
            return e
        span = self.range(other, region)
        if not (INT32[0] < span.lo and span.hi < INT32[1]):
            return e
        key = (e, span.lo, span.hi)
        if key not in self.clamped:  # kept: the range memo goes by node identity
            self.clamped[key] = ir.clamp(e, ir.Const(span.lo - 1), ir.Const(span.hi + 1), span=e.span)
        return self.clamped[key]

    def render_bool(self, e: ir.Expr, r: int, region: ir.Region, where: str) -> str:
        if isinstance(e, ir.Ancestor):
            slot = self.array(e.array)
            (a, ta), (b, tb) = self.render(e.node, r, region, where), self.render(e.ancestor, r, region, where)
            return f"ancestor(s, {slot}, {_cast(a, ta, 'long long')}, {_cast(b, tb, 'long long')})"
        if isinstance(e, ir.Index):
            return f"({self.render_op(e, r, region, where)[0]} != 0)"
        o = ir.operation(e)
        if o is not None and o.op.operands == BOOL:  # a connective: its operands as C bools
            operands = [self.render_bool(a, r, region, where) for a in o.args]
            # A long chain evaluates every operand (& |, not && ||): NVRTC's time grows with the square of the
            # branches a short-circuit makes (1,000 `or` terms: 53 s, 12 s without). Any operand is safe to
            # evaluate: a read outside a list gives 0 and the planner refuses a zero divisor.
            return spell(o.op.c_eager if len(operands) > ir.SHORT_CHAIN else o.op.c, operands)
        code, ctype = self.render(e, r, region, where)
        return code if ctype == "bool" else f"({code} != 0)"

    # -- regions ------------------------------------------------------------------------------------

    def side_test(self, side: ir.Side) -> str:
        if len(side.segments) == len(self.program.segments):
            return ""
        bits = sum(1 << self.program.segment_index(s) for s in side.segments)
        return f"((0x{bits:08x}u >> t.symbol) & 1u)"

    def region(self, r: int, region: ir.Region) -> RegionCode:
        if region.rows is not None:
            return self.region_by_rows(r, region)
        row_terms, col_terms, elem_terms = [], [], []
        for side, terms in (("q", row_terms), ("k", col_terms)):
            test = self.side_test(getattr(region, side))
            if test:
                terms.append(test)
                setattr(self.code, "lookup_q" if side == "q" else "lookup_k", True)
        for c in ir.conjuncts(region.pred):
            deps = self.deps(c)
            where = "elem" if deps == {"q", "k"} else "col" if deps == {"k"} else "row"
            target = {"row": row_terms, "col": col_terms, "elem": elem_terms}[where]
            target.append(self.render_bool(c, r, region, where))

        def join(ts: list[str]) -> str:  # a long conjunction evaluates every term (render_bool says why)
            return (" & " if len(ts) > ir.SHORT_CHAIN else " && ").join(ts) if ts else "true"

        return RegionCode(r, region.rule or ir.show(region.pred), join(row_terms), join(col_terms), join(elem_terms),
                          self.eager(region))


    def region_by_rows(self, r: int, region: ir.Region) -> RegionCode:
        """A region with row intervals: the key needs no look-up, only two comparisons with the row's bounds."""
        rows = region.rows
        row_terms = [t for t in (self.side_test(region.q),) if t]
        if row_terms:
            self.code.lookup_q = True
        if rows.row != ir.TRUE:
            row_terms.append(self.render_bool(rows.row, r, region, "row"))
        lo, _ = self.hoist(rows.lo, r, region, "q")
        hi, _ = self.hoist(rows.hi, r, region, "q")
        elem = f"(k.index >= {lo} && k.index < {hi})"
        rule = (region.rule or ir.show(region.pred)) + f"  [keys {ir.show(rows.lo)} .. {ir.show(rows.hi)})"
        return RegionCode(r, rule, " && ".join(row_terms) if row_terms else "true", "true", elem, self.eager(region),
                          lo, hi)

    def eager(self, region: ir.Region) -> bool:
        """Whether mask_visible() tests the region branch-free with the others (EAGER_RULES): few rules, and
        none of its tests an ancestor() walk, whose loop only the tiles of its kind should pay for. Evaluating
        any other test is safe (render_bool says why)."""
        return len(self.program.regions) <= EAGER_RULES and not any(
            isinstance(n, ir.Ancestor) for n in ir.walk(region.pred))


def c_literal(value: int, as_int: bool) -> str:
    """An integer constant as C writes it, with the type asked for: `int` (as_int) or `long long`. C has no
    negative literals: `-2147483648` is the long 2147483648 negated (which makes calls of the int/long long
    overloads ambiguous) and `-9223372036854775808LL` does not fit at all, so the lowest values are written as
    differences."""
    suffix = "" if as_int else "LL"
    if value in (-(2**31), -(2**63)):
        return f"({value + 1}{suffix} - 1)"
    return f"{value}{suffix}"


def _cast(code: str, have: str, want: str) -> str:
    if have == want or have == "bool":
        return code
    return f"(({want}){code})"


def mask_code(program: ir.Program) -> MaskCode:
    if len(program.regions) > MAX_REGIONS:
        raise error(program.regions[MAX_REGIONS].span,
                    f"more than {MAX_REGIONS} rules remain after merging; the kernel supports {MAX_REGIONS}")
    b = _Builder(program)
    b.code.segment_names = [s.name for s in program.segments]
    b.code.regions = [b.region(r, region) for r, region in enumerate(program.regions)]
    for side in "qk":
        if b.token_fields[side] & {"pos", "member", "start", "end"} or any(f.startswith("grid:") for f in b.token_fields[side]):
            setattr(b.code, f"lookup_{side}", True)
    return b.code
