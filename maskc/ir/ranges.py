"""Static value ranges: which integer width each expression needs.

Every value has a range known before any runtime value is: positions lie in [0, 2^31 - 1), runtime
integers are 32-bit (the runtime refuses others), `const` values are known exactly. Ranges are computed with
Python's unbounded integers, so a result that might not fit 64 bits is caught here and reported at its
source position instead of wrapping on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from maskc import ir
from maskc.diagnostics import error

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
POSITION = (0, 2**31 - 2)
MEMBER = (0, 2**24 - 1)


@dataclass(frozen=True)
class Range:
    lo: int
    hi: int

    @property
    def fits_int32(self) -> bool:
        return INT32[0] <= self.lo and self.hi <= INT32[1]

    @property
    def ctype(self) -> str:
        return "int" if self.fits_int32 else "long long"


def _grid_dims(program: ir.Program, region: ir.Region | None, side: str) -> tuple[int, ...] | None:
    """Constant dimensions of the grid a side stands on, if it is one grid with folded dimensions."""
    if region is None:
        return None
    segs = getattr(region, side).segments
    if len(segs) != 1:
        return None
    seg = program.segment(segs[0])
    if seg.kind != "grid" or not all(isinstance(d, ir.Const) for d in seg.dims):
        return None
    return tuple(int(d.value) for d in seg.dims)


def static_range(e: ir.Expr, program: ir.Program, region: ir.Region | None = None,
                 memo: dict[int, Range] | None = None) -> Range:
    """The range of `e`. With a `memo` (by node identity, so only for nodes that outlive it), the ranges of every
    node of a tree cost one pass over it, not one per node."""
    if memo is None:
        return _range(e, program, region, None)
    hit = memo.get(id(e))
    if hit is None:
        hit = memo[id(e)] = _range(e, program, region, memo)
    return hit


def _range(e: ir.Expr, program: ir.Program, region: ir.Region | None, memo: dict[int, Range] | None) -> Range:
    def r(x: ir.Expr) -> Range:
        return static_range(x, program, region, memo)

    if isinstance(e, ir.Const):
        v = int(e.value)
        return Range(v, v)
    if isinstance(e, ir.Param):
        if e.name == "n":
            return Range(0, 2**31 - 1)
        decl = program.param(e.name)
        if decl is not None and decl.type.elem == "bool":
            return Range(0, 1)
        return Range(*INT32)
    if isinstance(e, ir.SegmentBound):
        return Range(0, 2**31 - 1)
    if isinstance(e, ir.Token):
        if e.attr in ("start", "end"):
            return Range(0, 2**31 - 1)
        if e.attr in ("index", "pos"):
            return Range(*POSITION)
        dims = _grid_dims(program, region, e.side)
        if dims is None:
            return Range(*POSITION)
        extent = {"x": dims[-1], "y": dims[-2], "t": dims[0] if len(dims) == 3 else 1}[e.attr]
        return Range(0, max(extent - 1, 0))
    if isinstance(e, ir.Member):
        return Range(*MEMBER)
    if isinstance(e, ir.FamilyIndex):
        return Range(*MEMBER)
    if isinstance(e, ir.ArrayLen):
        return Range(0, 2**31 - 1)
    if isinstance(e, ir.ArraySum):
        return Range(-(2**62), 2**62)
    if isinstance(e, ir.Index):
        decl = program.param(e.array)
        return Range(0, 1) if decl is not None and decl.type.elem == "bool" else Range(*INT32)
    if isinstance(e, ir.Ancestor):
        return Range(0, 1)
    if (o := ir.operation(e)) is not None:
        lo, hi = o.op.interval(*(r(a) for a in o.args), *o.consts)
        return _checked(e, lo, hi) if o.op.grows else Range(lo, hi)
    raise TypeError(f"no range for {e!r}")


def _checked(e: ir.Expr, lo: int, hi: int) -> Range:
    if lo < INT64[0] or hi > INT64[1]:
        reach = lo if lo < INT64[0] else hi
        shown = str(reach) if abs(reach) < 2**64 else f"a magnitude of 2^{abs(reach).bit_length() - 1} or more"
        raise error(e.span, f"this expression may overflow 64-bit integers (its values can reach {shown})",
                    "runtime integers are 32-bit and positions are below 2^31; rewrite to keep intermediate values smaller")
    return Range(lo, hi)


def check_ranges(program: ir.Program) -> None:
    """Raise a MaskError at the first expression that might overflow 64 bits, or that divides by a divisor that
    is 0 whatever the values (a literal, or a const parameter compiled in as 0)."""
    for seg in program.segments:  # (in source order: the segments first)
        for e in (seg.length, seg.count, *seg.dims):
            if e is not None:
                for node in ir.walk(e):
                    _check_divisor(node)
                static_range(e, program)
                if isinstance(e, ir.Const) and e.value < 0:  # (const values compiled in: negative at every call)
                    raise error(e.span if e.span.line else seg.span, f"segment {seg.name} has a negative "
                                f"{'count' if e is seg.count else 'length' if e is seg.length else 'grid dimension'}"
                                f" ({e.value})")
    for region in program.regions:
        memo: dict[int, Range] = {}
        for node in ir.walk(region.pred):
            _check_divisor(node)
            if not isinstance(node, (ir.Compare, ir.Logic, ir.Ancestor)):
                static_range(node, program, region, memo)


def _check_divisor(node: ir.Expr) -> None:
    o = ir.operation(node)
    if o is not None and o.op.divides and o.args[-1] == ir.Const(0):
        divisor = o.args[-1]
        where = divisor.span if divisor.span.line else node.span
        raise error(where, f"division by zero: the divisor of '{ir.show(node)}' is always 0",
                    "a const parameter compiled in as 0, or a literal; the operation has no value")
