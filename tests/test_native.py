"""The C++ planner (maskc.plan.native): the numpy planner's descriptors and key descriptors byte for byte, and
the numpy planner wherever it is off, missing, or cannot be built."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mask_gen import random_masks
from test_plan import CONFIGS, DESCRIPTOR_ARRAYS, FAST_EXAMPLES, example

from maskc.cache import atomic_write
from maskc.compiler import compile_file, compile_text
from maskc.kernels import KernelOptions
from maskc.plan import native
from maskc.plan.by_key import by_key
from maskc.plan.planner import plan

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
KEY_ARRAYS = ("work_seq", "work_ktile", "col_ptr", "q_tile", "kind", "q_item")
STATS = ("tiles_total", "tiles_full", "tiles_partial", "tiles_refined", "tiles_conservative", "fast_path",
         "regions_factored")

needs_compiler = pytest.mark.skipif(native.library(wait=True) is None, reason="no C++ compiler builds the planner")


def numpy_only():
    return mock.patch.dict(os.environ, {"MASKC_NATIVE": "0"})


def check_same(compiled, values, layouts, config) -> None:
    """The C++ planner's descriptor and key descriptor are the numpy planner's, byte for byte."""
    with numpy_only():
        theirs = plan(compiled.program, layouts, values, config)
        their_keys = [by_key(theirs), by_key(theirs, stagger=True)]
    mine = plan(compiled.program, layouts, values, config)
    for name in DESCRIPTOR_ARRAYS:
        a, b = getattr(mine, name), getattr(theirs, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    assert [getattr(mine.stats, s) for s in STATS] == [getattr(theirs.stats, s) for s in STATS]
    for my_keys, their in zip([by_key(mine), by_key(mine, stagger=True)], their_keys):
        for name in KEY_ARRAYS:
            a, b = getattr(my_keys, name), getattr(their, name)
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), f"key descriptor's {name}"


@needs_compiler
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.block_q}x{c.block_k}")
@pytest.mark.parametrize("name", FAST_EXAMPLES)
def test_the_examples_plan_the_same(name, config):
    compiled, values, layouts, _ = example(name)
    check_same(compiled, values, layouts, config)


@needs_compiler
@pytest.mark.parametrize("count", [1, 12, 64, 1024])
@pytest.mark.parametrize("name", ["document", "rm_shared", "hstu_jagged"])
def test_packed_batches_of_new_lengths_plan_the_same(name, count):
    """A training step's batches: 32768 tokens in `count` random lengths, sm_90a's tiles."""
    rng = np.random.default_rng(count)
    compiled = compile_file(EXAMPLES / f"{'causal' if name == 'document' else name}.mask", KernelOptions(arch="sm_90a"))
    cuts = np.sort(rng.choice(np.arange(1, 32768), count - 1, replace=False))
    lengths = np.diff(np.concatenate([[0], cuts, [32768]]))
    sequences = []
    for n in lengths.tolist():
        given = {"n": n}
        if name == "rm_shared":
            parts = rng.multinomial(n, rng.dirichlet(np.ones(int(rng.integers(1, 6))))).tolist()
            given = {"prompt": parts[0], "responses": parts[1:]}
        elif name == "hstu_jagged":
            given.update(context=min(n, 6), targets=int(rng.random() * (n - min(n, 6)) / 4))
        sequences.append(given)
    values, layouts = compiled.bind(sequences)
    check_same(compiled, values, layouts, compiled.tiles)


@needs_compiler
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=random_masks(rows=True), config=st.sampled_from(CONFIGS))
def test_random_row_interval_masks_plan_the_same(case, config):
    text, consts, sequences = case
    compiled = compile_text(text, KernelOptions(), consts)
    try:
        values, layouts = compiled.bind(sequences)
        with numpy_only():
            plan(compiled.program, layouts, values, config)
    except Exception:  # values the planner refuses: refused before either planner runs
        return
    check_same(compiled, values, layouts, config)


def test_maskc_native_0_keeps_to_numpy():
    with numpy_only():
        assert native.library() is None and native.library(wait=True) is None


def _fresh(monkeypatch, tmp_path) -> None:
    """This process's library forgotten, and a cache of its own."""
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("MASKC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("MASKC_NATIVE", raising=False)


def test_without_a_compiler_numpy_plans(monkeypatch, tmp_path):
    _fresh(monkeypatch, tmp_path)
    monkeypatch.setattr(native, "_compiler", lambda: None)
    assert native.library(wait=True) is None
    compiled, values, layouts, _ = example("rm_shared")
    assert plan(compiled.program, layouts, values, compiled.tiles).stats.fast_path


def test_a_compiler_that_fails_leaves_numpy_planning(monkeypatch, tmp_path):
    _fresh(monkeypatch, tmp_path)
    monkeypatch.setenv("CXX", "false")  # (found, and fails whatever it is given)
    assert native.library(wait=True) is None
    assert not list((tmp_path / "native").glob(".build.*"))
    compiled, values, layouts, _ = example("document")
    with numpy_only():
        theirs = plan(compiled.program, layouts, values, compiled.tiles)
    mine = plan(compiled.program, layouts, values, compiled.tiles)
    assert all(getattr(mine, n).tobytes() == getattr(theirs, n).tobytes() for n in DESCRIPTOR_ARRAYS)


@needs_compiler
def test_a_damaged_library_in_the_cache_is_built_again(monkeypatch, tmp_path):
    _fresh(monkeypatch, tmp_path)
    assert native.library(wait=True) is not None
    (built,) = (tmp_path / "native").glob("planner-*.so")
    good = built.read_bytes()
    # A half-written file, put in place as a new file (rewriting the loaded one in place would break the mapping
    # this process runs: the cache never does that, atomic_write replaces).
    atomic_write(built, good[: len(good) // 2])
    monkeypatch.setattr(native, "_state", {})
    assert native.library(wait=True) is not None
    assert built.read_bytes() == good
    assert not list((tmp_path / "native").glob(".build.*"))  # (each build's own file, removed)


@needs_compiler
def test_a_library_out_of_memory_leaves_numpy_planning(monkeypatch):
    """Where the C++ planner cannot allocate (it returns no handle), the numpy planner plans the call."""
    lib = native.library()
    monkeypatch.setattr(native, "_state", {"library": _NoMemory(lib)})
    compiled, values, layouts, _ = example("hstu_jagged")
    with numpy_only():
        theirs = plan(compiled.program, layouts, values, compiled.tiles)
    mine = plan(compiled.program, layouts, values, compiled.tiles)
    assert all(getattr(mine, n).tobytes() == getattr(theirs, n).tobytes() for n in DESCRIPTOR_ARRAYS)
    assert by_key(mine).q_tile.tobytes() == by_key(theirs).q_tile.tobytes()


class _NoMemory:
    """The library, except that its entry points report memory running out."""

    def __init__(self, lib):
        self.maskc_descriptor = lambda *args: None
        self.maskc_key_descriptor = lambda *args: -1
        self.maskc_descriptor_tiles = lib.maskc_descriptor_tiles


@needs_compiler
def test_a_descriptor_past_the_limit_is_refused_as_with_numpy(monkeypatch):
    """The size check comes before the tiles are written (the C++ planner holds them as runs until then)."""
    from maskc.plan import planner

    compiled, values, layouts, _ = example("causal")
    desc = plan(compiled.program, layouts, values, compiled.tiles)
    monkeypatch.setattr(planner, "MAX_DESCRIPTOR_BYTES", desc.nbytes - 1)
    monkeypatch.setattr(planner, "visited_tiles_floor", lambda *args: 0)  # (past the check before planning)
    messages = []
    for setting in ("1", "0"):
        monkeypatch.setenv("MASKC_NATIVE", setting)
        with pytest.raises(planner.PlanError, match="the descriptor would list") as refused:
            plan(compiled.program, layouts, values, compiled.tiles)
        messages.append(str(refused.value))
    assert messages[0] == messages[1] == (f"the descriptor would list {len(desc.k_tile):,} tiles (0.0 GiB), more than "
                                          "the 1 GiB limit; use fewer or shorter sequences")
