"""Code generation: the IR becomes a self-contained CUDA source file.

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

import re
from dataclasses import dataclass, field
from functools import lru_cache

import jinja2

from . import __version__, ir
from .diagnostics import error
from .layout import MAX_FAMILY_MEMBERS, layout_uses_n
from .ranges import Range, static_range
from .resources import resource_dir
from .tiling import tiling_for

MAX_REGIONS = 32
ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
DTYPES = {"bf16": "bf16", "fp16": "f16"}
HEAD_DIMS = (64, 128)


@dataclass(frozen=True)
class KernelOptions:
    """Everything a compile depends on besides the mask; frozen, so it can key the build cache."""

    head_dim: int = 128
    dtype: str = "bf16"
    arch: str = "sm_90"
    block_q: int = 128
    block_k: int = 64

    def __post_init__(self):
        if self.head_dim not in HEAD_DIMS:
            raise ValueError(f"head_dim must be one of {HEAD_DIMS}, got {self.head_dim}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")


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


@dataclass(frozen=True)
class ArrayInfo:
    name: str
    ndim: int


@dataclass
class MaskCode:
    """The generated mask, as data for the templates (and for the planner's sequence table)."""

    seq_values: list[SeqValue] = field(default_factory=list)
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
    def kind_bits(self) -> int:
        n = len(self.regions)
        return 8 if n <= 8 else 16 if n <= 16 else 32

    # The sequence table (int64 per sequence): fixed fields, 3 per list parameter, then the values.
    SEQ_FIXED = ("token_offset", "length", "segment_begin", "segment_count")

    blocks: int = 1  # blocks of tiles per sequence (maskc.tiling), 6 fields each
    BLOCK_FIELDS = ("start", "dims_t", "dims_y", "dims_x", "first_q", "first_k")

    @property
    def seq_fields(self) -> int:
        return len(self.SEQ_FIXED) + len(self.BLOCK_FIELDS) * self.blocks + 3 * len(self.arrays) + len(self.seq_values)

    def array_field(self, slot: int) -> int:
        return len(self.SEQ_FIXED) + len(self.BLOCK_FIELDS) * self.blocks + 3 * slot

    def value_field(self, index: int) -> int:
        return self.array_field(len(self.arrays)) + index


# ---------------------------------------------------------------------------------------------------
# Building the mask code
# ---------------------------------------------------------------------------------------------------


def _deps(e: ir.Expr) -> frozenset[str]:
    """Which tokens an expression depends on: {} (the sequence), {'q'}, {'k'} or both."""
    out = set()
    for node in ir.walk(e):
        if isinstance(node, (ir.Token, ir.Member)):
            out.add(node.side)
    return frozenset(out)


_BOOL_NODES = (ir.Compare, ir.Logic, ir.Ancestor)


class _Builder:
    def __init__(self, program: ir.Program):
        self.program = program
        self.code = MaskCode()
        self.arrays_seen: dict[str, int] = {}
        self.row_hoisted: dict[tuple, str] = {}
        self.col_hoisted: dict[tuple, str] = {}
        self.token_fields = self.code.token_fields

    def is_bool(self, e: ir.Expr) -> bool:
        if isinstance(e, _BOOL_NODES) or (isinstance(e, ir.Unary) and e.op == "not"):
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

    def seq_value(self, e: ir.Expr, region: ir.Region) -> str:
        for i, sv in enumerate(self.code.seq_values):
            if sv.expr == e:
                break
        else:
            ctype = "int" if self.is_bool(e) else static_range(e, self.program, region).ctype
            self.code.seq_values.append(SeqValue(e, ctype, self.is_bool(e)))
            i = len(self.code.seq_values) - 1
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
        deps = _deps(e)
        if isinstance(e, ir.Const):
            if isinstance(e.value, bool):
                return ("true" if e.value else "false"), "bool"
            rng = Range(int(e.value), int(e.value))
            return (f"{e.value}" if rng.fits_int32 else f"{e.value}LL"), rng.ctype
        if not deps:
            return self.seq_value(e, region), ("bool" if self.is_bool(e) else static_range(e, self.program, region).ctype)
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
        ctype = "bool" if self.is_bool(e) else static_range(e, self.program, region).ctype
        if key not in table:
            code, _ = self.render(e, r, region, "row" if side == "q" else "col")
            name = f"h{len(fields)}"
            fields.append(Field(name, ctype, code, ir.show(e)))
            table[key] = name
        return f"{side}.{table[key]}", ctype

    def render_op(self, e: ir.Expr, r: int, region: ir.Region, where: str) -> tuple[str, str]:
        sub = lambda x: self.render(x, r, region, where)  # noqa: E731
        if isinstance(e, ir.Compare):
            (a, ta), (b, tb) = sub(e.lhs), sub(e.rhs)
            t = "long long" if "long long" in (ta, tb) else ta if ta == tb else "int"
            return f"({_cast(a, ta, t)} {e.op} {_cast(b, tb, t)})", "bool"
        if isinstance(e, ir.Logic):
            op = " && " if e.op == "and" else " || "
            return "(" + op.join(sub(a)[0] for a in e.args) + ")", "bool"
        if isinstance(e, ir.Unary) and e.op == "not":
            return f"(!{sub(e.arg)[0]})", "bool"
        rng = static_range(e, self.program, region)
        t = rng.ctype
        if isinstance(e, ir.Unary):
            a, ta = sub(e.arg)
            return (f"(-{_cast(a, ta, t)})" if e.op == "neg" else f"iabs({_cast(a, ta, t)})"), t
        if isinstance(e, ir.Pow):
            a, ta = sub(e.base)
            return f"ipow({_cast(a, ta, t)}, {e.exponent})", t
        if isinstance(e, ir.Binary):
            (a, ta), (b, tb) = sub(e.lhs), sub(e.rhs)
            a, b = _cast(a, ta, t), _cast(b, tb, t)
            if e.op in ("+", "-", "*"):
                return f"({a} {e.op} {b})", t
            if e.op in ("min", "max"):
                return f"i{e.op}({a}, {b})", t
            lhs = static_range(e.lhs, self.program, region)
            rhs = static_range(e.rhs, self.program, region)
            # C's `/` and `%` truncate; they agree with floor semantics only for non-negative operands.
            if lhs.lo >= 0 and rhs.lo > 0:
                return f"({a} {'/' if e.op == '//' else '%'} {b})", t
            return f"{'floordiv' if e.op == '//' else 'floormod'}({a}, {b})", t
        if isinstance(e, ir.Index):
            slot = self.array(e.array)
            idx = [_cast(*sub(i), "long long") for i in e.indices]
            if len(idx) == 1:
                idx.append("0LL")
                idx.reverse()  # a list is a table with one row
            # array_read returns a 64-bit value; give it the type its range was given (else overloads clash)
            return _cast(f"array_read(s, {slot}, {idx[0]}, {idx[1]})", "long long", t), t
        raise TypeError(f"cannot render {e!r}")

    def render_bool(self, e: ir.Expr, r: int, region: ir.Region, where: str) -> str:
        if isinstance(e, ir.Ancestor):
            slot = self.array(e.array)
            (a, ta), (b, tb) = self.render(e.node, r, region, where), self.render(e.ancestor, r, region, where)
            return f"ancestor(s, {slot}, {_cast(a, ta, 'long long')}, {_cast(b, tb, 'long long')})"
        if isinstance(e, ir.Index):
            return f"({self.render_op(e, r, region, where)[0]} != 0)"
        if isinstance(e, ir.Logic):
            op = " && " if e.op == "and" else " || "
            return "(" + op.join(self.render_bool(a, r, region, where) for a in e.args) + ")"
        if isinstance(e, ir.Unary) and e.op == "not":
            return f"(!{self.render_bool(e.arg, r, region, where)})"
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
            deps = _deps(c)
            where = "elem" if deps == {"q", "k"} else "col" if deps == {"k"} else "row"
            target = {"row": row_terms, "col": col_terms, "elem": elem_terms}[where]
            target.append(self.render_bool(c, r, region, where))
        join = lambda ts: " && ".join(ts) if ts else "true"  # noqa: E731
        return RegionCode(r, region.rule or ir.show(region.pred), join(row_terms), join(col_terms), join(elem_terms))


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
        return RegionCode(r, rule, " && ".join(row_terms) if row_terms else "true", "true", elem)


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


# ---------------------------------------------------------------------------------------------------
# Rendering the source
# ---------------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def kernel_name(program: ir.Program, options: KernelOptions) -> str:
    """A readable, unique name: the mask, head dim, dtype and tile shape."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", program.name)
    return f"maskc_{base}_fwd_hd{options.head_dim}_{options.dtype}_bq{options.block_q}_bk{options.block_k}"


def _grids(program: ir.Program, code: MaskCode) -> dict[str, list[dict]]:
    """Per side, the grid segments whose coordinates the mask reads, with their dimensions as C code."""
    out: dict[str, list[dict]] = {"q": [], "k": []}
    for side in "qk":
        for f in sorted(code.token_fields[side]):
            if not f.startswith("grid:"):
                continue
            seg = program.segment(f[5:])
            dims = []
            for d in seg.dims:
                if isinstance(d, ir.Const):
                    dims.append(str(int(d.value)))
                else:
                    dims.append(f"imax({_seq_value_ref(code, d)}, 1)")
            out[side].append({"name": seg.name, "symbol": program.segment_index(seg.name), "dims": dims})
    return out


def _seq_value_ref(code: MaskCode, e: ir.Expr) -> str:
    for i, sv in enumerate(code.seq_values):
        if sv.expr == e:
            return f"(int)s.v{i}"
    code.seq_values.append(SeqValue(e, "long long", False))
    return f"(int)s.v{len(code.seq_values) - 1}"


def host_expr(e: ir.Expr, prefix: str, segments: list[str]) -> str:
    """C++ for the host planner: a layout or sequence value over the runtime values `v`, in 64 bits."""
    def r(x: ir.Expr) -> str:
        return host_expr(x, prefix, segments)

    if isinstance(e, ir.SegmentBound):
        return f"span_{'end' if e.end else 'start'}[{segments.index(e.segment)}]"
    if isinstance(e, ir.Const):
        return f"{int(e.value)}LL"
    if isinstance(e, ir.Param):
        return "N_" if e.name == "n" else f"(long long)v.{e.name}"
    if isinstance(e, ir.FamilyIndex):
        return "i"
    if isinstance(e, ir.Index):
        if len(e.indices) == 1:
            return f"{prefix}_read(v.{e.array}, 1, v.{e.array}_len, 0, {r(e.indices[0])})"
        return f"{prefix}_read(v.{e.array}, v.{e.array}_rows, v.{e.array}_cols, {r(e.indices[0])}, {r(e.indices[1])})"
    if isinstance(e, ir.ArrayLen):
        return f"v.{e.array}_len"
    if isinstance(e, ir.ArraySum):
        return f"{prefix}_sum(v.{e.array}, v.{e.array}_len)"
    if isinstance(e, ir.Unary):
        return {"neg": f"(-{r(e.arg)})", "abs": f"iabs({r(e.arg)})", "not": f"(!{r(e.arg)})"}[e.op]
    if isinstance(e, ir.Pow):
        return f"ipow({r(e.base)}, {e.exponent})"
    if isinstance(e, ir.Binary):
        if e.op in ("min", "max"):
            return f"i{e.op}({r(e.lhs)}, {r(e.rhs)})"
        if e.op in ("//", "%"):
            return f"{prefix}_{'div' if e.op == '//' else 'mod'}({r(e.lhs)}, {r(e.rhs)}, &err)"
        return f"({r(e.lhs)} {e.op} {r(e.rhs)})"
    if isinstance(e, ir.Compare):
        return f"(long long)({r(e.lhs)} {e.op} {r(e.rhs)})"
    if isinstance(e, ir.Logic):
        op = " && " if e.op == "and" else " || "
        return "(long long)(" + op.join(r(a) for a in e.args) + ")"
    raise TypeError(f"no host code for {ir.show(e)}")


def planner_name(program: ir.Program, options: KernelOptions) -> str:
    """The standalone planner depends on the mask and the tile shape only."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", program.name)
    return f"maskc_{base}_bq{options.block_q}_bk{options.block_k}"


