"""The planner (maskc.plan) against brute force: for every example and for random masks, the descriptor
lists exactly the tiles with a visible pair, a `full` tile is full, a partial tile is partial and the regions
its kind names suffice; the CPU model of the kernel's tile loop matches dense attention; the generated mask
code (compiled for the host) matches the exact mask. Also the CSR's order and size, and huge requests."""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
import tracemalloc
from functools import lru_cache
from pathlib import Path
from unittest import mock

import bounded
import host_mask
import numpy as np
import pytest
from descriptor_check import check_descriptor, check_structure
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mask_gen import random_masks
from small_configs import PINNED, SMALL, without_residue_grids

from maskc.compiler import compile_file, compile_text
from maskc.kernels import KernelOptions, TileKind
from maskc.plan import planner
from maskc.plan.planner import MAX_DESCRIPTOR_BYTES, PlanError, TileConfig, plan, visited_tiles_floor
from maskc.plan.factors import factored_forms
from maskc.plan.rows import row_forms
from maskc.tools.reference import attention, dense_mask, simulate

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CONFIGS = [TileConfig(128, 64), TileConfig(16, 8), TileConfig(8, 16)]
UNLIMITED = 1 << 40  # a refinement budget that never runs out: the descriptor must be exact


@lru_cache(maxsize=None)
def example(name: str):
    """The compiled example, its small configuration's values and layouts, and their exact masks."""
    consts, sequences = SMALL[name]
    compiled = compile_file(EXAMPLES / f"{name}.mask", KernelOptions(), consts)
    values, layouts = compiled.bind(sequences)
    masks = [dense_mask(compiled.program, lay, val) for lay, val in zip(layouts, values)]
    return compiled, values, layouts, masks


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.block_q}x{c.block_k}")
@pytest.mark.parametrize("name", sorted(SMALL))
def test_descriptor_of_every_example_is_exact(name, config):
    compiled, values, layouts, masks = example(name)
    desc = plan(compiled.program, layouts, values, config)
    assert desc.stats.tiles_conservative == 0
    check_descriptor(compiled.program, desc, layouts, values, masks)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_without_refinement_budget_the_descriptor_stays_sound(name):
    """Tiles the budget leaves unrefined stay partial: slower, never wrong."""
    compiled, values, layouts, masks = example(name)
    for config in CONFIGS:
        desc = plan(compiled.program, layouts, values, config, refine_budget=0)
        check_descriptor(compiled.program, desc, layouts, values, masks, exact=False)


def test_simulated_kernel_matches_dense_attention_on_every_example():
    rng = np.random.default_rng(0)
    for name in sorted(SMALL):
        compiled, values, layouts, masks = example(name)
        desc = plan(compiled.program, layouts, values, TileConfig(16, 8))
        check_simulation(compiled.program, desc, layouts, values, masks, rng)


def check_simulation(program, desc, layouts, values, masks, rng, d: int = 8):
    qs = [rng.standard_normal((lay.n, d)).astype(np.float32) for lay in layouts]
    ks = [rng.standard_normal((lay.n, d)).astype(np.float32) for lay in layouts]
    vs = [rng.standard_normal((lay.n, d)).astype(np.float32) for lay in layouts]
    scale = 1 / np.sqrt(d)
    outs, lses = simulate(program, desc, layouts, values, qs, ks, vs, scale)
    for b, mask in enumerate(masks):
        o_ref, lse_ref = attention(qs[b], ks[b], vs[b], mask, scale)
        assert np.abs(outs[b] - o_ref).max(initial=0) < 1e-4, f"sequence {b}: O differs"
        empty = ~mask.any(axis=1)
        assert (outs[b][empty] == 0).all() and np.isneginf(lses[b][empty]).all()
        assert np.abs(lses[b][~empty] - lse_ref[~empty]).max(initial=0) < 1e-4, f"sequence {b}: LSE differs"


# ---------------------------------------------------------------------------------------------------
# Random masks
# ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def host_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("host-mask")


def compiled_random(case):
    text, consts, sequences = case
    try:
        return compile_text(text, KernelOptions(), consts)
    except Exception as exc:  # the generator writes valid masks only: any refusal is a bug on one side
        raise AssertionError(f"the front end refused a generated mask:\n{text}") from exc


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=random_masks(), config=st.sampled_from(CONFIGS), seed=st.integers(0, 2**32 - 1))
def test_random_masks_plan_exactly(case, config, seed):
    text, consts, sequences = case
    compiled = compiled_random(case)
    values, layouts = compiled.bind(sequences)
    masks = [dense_mask(compiled.program, lay, val) for lay, val in zip(layouts, values)]
    desc = plan(compiled.program, layouts, values, config, refine_budget=UNLIMITED)
    note = f"\n{text}\nconsts {consts}\nsequences {sequences}\nconfig {config}"
    try:
        assert desc.stats.tiles_conservative == 0
        check_descriptor(compiled.program, desc, layouts, values, masks)
        check_simulation(compiled.program, desc, layouts, values, masks, np.random.default_rng(seed))
    except AssertionError as exc:
        raise AssertionError(f"{exc}{note}") from None


