"""The GPU planner's kernels (kernels.cu) against the host planner: for the cases check.py uses (its options),
builds kernels.cu, runs its passes in order with nothing read back in between, and compares the descriptor, the
backward's key tables, the forward's head-major run and both descriptors' long items with the host planner's,
byte for byte. On a GPU: built by NVRTC through CuPy, launched on one stream; with --time, the host time of the
launches (inputs uploaded, buffers made, fourteen launches: what a call would pay on top of bind and the segment
constants) and the GPU time of the passes, per plan. With --cpu, no GPU: kernels.cu built by g++ with
emulate_kernels.cpp, each launch a loop over its threads (checks the kernels, their Plan and the passes' order).

    python docs/experiments/gpu_planner/gpu_check.py [--cpu] [--random R] [--seed S] [--packed] [--time]

Not yet run on a GPU (written in the twenty-seventh session, which had no device; --cpu passes).
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
sys.path.insert(0, str(HERE))

import check  # noqa: E402  (its path setup puts the repository and bench/ first)

from maskc.compiler import compile_file  # noqa: E402
from maskc.plan.by_key import by_key, key_tables, long_items  # noqa: E402
from maskc.plan.planner import plan  # noqa: E402

P = ctypes.c_void_p
I64 = ctypes.c_int64


class Inputs(ctypes.Structure):  # classify.cuh's Inputs (x86-64 and CUDA lay these out alike)
    _fields_ = [("consts", P), ("seg_start", P), ("seg_length", P), ("entry_ptr", P), ("seq_length", P),
                ("bits", P), ("segments", I64), ("regions", ctypes.c_int), ("bq", I64), ("bk", I64)]


WORK = ("seq", "counts", "first", "last", "key_first", "key_last", "by_keys", "group", "group_base", "longest", "rank",
        "visit", "tiles", "kinds", "pieces", "spans", "state")
OUT = ("work_seq", "work_qtile", "row_ptr", "k_tile", "kind")
KEY_WORK = ("item_of_qtile", "key_count", "key_place")
PIECE_BYTES, SPAN_BYTES = 24, 40  # sizeof(Piece), sizeof(Span) in tiles.h: each query tile's scratch
KEY_OUT = ("key_work", "col_ptr", "q_tile", "q_item", "q_kind")


class Plan(ctypes.Structure):  # kernels.cu's Plan, field for field
    _fields_ = [("in_", Inputs), ("sequences", I64), ("items", I64), ("room", I64), ("qtile_base", P),
                *((name, P) for name in WORK + OUT), ("ktile_base", P), ("keys", I64), ("multiprocessors", I64),
                *((name, P) for name in KEY_WORK + KEY_OUT)]


PASSES = [("plan_classify", "items"), ("plan_keys", "items"), ("plan_place_in_sequence", "items"),
          ("plan_groups", "sequences"), ("plan_group_base", 1), ("plan_longest", "items"),
          ("plan_rank_groups", "items"), ("plan_place_items", "items"), ("plan_row_ptr", 1), ("plan_write", "items"),
          ("plan_key_count", "keys"), ("plan_key_place", "keys"), ("plan_col_ptr", 1), ("plan_key_write", "keys")]


class Gpu:
    """kernels.cu on the GPU, through CuPy (NVRTC)."""

    def __init__(self):
        import cupy

        self.cupy = cupy
        mod = cupy.RawModule(code=(HERE / "kernels.cu").read_text(), backend="nvrtc",
                             options=("-std=c++17", f"--include-path={HERE}", f"--include-path={check.NATIVE}"))
        self.kernels = {name: mod.get_function(name) for name, _ in PASSES}
        self.multiprocessors = cupy.cuda.Device().attributes["MultiProcessorCount"]

    def asarray(self, a):
        return self.cupy.asarray(a)

    def zeros(self, n, dtype):
        return self.cupy.zeros(n, dtype=dtype)

    @staticmethod
    def ptr(a) -> int:
        return a.data.ptr

    def launch(self, name: str, grid: int, block: int, plan_bytes) -> None:
        self.kernels[name]((grid,), (block,), (plan_bytes,))

    def read(self, a) -> np.ndarray:
        return self.cupy.asnumpy(a)


class Cpu:
    """kernels.cu on the CPU (emulate_kernels.cpp): the same passes, each launch a loop over its threads."""

    multiprocessors = 132  # (an H100's; any count checks long_items)

    def __init__(self):
        out = Path(tempfile.mkdtemp()) / "kernels.so"
        subprocess.run(["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-I", str(HERE), "-I", str(check.NATIVE),
                        str(HERE / "emulate_kernels.cpp"), "-o", str(out)], check=True)
        self.lib = ctypes.CDLL(str(out))

    @staticmethod
    def asarray(a):
        return np.ascontiguousarray(a)

    @staticmethod
    def zeros(n, dtype):
        return np.zeros(n, dtype=dtype)

    @staticmethod
    def ptr(a) -> int:
        return a.ctypes.data

    def launch(self, name: str, grid: int, block: int, plan_bytes) -> None:
        assert self.lib.launch(name.encode(), ctypes.c_int64(grid), ctypes.c_int64(block),
                               ctypes.c_void_p(plan_bytes.ctypes.data)) == 0, name

    @staticmethod
    def read(a) -> np.ndarray:
        return a


def run(xp, given, keep: list) -> dict:
    """Uploads the inputs, launches the passes, and returns the device arrays by name (OUT, KEY_OUT, state)
    without waiting for them. `keep` holds every buffer until the caller has read them."""
    consts, seg_start, seg_length, entry_ptr, ns, bits, bq, bk = given
    sequences = len(ns)
    qtile_base, ktile_base = (np.zeros(sequences + 1, dtype=np.int64) for _ in range(2))
    np.cumsum((ns + bq - 1) // bq, out=qtile_base[1:])
    np.cumsum((ns + bk - 1) // bk, out=ktile_base[1:])
    items, keys = int(qtile_base[-1]), int(ktile_base[-1])
    room = int(((ns + bk - 1) // bk).max(initial=0))
    slots = max(items * room, 1)  # (every query tile's slot; the listed tiles are fewer)
    dev = [xp.asarray(a) for a in (consts, seg_start, seg_length, entry_ptr, ns, bits, qtile_base, ktile_base)]
    n, k = max(items, 1), max(keys, 1)
    bufs = {name: xp.zeros(n, dtype=np.int64) for name in WORK}
    bufs.update(group_base=xp.zeros(sequences + 1, dtype=np.int64), tiles=xp.zeros(slots, dtype=np.int64),
                kinds=xp.zeros(slots, dtype=np.uint32), state=xp.zeros(6, dtype=np.uint64),
                pieces=xp.zeros(n * bq * PIECE_BYTES, dtype=np.uint8),
                spans=xp.zeros(n * bq * len(bits) * SPAN_BYTES, dtype=np.uint8),
                work_seq=xp.zeros(n, dtype=np.int32), work_qtile=xp.zeros(n, dtype=np.int32),
                row_ptr=xp.zeros(items + 1, dtype=np.int32), k_tile=xp.zeros(slots, np.int32),
                kind=xp.zeros(slots, np.uint32), item_of_qtile=xp.zeros(n, dtype=np.int64),
                key_count=xp.zeros(k, dtype=np.int64), key_place=xp.zeros(k, dtype=np.int64),
                key_work=xp.zeros(2 * k, dtype=np.int32), col_ptr=xp.zeros(keys + 1, dtype=np.int32),
                q_tile=xp.zeros(slots, np.int32), q_item=xp.zeros(slots, np.int32),
                q_kind=xp.zeros(slots, np.uint32))
    ptr = {name: xp.ptr(a) for name, a in bufs.items()}
    plan_struct = Plan(Inputs(*(xp.ptr(a) for a in dev[:6]), len(seg_length), len(bits), bq, bk), sequences, items,
                       room, xp.ptr(dev[6]), *(ptr[name] for name in WORK + OUT), xp.ptr(dev[7]), keys,
                       xp.multiprocessors, *(ptr[name] for name in KEY_WORK + KEY_OUT))
    device_plan = xp.asarray(np.frombuffer(bytes(plan_struct), dtype=np.uint8).copy())
    counts = {"items": items, "sequences": sequences, "keys": keys, 1: 1}
    for name, over in PASSES:
        total = counts[over]
        if total:
            xp.launch(name, (total + 127) // 128, 128, device_plan)
    keep += [dev, bufs, device_plan]
    return {name: bufs[name] for name in OUT + KEY_OUT + ("state",)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--random", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--packed", action="store_true", help="packed batches of 32768 tokens instead")
    parser.add_argument("--time", action="store_true")
    parser.add_argument("--cpu", action="store_true", help="kernels.cu emulated on the CPU (no GPU needed)")
    args = parser.parse_args()
    check.plan_identical.OPTIONS = check.plan_identical._options()
    xp = Cpu() if args.cpu else Gpu()
    multiprocessors = xp.multiprocessors
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
        if args.cpu:
            arrays = run(xp, given, keep)
        else:
            cupy = xp.cupy
            cupy.cuda.Device().synchronize()
            begin, end = cupy.cuda.Event(), cupy.cuda.Event()
            begin.record()
            start = time.perf_counter()
            arrays = run(xp, given, keep)
            host_us.append(1e6 * (time.perf_counter() - start))
            end.record()
            end.synchronize()
            gpu_us.append(1e3 * cupy.cuda.get_elapsed_time(begin, end))
        got = {name: xp.read(a) for name, a in arrays.items()}
        items, tiles, keys = len(desc.work_seq), int(got["row_ptr"][-1]), len(got["col_ptr"]) - 1
        mine = {"work_seq": got["work_seq"][:items], "work_qtile": got["work_qtile"][:items],
                "row_ptr": got["row_ptr"], "k_tile": got["k_tile"][:tiles], "kind": got["kind"][:tiles]}
        wrong = [f for f, a in mine.items() if not (a.dtype == getattr(desc, f).dtype
                                                     and np.array_equal(a, getattr(desc, f)))]
        key_desc = by_key(desc)
        theirs = key_tables(key_desc, desc.kind.dtype)
        mine = {"key_work": got["key_work"][:2 * keys].reshape(-1, 2), "col_ptr": got["col_ptr"],
                "q_tiles": got["q_tile"][:tiles], "q_kinds": got["q_kind"][:tiles], "q_items": got["q_item"][:tiles]}
        wrong += [f"key {f}" for f, a in mine.items() if not (a.dtype == getattr(theirs, f).dtype
                                                               and np.array_equal(a, getattr(theirs, f)))]
        state = [int(x) for x in got["state"]]
        if tuple(state[2:4]) != desc.longest_equal_run():
            wrong.append("head-major run")
        if state[4:6] != [long_items(desc.row_ptr, multiprocessors), long_items(key_desc.col_ptr, multiprocessors)]:
            wrong.append("long items")
        checked += 1
        if wrong:
            failed += 1
            print(f"{case_id}: {', '.join(wrong)} differ")
    where = "on the CPU (kernels.cu emulated)" if args.cpu else "on the GPU"
    print(f"{checked} plans checked {where}, {failed} differ")
    if args.time and host_us:
        print(f"host: median {statistics.median(host_us):.0f} us per plan (uploads, buffers, launches); "
              f"GPU: median {statistics.median(gpu_us):.0f} us (from the first upload to the last pass)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
