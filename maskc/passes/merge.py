"""Fewer, larger regions: drop impossible ones, deduplicate, and merge regions that differ in one side.

Fewer regions mean fewer instances to plan and fewer predicates for the kernel to test in a partial tile.
A union of two regions with the same predicate and the same k side is one region whose q side is the union
(and likewise for k); that is exact for any predicate, but a predicate that looks inside the segments of a
side (positions, grid coordinates, family members) keeps that side as it is, so that per-segment facts stay
attached to one kind of segment.
"""

from __future__ import annotations

from dataclasses import replace

from maskc import ir


def drop_empty_regions(program: ir.Program) -> ir.Program:
    return replace(program, regions=tuple(r for r in program.regions if r.pred != ir.FALSE))


def _union(program: ir.Program, a: ir.Side, b: ir.Side) -> ir.Side:
    names = set(a.segments) | set(b.segments)
    ordered = tuple(s.name for s in program.segments if s.name in names)
    return ir.Side(ordered, span=a.span.merge(b.span))


def _subsumes(big: ir.Region, small: ir.Region) -> bool:
    return (big.pred == ir.TRUE and set(small.q.segments) <= set(big.q.segments)
            and set(small.k.segments) <= set(big.k.segments))


def _try_merge(program: ir.Program, a: ir.Region, b: ir.Region) -> ir.Region | None:
    if a.pred != b.pred:
        return None
    rule = f"{a.rule}; {b.rule}" if a.rule and b.rule else a.rule or b.rule
    if set(a.k.segments) == set(b.k.segments) and not ir.looks_inside(a.pred, "q"):
        return replace(a, q=_union(program, a.q, b.q), rule=rule, span=a.span.merge(b.span))
    if set(a.q.segments) == set(b.q.segments) and not ir.looks_inside(a.pred, "k"):
        return replace(a, k=_union(program, a.k, b.k), rule=rule, span=a.span.merge(b.span))
    return None


def merge_regions(program: ir.Program) -> ir.Program:
    regions = list(program.regions)
    changed = True
    while changed:
        changed = False
        for i in range(len(regions)):
            for j in range(len(regions)):
                if i == j:
                    continue
                a, b = regions[i], regions[j]
                if _subsumes(a, b):
                    del regions[j]
                    changed = True
                    break
                merged = _try_merge(program, a, b) if i < j else None
                if merged is not None:
                    regions[i] = merged
                    del regions[j]
                    changed = True
                    break
            if changed:
                break
    return replace(program, regions=tuple(regions))