def _family_lists(program: ir.Program) -> dict[str, list[str]]:
    """Lists a family's length indexes with its member index: they must have one entry per member."""
    out = {}
    for seg in program.segments:
        names = []
        if seg.kind == "family":
            for node in ir.walk(seg.length):
                if isinstance(node, ir.Index) and isinstance(node.indices[0], ir.FamilyIndex) and node.array not in names:
                    names.append(node.array)
        out[seg.name] = names
    return out


def render_source(program: ir.Program, options: KernelOptions, source_name: str = "") -> tuple[str, MaskCode]:
    """The complete `.cu` file for the mask, and the mask code the planner needs to fill its tables."""
    code = mask_code(program)
    tiling = tiling_for(program, options.block_q, options.block_k)
    code.blocks = len(tiling.blocks)
    grids = _grids(program, code)
    env = _environment()
    text = env.get_template("kernel.cu.j2").render(
        version=__version__,
        source_name=source_name or (program.source.path if program.source else "<mask>"),
        program=program,
        rules=[(r.rule or ir.show(r.pred)) for r in program.regions],
        show=ir.show,
        code=code,
        grids=grids,
        opt=options,
        kernel_name=kernel_name(program, options),
        element="bf16" if options.dtype == "bf16" else "f16",
        tiling=tiling,
        params=[p for p in program.params],
        P=planner_name(program, options),
        runtime_params=program.runtime_params,
        host=lambda e: host_expr(e, planner_name(program, options), [s.name for s in program.segments]),
        family_lists=_family_lists(program),
        layout_uses_n=layout_uses_n(program),
        max_members=MAX_FAMILY_MEMBERS,
    )
    return text, code
