"""Optimisation passes: pure functions Program -> Program, applied in order.

Passes see only compile-time facts (the layout's order, `const` values); anything that depends on runtime
values is the planner's job, so changing a runtime value never changes the IR and never recompiles.
"""

from __future__ import annotations

from typing import Callable

from maskc import ir

from .fold import fold_constants, inline_consts
from .layout_order import decide_by_layout_order
from .merge import drop_empty_regions, merge_regions
from .residue_grid import residue_grids
from .row_intervals import annotate_row_intervals
from .verify import verify

Pass = Callable[[ir.Program], ir.Program]

PIPELINE: tuple[tuple[str, Pass], ...] = (
    ("inline-consts", inline_consts),
    ("fold-constants", fold_constants),
    ("residue-grids", residue_grids),
    ("decide-by-layout-order", decide_by_layout_order),
    ("drop-empty-regions", drop_empty_regions),
    ("merge-regions", merge_regions),
    ("row-intervals", annotate_row_intervals),
)


def run_pipeline(program: ir.Program, check: bool = False,
                 observe: Callable[[str, ir.Program], None] | None = None) -> ir.Program:
    """Apply every pass; `observe(name, program)` sees the IR after each (for `maskc explain`)."""
    if observe:
        observe("lowered", program)
    for name, fn in PIPELINE:
        program = fn(program)
        if check:
            verify(program, after=name)
        if observe:
            observe(name, program)
    return program


__all__ = ["PIPELINE", "run_pipeline", "verify"]
