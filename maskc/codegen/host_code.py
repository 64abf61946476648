"""Host C++ for the standalone planner at the end of every generated `.cu`: layout and sequence values
over the runtime values, in 64 bits (the host code NVRTC skips; nvcc or any C++ compiler builds it)."""

from __future__ import annotations

from maskc import ir


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
