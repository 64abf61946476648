"""Host C++ for the standalone planner at the end of every generated `.cu`: layout and sequence values
over the runtime values, in 64 bits (the host code NVRTC skips; nvcc or any C++ compiler builds it)."""

from __future__ import annotations

from maskc import ir
from maskc.codegen.mask_code import c_literal
from maskc.ir.ops import spell


def host_expr(e: ir.Expr, prefix: str, segments: list[str], tables: frozenset[str] = frozenset()) -> str:
    """C++ for the host planner: a layout or sequence value over the runtime values `v`, in 64 bits. `tables`
    names the [[int]] and [[bool]] parameters (`v` holds their rows and columns, not a length)."""
    def r(x: ir.Expr) -> str:
        return host_expr(x, prefix, segments, tables)

    if isinstance(e, ir.SegmentBound):
        return f"span_{'end' if e.end else 'start'}[{segments.index(e.segment)}]"
    if isinstance(e, ir.Const):
        return c_literal(int(e.value), as_int=False)
    if isinstance(e, ir.Param):
        return "N_" if e.name == "n" else f"(long long)v.{e.name}"
    if isinstance(e, ir.FamilyIndex):
        return "i"
    if isinstance(e, ir.Index):
        if len(e.indices) == 1:
            return f"{prefix}_read(v.{e.array}, 1, v.{e.array}_len, 0, {r(e.indices[0])})"
        return f"{prefix}_read(v.{e.array}, v.{e.array}_rows, v.{e.array}_cols, {r(e.indices[0])}, {r(e.indices[1])})"
    if isinstance(e, ir.ArrayLen):  # the rows of a table
        return f"v.{e.array}_rows" if e.array in tables else f"v.{e.array}_len"
    if isinstance(e, ir.ArraySum):
        return f"{prefix}_sum(v.{e.array}, v.{e.array}_len)"
    if (o := ir.operation(e)) is not None:
        return spell(o.op.host, [r(a) for a in o.args] + [str(c) for c in o.consts], p=prefix)
    raise TypeError(f"no host code for {ir.show(e)}")


def family_lists(program: ir.Program) -> dict[str, list[str]]:
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
