"""Checks the GPU's form of the planner (maskc/plan/cpp's tiles.h and order.h, ranks.cuh and transpose.cuh here,
in their per-thread passes) against the numpy planner, without a GPU: emulate.cpp runs each pass's threads as a
loop, built with g++ into a shared library and, for every case of bench/plan_identical.py that takes the row-interval fast path (every
example's defaults and random ragged batches, the kernel families' tile shapes and the tests'), each query tile's
visited key tiles and kinds must be the descriptor's exactly.

    python docs/experiments/gpu_planner/check.py [--random R] [--seed S] [--time] [--packed]

The inputs it hands the classifier are what the host keeps making in the GPU design: the layouts (bind) and each
region's constants per concrete segment (rows.segment_constants). --time also times the emulation per plan (a
CPU loop: no prediction of the GPU's time).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
NATIVE = ROOT / "maskc" / "plan" / "cpp"  # tiles.h, order.h: the logic the host planner shares
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import plan_identical  # noqa: E402

from maskc.compiler import compile_file  # noqa: E402
from maskc.plan import rows  # noqa: E402
from maskc.plan.by_key import by_key  # noqa: E402
from maskc.plan.layout import entries_per_sequence  # noqa: E402
from maskc.plan.planner import _Batch, _tiling, plan  # noqa: E402


def build() -> ctypes.CDLL:
    """The passes through emulate.cpp, as a shared library."""
    out = Path(tempfile.mkdtemp()) / "classify.so"
    subprocess.run(["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-I", str(HERE), "-I", str(NATIVE),
                    str(HERE / "emulate.cpp"), "-o", str(out)], check=True)
    lib = ctypes.CDLL(str(out))
    lib.classify_all.restype = lib.plan_all.restype = ctypes.c_int64
    return lib


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


def inputs(compiled, layouts, values, config) -> tuple | None:
    """The classifier's arguments (Inputs in classify.cuh), or None where the fast path does not apply."""
    program = compiled.program
    tiling = _tiling(program, config)
    forms = rows.row_forms(program)
    batch = _Batch.of(layouts, values, tiling)
    if forms is None or not batch.blocks.runs_only:
        return None
    consts = rows.segment_constants(forms, batch, tiling.block_k)
    if consts is None:
        return None
    consts = np.ascontiguousarray(consts, dtype=np.int64)
    seq = batch.segment_seq
    seg_start = np.ascontiguousarray(batch.starts - batch.base[seq], dtype=np.int64)
    seg_length = np.ascontiguousarray(batch.lengths, dtype=np.int64)
    entry_ptr = np.zeros(len(layouts) + 1, dtype=np.int64)
    np.cumsum(entry_per := entries_per_sequence(layouts), out=entry_ptr[1:])
    del entry_per
    ns = np.ascontiguousarray(batch.bounds[:, -1], dtype=np.int64)
    bits = np.ascontiguousarray(forms.bits, dtype=np.uint32)
    return consts, seg_start, seg_length, entry_ptr, ns, bits, tiling.block_q, tiling.block_k


def _arguments(args) -> list:
    consts, seg_start, seg_length, entry_ptr, ns, bits, bq, bk = args
    return [_ptr(consts), _ptr(seg_start), _ptr(seg_length), _ptr(entry_ptr), _ptr(ns), _ptr(bits),
            ctypes.c_int64(len(seg_length)), ctypes.c_int(len(bits)), ctypes.c_int64(bq), ctypes.c_int64(bk),
            ctypes.c_int64(len(ns))]


def classify(lib, args) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{global q tile: (k tiles, kinds)} from the classifier (step 1)."""
    ns, bq, bk = args[4], args[6], args[7]
    q_tiles = int(((ns + bq - 1) // bq).sum())
    room = int(((ns + bk - 1) // bk).max(initial=0))
    counts = np.zeros(q_tiles, dtype=np.int64)
    k_tile = np.zeros(max(q_tiles * room, 1), dtype=np.int64)
    kind = np.zeros(max(q_tiles * room, 1), dtype=np.uint32)
    got = lib.classify_all(*_arguments(args), _ptr(counts), _ptr(k_tile), _ptr(kind))
    assert got == room, (got, room)
    return {g: (k_tile[g * room:g * room + counts[g]], kind[g * room:g * room + counts[g]]) for g in range(q_tiles)}


def descriptor(lib, args) -> tuple[np.ndarray, ...]:
    """(work_seq, work_qtile, row_ptr, k_tile, kind) from the classifier and the visiting order (steps 1 and 2)."""
    ns, bq, bk = args[4], args[6], args[7]
    items = int(((ns + bq - 1) // bq).sum())
    room = max(items * int(((ns + bk - 1) // bk).max(initial=0)), 1)
    work_seq, work_qtile, row_ptr = (np.zeros(n, dtype=np.int32) for n in (items, items, items + 1))
    k_tile, kind = np.zeros(room, dtype=np.int32), np.zeros(room, dtype=np.uint32)
    tiles = lib.plan_all(*_arguments(args), _ptr(work_seq), _ptr(work_qtile), _ptr(row_ptr), _ptr(k_tile), _ptr(kind))
    return work_seq, work_qtile, row_ptr, k_tile[:tiles], kind[:tiles]


def key_descriptor(lib, desc) -> tuple[np.ndarray, ...]:
    """(work_seq, work_ktile, col_ptr, q_tile, kind, q_item) of the transpose (step 3), from the host's descriptor."""
    qtile_base = np.ascontiguousarray(desc.blocks.tile_base("q"), dtype=np.int64)
    ktile_base = np.ascontiguousarray(desc.blocks.tile_base("k"), dtype=np.int64)
    item_of_qtile = np.zeros(int(qtile_base[-1]), dtype=np.int64)
    item_of_qtile[qtile_base[desc.work_seq] + desc.work_qtile] = np.arange(len(desc.work_seq))
    keys, tiles = int(ktile_base[-1]), len(desc.k_tile)
    work_seq, work_ktile, col_ptr = (np.zeros(n, dtype=np.int32) for n in (keys, keys, keys + 1))
    q_tile, q_item = np.zeros(tiles, dtype=np.int32), np.zeros(tiles, dtype=np.int32)
    kind = np.zeros(tiles, dtype=np.uint32)
    row_ptr, k_tile = (np.ascontiguousarray(a, dtype=np.int32) for a in (desc.row_ptr, desc.k_tile))
    kinds = np.ascontiguousarray(desc.kind, dtype=np.uint32)
    lib.by_key_all(_ptr(row_ptr), _ptr(k_tile), _ptr(kinds), _ptr(item_of_qtile), _ptr(qtile_base), _ptr(ktile_base),
                   ctypes.c_int64(len(qtile_base) - 1), _ptr(work_seq), _ptr(work_ktile), _ptr(col_ptr), _ptr(q_tile),
                   _ptr(kind), _ptr(q_item))
    return work_seq, work_ktile, col_ptr, q_tile, kind, q_item


