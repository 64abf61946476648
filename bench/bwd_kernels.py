"""Where the backward pass spends its time: each backward kernel (dQ, dK/dV) timed alone with the PyTorch
profiler, per workload and backward family (a development probe for docs/training.md's log).

    python bench/bwd_kernels.py [--n 32768] [--heads 16] [--workloads causal hstu:targets=0 ...] [--archs sm_90a ...]

Prints one row per (workload, variant, kernel): mean time in ms and the effective TFLOP/s that kernel alone
would reach if it were the whole backward (2.5 x the forward's work), so the two rows' times add up to the
backward and their shares show which kernel to work on.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

import maskc

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside families.py, also under PYTHONSAFEPATH
from families import WORKLOADS  # noqa: E402  (runtime values of one sequence per workload)

DEFAULT_WORKLOADS = ["full", "causal", "hstu", "shared_prompt", "document"]


def kernel_times(fn, calls: int) -> dict[str, float]:
    """Mean device time (ms) per call of each CUDA kernel that `fn` launches."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times: dict[str, float] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times[event.name] = times.get(event.name, 0.0) + event.device_time / 1e3 / calls
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--archs", nargs="+", default=["sm_90a"], help="as bench/families.py: sm_90a, sm_90a:portable")
    ap.add_argument("--workloads", nargs="+", default=DEFAULT_WORKLOADS)
    args = ap.parse_args()
    rows = []
    for spec in args.workloads:
        name, _, changes = spec.partition(":")  # "hstu:targets=0": a workload with other runtime values
        params = {**WORKLOADS[name], **{k: int(v) for k, v in (c.split("=") for c in changes.split(",") if c)}}
        q, k, v, d_out = (torch.randn(1, args.n, args.heads, args.head_dim, device="cuda", dtype=torch.bfloat16)
                          for _ in range(4))
        for arch in args.archs:
            arch_name, *extras = arch.split(":")
            options = {"backward_kernels": e for e in extras}
            attn = maskc.load(EXAMPLES / f"{name}.mask", head_dim=args.head_dim, arch=arch_name, **options)
            out, lse = attn(q, k, v, return_lse=True, **params)
            visible_pairs = torch.exp(attn(torch.zeros_like(q), k, v, return_lse=True, **params)[1].double())
            visible_pairs = visible_pairs.round().sum().item() / args.heads
            work = 2.5 * 4 * visible_pairs * args.head_dim * args.heads
            times = kernel_times(lambda: attn.backward(q, k, v, out, lse, d_out, **params), args.calls)
            for kernel, ms in sorted(times.items()):
                short = kernel.rsplit("_bwd_", 1)[-1] if "_bwd_" in kernel else kernel[:40]
                rows.append((spec, arch, short, ms, work / (ms * 1e-3) / 1e12))
                print(rows[-1], flush=True)
    print(f"\n{'workload':20s} {'variant':18s} {'kernel':28s} {'ms':>8s} {'TF/s':>8s}")
    for name, arch, kernel, ms, tflops in rows:
        print(f"{name:20s} {arch:18s} {kernel:28s} {ms:8.3f} {tflops:8.1f}")


if __name__ == "__main__":
    main()
