"""The optimisation passes (maskc.passes), each on hand-written masks: constant folding, decisions the layout's
order settles, dropping, merging, deduplication and subsumption; verify() after every pass of every example;
and the one property every pass must keep: the exact mask does not change."""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mask_gen import random_masks
from small_configs import SMALL

from maskc import ir
from maskc.compiler import bind_consts
from maskc.front import read_file, read_program
from maskc.passes import PIPELINE, run_pipeline, verify
from maskc.passes.fold import fold_constants, inline_consts
from maskc.passes.layout_order import decide_by_layout_order
from maskc.passes.merge import _Facts, _subsumes, _try_merge, drop_empty_regions, merge_regions
from maskc.passes.residue_grid import lay_out_as_grid, residue_conjunct, residue_grids
from maskc.passes.verify import VerifyError
from maskc.plan.layout import bind_sequence, concrete_layout
from maskc.tools.reference import dense_mask

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def lowered(rules: str, segments: str = "S = n", params: str = "w: int = 4, flag: bool = true",
            consts: dict | None = None) -> ir.Program:
    text = (f"mask t({params})\nsegments:\n" + "".join(f"    {s}\n" for s in segments.split(";")) +
            "rules:\n" + "".join(f"    {r}\n" for r in rules.split(";")))
    return bind_consts(read_program(text), consts or {})


def preds(program: ir.Program) -> list[str]:
    return [ir.show(r.pred) for r in program.regions]


def sides(program: ir.Program) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    return [(r.q.segments, r.k.segments) for r in program.regions]


# ---------------------------------------------------------------------------------------------------
# Constant folding
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where, folded", [
    ("q < 2 + 3 * 4", "q < 14"),
    ("q - k < -7 // 2", "q - k < -4"),
    ("q - k < -7 % 2 + 2^3", "q - k < 9"),
    ("q + 0 < k * 1 - 0", "q < k"),
    ("0 + q < 1 * k // 1", "q < k"),
    ("not (q < k)", "q >= k"),
    ("not not (q == k)", "q == k"),
    ("not flag", "not flag"),
    ("true and q < k", "q < k"),
    ("false or q < k", "q < k"),
    ("q < k or true", "true"),
    ("q < k and q < k", "q < k"),
    ("(q < k and k > 2) and q != 3", "q < k and k > 2 and q != 3"),
    ("q - k == q - k", "true"),
    ("abs(-3) + min(4, 2, 9) + max(-1, -5) + clamp(12, 0, 10) < q", "14 < q"),
    ("q < w", "q < w"),
])
def test_constant_folding(where, folded):
    program = fold_constants(lowered(f"S -> S   where {where}"))
    assert preds(program) == [folded]


def test_a_rule_folded_to_false_is_dropped_and_one_folded_to_true_is_full():
    program = run_pipeline(lowered("S -> S   where q < k and 1 > 2;S -> S   causal where 3 >= 3"), check=True)
    assert preds(program) == ["k <= q"]


def test_const_parameters_are_inlined_and_folded():
    program = lowered("S -> S   where q - k < w * 2 and flag", params="const w: int = 4, const flag: bool = true")
    assert "w" in ir.params_used(program.regions[0].pred)
    program = fold_constants(inline_consts(program))
    assert preds(program) == ["q - k < 8"]
    program = lowered("S -> S   where q - k < w * 2 and flag", params="const w: int = 4, const flag: bool = true",
                      consts={"w": 10, "flag": False})
    assert run_pipeline(program, check=True).regions == ()


def test_a_zero_divisor_is_left_for_the_planner_to_report():
    program = fold_constants(lowered("S -> S   where q // 0 < k"))
    assert preds(program) == ["q // 0 < k"]


# ---------------------------------------------------------------------------------------------------
# Decisions the layout's order settles
# ---------------------------------------------------------------------------------------------------

ORDERED = "P = w;R[i] = L[i];T = n - w - sum(L)"
ORDERED_PARAMS = "w: int = 4, L: [int] = [2, 3]"


