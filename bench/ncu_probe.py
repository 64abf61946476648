"""One workload's forward, then its backward, each after a warm-up call: for ncu, whose `--launch-skip 2
--launch-count 2` with `-k regex:"fwd_sm90a|dkdv"` then profiles the second forward and the second dK/dV kernel
(bench/ncu_sass_groups.py reads the result).

    python bench/ncu_probe.py WORKLOAD [--head-dim 128]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

import maskc

sys.path.insert(0, str(Path(__file__).resolve().parent))  # beside harness.py, also under PYTHONSAFEPATH
import harness  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=harness.ALL_WORKLOADS)
    ap.add_argument("--head-dim", type=int, default=128, choices=(64, 128, 256))
    args = ap.parse_args()
    w = harness.make_workload(args.workload)
    q, k, v, d_out = (torch.randn(w.n, 16, args.head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    cu_seqlens = torch.tensor([0, *np.cumsum(w.lengths)], dtype=torch.int32)
    attn = maskc.load(EXAMPLES / f"{args.workload}.mask", head_dim=args.head_dim, dtype="bf16", **w.consts)
    params = w.maskc_params()
    for _ in range(2):
        out, lse = attn(q, k, v, cu_seqlens=cu_seqlens, return_lse=True, **params)
        attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens, **params)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
