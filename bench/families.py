"""The kernel families side by side on one GPU: correctness on sampled rows, then time (a development
check for the Hopper family; bench/harness.py is the full comparison with FlexAttention and SDPA).

    python bench/families.py [--n 32768] [--heads 16] [--head-dim 128] [--workloads causal full ...] [--backward]

With --backward, also the backward pass of each variant: its time, effective TFLOP/s (2.5 x the forward's
work) and the largest difference of its dq, dk, dv from the first variant's (relative to their largest value).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch
from triton.testing import do_bench

import maskc
import maskc.plan.tiling
from maskc.tools.reference import visible

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
DOCS = [2053, 328, 850, 361, 2568, 1799, 1174, 5864, 2613, 5035, 6306, 3817]
WORKLOADS = {  # name -> runtime values of one sequence of n = 32768 tokens
    "full": {}, "causal": {}, "sliding_window": {}, "hstu": {}, "shared_prompt": {},
    "document": {"docs": DOCS}, "clear_text": {}, "clear": {}, "natten2d": {}, "video3d": {},
}


def sample_error(attn, q, k, v, out, params, rows):
    """max |O - O_ref| over sampled rows, O_ref in float32 from the exact mask."""
    seq = {"n": q.shape[1], **params}
    values, layouts = attn.compiled.bind([seq])
    mask = torch.from_numpy(visible(attn.program, layouts[0], values[0], rows[:, None], np.arange(q.shape[1])[None, :]))
    mask = mask.to(q.device)
    idx = torch.from_numpy(rows).to(q.device)
    qs = q[0, idx].float().transpose(0, 1)  # [H, R, D]
    ks, vs = k[0].float().transpose(0, 1), v[0].float().transpose(0, 1)
    s = (qs @ ks.transpose(1, 2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~mask, float("-inf"))
    o_ref = (torch.softmax(s, -1).nan_to_num(0.0) @ vs).transpose(0, 1)
    return (out[0, idx].float() - o_ref).abs().max().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--archs", nargs="+", default=["sm_90", "sm_90a"],
                    help="kernel variants: an arch, optionally with :kN (N-key tiles), :sN (N K/V stages) and "
                         ":hopper_fused, :hopper or :portable (which backward kernels)")
    ap.add_argument("--backward", action="store_true", help="also time the backward pass")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    ap.add_argument("--grid-key-box", metavar="TxYxX", help="a probe: the preferred key tile shape of 2D grids "
                    "(plan/tiling.py's, (t, y, x) before it is scaled to the key tile), e.g. 1x8x8: 16 x 8 tiles "
                    "at 128 keys (the default, 1x8x16, gives 8 x 16)")
    args = ap.parse_args()
    if args.grid_key_box:  # every mask compiled below plans with it (tiling_for reads the table)
        maskc.plan.tiling._SHAPES[(2, "k")] = tuple(int(x) for x in args.grid_key_box.split("x"))
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    rows_out = []
    for name in args.workloads:
        params = WORKLOADS[name]
        q, k, v = (torch.randn(1, args.n, args.heads, args.head_dim, device="cuda", dtype=dt) for _ in range(3))
        rows = np.sort(np.random.default_rng(0).choice(args.n, 128, replace=False))
        visible_pairs = None
        grads = {}  # the first variant's gradients, to compare the others with
        for arch in args.archs:
            # "sm_90a:k64:s3": the Hopper family with 64-key tiles and a three-stage K/V pipeline
            arch_name, *extras = arch.split(":")
            names = {"k": "key_tile", "s": "kv_stages"}
            passes = set(maskc.kernels.BACKWARD_PASSES)  # backward kernels by name
            options = {"arch": arch_name, **{names[e[0]]: int(e[1:]) for e in extras if e not in passes}}
            options.update({"backward_kernels": e for e in extras if e in passes})
            if args.head_dim not in maskc.kernels.KernelOptions(arch=arch_name).family.head_dims:
                continue
            try:
                t0 = time.perf_counter()
                attn = maskc.load(EXAMPLES / f"{name}.mask", head_dim=args.head_dim, dtype=args.dtype, **options)
                out = attn(q, k, v, **params)
                torch.cuda.synchronize()
                first = time.perf_counter() - t0
                if visible_pairs is None:
                    _, lse = attn(torch.zeros_like(q), k, v, return_lse=True, **params)
                    visible_pairs = torch.exp(lse.double()).round().sum().item() / args.heads
                err = sample_error(attn, q, k, v, out, params, rows)
                ms = do_bench(lambda: attn(q, k, v, **params), warmup=25, rep=200, return_mode="median")
                tflops = 4 * visible_pairs * args.head_dim * args.heads / (ms * 1e-3) / 1e12
                backward = backward_pass(attn, q, k, v, params, grads, visible_pairs, args) if args.backward else ()
                rows_out.append((name, arch, err, ms, tflops, first, *backward))
            except Exception as exc:  # keep going: one failure must not hide the other results
                rows_out.append((name, arch, float("nan"), float("nan"), float("nan"), float("nan")))
                print(f"{name} {arch}: {type(exc).__name__}: {exc}"[:400], flush=True)
            print(rows_out[-1], flush=True)
    print(f"\n{'workload':16s} {'arch':16s} {'max err':>9s} {'ms':>8s} {'TFLOP/s':>8s} {'first s':>8s}"
          + (f" {'bwd ms':>8s} {'bwd TF/s':>8s} {'grad diff':>9s}" if args.backward else ""))
    for name, arch, err, ms, tflops, first, *backward in rows_out:
        print(f"{name:16s} {arch:16s} {err:9.2e} {ms:8.3f} {tflops:8.1f} {first:8.2f}"
              + ("".join(f" {x:8.3f}" if i < 2 else f" {x:9.2e}" for i, x in enumerate(backward)) if backward else ""))


def backward_pass(attn, q, k, v, params, grads, visible_pairs, args):
    """(ms, effective TFLOP/s, max relative difference from the first variant's gradients)."""
    out, lse = attn(q, k, v, return_lse=True, **params)
    d_out = torch.randn(q.shape, device=q.device, dtype=q.dtype, generator=torch.Generator(device="cuda").manual_seed(1))
    got = attn.backward(q, k, v, out, lse, d_out, **params)
    torch.cuda.synchronize()
    if not grads:
        grads.update(zip("qkv", got))
    diff = max(((a.float() - grads[n].float()).abs().max() / grads[n].float().abs().max().clamp_min(1e-6)).item()
               for n, a in zip("qkv", got))
    if any(torch.isnan(g).any().item() for g in got):
        diff = float("nan")
    ms = do_bench(lambda: attn.backward(q, k, v, out, lse, d_out, **params), warmup=10, rep=100, return_mode="median")
    return ms, 2.5 * 4 * visible_pairs * args.head_dim * args.heads / (ms * 1e-3) / 1e12, diff


if __name__ == "__main__":
    main()
