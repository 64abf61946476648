"""Where a dK/dV CTA's time goes (the twenty-eighth session's question, docs/training.md), from clock64 stamps that
docs/experiments/s28/bwd-timeline.patch adds to the fused dK/dV kernel (a build of its own: the patch is not on
main). Per CTA: its start, K/V landed, the first step's Q/dO landed, each consumer's last step done, the dK/dV
stores done, the dQ writer's last reduction done. Per multiprocessor, the gap from one CTA's end to the next
one's start is the launch's cost.

    python docs/experiments/s28/timeline.py [--lengths 512 2048 32768] [--workloads document rm_shared]
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


def timeline_buffer():
    for module in MODULES:
        try:
            ptr = module.get_global("maskc_timeline")
        except Exception:  # a module without the stamps (the forward's)
            continue
        return cupy.ndarray((16384, 12), dtype=cupy.uint64, memptr=ptr)
    raise SystemExit("no module has maskc_timeline: is the timeline patch applied to this build?")


def run(name: str, attn, cu_seqlens, values: dict) -> None:
    q, k, v, d_out = (torch.randn(N, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    out, lse = attn(q, k, v, cu_seqlens=cu_seqlens, return_lse=True, **values)
    for _ in range(3):
        attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens, **values)
    buf = timeline_buffer()
    buf.fill(0)
    torch.cuda.synchronize()
    attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens, **values)
    torch.cuda.synchronize()
    t = buf.get()
    t = t[t[:, 1] != 0].astype(np.int64)
    sm, start, kv, first_q, end0, end1, stored, dqw, steps, prod, gtime = (t[:, i] for i in range(11))
    # cycles per ns on this GPU, from the CTAs' starts on each multiprocessor against the global timer
    ratios = []
    for s in np.unique(sm):
        sel = sm == s
        if sel.sum() > 2 and np.ptp(gtime[sel]) > 0:
            ratios.append(np.ptp(start[sel]) / np.ptp(gtime[sel]))
    ghz = float(np.median(ratios))
    us = lambda c: c / ghz / 1e3  # noqa: E731
    loop_end = np.maximum(end0, end1)
    end = np.maximum.reduce([stored, dqw, prod, loop_end])
    gaps = []
    busy, span = 0, 0
    for s in np.unique(sm):
        sel = np.flatnonzero(sm == s)
        order = sel[np.argsort(start[sel])]
        gaps.extend(start[order[1:]] - end[order[:-1]])
        busy += (end[order] - start[order]).sum()
        span += end[order].max() - start[order].min()
    step_time = (end0 - first_q) / np.maximum(steps, 1)
    print(f"== {name}: {len(t)} CTAs on {len(np.unique(sm))} SMs, {ghz:.3f} cycles/ns, steps a CTA "
          f"median {np.median(steps):.0f} (min {steps.min()}, max {steps.max()}), SMs busy {busy / span:.1%} of their span")
    print(f"   us (median / mean): launch gap {us(np.median(gaps)):.2f} / {us(np.mean(gaps)):.2f}; "
          f"K/V landed {us(np.median(kv - start)):.2f} / {us(np.mean(kv - start)):.2f}; "
          f"first Q landed {us(np.median(first_q - start)):.2f}; "
          f"loop a step {us(np.median(step_time)):.2f}; consumers' ends apart {us(np.median(np.abs(end0 - end1))):.2f}; "
          f"stores {us(np.median(stored - end0)):.2f}; dQ writer after the loop {us(np.median(dqw - loop_end)):.2f}; "
          f"producer done before loop end {us(np.median(loop_end - prod)):.2f}")
    for lo, hi in ((1, 2), (3, 4), (5, 8), (9, 16), (17, 64), (65, 1 << 30)):
        sel = (steps >= lo) & (steps <= hi)
        if sel.any():
            whole = end[sel] - start[sel]
            print(f"   steps {lo:>3d}-{min(hi, steps.max()):<5d} {sel.sum():5d} CTAs: whole {us(np.median(whole)):7.2f} us, "
                  f"per step in the loop {us(np.median(step_time[sel])):5.2f}, outside the loop "
                  f"{us(np.median(whole - (end0[sel] - first_q[sel]))):5.2f} (to first Q {us(np.median(first_q[sel] - start[sel])):.2f}, "
                  f"after {us(np.median(end[sel] - end0[sel])):.2f})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", nargs="*", type=int, default=[512, 2048, 32768])
    ap.add_argument("--workloads", nargs="*", default=["document", "rm_shared"])
    args = ap.parse_args()
    causal = maskc.load(ROOT / "examples" / "causal.mask", head_dim=HEAD_DIM, dtype="bf16")
    for length in args.lengths:
        run(f"causal documents of {length}", causal, torch.arange(0, N + 1, length, dtype=torch.int32), {})
    from harness import make_workload  # noqa: E402
    for name in args.workloads:
        w = make_workload(name, N)
        attn = maskc.load(ROOT / "examples" / f"{name}.mask", head_dim=HEAD_DIM, dtype="bf16", **w.consts)
        cu_seqlens = torch.tensor(np.concatenate([[0], np.cumsum(w.lengths)]), dtype=torch.int32)
        run(name, attn, cu_seqlens, w.maskc_params())


if __name__ == "__main__":
    main()
