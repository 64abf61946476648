"""Where a dK/dV CTA's time goes (the twenty-eighth session's question, docs/training.md), from clock64 stamps that
docs/experiments/s28/bwd-timeline.patch adds to the fused dK/dV kernel (a build of its own: the patch is not on
main). Per CTA: its start, K/V landed, the first step's Q/dO landed, each consumer's last step done, the dK/dV
stores done, the dQ writer's last reduction done. Per multiprocessor, the gap from one CTA's end to the next
one's start is the launch's cost.

With --persistent, the stamps of bwd-timeline-persistent.patch (on the persistent kernel of the branch
s28-persistent-dkdv) instead: per pair (a key item and head), consumer 0's pair seen, K and V landed, the first
step's Q landed, its loop done, its stores done; per multiprocessor, the gap from one pair's stores to the next
pair seen.

    python docs/experiments/s28/timeline.py [--persistent] [--lengths 512 2048 32768] [--workloads document rm_shared]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cupy
import numpy as np
import torch

import maskc

N, HEADS, HEAD_DIM = 32768, 16, 128
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

MODULES = []
_RawModule = cupy.RawModule


class RecordingModule(_RawModule):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        MODULES.append(self)


cupy.RawModule = RecordingModule


def module_globals(shapes: dict) -> dict:
    """The u64 arrays `shapes` names ({name: shape}) in the newest module that has them all: the mask timed last (each
    mask's kernels have buffers of their own; the first one found, causal's, had left the workloads' rows all zero and
    the analysis dividing by zero)."""
    for module in reversed(MODULES):
        try:
            return {name: cupy.ndarray(shape, dtype=cupy.uint64, memptr=module.get_global(name))
                    for name, shape in shapes.items()}
        except Exception:  # a module without them (the forward's, for the backward's stamps)
            continue
    raise SystemExit(f"no module has {', '.join(shapes)}: is the experiment's patch applied to this build?")


def timeline_buffer(shape=(16384, 12)):
    return module_globals({"maskc_timeline": shape})["maskc_timeline"]


def stamps(attn, cu_seqlens, values: dict, shape) -> np.ndarray:
    """The stamps of one backward call (after three to warm up)."""
    q, k, v, d_out = (torch.randn(N, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    out, lse = attn(q, k, v, cu_seqlens=cu_seqlens, return_lse=True, **values)
    for _ in range(3):
        attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens, **values)
    buf = timeline_buffer(shape)
    buf.fill(0)
    torch.cuda.synchronize()
    attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens, **values)
    torch.cuda.synchronize()
    return buf.get()


def cycles_per_ns(sm, clock, gtime) -> float:
    """This GPU's clock against the global timer, from stamps of both on each multiprocessor."""
    ratios = []
    for s in np.unique(sm):
        sel = sm == s
        if sel.sum() > 2 and np.ptp(gtime[sel]) > 0:
            ratios.append(np.ptp(clock[sel]) / np.ptp(gtime[sel]))
    return float(np.median(ratios))


def gaps_and_busy(sm, begin, end) -> tuple[list, float]:
    """Per multiprocessor, the gaps from one unit's end (a CTA's, a pair's) to the next one's begin, and the share
    of the multiprocessors' spans their units take."""
    gaps, busy, span = [], 0, 0
    for s in np.unique(sm):
        sel = np.flatnonzero(sm == s)
        order = sel[np.argsort(begin[sel])]
        gaps.extend(begin[order[1:]] - end[order[:-1]])
        busy += (end[order] - begin[order]).sum()
        span += end[order].max() - begin[order].min()
    return gaps, busy / span


def step_buckets(steps):
    """(first, last, selection) of the units with first..last steps, for each bucket that has any."""
    for lo, hi in ((1, 2), (3, 4), (5, 8), (9, 16), (17, 64), (65, 1 << 30)):
        sel = (steps >= lo) & (steps <= hi)
        if sel.any():
            yield lo, min(hi, steps.max()), sel