@pytest.mark.skipif(host_mask.compiler() is None, reason="needs a C++ compiler")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                  HealthCheck.function_scoped_fixture])
@given(case=random_masks())
def test_random_masks_generated_code_is_exact(case, host_dir):
    text, consts, sequences = case
    host_mask.check_generated_code(compiled_random(case), sequences, host_dir,
                                   f"\n{text}\nconsts {consts}\nsequences {sequences}")


# Random runtime values for every example (const values as in small_configs): the real workloads at odd
# sizes, empty segments, negative windows and divisors.

def _rest(**fixed):
    """Values with n = the fixed segments' tokens + a random rest."""
    return st.fixed_dictionaries(fixed).flatmap(lambda v: st.integers(0, 120).map(
        lambda rest: {**v, "n": rest + sum(x if isinstance(x, int) else sum(x) for k, x in v.items()
                                           if k in ("global_tokens", "targets", "context", "prefix", "sinks",
                                                    "responses"))}))


_N = st.integers(0, 300)
_DOCS = st.lists(st.integers(0, 60), max_size=5)
_TREE = st.integers(0, 20).flatmap(lambda size: st.tuples(*[st.integers(-1, x - 1) for x in range(size)]).map(list))
_TABLE = st.tuples(st.integers(0, 6), st.integers(0, 6)).flatmap(
    lambda rc: st.lists(st.lists(st.booleans(), min_size=rc[1], max_size=rc[1]), min_size=rc[0], max_size=rc[0]))
_NONZERO = st.integers(-4, 6).filter(bool)
EXAMPLE_VALUES = {
    "block_sparse": st.fixed_dictionaries({"n": st.integers(0, 700), "layout": _TABLE}),
    "causal": st.fixed_dictionaries({"n": _N}),
    "chunked_causal": st.fixed_dictionaries({"n": _N, "chunk": st.integers(-40, 80).filter(bool)}),
    "clear": st.fixed_dictionaries({"r": st.integers(-2, 9)}),
    "clear_text": st.fixed_dictionaries({"text": st.integers(0, 40), "r": st.integers(-1, 9)}),
    "dilated_window": st.fixed_dictionaries({"n": _N, "window": st.integers(-3, 40), "dilation": _NONZERO}),
    "document": st.fixed_dictionaries({"docs": _DOCS}),
    "full": st.fixed_dictionaries({"n": _N}),
    "global_window": _rest(global_tokens=st.integers(0, 20), radius=st.integers(-2, 40)),
    "hstu": _rest(targets=st.integers(0, 50)),
    "hstu_jagged": _rest(context=st.integers(0, 10), targets=st.integers(0, 30)),
    "natten2d": st.fixed_dictionaries({"kernel": st.integers(-1, 9), "d": st.sampled_from([-2, -1, 1, 2, 3])}),
    "prefix_lm": _rest(prefix=st.integers(0, 60)),
    "rm_shared": st.fixed_dictionaries({"prompt": st.integers(0, 60), "responses": _DOCS}),
    "shared_prompt": _rest(responses=_DOCS),
    "sinks_window": _rest(sinks=st.integers(0, 10), window=st.integers(-2, 50)),
    "sliding_window": st.fixed_dictionaries({"n": _N, "window": st.integers(-2, 60)}),
    "tree": _TREE.flatmap(lambda parent: st.integers(0, 80).map(lambda rest: {"parent": parent,
                                                                             "n": len(parent) + rest})),
    "video3d": st.fixed_dictionaries({"rt": st.integers(-1, 3), "ry": st.integers(-1, 4), "rx": st.integers(-1, 5)}),
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), name=st.sampled_from(sorted(SMALL)), config=st.sampled_from(CONFIGS))
def test_examples_with_random_values_plan_exactly(data, name, config):
    compiled = example(name)[0]
    sequences = data.draw(st.lists(EXAMPLE_VALUES[name], min_size=1, max_size=3), label="sequences")
    values, layouts = compiled.bind(sequences)
    masks = [dense_mask(compiled.program, lay, val) for lay, val in zip(layouts, values)]
    desc = plan(compiled.program, layouts, values, config, refine_budget=UNLIMITED)
    assert desc.stats.tiles_conservative == 0
    check_descriptor(compiled.program, desc, layouts, values, masks)
    check_simulation(compiled.program, desc, layouts, values, masks, np.random.default_rng(0))


# ---------------------------------------------------------------------------------------------------
# The fast path for row intervals (maskc/plan/rows.py) against the general search
# ---------------------------------------------------------------------------------------------------

FAST_EXAMPLES = ["causal", "document", "full", "global_window", "hstu", "hstu_jagged", "prefix_lm", "rm_shared",
                 "shared_prompt", "sinks_window", "sliding_window"]
DESCRIPTOR_ARRAYS = ("work_seq", "work_qtile", "row_ptr", "k_tile", "kind")


def takes_fast_path(compiled) -> bool:
    return row_forms(compiled.program) is not None and not compiled.tiling.has_grids


