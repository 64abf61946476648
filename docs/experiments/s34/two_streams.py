"""Does the backward's memory-bound work (prep, dq_store: ~318 us at N = 32768, 16 heads on the H100) overlap
the compute-bound dK/dV kernel of other heads when the heads are split over two streams?

Times, backward alone (rounds alternate nothing: each line is its own do_bench median):
  one16      one call over 16 heads (what the library does)
  seq8x2     two calls of 8 heads each, one after the other on one stream
  conc       the two 8-head calls on two streams of equal priority
  conc_hi    the second stream at high priority (its CTAs are dispatched first as multiprocessors free up)
  conc_hi_s  as conc_hi, the second stream first sleeping ~prep's time, so that its prep meets the first's dK/dV
If conc* beat seq8x2 by several percent, splitting the heads over streams inside the library would pay.

    python docs/experiments/s34/two_streams.py rm_shared document shared_prompt
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from triton.testing import do_bench

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import harness

import maskc


def run(name: str) -> None:
    w = harness.make_workload(name)
    cu_seqlens = torch.tensor([0, *np.cumsum(w.lengths)], dtype=torch.int32)
    params = w.maskc_params()
    attn = maskc.load(ROOT / "examples" / f"{name}.mask", head_dim=128, dtype="bf16", **w.consts)

    def inputs(heads):
        q, k, v, d_out = (torch.randn(w.n, heads, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        out, lse = attn(q, k, v, cu_seqlens=cu_seqlens, return_lse=True, **params)
        return q, k, v, out, lse, d_out

    a, b, all16 = inputs(8), inputs(8), inputs(16)

    def bwd(x):
        return attn.backward(*x, cu_seqlens=cu_seqlens, **params)

    cur = torch.cuda.current_stream()
    s1, s2, s2_hi = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream(priority=-1)

    def two(second, sleep_cycles=0):
        def step():
            s1.wait_stream(cur)
            second.wait_stream(cur)
            with torch.cuda.stream(s1):
                bwd(a)
            with torch.cuda.stream(second):
                if sleep_cycles:
                    torch.cuda._sleep(sleep_cycles)
                bwd(b)
            cur.wait_stream(s1)
            cur.wait_stream(second)
        return step

    cases = {
        "one16": lambda: bwd(all16),
        "seq8x2": lambda: (bwd(a), bwd(b)),
        "conc": two(s2),
        "conc_hi": two(s2_hi),
        "conc_hi_s": two(s2_hi, sleep_cycles=150_000),
    }
    pairs = harness.count_pairs(harness.mask_mod(w, lambda x: torch.as_tensor(x, device="cuda")), w.n, "cuda")
    for case, step in cases.items():
        step()
        torch.cuda.synchronize()
        ms = do_bench(step, warmup=50, rep=300, return_mode="median")
        tflops = harness.BACKWARD_FLOPS * harness.tflops(pairs, 16, 128, ms)
        print(f"{name:14s} {case:10s} {tflops:7.1f} TFLOP/s {ms:8.3f} ms", flush=True)


if __name__ == "__main__":
    for name in sys.argv[1:] or ["rm_shared", "document", "shared_prompt"]:
        run(name)