def test_causal_towards_an_earlier_segment_becomes_full():
    program = run_pipeline(lowered("R[i] -> P   causal;T -> P|R   causal", ORDERED, ORDERED_PARAMS), check=True)
    assert sides(program) == [(("R",), ("P",)), (("T",), ("P", "R"))] and preds(program) == ["true", "true"]


def test_layout_order_decides_comparisons_of_q_and_k_only():
    program = decide_by_layout_order(lowered(
        "R[i] -> P   causal where q - k < w;T -> P   where k < q and k >= q - w;P -> T   where k > q and q != k",
        ORDERED, ORDERED_PARAMS))
    assert preds(program) == ["q - k < w", "k >= q - w", "true"]
    # Their difference against 0, either way round, orders them too; other differences decide nothing.
    program = decide_by_layout_order(lowered(
        "T -> P   where 0 <= q - k and q - k < w;P -> T   where 0 <= q - k;P -> T   where k - q > 0 and q - k != 1",
        ORDERED, ORDERED_PARAMS))
    assert preds(program) == ["q - k < w", "false", "q - k != 1"]
    # The same rules inside one segment (or a family with itself) decide nothing.
    program = decide_by_layout_order(lowered("P -> P   causal;R[i] -> R[j]   causal where j < i", ORDERED,
                                             ORDERED_PARAMS))
    assert preds(program) == ["k <= q", "k <= q and k.member < q.member"]


def test_diag_between_ordered_segments_is_dropped():
    program = run_pipeline(lowered("T -> P   diag;P -> T   diag;P -> R   causal;T -> T   diag", ORDERED,
                                   ORDERED_PARAMS), check=True)
    assert sides(program) == [(("T",), ("T",))] and preds(program) == ["k == q"]


def test_the_example_masks_lose_what_their_layout_decides():
    hstu = run_pipeline(bind_consts(read_file(EXAMPLES / "hstu.mask"), {}), check=True)
    assert [(r.q.segments, r.k.segments, ir.show(r.pred)) for r in hstu.regions] == [
        (("H",), ("H",), "k <= q"), (("T",), ("H",), "true"), (("T",), ("T",), "k == q")]


# ---------------------------------------------------------------------------------------------------
# Merging, deduplication, subsumption
# ---------------------------------------------------------------------------------------------------

ABC = "A = 3;B = w;C = n - 3 - w"


def test_regions_with_the_same_predicate_and_k_side_merge():
    program = merge_regions(lowered("A -> B   where q - k < w;C -> B   where q - k < w", ABC))
    assert sides(program) == [(("A", "C"), ("B",))] and preds(program) == ["q - k < w"]
    assert "A -> B" in program.regions[0].rule and "C -> B" in program.regions[0].rule
    # and with the same q side, along k
    program = merge_regions(lowered("A -> C   where q + k < w;A -> A|B   where q + k < w", ABC))
    assert sides(program) == [(("A",), ("A", "B", "C"))]


def test_regions_that_differ_or_look_inside_segments_do_not_merge():
    program = merge_regions(lowered("A -> B   where q - k < w;C -> B   where q - k <= w", ABC))
    assert len(program.regions) == 2
    program = merge_regions(lowered("A -> B   where q.pos < w;C -> B   where q.pos < w", ABC))
    assert sides(program) == [(("A",), ("B",)), (("C",), ("B",))]
    # q.pos only pins the q side: merging along k is still exact
    program = merge_regions(lowered("A -> A   where q.pos < w;A -> C   where q.pos < w", ABC))
    assert sides(program) == [(("A",), ("A", "C"))]
    program = merge_regions(lowered("A -> B   where q < k;C -> A   where q < k", ABC))
    assert len(program.regions) == 2


def test_duplicate_rules_become_one_region():
    program = run_pipeline(lowered("A -> B   where q - k < w;A -> B   where (q - k < w);A -> B   where q - k < w",
                                   ABC), check=True)
    assert sides(program) == [(("A",), ("B",))] and preds(program) == ["q - k < w"]