def check_fast_path(compiled, values, layouts, config, masks=None, note=""):
    """With the fast paths (rows.py, factors.py; and the C++ planner, plan/native.py, where it is built) and
    without, exact (no refinement budget): the same descriptor byte for byte, and exact against brute force
    (`masks`: given, computed, or False to skip)."""
    general = plan(compiled.program, layouts, values, config, refine_budget=UNLIMITED, fast=False)
    assert not general.stats.fast_path
    for planner_name, setting in (("the C++ planner", "1"), ("numpy", "0")):
        with mock.patch.dict(os.environ, {"MASKC_NATIVE": setting}):
            fast = plan(compiled.program, layouts, values, config, refine_budget=UNLIMITED)
        assert fast.stats.fast_path == takes_fast_path(compiled)
        for name in DESCRIPTOR_ARRAYS:
            a, b = getattr(fast, name), getattr(general, name)
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), \
                f"{name} differs from the general search ({planner_name}){note}"
    if masks is not False:
        check_descriptor(compiled.program, fast, layouts, values, masks)


def test_the_fast_path_takes_the_row_interval_examples():
    taken = [name for name in sorted(SMALL) if takes_fast_path(example(name)[0])]
    assert taken == FAST_EXAMPLES


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.block_q}x{c.block_k}")
@pytest.mark.parametrize("name", FAST_EXAMPLES)
def test_fast_path_equals_the_general_search_on_examples(name, config):
    compiled, values, layouts, masks = example(name)
    check_fast_path(compiled, values, layouts, config, masks)


@pytest.mark.parametrize("name", FAST_EXAMPLES)
def test_fast_path_equals_the_general_search_at_32k(name):
    """The default values (N = 32768; the packed batches of hstu_jagged and rm_shared), the default tiles."""
    compiled = compile_file(EXAMPLES / f"{name}.mask", KernelOptions())
    values, layouts = compiled.bind([dict(line) for line in compiled.program.batch] or [{}])
    check_fast_path(compiled, values, layouts, compiled.tiles, masks=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), name=st.sampled_from(FAST_EXAMPLES), config=st.sampled_from(CONFIGS))
def test_fast_path_equals_the_general_search_with_random_values(data, name, config):
    compiled = example(name)[0]
    sequences = data.draw(st.lists(EXAMPLE_VALUES[name], min_size=1, max_size=4), label="sequences")
    values, layouts = compiled.bind(sequences)
    check_fast_path(compiled, values, layouts, config)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=random_masks(rows=True), config=st.sampled_from(CONFIGS))
def test_fast_path_equals_the_general_search_on_random_masks(case, config):
    """Random masks made mostly of row intervals (about two in three take the fast path; the rest check that
    it declines)."""
    text, _, sequences = case
    compiled = compiled_random(case)
    values, layouts = compiled.bind(sequences)
    check_fast_path(compiled, values, layouts, config, note=f"\n{text}\nsequences {sequences}\nconfig {config}")


MEMBER_LISTS = {
    # Interleaved text and images (Transfusion): causal throughout, each image whole inside itself.
    "image_text": ("mask image_text(lens: [int] = [5], image: [bool] = [false])\nsegments:\n    M[i] = lens[i]\n"
                   "rules:\n    * -> *       causal\n    M[i] -> M[i] where image[i]\n"),
    # Documents, each with a window of its own.
    "windows": ("mask windows(lens: [int] = [5], w: [int] = [1])\nsegments:\n    D[i] = lens[i]\nrules:\n"
                "    D[i] -> D[i] causal where q - k < w[i] + 1\n"),
    # Prefix-LM documents packed: each document's own prefix is seen by all of it.
    "prefixes": ("mask prefixes(lens: [int] = [5], w: [int] = [1])\nsegments:\n    D[i] = lens[i]\nrules:\n"
                 "    D[i] -> D[i] causal\n    D[i] -> D[i] where k.pos < w[i]\n"),
}


@pytest.mark.parametrize("name", sorted(MEMBER_LISTS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), config=st.sampled_from(CONFIGS))
def test_the_fast_path_reads_a_members_own_list_entries(name, data, config):
    # A family member's own entry of a list (`image[i]`, `w[i]`) is constant along its rows: row intervals
    # in closed form, as for a parameter (the general search took 40-50 ms for such a mask at 32K tokens), and
    # so are a key's facts in the query's own member (`k.pos`).
    compiled = compile_text(MEMBER_LISTS[name], KernelOptions(), {})
    assert takes_fast_path(compiled)
    sequences = []
    for _ in range(data.draw(st.integers(1, 3))):
        lens = data.draw(st.lists(st.integers(0, 90), max_size=5))
        # Entries past the members (read as 0 where missing) and missing ones: each list its own length.
        extra = data.draw(st.integers(-len(lens), 2))
        entries = data.draw(st.lists(st.integers(-3, 40), min_size=len(lens) + extra, max_size=len(lens) + extra))
        sequences.append({"lens": lens, **({"image": [x % 2 == 1 for x in entries]} if name == "image_text"
                                           else {"w": entries})})
    values, layouts = compiled.bind(sequences)
    check_fast_path(compiled, values, layouts, config)


# ---------------------------------------------------------------------------------------------------
# Rules that factor over the tiles' axes (maskc/plan/factors.py) against the general search
# ---------------------------------------------------------------------------------------------------


def factored(compiled) -> list[bool]:
    return [form is not None for form in factored_forms(compiled.program, compiled.tiling)]


def test_the_factored_path_takes_rules_that_factor_over_the_axes():
    taken = {name: factored(example(name)[0]) for name in sorted(SMALL)}
    assert {name: flags for name, flags in taken.items() if any(flags)} == {
        "causal": [True], "sliding_window": [True],  # (the row-interval fast path plans these first)
        "block_sparse": [True], "chunked_causal": [True], "clear": [True], "clear_text": [False, False, True],
        "natten2d": [True], "video3d": [True],
        "dilated_window": [True, False, True]}  # a grid of its residues and the partial last row (passes/residue_grid.py)


