"""Where a backward step's time goes in the dK/dV kernel: how long consumer 0's first thread waits per step for the
step's Q and dO (q_full), for the other consumer's half of dS (DS_READY) and for the dQ staging to be free
(DQ_EMPTY), next to the step's whole time. The thirty-first session's question: the persistent kernel's steps took
~9% more cycles than main's in the timelines (docs/training.md), with the same consumer code.

Builds: main's kernel with docs/experiments/s31/bwd-waits-main.patch over s29-timeline (branch s31-waits-main), the
persistent kernel with bwd-waits-persistent.patch over s29-timeline-persistent (branch s31-waits-persistent); the
waits are summed per CTA (atomicAdd of 32-bit clock differences into maskc_waits[4 * blockIdx.x + i]).

    python docs/experiments/s31/bwd_waits.py [--persistent] [--workloads shared_prompt document]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "docs" / "experiments" / "s28"))

from timeline import HEAD_DIM, N, each_call, module_globals  # noqa: E402  (its import records every RawModule made after it)


def run(name: str, attn, cu_seqlens, values: dict, persistent: bool) -> None:
    q, k, v, d_out = (torch.randn(N, 16, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    out, lse = attn(q, k, v, cu_seqlens=cu_seqlens, return_lse=True, **values)
    for _ in range(3):
        attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens, **values)
    shape = (65536, 8) if persistent else (16384, 12)
    bufs = module_globals({"maskc_timeline": shape, "maskc_waits": (65536, 4)})
    for b in bufs.values():
        b.fill(0)
    torch.cuda.synchronize()
    attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens, **values)
    torch.cuda.synchronize()
    t, w = (bufs[n].get().astype(np.int64) for n in ("maskc_timeline", "maskc_waits"))
    t = t[t[:, 1] != 0]
    if persistent:
        first_q, loop_end, steps = t[:, 3], t[:, 4], t[:, 6]
    else:
        first_q, loop_end, steps = t[:, 3], t[:, 4], t[:, 8]
    has = steps > 0
    loop, n = (loop_end - first_q)[has].sum(), steps[has].sum()
    q_wait, ds_wait, dq_wait = (w[:, i].sum() for i in range(3))
    print(f"== {name} ({'persistent' if persistent else 'main'}): {n} steps; cycles a step: the loop {loop / n:.0f}, "
          f"waiting for Q/dO {q_wait / n:.0f}, for the other consumer's dS {ds_wait / n:.0f}, for the dQ staging "
          f"{dq_wait / n:.0f}; the rest {(loop - q_wait - ds_wait - dq_wait) / n:.0f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", nargs="*", default=["shared_prompt", "document"])
    ap.add_argument("--persistent", action="store_true")
    args = ap.parse_args()
    for call in each_call([], args.workloads):
        run(*call, persistent=args.persistent)


if __name__ == "__main__":
    main()
