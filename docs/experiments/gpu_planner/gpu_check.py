"""The GPU planner's kernels (kernels.cu) on a GPU, against the host planner: for the cases check.py uses (its
options), builds kernels.cu with NVRTC through CuPy, runs the passes on one stream with nothing read back in
between, and compares the descriptor (and the forward's head-major run) with the host planner's, byte for byte.
With --time, the host time of the launches (inputs uploaded, buffers made, ten launches: what a call would pay
on top of bind and the segment constants) and the GPU time of the passes, per plan.

    python docs/experiments/gpu_planner/gpu_check.py [--random R] [--seed S] [--packed] [--time]

Needs a GPU and CuPy. Not run yet (written in the twenty-seventh session, which had no device).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import check  # noqa: E402  (its path setup puts the repository and bench/ first)

import cupy  # noqa: E402

from maskc.compiler import compile_file  # noqa: E402
from maskc.plan.planner import plan  # noqa: E402

P = ctypes.c_void_p
I64 = ctypes.c_int64


class Inputs(ctypes.Structure):  # classify.cuh's Inputs (x86-64 and CUDA lay these out alike)
    _fields_ = [("consts", P), ("seg_start", P), ("seg_length", P), ("entry_ptr", P), ("seq_length", P),
                ("bits", P), ("segments", I64), ("regions", ctypes.c_int), ("bq", I64), ("bk", I64)]


class Plan(ctypes.Structure):  # kernels.cu's Plan
    _fields_ = [("in_", Inputs), ("sequences", I64), ("items", I64), ("room", I64), ("qtile_base", P),
                *((name, P) for name in ("seq", "counts", "first", "last", "key_first", "key_last", "by_keys",
                                         "group", "group_base", "longest", "rank", "visit", "tiles", "kinds",
                                         "state", "work_seq", "work_qtile", "row_ptr", "k_tile", "kind"))]


PASSES = [("plan_classify", "items"), ("plan_keys", "items"), ("plan_place_in_sequence", "items"),
          ("plan_groups", "sequences"), ("plan_group_base", 1), ("plan_longest", "items"),
          ("plan_rank_groups", "items"), ("plan_place_items", "items"), ("plan_row_ptr", 1), ("plan_write", "items")]


def module() -> dict:
    """The passes' kernels by name."""
    mod = cupy.RawModule(code=(HERE / "kernels.cu").read_text(), backend="nvrtc",
                         options=("-std=c++17", f"--include-path={HERE}"))
    return {name: mod.get_function(name) for name, _ in PASSES}


def run(mod, given, keep: list) -> tuple:
    """Uploads the inputs, launches the passes, and returns the device arrays (work_seq, work_qtile, row_ptr,
    k_tile, kind, state) without waiting for them. `keep` holds every buffer until the caller has read them."""
    consts, seg_start, seg_length, entry_ptr, ns, bits, bq, bk = given
    sequences = len(ns)
    qtile_base = np.zeros(sequences + 1, dtype=np.int64)
    np.cumsum((ns + bq - 1) // bq, out=qtile_base[1:])
    items = int(qtile_base[-1])
    room = int(((ns + bk - 1) // bk).max(initial=0))
    dev = [cupy.asarray(a) for a in (consts, seg_start, seg_length, entry_ptr, ns, bits, qtile_base)]
    n = max(items, 1)
    work = {name: cupy.zeros(n, dtype=np.int64) for name in ("seq", "counts", "first", "last", "key_first",
                                                             "key_last", "by_keys", "group", "longest", "rank",
                                                             "visit")}
    work["group_base"] = cupy.zeros(sequences + 1, dtype=np.int64)
    work["tiles"] = cupy.zeros(max(items * room, 1), dtype=np.int64)
    work["kinds"] = cupy.zeros(max(items * room, 1), dtype=np.uint32)
    work["state"] = cupy.zeros(4, dtype=np.uint64)
    out = {"work_seq": cupy.zeros(n, dtype=np.int32), "work_qtile": cupy.zeros(n, dtype=np.int32),
           "row_ptr": cupy.zeros(items + 1, dtype=np.int32), "k_tile": cupy.zeros(max(items * room, 1), np.int32),
           "kind": cupy.zeros(max(items * room, 1), np.uint32)}
    ptr = {name: a.data.ptr for name, a in {**work, **out}.items()}
    plan_struct = Plan(Inputs(*(a.data.ptr for a in dev[:6]), len(seg_length), len(bits), bq, bk), sequences, items,
                       room, dev[6].data.ptr, *(ptr[f[0]] for f in Plan._fields_[5:]))
    device_plan = cupy.asarray(np.frombuffer(bytes(plan_struct), dtype=np.uint8))
    counts = {"items": items, "sequences": sequences, 1: 1}
    for name, over in PASSES:
        total = counts[over]
        if total:
            mod[name](((total + 127) // 128,), (128,), (device_plan,))
    keep += [dev, work, out, device_plan]
    return out["work_seq"], out["work_qtile"], out["row_ptr"], out["k_tile"], out["kind"], work["state"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--random", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--packed", action="store_true", help="packed batches of 32768 tokens instead")
    parser.add_argument("--time", action="store_true")
    args = parser.parse_args()
    check.plan_identical.OPTIONS = check.plan_identical._options()
    mod = module()
    compiled_cache: dict = {}
    checked = failed = 0
    host_us, gpu_us = [], []
    for case_id, name, consts, o, config, sequences, extra in check.cases(args):
        if extra:
            continue
        key = (name, tuple(sorted(consts.items())), o)
        if key not in compiled_cache:
            compiled_cache[key] = compile_file(check.plan_identical.EXAMPLES / f"{name}.mask",
                                               check.plan_identical.OPTIONS[o], consts)
        compiled = compiled_cache[key]
        if sequences is None:
            sequences = [dict(line) for line in compiled.program.batch] if compiled.program.batch else [{}]
        try:
            values, layouts = compiled.bind(sequences)
            config = config or compiled.tiles
            desc = plan(compiled.program, layouts, values, config)
        except Exception:
            continue
        given = check.inputs(compiled, layouts, values, config)
        if given is None:
            continue
        keep: list = []
        cupy.cuda.Device().synchronize()
        begin, end = cupy.cuda.Event(), cupy.cuda.Event()
        begin.record()
        start = time.perf_counter()
        arrays = run(mod, given, keep)
        host_us.append(1e6 * (time.perf_counter() - start))
        end.record()
        end.synchronize()
        gpu_us.append(1e3 * cupy.cuda.get_elapsed_time(begin, end))
        work_seq, work_qtile, row_ptr, k_tile, kind, state = (cupy.asnumpy(a) for a in arrays)
        tiles = int(row_ptr[-1])
        mine = {"work_seq": work_seq[:len(desc.work_seq)], "work_qtile": work_qtile[:len(desc.work_seq)],
                "row_ptr": row_ptr, "k_tile": k_tile[:tiles], "kind": kind[:tiles]}
        wrong = [f for f, a in mine.items() if not (a.dtype == getattr(desc, f).dtype
                                                     and np.array_equal(a, getattr(desc, f)))]
        if tuple(int(x) for x in state[2:4]) != desc.longest_equal_run():
            wrong.append("head-major run")
        checked += 1
        if wrong:
            failed += 1
            print(f"{case_id}: {', '.join(wrong)} differ")
    print(f"{checked} plans checked on the GPU, {failed} differ")
    if args.time and host_us:
        print(f"host: median {statistics.median(host_us):.0f} us per plan (uploads, buffers, launches); "
              f"GPU: median {statistics.median(gpu_us):.0f} us (from the first upload to the last pass)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
