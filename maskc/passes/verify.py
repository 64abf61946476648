"""Invariants every pass must keep; run after each pass in tests (`run_pipeline(check=True)`)."""

from __future__ import annotations

from maskc import ir


class VerifyError(AssertionError):
    pass


def verify(program: ir.Program, after: str = "") -> None:
    where = f" after pass '{after}'" if after else ""
    names = [s.name for s in program.segments]
    if len(set(names)) != len(names):
        raise VerifyError(f"duplicate segment names{where}")
    consts = {name for name, _ in program.consts}
    for r, region in enumerate(program.regions):
        for side in (region.q, region.k):
            if not side.segments:
                raise VerifyError(f"region {r} has an empty side{where}")
            if list(side.segments) != [n for n in names if n in side.segments]:
                raise VerifyError(f"region {r}: side {side.segments} not in layout order or unknown{where}")
        if region.rows is not None:
            if ir.uses_side(region.rows.row, "k") or ir.uses_side(region.rows.lo, "k") or ir.uses_side(region.rows.hi, "k"):
                raise VerifyError(f"region {r}: its row intervals read the key{where}")
        for node in ir.walk(region.pred):
            if isinstance(node, ir.FamilyIndex):
                raise VerifyError(f"region {r}: a family index outside a segment length{where}")
            if isinstance(node, ir.Param) and node.name in consts and after and after != "lowered":
                raise VerifyError(f"region {r}: const parameter '{node.name}' was not inlined{where}")
            if isinstance(node, ir.Token) and node.attr in ("t", "y", "x"):
                side = region.q if node.side == "q" else region.k
                if len(side.segments) != 1 or program.segment(side.segments[0]).kind != "grid":
                    raise VerifyError(f"region {r}: grid coordinates on a side that is not one grid{where}")
