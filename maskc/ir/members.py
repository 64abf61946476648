"""Which masks' packed members may run as sequences of their own: an analysis of the program alone (the tiles
that start at every member, and the split of a call's values, are maskc/plan/members.py's; the standalone source
names the split too, so code generation reads this without the planner).

Splitting is exact when nothing of the mask changes for a member taken out of its sequence:
  - the layout is that one family, `F[i] = L[i]` with `L` a runtime list parameter (a member's sequence gets
    `L = [length]` and n = length);
  - every rule is `F[i] -> F[i]` (the passes give it the conjunct `q`'s member == `k`'s member);
  - the rest of each predicate reads nothing that moves with the member: `q.pos`, `k.pos`, scalar parameters
    other than `n`, and the positions `q`, `k` only where a shift of both cancels (`k <= q`, `q - k < w`); no
    member index, no list, no `n`.
"""

from __future__ import annotations

from dataclasses import dataclass

from maskc import ir


@dataclass(frozen=True)
class MemberSplit:
    """The family whose members a call's sequences split into, and the list parameter of its lengths."""

    family: str
    lengths: str
    default: tuple | None  # the list parameter's default (a call may leave it out)


def member_split(program: ir.Program) -> MemberSplit | None:
    """How `program`'s sequences split into their family's members (see the module's docstring), or None."""
    if len(program.segments) != 1:
        return None
    family = program.segments[0]
    if family.kind != "family" or not isinstance(family.length, ir.Index):
        return None
    name = family.length.array
    decl = program.param(name)
    if decl is None or family.length.indices != (ir.FamilyIndex(),) or family.count != ir.ArrayLen(name):
        return None
    if not program.regions or not all(_within_members(r, family.name) for r in program.regions):
        return None
    return MemberSplit(family.name, name, decl.default)


_SAME_MEMBER = (ir.Compare("==", ir.Member("q"), ir.Member("k")), ir.Compare("==", ir.Member("k"), ir.Member("q")))


def _within_members(region: ir.Region, family: str) -> bool:
    """Whether the region is `F[i] -> F[i]` with a predicate that no member's place in its sequence changes."""
    if region.q.segments != (family,) or region.k.segments != (family,):
        return False
    parts = ir.conjuncts(region.pred)
    same = [p for p in parts if p in _SAME_MEMBER]
    return bool(same) and all(_shift(p) == 0 for p in parts if p not in _SAME_MEMBER)


def _shift(e: ir.Expr) -> int | None:
    """How `e` changes when both tokens move by c inside one sequence (their member moving with them): by
    `_shift(e) * c`, or None where it changes otherwise or cannot be told (a member index, a list, `n`)."""
    if isinstance(e, ir.Const):
        return 0
    if isinstance(e, ir.Param):
        return None if e.name == "n" else 0
    if isinstance(e, ir.Token):
        return {"pos": 0, "index": 1, "start": 1, "end": 1}.get(e.attr)
    if isinstance(e, ir.Unary):
        a = _shift(e.arg)
        if a is None:
            return None
        return -a if e.op == "neg" else (0 if a == 0 else None)
    if isinstance(e, ir.Pow):
        return 0 if _shift(e.base) == 0 else None
    if isinstance(e, ir.Binary):
        a, b = _shift(e.lhs), _shift(e.rhs)
        if a is None or b is None:
            return None
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op in ("min", "max"):
            return a if a == b else None
        if e.op == "*":
            if a == b == 0:
                return 0
            scale = e.lhs if b != 0 else e.rhs  # the factor that does not move, if it is a number
            moving = b if b != 0 else a
            return moving * scale.value if isinstance(scale, ir.Const) and type(scale.value) is int else None
        return 0 if a == b == 0 else None  # // and %
    if isinstance(e, ir.Compare):
        a, b = _shift(e.lhs), _shift(e.rhs)
        return 0 if a is not None and a == b else None
    if isinstance(e, ir.Logic):
        return 0 if all(_shift(a) == 0 for a in e.args) else None
    return None  # Member, FamilyIndex, lists and their aggregates, ancestors, segment bounds
