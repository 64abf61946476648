"""Fewer, larger regions: drop impossible ones, deduplicate, and merge regions that differ in one side.

Fewer regions mean fewer instances to plan and fewer predicates for the kernel to test in a partial tile.
A union of two regions with the same predicate and the same k side is one region whose q side is the union
(and likewise for k); that is exact for any predicate, but a predicate that looks inside the segments of a
side (positions, grid coordinates, family members) keeps that side as it is, so that per-segment facts stay
attached to one kind of segment.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from maskc import ir


def drop_empty_regions(program: ir.Program) -> ir.Program:
    return replace(program, regions=tuple(r for r in program.regions if r.pred != ir.FALSE))


def _union(program: ir.Program, a: ir.Side, b: ir.Side) -> ir.Side:
    names = set(a.segments) | set(b.segments)
    ordered = tuple(s.name for s in program.segments if s.name in names)
    return ir.Side(ordered, span=a.span.merge(b.span))


class _Facts(NamedTuple):
    """What merging asks of a region, computed once: its sides as sets, its predicate's hash (regions with
    different hashes never merge, and hashing a big predicate again for each pair would cost its size)."""

    q: frozenset[str]
    k: frozenset[str]
    pred_hash: int
    true: bool
    inside_q: bool
    inside_k: bool

    @staticmethod
    def of(region: ir.Region, pred_facts: "_Facts | None" = None) -> "_Facts":
        pred = pred_facts or _Facts(frozenset(), frozenset(), hash(region.pred), region.pred == ir.TRUE,
                                    ir.looks_inside(region.pred, "q"), ir.looks_inside(region.pred, "k"))
        return pred._replace(q=frozenset(region.q.segments), k=frozenset(region.k.segments))


def _subsumes(big: _Facts, small: _Facts) -> bool:
    return big.true and small.q <= big.q and small.k <= big.k


def _try_merge(program: ir.Program, a: ir.Region, b: ir.Region, fa: _Facts, fb: _Facts) -> ir.Region | None:
    if fa.pred_hash != fb.pred_hash or a.pred != b.pred:
        return None
    rule = f"{a.rule}; {b.rule}" if a.rule and b.rule else a.rule or b.rule
    if fa.k == fb.k and not fa.inside_q:
        return replace(a, q=_union(program, a.q, b.q), rule=rule, span=a.span.merge(b.span))
    if fa.q == fb.q and not fa.inside_k:
        return replace(a, k=_union(program, a.k, b.k), rule=rule, span=a.span.merge(b.span))
    return None


def merge_regions(program: ir.Program) -> ir.Program:
    """Applies, as long as there is one, the first change in row-major order over the pairs (i, j) of regions:
    region i subsumes region j (j is dropped), or i < j and the two merge (i becomes their union, j is dropped).

    A pair is checked again only once one of its regions has changed, so that R regions cost O(R^2) checks
    rather than O(R^3): `pending[i]` holds the partners j for which (i, j) may apply, None standing for all.
    Regions are named by their first position, which deleting others does not change."""
    regions = dict(enumerate(program.regions))
    facts = {i: _Facts.of(r) for i, r in regions.items()}
    pending: dict[int, set[int] | None] = {i: None for i in regions}
    while True:
        change = None
        for i in regions:
            for j in regions if pending[i] is None else sorted(pending[i]):
                if j == i:
                    continue
                if _subsumes(facts[i], facts[j]):
                    change = (i, j, None)
                    break
                merged = _try_merge(program, regions[i], regions[j], facts[i], facts[j]) if i < j else None
                if merged is not None:
                    change = (i, j, merged)
                    break
            if change:
                break
            pending[i] = set()  # no pair of this row applies: settled until a partner changes
        if change is None:
            return replace(program, regions=tuple(regions.values()))
        i, j, merged = change
        del regions[j], facts[j], pending[j]
        for partners in pending.values():
            if partners is not None:
                partners.discard(j)
                if merged is not None:
                    partners.add(i)
        pending[i] = None  # its row, past j, is unchecked (and all of it if i changed)
        if merged is not None:
            regions[i], facts[i] = merged, _Facts.of(merged, facts[i])
