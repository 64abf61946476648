"""Timing only, for A/B runs of two builds in one GPU session: maskc's forward (or backward) on ANCHORS.md
workloads, effective TFLOP/s and a do_bench median. No correctness check: experiment builds may be wrong on
purpose (a mask removed to price it); bench/harness.py is the checked comparison.

    python bench/probe.py [--backward] [--head-dim 64|128|256] [--kv-stages 2|3] [--backward-kernels NAME]
                          WORKLOAD ...

The backward counts as 2.5 forward passes (bench/harness.py's convention) and is timed alone: one forward,
then `attn.backward(...)` repeated.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from triton.testing import do_bench

import maskc

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside harness.py, also under PYTHONSAFEPATH
import harness

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def probe(name: str, backward: bool, head_dim: int = 128, **options) -> str:
    """One workload's line: effective TFLOP/s and the median time."""
    w = harness.make_workload(name)
    q, k, v, d_out = (torch.randn(w.n, 16, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    cu_seqlens = torch.tensor([0, *np.cumsum(w.lengths)], dtype=torch.int32)
    pairs = harness.count_pairs(harness.mask_mod(w, lambda a: torch.as_tensor(a, device="cuda")), w.n, "cuda")
    attn = maskc.load(EXAMPLES / f"{name}.mask", head_dim=head_dim, dtype="bf16", **options, **w.consts)
    params = w.maskc_params()
    if backward:
        out, lse = attn(q, k, v, cu_seqlens=cu_seqlens, return_lse=True, **params)

        def step():
            return attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens, **params)
    else:

        def step():
            return attn(q, k, v, cu_seqlens=cu_seqlens, **params)
    step()
    torch.cuda.synchronize()
    ms = do_bench(step, warmup=50, rep=300, return_mode="median")
    work = harness.BACKWARD_FLOPS if backward else 1.0
    tflops = work * harness.tflops(pairs, 16, head_dim, ms)
    return f"{name:16s} {'bwd' if backward else 'fwd'} {tflops:7.1f} TFLOP/s {ms:8.3f} ms"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workloads", nargs="+", choices=harness.ALL_WORKLOADS)
    ap.add_argument("--backward", action="store_true", help="time the backward pass instead of the forward")
    ap.add_argument("--head-dim", type=int, default=128, choices=(64, 128, 256))
    ap.add_argument("--kv-stages", type=int, choices=(2, 3), help="the Hopper forward's K/V pipeline depth")
    ap.add_argument("--backward-kernels", help="which backward pass (maskc.load's backward_kernels)")
    args = ap.parse_args()
    given = {"kv_stages": args.kv_stages, "backward_kernels": args.backward_kernels}
    options = {k: v for k, v in given.items() if v is not None}  # the others: maskc.load's defaults
    for name in args.workloads:
        print(probe(name, args.backward, args.head_dim, **options), flush=True)


if __name__ == "__main__":
    main()
