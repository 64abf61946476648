"""The backward's kernels one by one (torch.profiler, CUDA time per call, mean of 20 calls) at 8, 16 and 32 heads,
N = 32768, hd 128: how much of each kernel is per head (its slope) and how much is fixed (ramp and tail: the
intercept of the line through the three head counts), for the fused pass's prep, dK/dV and dq_store.

    python docs/experiments/s34/kernel_times.py rm_shared document causal
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import harness

import maskc

CALLS = 20


def kernel_us(name: str, heads: int) -> dict[str, float]:
    w = harness.make_workload(name)
    cu_seqlens = torch.tensor([0, *np.cumsum(w.lengths)], dtype=torch.int32)
    params = w.maskc_params()
    attn = maskc.load(ROOT / "examples" / f"{name}.mask", head_dim=128, dtype="bf16", **w.consts)
    q, k, v, d_out = (torch.randn(w.n, heads, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    out, lse = attn(q, k, v, cu_seqlens=cu_seqlens, return_lse=True, **params)
    for _ in range(3):
        attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens, **params)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens, **params)
        torch.cuda.synchronize()
    total = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kind = next((s for s in ("prep", "dkdv", "dq_store") if s in e.name), e.name)
            total[kind] += e.time_range.elapsed_us() / CALLS
    return total


def main() -> None:
    heads = (8, 16, 32)
    for name in sys.argv[1:] or ["rm_shared", "document", "causal"]:
        rows = {h: kernel_us(name, h) for h in heads}
        print(name, "kernels:", sorted(rows[16]), flush=True)
        for kind in ("prep", "dkdv", "dq_store"):
            ys = [rows[h].get(kind, float("nan")) for h in heads]
            slope, intercept = np.polyfit(heads, ys, 1)
            print(f"{name:14s} {kind:9s} " + " ".join(f"{h:2d}h {y:8.1f} us" for h, y in zip(heads, ys))
                  + f" | per head {slope:6.2f} us, fixed {intercept:6.1f} us", flush=True)


if __name__ == "__main__":
    main()
