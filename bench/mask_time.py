"""Timing only (no check; a development probe): the forward and the backward of any .mask file on the sequence
and runtime values of an ANCHORS.md workload, with values overridden, median ms. Used to time parts of a mask
alone, e.g. clear_text's image rule without its text rules, or a text rule with r = 0 (docs/benchmarks.md,
eleventh session):

    python bench/mask_time.py MASK WORKLOAD [NAME=INT ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from triton.testing import do_bench

import maskc

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside harness.py, also under PYTHONSAFEPATH
import harness


def main():
    mask, name, *overrides = sys.argv[1:]
    w = harness.make_workload(name)
    params = {**w.maskc_params(), **{k: int(v) for k, v in (o.split("=", 1) for o in overrides)}}
    q, k, v, d_out = (torch.randn(w.n, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    cu = torch.tensor([0, *np.cumsum(w.lengths)], dtype=torch.int32)
    attn = maskc.load(mask, head_dim=128, dtype="bf16", **w.consts)
    out, lse = attn(q, k, v, cu_seqlens=cu, return_lse=True, **params)

    def forward():
        return attn(q, k, v, cu_seqlens=cu, **params)

    def backward():
        return attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu, **params)

    forward()
    backward()
    torch.cuda.synchronize()
    fwd = do_bench(forward, warmup=50, rep=300, return_mode="median")
    bwd = do_bench(backward, warmup=30, rep=200, return_mode="median")
    print(f"{mask:28s} {' '.join(overrides):10s} on {name}: fwd {fwd:7.3f} ms  bwd {bwd:7.3f} ms", flush=True)


if __name__ == "__main__":
    main()