def grid_mask(rule: str, dims: str = "h, w") -> str:
    return f"mask m(h: int = 8, w: int = 12, t: int = 2, r: int = 3, on: bool = true)\nsegments:\n    G = grid({dims})\n" \
           f"rules:\n    G -> G   where {rule}\n"


@pytest.mark.parametrize("rule, taken", [
    ("(q.y - k.y)^2 + (q.x - k.x)^2 <= r^2", True),  # one factor over two axes, of differences
    ("abs(k.x - q.x) <= r and k.y <= q.y", True),
    ("q.x != k.x or (q.y - k.y) % 2 == 0", True),
    ("q.y - k.y < n // 4", True),  # n is a value of the sequence
    ("q.y <= 3 and k.y <= q.y", True),  # one axis, where the query lies too: over (q.y, k.y)
    ("k.x // 4 == q.x // 4 and abs(q.y - k.y) <= r", True),  # a factor per axis, of either kind
    ("q.y + k.x < r", False),  # two axes, not as differences
    ("q.y - k.x < 2", False),  # two different coordinates
    ("q.y <= 3 or k.x <= q.x", False),  # a disjunction across the axes
    ("k <= q and abs(q.x - k.x) <= r", True),  # positions as differences: the coordinates' times the strides
    ("0 <= q - k < 4 * w and q.x == k.x", True),  # a dilated window laid out as a grid (passes/residue_grid.py)
    ("q < 2 * w and abs(q.x - k.x) <= r", False),  # a position, not a difference
])
def test_rules_that_factor_over_the_axes(rule, taken):
    compiled = compile_text(grid_mask(rule), KernelOptions())
    assert factored(compiled) == [taken]


@pytest.mark.parametrize("rule, taken", [
    ("0 <= q - k < 9 and (q - k) % 3 == 0", True),
    ("abs(q.pos - k.pos) <= 5", True),
    ("q // 64 == k // 64", True),  # the same over whole tiles where 64 is a multiple of the tile size
    ("q // w == k // w and k <= q", True),  # chunks, and causal inside them: two factors of one axis
    ("q % 64 == k % 64", False),  # absolute positions on a run: its table would be n x n
    ("q - k.pos < 4", False),
])
def test_rules_on_runs_factor_where_they_read_differences(rule, taken):
    text = f"mask m(w: int = 3)\nsegments:\n    S = n\nrules:\n    S -> S   where {rule}\n"
    with without_residue_grids():  # (which lays a dilated window out as a grid)
        assert factored(compile_text(text, KernelOptions())) == [taken]


FACTORS = ["abs(q.y - k.y) <= r", "abs(q.x - k.x) <= r + 1", "(q.y - k.y)^2 + (q.x - k.x)^2 <= r^2", "k.x <= q.x",
           "q.y != k.y", "(q.x - k.x) % 3 == 0", "q.y - k.y >= -r", "k.y < q.y or (k.y == q.y and k.x <= q.x)",
           "abs(q.t - k.t) <= 1", "q.t - k.t == 0 or k.x == q.x", "k.y // 3 == q.y // 3", "q.x <= r or k.x >= q.x",
           "0 <= k.x - clamp(q.x - r, 0, w - 2 * r - 1) < 2 * r + 1", "(q.y + k.y) % 2 == 0", "k.t <= q.t", "r >= 1",
           "on or q.y != k.y", "not on", "0 <= q - k < 3 * w", "k <= q", "abs(q.pos - k.pos) <= w + r"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), config=st.sampled_from(CONFIGS), three=st.booleans())
def test_the_factored_path_equals_the_general_search_on_random_rules(data, config, three):
    """Random conjunctions of a few factors on packed grids of random sizes, the sequences' values differing or
    not; 2D and 3D. (A draw the path declines, a disjunction across axes say, checks the search alone.)"""
    rules = [r for r in FACTORS if three or "q.t" not in r]
    terms = data.draw(st.lists(st.sampled_from(rules), min_size=1, max_size=3), label="terms")
    joiner = data.draw(st.sampled_from([" and ", " or "]), label="joiner")
    rule = joiner.join(f"({t})" for t in terms)
    compiled = compile_text(grid_mask(rule, "t, h, w" if three else "h, w"), KernelOptions())
    sizes = st.integers(1, 19)
    sequence = st.fixed_dictionaries({"h": sizes, "w": sizes, "t": st.integers(1, 3), "r": st.integers(-1, 6),
                                      "on": st.booleans()})
    sequences = data.draw(st.lists(sequence, min_size=1, max_size=3), label="sequences")
    for given_values in sequences:
        given_values["n"] = given_values["h"] * given_values["w"] * (given_values["t"] if three else 1)
        if not three:
            del given_values["t"]
    values, layouts = compiled.bind(sequences)
    check_fast_path(compiled, values, layouts, config, note=f"\n{rule}\nsequences {sequences}\nconfig {config}")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), config=st.sampled_from(CONFIGS))
