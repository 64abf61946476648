"""Lay a segment out as a grid of `d` columns where its rules keep one pair in `d`.

A dilated window, `S -> S where 0 <= q - k < w * d and (q - k) % d == 0`, keeps one pair in `d` of any run of
consecutive tokens, so every tile of consecutive queries is mostly hidden. Laid out as a grid of `d` columns,
`(q - k) % d == 0` is `q.x == k.x`: the tiler then gives the grid's tiles one column (plan/tiling.py,
pinned_axes), and most of them are full. This pass makes that layout where the rules allow it:

    S = L                              S = grid(L // abs(d), abs(d))
                                       S_tail = L % abs(d)                  (the partial last row)
    S -> S where P and c        ->     S -> S where P and q.x == k.x
                                       S_tail -> S where P and k.x == q.pos
                                       S_tail -> S_tail where P and q == k
                                       S -> S_tail where P and q.x == k.pos

for a single segment S whose every rule between its own tokens has a conjunct c of the form `(q - k) % d == 0`
(the same d in each, any expression of the sequence's values). The tail starts a row, so a tail token's column
is its position in the tail, and it is shorter than a row, so two of its tokens share a residue only where they
are the same. Tokens keep their positions (`q`, `k` are unchanged), so every predicate keeps its meaning; a
segment whose rules read positions inside it (`q.pos`) is left alone, since the tail's would start again from 0.
Rules with S on one side only get the tail beside S. Where L and d are constants and d divides L, there is no
tail. Only where S is the layout's one segment that is not a grid (see `residue_grids`).
"""

from __future__ import annotations

from dataclasses import replace

from maskc import ir

from maskc.codegen.mask_code import MAX_REGIONS
from maskc.front.check import MAX_SEGMENT_NAMES

from .fold import simplify


def residue_grids(program: ir.Program) -> ir.Program:
    """The rewrite, where it pays on every kernel family: for the one segment of the layout that is not a grid.
    Beside other runs (a text prefix), the Hopper family keeps a grid's tiles 8 columns wide (plan/tiling.py),
    and a grid of fewer columns would then leave slots empty; there the segment stays a run."""
    runs = [i for i, s in enumerate(program.segments) if s.kind != "grid"]
    if len(runs) != 1 or ir.is_row_remainder(program, runs[0]):  # (a tail this pass laid out)
        return program
    segment = program.segments[runs[0]]
    divisor = _residue_divisor(program, segment)
    if divisor is None:
        return program
    rewritten = lay_out_as_grid(program, segment, divisor)
    fits = len(rewritten.segments) <= MAX_SEGMENT_NAMES and len(rewritten.regions) <= MAX_REGIONS
    return rewritten if fits else program


def residue_conjunct(e: ir.Expr) -> ir.Expr | None:
    """`d` where `e` is `(q - k) % d == 0` (or `(k - q) % d == 0`, or with the sides of `==` swapped)."""
    if not (isinstance(e, ir.Compare) and e.op == "=="):
        return None
    for mod, zero in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
        if zero == ir.Const(0) and isinstance(mod, ir.Binary) and mod.op == "%" and ir.token_difference(mod.lhs):
            return mod.rhs
    return None


def _residue_divisor(program: ir.Program, segment: ir.Segment) -> ir.Expr | None:
    """The `d` every rule between the tokens of `segment` keeps one pair in (see the module's comment), or
    None where the rewrite does not apply."""
    if segment.kind != "single":
        return None
    divisor = None
    for region in program.regions:
        on_q, on_k = segment.name in region.q.segments, segment.name in region.k.segments
        if (on_q and ir.looks_inside(region.pred, "q")) or (on_k and ir.looks_inside(region.pred, "k")):
            return None
        if not (on_q and on_k):
            continue
        found = [d for c in ir.conjuncts(region.pred) if (d := residue_conjunct(c)) is not None]
        if not found or (divisor is not None and divisor not in found):
            return None
        divisor = divisor if divisor is not None else found[0]
    if divisor is None or (isinstance(divisor, ir.Const) and abs(divisor.value) <= 1):
        return None
    return divisor