def test_a_full_region_subsumes_what_it_covers():
    program = run_pipeline(lowered("A -> A|B   causal;A|C -> *   full;B -> A   where q < w", ABC), check=True)
    assert sides(program) == [(("A", "C"), ("A", "B", "C")), (("B",), ("A",))]
    assert preds(program) == ["true", "q < w"]
    program = run_pipeline(lowered("* -> *   full;A -> B   causal;C -> C   where q < w", ABC), check=True)
    assert sides(program) == [(("A", "B", "C"), ("A", "B", "C"))] and preds(program) == ["true"]


def merge_by_rescanning(program: ir.Program) -> ir.Program:
    """What merge_regions does, by its definition: apply the first change in row-major order over the pairs
    of regions, then look again from the start."""
    regions = list(program.regions)
    while True:
        for i, j in itertools.permutations(range(len(regions)), 2):
            a, b = regions[i], regions[j]
            if _subsumes(_Facts.of(a), _Facts.of(b)):
                del regions[j]
                break
            merged = _try_merge(program, a, b, _Facts.of(a), _Facts.of(b)) if i < j else None
            if merged is not None:
                regions[i] = merged
                del regions[j]
                break
        else:
            return replace(program, regions=tuple(regions))


def test_merging_checks_a_pair_again_only_when_it_changed_and_finds_what_rescanning_finds():
    q, k = ir.Token("q", "index"), ir.Token("k", "index")
    predicates = [ir.TRUE, ir.Compare("<=", k, q), ir.Compare("<", ir.Token("q", "pos"), ir.Const(4)),
                  ir.Compare("<", ir.Token("k", "pos"), ir.Const(4))]  # the last two look inside a side
    names = "ABCDE"
    segments = tuple(ir.Segment(name, "single", length=ir.Const(4)) for name in names)
    rng = random.Random(7)
    for _ in range(300):
        def side():
            return ir.Side(tuple(n for n in names if rng.random() < 0.4) or (rng.choice(names),))
        regions = tuple(ir.Region(side(), side(), rng.choice(predicates), rule=str(r))
                        for r in range(rng.randint(2, 12)))
        program = ir.Program("m", (), segments, regions)
        merged = merge_regions(program)
        assert merged == merge_by_rescanning(program)
        assert [r.rule for r in merged.regions] == [r.rule for r in merge_by_rescanning(program).regions]


def test_merging_a_thousand_rules_is_quick():
    # Every ordered pair of 32 segments, in a shuffled order: rescanning from the start after each of the 1,023
    # merges took 11 s.
    names = [f"S{i}" for i in range(32)]
    pairs = [(a, b) for a in names for b in names]
    random.Random(0).shuffle(pairs)
    program = ir.Program("m", (), tuple(ir.Segment(n, "single", length=ir.Const(4)) for n in names),
                         tuple(ir.Region(ir.Side((a,)), ir.Side((b,)), ir.TRUE) for a, b in pairs))
    start = time.perf_counter()
    merged = merge_regions(program)
    assert len(merged.regions) == 1 and merged.regions[0].q.segments == tuple(names)
    assert time.perf_counter() - start < 5


def test_drop_empty_regions():
    program = lowered("A -> B   where q < w;A -> C   full", ABC)
    program = replace(program, regions=(replace(program.regions[0], pred=ir.FALSE), program.regions[1]))
    assert sides(drop_empty_regions(program)) == [(("A",), ("C",))]


# ---------------------------------------------------------------------------------------------------
# A segment whose rules keep one pair in d, laid out as a grid of d columns
# ---------------------------------------------------------------------------------------------------