def host(desc) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{global q tile: (k tiles, kinds)} from the host planner's descriptor."""
    qtile_base = desc.blocks.tile_base("q")
    out = {}
    for w in range(len(desc.work_seq)):
        g = int(qtile_base[desc.work_seq[w]] + desc.work_qtile[w])
        lo, hi = desc.row_ptr[w], desc.row_ptr[w + 1]
        out[g] = (desc.k_tile[lo:hi].astype(np.int64), desc.kind[lo:hi].astype(np.uint32))
    return out


def cases(args):
    """plan_identical's cases, or with --packed the bench's packed batches of 32768 tokens (new lengths each)."""
    if not args.packed:
        yield from plan_identical.cases(args.seed, args.random)
        return
    from plan_time import packed_batch

    rng = np.random.default_rng(args.seed)
    for name in ("document", "rm_shared", "hstu_jagged"):
        for count in (1, 12, 64, 1024):
            for i in range(args.random):
                cu_seqlens, values = packed_batch(rng, name, count)
                lengths = np.diff(cu_seqlens).tolist()
                sequences = [{"n": n, **{k: v[b] for k, v in values.items()}} for b, n in enumerate(lengths)]
                example = "causal" if name == "document" else name
                yield f"{name}/{count}/{i}", example, {}, 1, None, sequences, {}  # options 1: sm_90a


def differing(mine, theirs, fields) -> list[str]:
    """The fields whose arrays differ in dtype or values."""
    return [f for f, a in zip(fields, mine)
            if not (a.dtype == getattr(theirs, f).dtype and np.array_equal(a, getattr(theirs, f)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--random", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time", action="store_true")
    parser.add_argument("--packed", action="store_true", help="packed batches of 32768 tokens instead")
    args = parser.parse_args()
    plan_identical.OPTIONS = plan_identical._options()
    lib = build()
    compiled_cache: dict = {}
    planned = checked = failed = 0
    seconds = []
    for case_id, name, consts, o, config, sequences, extra in cases(args):
        if extra:  # (the search and the refinement budget: not the fast path's business)
            continue
        key = (name, tuple(sorted(consts.items())), o)
        if key not in compiled_cache:
            compiled_cache[key] = compile_file(plan_identical.EXAMPLES / f"{name}.mask", plan_identical.OPTIONS[o],
                                               consts)
        compiled = compiled_cache[key]
        if sequences is None:
            program = compiled.program
            sequences = [dict(line) for line in program.batch] if program.batch else [{}]
        try:
            values, layouts = compiled.bind(sequences)
            config = config or compiled.tiles
            desc = plan(compiled.program, layouts, values, config)
        except Exception:  # refused values: the host refuses them before any planning on the GPU
            continue
        planned += 1
        # The transpose serves every descriptor, whichever path planned it.
        wrong = [f"key descriptor's {f}" for f in differing(key_descriptor(lib, desc), by_key(desc),
                                                            ("work_seq", "work_ktile", "col_ptr", "q_tile", "kind",
                                                             "q_item"))]
        given = inputs(compiled, layouts, values, config)
        if given is not None:
            checked += 1
            start = time.perf_counter()
            whole = descriptor(lib, given)
            seconds.append(time.perf_counter() - start)
            wrong += [f"descriptor's {f}" for f in differing(whole, desc, ("work_seq", "work_qtile", "row_ptr",
                                                                            "k_tile", "kind"))]
            mine, theirs = classify(lib, given), host(desc)
            bad = [g for g in mine if not (np.array_equal(mine[g][0], theirs.get(g, (np.zeros(0),))[0])
                                           and np.array_equal(mine[g][1], theirs.get(g, (None, np.zeros(0)))[1]))]
            if bad:
                g = bad[0]
                wrong.append(f"{len(bad)} q tiles' classes (q tile {g}: classifier {list(zip(*mine[g]))[:8]}, "
                             f"host {list(zip(*theirs.get(g, ([], []))))[:8]})")
        if wrong:
            failed += 1
            print(f"{case_id}: {'; '.join(wrong)} differ")
    print(f"{planned} plans: {checked} on the fast path, classified and ordered; every one transposed; "
          f"{failed} differ")
    if args.time and seconds:
        print(f"emulation: median {1e3 * statistics.median(seconds):.2f} ms per descriptor (CPU loops)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
