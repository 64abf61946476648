"""Timing only, for A/B runs of two builds in one GPU session: maskc's forward (or backward) on ANCHORS.md
workloads, effective TFLOP/s and a do_bench median. No correctness check: experiment builds may be wrong on
purpose (a mask removed to price it); bench/harness.py is the checked comparison.

    python bench/probe.py [--backward] [--head-dim 64|128|256] [--kv-stages 2|3] [--backward-kernels NAME]
                          [--ncu] WORKLOAD ...

The backward counts as 2.5 forward passes (bench/harness.py's convention) and is timed alone: one forward,
then `attn.backward(...)` repeated. With --ncu, nothing is timed: each workload's forward and backward run twice
for a profiler (`for_ncu`).
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


def call(name: str, head_dim: int, **options):
    """A workload's inputs and mask: (workload, attn, q, k, v, d_out, cu_seqlens, runtime params)."""
    w = harness.make_workload(name)
    q, k, v, d_out = (torch.randn(w.n, 16, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    cu_seqlens = torch.tensor([0, *np.cumsum(w.lengths)], dtype=torch.int32)
    attn = maskc.load(EXAMPLES / f"{name}.mask", head_dim=head_dim, dtype="bf16", **options, **w.consts)
    return w, attn, q, k, v, d_out, cu_seqlens, w.maskc_params()


def probe(name: str, backward: bool, head_dim: int = 128, **options) -> str:
    """One workload's line: effective TFLOP/s and the median time."""
    w, attn, q, k, v, d_out, cu_seqlens, params = call(name, head_dim, **options)
    pairs = harness.count_pairs(harness.mask_mod(w, lambda a: torch.as_tensor(a, device="cuda")), w.n, "cuda")
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


def for_ncu(name: str, head_dim: int = 128, **options) -> None:
    """The workload's forward, then its backward, twice and untimed: under `ncu --launch-skip 2 --launch-count 2
    -k regex:"fwd_sm90a|dkdv"` the second forward and the second dK/dV kernel are profiled (bench/ncu_sass_groups.py
    reads the result)."""
    _, attn, q, k, v, d_out, cu_seqlens, params = call(name, head_dim, **options)
    for _ in range(2):
        out, lse = attn(q, k, v, cu_seqlens=cu_seqlens, return_lse=True, **params)
        attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens, **params)
    torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workloads", nargs="+", choices=harness.ALL_WORKLOADS)
    ap.add_argument("--backward", action="store_true", help="time the backward pass instead of the forward")
    ap.add_argument("--head-dim", type=int, default=128, choices=(64, 128, 256))
    ap.add_argument("--kv-stages", type=int, choices=(2, 3), help="the Hopper forward's K/V pipeline depth")
    ap.add_argument("--backward-kernels", help="which backward pass (maskc.load's backward_kernels)")
    ap.add_argument("--ncu", action="store_true", help="run the forward and the backward twice, untimed (for ncu)")
    args = ap.parse_args()
    given = {"kv_stages": args.kv_stages, "backward_kernels": args.backward_kernels}
    options = {k: v for k, v in given.items() if v is not None}  # the others: maskc.load's defaults
    for name in args.workloads:
        if args.ncu:
            for_ncu(name, args.head_dim, **options)
        else:
            print(probe(name, args.backward, args.head_dim, **options), flush=True)


if __name__ == "__main__":
    main()