def test_a_dilated_window_becomes_a_grid_of_its_residues_and_a_partial_row():
    program = residue_grids(fold_constants(lowered("S -> S   where 0 <= q - k < w * d and (q - k) % d == 0",
                                                   params="w: int = 4, d: int = 3")))
    assert [(s.name, s.kind) for s in program.segments] == [("S", "grid"), ("S_tail", "single")]
    assert [ir.show(d) for d in program.segments[0].dims] == ["n // abs(d)", "abs(d)"]
    assert ir.show(program.segments[1].length) == "n % abs(d)" and ir.is_row_remainder(program, 1)
    assert sides(program) == [(("S",), ("S",)), (("S_tail",), ("S",)), (("S_tail",), ("S_tail",)),
                              (("S",), ("S_tail",))]
    # The residue said in columns: the tail starts a row (its positions are its columns) and is shorter than one.
    assert [p.split(" and ")[-1] for p in preds(program)] == ["q.x == k.x", "k.x == q.pos", "q == k", "q.x == k.pos"]
    assert {p.rsplit(" and ", 1)[0] for p in preds(program)} == {"0 <= q - k and q - k < w * d"}
    # Whole rows where the length is known to be: no tail. Beside another run, the segment stays a run (the Hopper
    # family would keep its tiles 8 columns wide); the rewrite itself puts the tail beside the segment there.
    whole = residue_grids(fold_constants(lowered("S -> S   where (k - q) % 4 == 0;I -> S   full",
                                                 "I = grid(2, 3);S = 12")))
    assert [(s.name, s.kind) for s in whole.segments] == [("I", "grid"), ("S", "grid")]
    mixed = fold_constants(lowered("S -> S   where 0 == (q - k) % w;* -> T   full", "S = n - 5;S_tail = 2;T = 3"))
    assert residue_grids(mixed) == mixed
    laid_out = lay_out_as_grid(mixed, mixed.segments[0], ir.Param("w"))
    assert [s.name for s in laid_out.segments] == ["S", "S_tail2", "S_tail", "T"]
    assert sides(laid_out)[-1] == (("S", "S_tail2", "S_tail", "T"), ("T",))


@pytest.mark.parametrize("rules, segments", [
    ("S -> S   where q - k < w", "S = n"),  # no residue
    ("S -> S   where (q - k) % 2 == 0;S -> S   where q == k", "S = n"),  # one rule keeps every pair in a run
    ("S -> S   where (q - k) % 2 == 0;S -> S   where (q - k) % w == 0", "S = n"),  # two divisors
    ("S -> S   where (q - k) % w == 0 and q.pos < 5", "S = n"),  # a position inside S: the tail's restarts
    ("S -> S   where (q - k) % 1 == 0 and k <= q", "S = n"),  # every pair of a run
    ("R -> R   where (q - k) % 2 == 0", "R[i] = L[i];S = n - sum(L)"),  # a family
    ("S -> S   where q % 2 == k", "S = n"),
])
def test_segments_whose_rules_do_not_keep_one_pair_in_d_stay_runs(rules, segments):
    program = fold_constants(lowered(rules, segments, params="w: int = 4, L: [int] = [3]"))
    assert residue_grids(program) == program