def test_the_factored_path_equals_the_general_search_on_runs(data, config):
    """Rules of position differences on a run (dilated windows), packed sequences of random lengths."""
    terms = data.draw(st.lists(st.sampled_from(["0 <= q - k < w * 3", "(q - k) % w == 0", "abs(q.pos - k.pos) <= w",
                                                "k <= q", "q - k != 1"]), min_size=1, max_size=3), label="terms")
    rule = " and ".join(f"({t})" for t in terms)
    with without_residue_grids():  # (which lays a dilated window out as a grid)
        compiled = compile_text(f"mask m(w: int = 3)\nsegments:\n    S = n\nrules:\n    S -> S   where {rule}\n",
                                KernelOptions())
    windows = st.sampled_from([-2, -1, 1, 2, 3, 5, 7])  # (never 0: a divisor)
    sequences = data.draw(st.lists(st.fixed_dictionaries({"n": st.integers(0, 90), "w": windows}), min_size=1,
                                   max_size=3), label="sequences")
    values, layouts = compiled.bind(sequences)
    check_fast_path(compiled, values, layouts, config, note=f"\n{rule}\nsequences {sequences}\nconfig {config}")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), config=st.sampled_from(CONFIGS))
def test_the_factored_path_equals_the_general_search_on_block_rules(data, config):
    """Rules of whole blocks of positions (block-sparse layouts, chunks), alone or with differences, on packed
    sequences of random lengths; block sizes that are multiples of the tile sizes or not (then the search plans)."""
    terms = data.draw(st.lists(st.sampled_from(["layout[q // 16][k // 16]", "q // c == k // c", "k <= q",
                                                "q.pos // 32 != k // 32", "q - k < 40"]), min_size=1, max_size=3,
                               unique=True), label="terms")
    rule = " and ".join(f"({t})" for t in terms)
    compiled = compile_text(f"mask m(c: int = 16, layout: [[bool]] = [[true]])\nsegments:\n    S = n\nrules:\n"
                            f"    S -> S   where {rule}\n", KernelOptions())
    blocks = st.integers(0, 6).flatmap(lambda b: st.lists(st.lists(st.booleans(), min_size=b, max_size=b),
                                                            min_size=b, max_size=b))
    sequence = st.fixed_dictionaries({"n": st.integers(0, 90), "c": st.sampled_from([8, 16, 24, 32, 64]),
                                      "layout": blocks})
    sequences = data.draw(st.lists(sequence, min_size=1, max_size=3), label="sequences")
    values, layouts = compiled.bind(sequences)
    check_fast_path(compiled, values, layouts, config, note=f"\n{rule}\nsequences {sequences}\nconfig {config}")


@pytest.mark.parametrize("h, w", [(3, 5), (4, 4), (2, 8), (5, 7)])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.block_q}x{c.block_k}")
def test_block_rules_on_a_run_that_follows_a_grid(h, w, config):
    """`q // 16` reads positions in the sequence: a run that begins after a grid of h x w tokens has whole tiles in
    one block of 16 only where h x w is a multiple of 16 (else the search plans it)."""
    compiled = compile_text("mask m(h: int = 3, w: int = 5)\nsegments:\n    G = grid(h, w)\n    S = n - h * w\n"
                            "rules:\n    G -> G   where abs(q.x - k.x) <= 1\n"
                            "    S -> S   where q // 16 == k // 16 and k <= q\n", KernelOptions())
    values, layouts = compiled.bind([{"h": h, "w": w, "n": h * w + 70}, {"h": h, "w": w, "n": h * w + 33}])
    check_fast_path(compiled, values, layouts, config)


@pytest.mark.parametrize("where", [
    # Each side fits int64, their difference does not: every tile was planned full, though none is visible.
    "9223372036854775807 - q < k - 9223372036854775807",
    # The index spans more than 2^63: it was scanned as a short range and the one visible pair skipped.
    "L[min(k, 1) * 4611686018427387903 + min(k, 1) * 4611686018427387903 - min(q, 1) * 4611686018427387903] > 0",
])
def test_values_near_the_ends_of_int64_plan_exactly(where):
    """Masks the language accepts (no intermediate passes 64 bits) whose planning used to wrap."""
    compiled = compile_text(f"mask m(n: int = 64, L: [int] = [5, 5])\nsegments:\n    S = n\nrules:\n"
                            f"    S -> S full where {where}\n", KernelOptions())
    values, layouts = compiled.bind([{"n": 64}])
    desc = plan(compiled.program, layouts, values, TileConfig(16, 8), refine_budget=UNLIMITED)
    check_descriptor(compiled.program, desc, layouts, values)


# ---------------------------------------------------------------------------------------------------
# Structure, size, limits
# ---------------------------------------------------------------------------------------------------


def sliding(n: int, window: int, config=TileConfig()):
    compiled, _, _, _ = example("sliding_window")
    values, layouts = compiled.bind([{"n": n, "window": window}])
    return plan(compiled.program, layouts, values, config)


PER_TOKEN_LISTS = {
    "doc_ids": ("mask doc_ids(n: int = 1024, doc: [int] = [])\nsegments:\n    S = n\nrules:\n"
                "    S -> S   causal where doc[q] == doc[k]\n"),
    "global_flags": ("mask global_flags(n: int = 1024, g: [bool] = [])\nsegments:\n    S = n\nrules:\n"
                     "    S -> S   where g[q] or g[k]\n"),
}


