"""What a work item costs beyond its tiles, on the GPU (the twenty-sixth session's question, docs/training.md).

Packed causal documents of one length L, tile-aligned, 32768 tokens in all (16 heads, head dim 128, bf16): every
query tile is a forward item and every key tile a dK/dV item at every L (256 of each per head), each with one
partial tile (the diagonal), so only the full tiles change with L: T (T - 1) / 2 per document of T = L / 128
tiles. A line through the times, t(L) = a * full tiles + c, prices a full tile (a) and what does not grow with
the documents (c: per item, its diagonal tile, and in the backward prep and dq_store). c per item against a full
tile's cost says how much of document's and rm_shared's time (items of 8-40 tiles) the items' fixed costs take.

    python docs/experiments/s26/item_cost.py [--lengths 512 1024 ... 32768] [--backward-kernels NAME]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from triton.testing import do_bench

import maskc

N, HEADS, HEAD_DIM, TILE = 32768, 16, 128, 128
CAUSAL = Path(__file__).resolve().parents[3] / "examples" / "causal.mask"


def times(attn, length: int) -> tuple[float, float]:
    """Median ms of the forward and of the backward with documents of `length` tokens."""
    q, k, v, d_out = (torch.randn(N, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    cu_seqlens = torch.arange(0, N + 1, length, dtype=torch.int32)
    out, lse = attn(q, k, v, cu_seqlens=cu_seqlens, return_lse=True)
    forward = do_bench(lambda: attn(q, k, v, cu_seqlens=cu_seqlens), warmup=25, rep=200, return_mode="median")
    backward = do_bench(lambda: attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens), warmup=25, rep=200,
                        return_mode="median")
    return forward, backward


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", nargs="+", type=int, default=[512, 1024, 2048, 4096, 8192, 16384, 32768])
    ap.add_argument("--backward-kernels")
    args = ap.parse_args()
    options = {"backward_kernels": args.backward_kernels} if args.backward_kernels else {}
    attn = maskc.load(CAUSAL, head_dim=HEAD_DIM, dtype="bf16", **options)
    rows = []
    print(f"{'L':>6s} {'full tiles':>10s} {'fwd ms':>8s} {'bwd ms':>8s}", flush=True)
    for length in args.lengths:
        if N % length or length % TILE:
            raise SystemExit(f"a length must divide {N} and be a multiple of {TILE}, got {length}")
        tiles = length // TILE
        full = (N // length) * tiles * (tiles - 1) // 2 * HEADS
        fwd, bwd = times(attn, length)
        rows.append((full, fwd, bwd))
        print(f"{length:6d} {full:10d} {fwd:8.3f} {bwd:8.3f}", flush=True)
    full, fwd, bwd = (np.array(c, dtype=np.float64) for c in zip(*rows))
    items = N // TILE * HEADS
    for name, t in (("forward", fwd), ("backward", bwd)):
        a, c = np.polyfit(full, t, 1)
        worst = np.abs(np.polyval((a, c), full) - t).max()
        print(f"{name}: a full tile {1e6 * a:.3f} ns of the GPU's time; fixed {c:.3f} ms, {1e6 * c / items:.1f} ns an "
              f"item (= {c / items / a:.2f} full tiles); the line's worst miss {worst:.3f} ms")


if __name__ == "__main__":
    main()