_RESIDUE_PARTS = ["0 <= q - k < w * d", "k <= q", "abs(q - k) <= 3 * w", "q >= 2", "k < n - 3", "q - k != d",
                  "q < len(L) + 5", "q - k >= d", "2 * w > k - q", "k - q <= w - 7", "q - k > -d", "1 <= k - q"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_laying_a_residue_segment_out_as_a_grid_keeps_the_mask(data):
    """Random masks with a segment whose rules keep one pair in d (the residue written several ways, d a runtime
    value or a constant, of either sign), other segments around it and rules to and from them: the pipeline's
    mask equals the one as written, for random lengths, and the segment became a grid."""
    residue = data.draw(st.sampled_from(["(q - k) % d == 0", "(k - q) % d == 0", "0 == (q - k) % d",
                                         "(q - k) % (-d) == 0"]))
    extra = data.draw(st.lists(st.sampled_from(_RESIDUE_PARTS), max_size=2, unique=True))
    rules = [f"S -> S   where {' and '.join([residue, *extra])}"]
    if data.draw(st.booleans()):
        rules.append(f"S -> S   where {residue} and {data.draw(st.sampled_from(_RESIDUE_PARTS))}")
    layout = data.draw(st.sampled_from(["S = n", "P = 3;S = n - 3", "S = n - w;T = w", "P = 2;S = n - 2 - w;T = w"]))
    names = [part.split(" = ")[0] for part in layout.split(";")]
    for other in [x for x in names if x != "S"]:
        rules.append(data.draw(st.sampled_from([f"{other} -> S   full", f"S -> {other}   where k < q + w",
                                                f"* -> {other}   where q - k < 2 * w", f"{other} -> *   causal"])))
    const_d = data.draw(st.sampled_from([None, 3, -2]))
    params = "w: int = 2, L: [int] = [1]" + ("" if const_d else ", d: int = 2")
    program = lowered(";".join(rules), layout, params=params + (f", const d: int = {const_d}" if const_d else ""),
                      consts={"d": const_d} if const_d else {})
    optimised = run_pipeline(program, check=True)
    assert (optimised.segment("S").kind == "grid") == (layout == "S = n")  # (beside other runs it stays one)
    assert run_pipeline(optimised, check=True) == optimised  # a fixed point: the tail stays a run
    if layout != "S = n":  # the rewrite alone, which the pipeline declines there
        folded = fold_constants(inline_consts(program))
        divisor = next(d for c in ir.conjuncts(folded.regions[0].pred) if (d := residue_conjunct(c)) is not None)
        optimised = lay_out_as_grid(folded, folded.segment("S"), divisor)
        verify(optimised)
    sequences = data.draw(st.lists(st.fixed_dictionaries({
        "n": st.integers(5, 70), "w": st.integers(0, 6), "L": st.lists(st.integers(-2, 5), max_size=3),
        **({} if const_d else {"d": st.sampled_from([-5, -3, -1, 1, 2, 3, 4, 7, 40])})}), min_size=1, max_size=3))
    assert_same_masks(program, optimised, [s for s in sequences if s["n"] >= 3 + s["w"]])


# ---------------------------------------------------------------------------------------------------
# verify, on every example after every pass; and what it catches
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_pass_keeps_the_invariants_and_the_mask_of_every_example(name):
    consts, sequences = SMALL[name]
    program = bind_consts(read_file(EXAMPLES / f"{name}.mask"), consts)
    seen = []
    optimised = run_pipeline(program, check=True, observe=lambda step, p: seen.append(step))
    assert seen == ["lowered"] + [step for step, _ in PIPELINE]
    assert run_pipeline(optimised, check=True) == optimised  # a fixed point
    assert_same_masks(program, optimised, sequences)


def assert_same_masks(before: ir.Program, after: ir.Program, sequences) -> None:
    for runtime in sequences:
        masks = []
        for program in (before, after):
            values = bind_sequence(program, runtime)
            masks.append(dense_mask(program, concrete_layout(program, values), values))
        assert np.array_equal(*masks), f"the passes changed the mask for {runtime}"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=random_masks())
def test_the_passes_keep_the_mask_of_random_masks(case):
    text, consts, sequences = case
    program = bind_consts(read_program(text), consts)
    assert_same_masks(program, run_pipeline(program, check=True), sequences)


def test_verify_catches_broken_invariants():
    program = lowered("A -> B   where q < w;C -> C   causal", ABC)
    verify(program)
    r0 = program.regions[0]
    broken = [replace(program, segments=program.segments + program.segments[:1])] + [
        replace(program, regions=(replace(r0, **change),)) for change in (
            {"q": ir.Side(("C", "A"))},  # not in layout order
            {"q": ir.Side(())},  # empty
            {"k": ir.Side(("Nope",))},  # unknown
            {"pred": ir.Compare("<", ir.Token("q", "y"), ir.Const(1))},  # grid coordinates off a grid
            {"pred": ir.Compare("<", ir.FamilyIndex(), ir.Const(1))},  # a family index outside a length
        )]
    for bad in broken:
        with pytest.raises(VerifyError):
            verify(bad, after="test")
    with_const = lowered("A -> B   where q < w", ABC, params="const w: int = 4")
    verify(with_const, after="lowered")
    with pytest.raises(VerifyError, match="not inlined"):
        verify(with_const, after="fold-constants")