@pytest.mark.parametrize("name", sorted(PER_TOKEN_LISTS))
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_per_token_lists_plan_exactly_within_the_default_budget(name, data):
    # Document ids or flags given per token, as FlexAttention's users write them: a list read over a tile is
    # bounded by the elements it reads (RangeExtremes), so a tile inside one document is proven full or empty
    # without evaluating it pair by pair (a 32K-token batch had every tile of the causal triangle listed, and
    # 150 ms of planning).
    n = data.draw(st.integers(1, 2000))
    config = data.draw(st.sampled_from(CONFIGS))
    cuts = sorted(data.draw(st.lists(st.integers(0, n - 1), max_size=8)))  # where documents begin, or global tokens
    if name == "doc_ids":
        values = {"doc": np.searchsorted(cuts, np.arange(n), side="right").tolist()}
    else:
        values = {"g": np.isin(np.arange(n), cuts).tolist()}
    compiled = compile_text(PER_TOKEN_LISTS[name], KernelOptions(), {})
    vals, layouts = compiled.bind([{"n": n, **values}])
    masks = [dense_mask(compiled.program, lay, val) for lay, val in zip(layouts, vals)]
    desc = plan(compiled.program, layouts, vals, config)
    assert desc.stats.tiles_conservative == 0
    check_descriptor(compiled.program, desc, layouts, vals, masks)
    # Only the tiles whose rows or columns hold a document's start (or a global token) need evaluating.
    tiles = -(-n // config.block_q) + -(-n // config.block_k)
    assert desc.stats.tiles_refined <= 2 * (len(cuts) + 1) * tiles


def test_visiting_order_puts_the_longest_rows_first():
    compiled, values, layouts, _ = example("causal")
    desc = plan(compiled.program, layouts, values, TileConfig(16, 8))
    check_structure(desc)
    counts = np.diff(desc.row_ptr)
    # Causal: the last query tile of the longer sequence has the most k tiles and runs first.
    assert (desc.work_seq[0], desc.work_qtile[0]) == (0, 18) and counts[0] == 38


def test_the_longest_run_of_equal_rows_is_found():
    """The Hopper forward visits the longest run of work items with equal key tile counts head-major."""
    desc = sliding(1000, 300, TileConfig(16, 8))
    counts = np.diff(desc.row_ptr)
    first, last = desc.longest_equal_run()
    assert last - first > 1 and len(set(counts[first:last].tolist())) == 1
    runs = [len(list(group)) for _, group in itertools.groupby(counts.tolist())]
    assert last - first == max(runs) and last - first < len(counts)
    compiled = example("full")[0]
    values, layouts = compiled.bind([{"n": 1000}])
    whole = plan(compiled.program, layouts, values, TileConfig(16, 8))
    assert whole.longest_equal_run() == (0, len(whole.work_seq)) == (0, 63)


def test_query_tiles_without_k_tiles_are_still_work_items():
    """A query row with no visible key must still be written (zeros, LSE = -inf): its tile is a work item
    with an empty list."""
    text = "mask t(a: int = 20)\nsegments:\n    A = a\n    B = n - a\nrules:\n    A -> A   causal\n"
    compiled = compile_text(text)
    values, layouts = compiled.bind([{"n": 100}, {"n": 40, "a": 0}])
    desc = plan(compiled.program, layouts, values, TileConfig(16, 8))
    check_structure(desc)
    counts = dict(zip(zip(desc.work_seq.tolist(), desc.work_qtile.tolist()), np.diff(desc.row_ptr).tolist()))
    assert len(counts) == 7 + 3
    assert counts[(0, 0)] == 2 and counts[(0, 1)] == 3 and all(counts[(0, t)] == 0 for t in range(2, 7))
    assert all(counts[(1, t)] == 0 for t in range(3))


def test_descriptor_memory_is_linear_in_the_tiles_visited():
    desc = sliding(1 << 20, 256)
    work, visited = len(desc.work_seq), len(desc.k_tile)
    assert work == (1 << 20) // 128 and visited <= 6 * work
    assert desc.nbytes <= 12 * work + 4 + 8 * visited
    assert desc.stats.tiles_total == work * (1 << 20) // 64  # the dense count, never materialised


def test_planning_memory_stays_proportional_to_the_visited_tiles():
    sliding(1 << 16, 256)  # warm up imports and caches
    tracemalloc.start()
    try:
        desc = sliding(1 << 22, 256)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # 2^31 tiles in all; 32768 query tiles visiting ~5 k tiles each.
    assert len(desc.k_tile) < 6 * len(desc.work_seq)
    assert peak < 200 * 2**20, f"planning a sparse 4M-token sequence peaked at {peak / 2**20:.0f} MiB"


def test_a_huge_request_is_refused_quickly_without_allocating_gigabytes():
    compiled, _, _, _ = example("full")
    values, layouts = compiled.bind([{"n": 2_000_000_000}])
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(PlanError, match="1 GiB"):
            plan(compiled.program, layouts, values, TileConfig())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < 2.0
    assert peak < 256 * 2**20, f"refusing the request took {peak / 2**20:.0f} MiB"


def test_a_descriptor_just_under_the_limit_is_allowed_and_over_is_refused():
    # Dense attention: visited tiles = q tiles x k tiles; 8 bytes each (k tile, kind).
    compiled, _, _, _ = example("full")
    limit_tiles = MAX_DESCRIPTOR_BYTES // 8
    n_over = int(np.ceil(np.sqrt(limit_tiles * 128 * 64))) + 8192
    values, layouts = compiled.bind([{"n": n_over}])
    with pytest.raises(PlanError):
        plan(compiled.program, layouts, values, TileConfig())
    values, layouts = compiled.bind([{"n": 65536}])
    desc = plan(compiled.program, layouts, values, TileConfig())
    assert len(desc.k_tile) == 512 * 1024 and (desc.kind == TileKind.FULL).all()


def test_tables_with_different_shapes_per_sequence():
    """block_sparse over a jagged batch: each sequence has its own layout table, of its own size."""
    compiled, _, _, _ = example("block_sparse")
    rng = np.random.default_rng(1)
    sequences = [{"n": 300, "layout": rng.random((3, 3)) < 0.5}, {"n": 500, "layout": rng.random((4, 2)) < 0.5},
                 {"n": 129, "layout": np.zeros((0, 0), bool)}]
    values, layouts = compiled.bind(sequences)
    for config in CONFIGS:
        desc = plan(compiled.program, layouts, values, config)
        check_descriptor(compiled.program, desc, layouts, values)


def test_a_per_sequence_value_that_divides_by_zero_points_at_its_expression():
    """validate_values refuses a zero divisor first; the kernel tables, built without it, still name the expression
    where it is written."""
    from maskc.plan.layout import bind_sequence, concrete_layout

    compiled = compile_text("mask m(d: int = 2)\nsegments:\n    S = n\nrules:\n"
                            "    S -> S   causal where q - k < n // d\n")
    values = [bind_sequence(compiled.program, {"n": 64, "d": 0})]
    layouts = [concrete_layout(compiled.program, values[0])]
    desc = plan(compiled.program, layouts, values, compiled.tiles)
    with pytest.raises(ValueError) as info:
        planner.kernel_tables(compiled.code, desc, layouts, values, np.zeros(1, np.int64))
    assert str(info.value) == "<mask>:5:35: error: sequence 0: n // d divides by zero for these parameter values"


REFUSE_IN_A_CHILD = """
import json, sys, time, tracemalloc
from maskc.compiler import compile_file
from maskc.kernels import KernelOptions
from maskc.plan.planner import PlanError, plan
compiled = compile_file(sys.argv[1], KernelOptions())
values, layouts = compiled.bind([{"n": int(sys.argv[2])}])
tracemalloc.start()
start = time.perf_counter()
try:
    plan(compiled.program, layouts, values, compiled.tiles)
    message = None
except PlanError as exc:
    message = str(exc)
print(json.dumps({"message": message, "seconds": time.perf_counter() - start,
                  "peak": tracemalloc.get_traced_memory()[1]}))
"""


@pytest.mark.parametrize("n", [10**8, 2**31 - 1])
def test_a_huge_causal_request_is_refused_at_once(n):
    """Causal attention is planned by the fast path, arrays per query tile, before the descriptor's size was known:
    at n = 10^8 that took 256 MiB before the refusal, at 2^31 - 1 more than 4 GiB and 16 s (a child process
    with 1 GiB of address space keeps a regression off the machine's memory). The floor refuses from the
    layout alone."""
    child = bounded.run([sys.executable, "-c", REFUSE_IN_A_CHILD, str(EXAMPLES / "causal.mask"), str(n)],
                        memory=bounded.GiB)
    assert child.returncode == 0, child.stderr[-2000:]
    result = json.loads(child.stdout)
    assert result["message"] is not None and "at least" in result["message"] and "1 GiB limit" in result["message"]
    assert result["seconds"] < 1.0 and result["peak"] < 16 * 2**20, result


FLOOR_CASES = {  # long sequences, where the coarse tiles span many tiles: (example, consts, sequences)
    "causal": ({}, [{"n": 1 << 18}]),
    "document": ({}, [{"docs": [90_000, 1, 150_000, 0, 22_143]}]),
    "hstu": ({}, [{"n": 250_000, "targets": 3000}]),
    "clear_text": ({"h": 256, "w": 300}, [{"text": 2000, "r": 20}]),
    "video3d": ({"frames": 8, "h": 64, "w": 96}, [{"rt": 3, "ry": 30, "rx": 40}]),
    "rm_shared": ({}, [{"prompt": 70_000, "responses": [30_000, 0, 45_000]}, {"prompt": 9, "responses": [100_000]}]),
}


@pytest.mark.parametrize("coarse", [1, 3, planner.COARSE_QUERY_TILES])
def test_the_floor_never_exceeds_the_tiles_visited(coarse, monkeypatch):
    """The floor refuses requests: it must never count a tile the descriptor does not list, whatever the tiles
    (fewer coarse query tiles make each span many small ones even at the small configurations' sizes)."""
    monkeypatch.setattr(planner, "COARSE_QUERY_TILES", coarse)
    for name in sorted(SMALL):
        compiled, values, layouts, _ = example(name)
        for config in CONFIGS:
            visited = len(plan(compiled.program, layouts, values, config).k_tile)
            assert visited_tiles_floor(compiled.program, layouts, values, config) <= visited, (name, config)
    for name, (consts, sequences) in FLOOR_CASES.items():
        compiled = compile_file(EXAMPLES / f"{name}.mask", KernelOptions(), consts)
        values, layouts = compiled.bind(sequences)
        visited = len(plan(compiled.program, layouts, values).k_tile)
        assert visited_tiles_floor(compiled.program, layouts, values) <= visited, name


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=random_masks(), config=st.sampled_from(CONFIGS), coarse=st.sampled_from([1, 2, 5]))
def test_the_floor_never_exceeds_the_tiles_visited_on_random_masks(case, config, coarse):
    text, consts, sequences = case
    compiled = compiled_random(case)
    values, layouts = compiled.bind(sequences)
    visited = len(plan(compiled.program, layouts, values, config, refine_budget=UNLIMITED).k_tile)
    original, planner.COARSE_QUERY_TILES = planner.COARSE_QUERY_TILES, coarse
    try:
        floor = visited_tiles_floor(compiled.program, layouts, values, config)
    finally:
        planner.COARSE_QUERY_TILES = original
    assert floor <= visited, f"\n{text}\nconsts {consts}\nsequences {sequences}\nconfig {config}"