def run_persistent(name: str, attn, cu_seqlens, values: dict) -> None:
    t = stamps(attn, cu_seqlens, values, (65536, 8))
    t = t[t[:, 1] != 0].astype(np.int64)
    sm, seen, kv, first_q, loop_end, stored, steps, gtime = (t[:, i] for i in range(8))
    ghz = cycles_per_ns(sm, seen, gtime)
    us = lambda c: c / ghz / 1e3  # noqa: E731
    gaps, busy = gaps_and_busy(sm, seen, stored)
    has = steps > 0
    step_time = (loop_end - first_q)[has] / steps[has]
    print(f"== {name}: {len(t)} pairs on {len(np.unique(sm))} SMs, {ghz:.3f} cycles/ns, steps a pair median "
          f"{np.median(steps):.0f} (max {steps.max()}); pairs' own time {busy:.1%} of the SMs' span")
    print(f"   us (median / mean): between pairs {us(np.median(gaps)):.2f} / {us(np.mean(gaps)):.2f}; "
          f"K and V landed after the pair seen {us(np.median(kv - seen)):.2f} / {us(np.mean(kv - seen)):.2f}; "
          f"first Q after K/V {us(np.median((first_q - kv)[has])):.2f}; a step {us(np.median(step_time)):.2f}; "
          f"stores {us(np.median(stored - loop_end)):.2f}")
    for lo, hi, sel in step_buckets(steps):
        whole = stored[sel] - seen[sel]
        print(f"   steps {lo:>3d}-{hi:<5d} {sel.sum():5d} pairs: whole {us(np.median(whole)):7.2f} us, "
              f"a step {us(np.median((loop_end - first_q)[sel] / steps[sel])):5.2f}, before the first step "
              f"{us(np.median(first_q[sel] - seen[sel])):5.2f}, after the last {us(np.median(stored[sel] - loop_end[sel])):.2f}")


def run(name: str, attn, cu_seqlens, values: dict) -> None:
    t = stamps(attn, cu_seqlens, values, (16384, 12))
    t = t[t[:, 1] != 0].astype(np.int64)
    sm, start, kv, first_q, end0, end1, stored, dqw, steps, prod, gtime = (t[:, i] for i in range(11))
    ghz = cycles_per_ns(sm, start, gtime)
    us = lambda c: c / ghz / 1e3  # noqa: E731
    loop_end = np.maximum(end0, end1)
    end = np.maximum.reduce([stored, dqw, prod, loop_end])
    gaps, busy = gaps_and_busy(sm, start, end)
    step_time = (end0 - first_q) / np.maximum(steps, 1)
    print(f"== {name}: {len(t)} CTAs on {len(np.unique(sm))} SMs, {ghz:.3f} cycles/ns, steps a CTA "
          f"median {np.median(steps):.0f} (min {steps.min()}, max {steps.max()}), SMs busy {busy:.1%} of their span")
    print(f"   us (median / mean): launch gap {us(np.median(gaps)):.2f} / {us(np.mean(gaps)):.2f}; "
          f"K/V landed {us(np.median(kv - start)):.2f} / {us(np.mean(kv - start)):.2f}; "
          f"first Q landed {us(np.median(first_q - start)):.2f}; "
          f"loop a step {us(np.median(step_time)):.2f}; consumers' ends apart {us(np.median(np.abs(end0 - end1))):.2f}; "
          f"stores {us(np.median(stored - end0)):.2f}; dQ writer after the loop {us(np.median(dqw - loop_end)):.2f}; "
          f"producer done before loop end {us(np.median(loop_end - prod)):.2f}")
    for lo, hi, sel in step_buckets(steps):
        whole = end[sel] - start[sel]
        print(f"   steps {lo:>3d}-{hi:<5d} {sel.sum():5d} CTAs: whole {us(np.median(whole)):7.2f} us, "
              f"per step in the loop {us(np.median(step_time[sel])):5.2f}, outside the loop "
              f"{us(np.median(whole - (end0[sel] - first_q[sel]))):5.2f} (to first Q {us(np.median(first_q[sel] - start[sel])):.2f}, "
              f"after {us(np.median(end[sel] - end0[sel])):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", nargs="*", type=int, default=[512, 2048, 32768])
    ap.add_argument("--workloads", nargs="*", default=["document", "rm_shared"])
    ap.add_argument("--persistent", action="store_true", help="the stamps of bwd-timeline-persistent.patch")
    args = ap.parse_args()
    report = run_persistent if args.persistent else run
    for call in each_call(args.lengths, args.workloads):
        report(*call)


def each_call(lengths, workloads):
    """(name, attn, cu_seqlens, runtime values): equal causal documents of each length, then each workload."""
    causal = maskc.load(ROOT / "examples" / "causal.mask", head_dim=HEAD_DIM, dtype="bf16")
    for length in lengths:
        yield f"causal documents of {length}", causal, torch.arange(0, N + 1, length, dtype=torch.int32), {}
    from harness import make_workload  # noqa: E402
    for name in workloads:
        w = make_workload(name, N)
        attn = maskc.load(ROOT / "examples" / f"{name}.mask", head_dim=HEAD_DIM, dtype="bf16", **w.consts)
        cu_seqlens = torch.tensor(np.concatenate([[0], np.cumsum(w.lengths)]), dtype=torch.int32)
        yield name, attn, cu_seqlens, w.maskc_params()


if __name__ == "__main__":
    main()