def lay_out_as_grid(program: ir.Program, segment: ir.Segment, divisor: ir.Expr) -> ir.Program:
    """`segment` as a grid of `abs(divisor)` columns and its partial last row, the rules rewritten to match."""
    name, span = segment.name, divisor.span
    width = simplify(ir.Unary("abs", divisor, span=span))  # (a constant's folded, so that the pass is idempotent)
    length = segment.length
    grid = replace(segment, kind="grid", length=None, dims=(ir.Binary("//", length, width, span=span), width))
    tail_name = _fresh(program, f"{name}_tail")
    whole_rows = (isinstance(length, ir.Const) and isinstance(divisor, ir.Const)
                  and length.value % abs(divisor.value) == 0)
    tail = ir.Segment(tail_name, "single", length=ir.Binary("%", length, width, span=span), span=segment.span)
    segments = []
    for s in program.segments:
        segments += [grid] + ([] if whole_rows else [tail]) if s.name == name else [s]

    def beside(side: ir.Side) -> ir.Side:
        if whole_rows or name not in side.segments:
            return side
        at = side.segments.index(name)
        return replace(side, segments=side.segments[:at + 1] + (tail_name,) + side.segments[at + 1:])

    def without(side: ir.Side, drop: str) -> ir.Side | None:
        kept = tuple(s for s in side.segments if s != drop)
        return replace(side, segments=kept) if kept else None

    regions = []
    for region in program.regions:
        if name not in region.q.segments or name not in region.k.segments:
            regions.append(replace(region, q=beside(region.q), k=beside(region.k)))
            continue
        # The grid's own pairs: the residue conjunct is the column. The rest keeps q - k as it is (as rows of the
        # grid times its width, the planner's factored path would take the rule, but the kernels' pair test
        # would multiply in 64 bits; as rows against a quotient, `q.y - k.y <= (w * d - 1) // abs(d)`, the
        # dilated window's backward measured 3.5% slower and its forward no faster: docs/hopper.md, twenty-fifth
        # session). Every other pair keeps the predicate.
        same_column = ir.Compare("==", ir.Token("q", "x"), ir.Token("k", "x"), span=span)
        pred = ir.conjoin([same_column if residue_conjunct(c) == divisor else c for c in ir.conjuncts(region.pred)],
                          region.pred.span)
        grid_side_q, grid_side_k = ir.Side((name,), span=region.q.span), ir.Side((name,), span=region.k.span)
        regions.append(replace(region, q=grid_side_q, k=grid_side_k, pred=pred, rows=None))
        q_rest, k_all = without(beside(region.q), name), beside(region.k)
        if q_rest is not None:
            regions += _tail_rows(replace(region, q=q_rest, k=k_all), name, tail_name, divisor)
        k_rest = without(beside(region.k), name)
        if k_rest is not None:
            regions += _tail_rows(replace(region, q=grid_side_q, k=k_rest), name, tail_name, divisor)
    return replace(program, segments=tuple(segments), regions=tuple(regions))


def _tail_rows(region: ir.Region, grid: str, tail: str, divisor: ir.Expr) -> list[ir.Region]:
    """A rule between the tail and the grid (or the tail itself), one rule per pair of segments, its residue
    conjunct said in columns (see the module's comment). The planner bounds these forms per tile (the residue it
    cannot), and the kernels test them without a division. A rule with other segments is left as it is."""
    if set(region.q.segments) | set(region.k.segments) > {grid, tail}:
        return [region]

    def same(a: tuple[str, str], b: tuple[str, str]) -> ir.Expr:
        return ir.Compare("==", ir.Token(*a, span=divisor.span), ir.Token(*b, span=divisor.span), span=divisor.span)

    column = {(tail, grid): same(("k", "x"), ("q", "pos")), (grid, tail): same(("q", "x"), ("k", "pos")),
              (tail, tail): same(("q", "index"), ("k", "index"))}
    return [replace(region, q=replace(region.q, segments=(q_name,)), k=replace(region.k, segments=(k_name,)),
                    pred=ir.conjoin([column[(q_name, k_name)] if residue_conjunct(c) == divisor else c
                                     for c in ir.conjuncts(region.pred)], region.pred.span))
            for q_name in region.q.segments for k_name in region.k.segments]


def _fresh(program: ir.Program, base: str) -> str:
    names = {s.name for s in program.segments}
    name, i = base, 2
    while name in names:
        name, i = f"{base}{i}", i + 1
    return name