@pytest.mark.parametrize("name", ["causal", "document", "hstu"])
def test_the_floor_of_dense_masks_is_close_to_the_tiles_visited(name):
    """What makes the refusal of a huge causal request work: coarse boxes prove nearly all of its tiles."""
    consts, sequences = FLOOR_CASES[name]
    compiled = compile_file(EXAMPLES / f"{name}.mask", KernelOptions(), consts)
    values, layouts = compiled.bind(sequences)
    visited = len(plan(compiled.program, layouts, values).k_tile)
    assert visited_tiles_floor(compiled.program, layouts, values) >= 0.95 * visited


@pytest.mark.parametrize("name", ["tree", "causal", "clear", "document"])
def test_an_empty_batch_plans_to_an_empty_descriptor(name):
    compiled = example(name)[0]
    for fast in (True, False):
        desc = plan(compiled.program, [], [], TileConfig(), fast=fast)
        assert len(desc.work_seq) == 0 and desc.row_ptr.tolist() == [0] and len(desc.k_tile) == 0


@pytest.mark.parametrize("name", sorted(SMALL))
def test_run_witnesses_in_closed_form_are_the_witness_slots(name):
    """The refinement's witness rows and columns of run tiles, computed from each tile's first token and count,
    are the tokens _witness_slots picks from the tiles' token arrays, for every pair of tiles."""
    from maskc.plan.tiling import block_of, block_table, tile_tokens, tiling_for

    consts, sequences = SMALL[name]
    compiled = compile_file(EXAMPLES / f"{name}.mask", consts=consts)
    _, layouts = compiled.bind(sequences)
    for block_q, block_k in ((128, 64), (16, 8), (8, 16)):
        bt = block_table(tiling_for(compiled.program, block_q, block_k), layouts)
        if not bt.runs_only:
            pytest.skip("grid tiles are boxes: the generic witnesses serve them")
        for b in range(len(layouts)):
            qt, kt = (a.reshape(-1) for a in np.meshgrid(np.arange(bt.tiles("q")[b]), np.arange(bt.tiles("k")[b])))
            seq = np.full(len(qt), b)
            rows, cols, q_tokens, k_tokens = planner._witness_tokens(bt, seq, qt, kt)
            q = tile_tokens(bt, "q", block_of(bt, "q", seq, qt), qt)
            k = tile_tokens(bt, "k", block_of(bt, "k", seq, kt), kt)
            assert np.array_equal(rows, np.take_along_axis(q, np.stack(planner._witness_slots(q, k), axis=1), axis=1))
            assert np.array_equal(cols, np.take_along_axis(k, np.stack(planner._witness_slots(k, q), axis=1), axis=1))
            some = np.arange(0, len(qt), 3)
            assert np.array_equal(q_tokens(some), q[some]) and np.array_equal(k_tokens(some), k[some])


@pytest.mark.parametrize("config", CONFIGS + [TileConfig(128, 64, min_run=8)],
                         ids=lambda c: f"{c.block_q}x{c.block_k}-run{c.min_run}")
@pytest.mark.parametrize("name", sorted(PINNED))
def test_grids_with_pinned_axes_plan_exactly(name, config):
    """Tiles one token wide along a pinned axis (ragged where the grid is narrower than a tile): the
    descriptor is exact against brute force, with and without the fast paths."""
    text, sequences = PINNED[name]
    compiled = compile_text(text, KernelOptions())
    values, layouts = compiled.bind(sequences)
    check_fast_path(compiled, values, layouts, config)


def test_a_list_read_whose_index_reads_a_list_plans_exactly():
    """A regression the property tests found: `L[L[a]]` in a row interval was read as a column per segment, and
    its index (itself a list read) was evaluated without the lists (KeyError). It takes the general search."""
    compiled = compile_text("mask m(a: int = 0, L: [int] = [])\nsegments:\n    Z = n\nrules:\n"
                            "    Z -> Z   where k < L[L[a]]\n", KernelOptions())
    for sequences in ([{"a": 0, "L": [], "n": 0}], [{"a": 1, "L": [3, 2, 40, 7], "n": 70}, {"a": 5, "L": [1], "n": 9}]):
        values, layouts = compiled.bind(sequences)
        check_fast_path(compiled, values, layouts, TileConfig(16, 8))
