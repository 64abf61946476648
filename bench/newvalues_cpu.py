"""The host time of a training step's first attention call when its runtime values are new (new lengths every
step: packed documents, reward-model groups, HSTU users), measured without a GPU: the forward call (checks,
the plan from scratch, tables, launch) and then its backward call (the plan found again, the tables by key
tile, launch), with CuPy, the driver's launch and the TMA encoder faked by tests/fake_cupy.py (a few us of each
call are the fakes'). 32768 tokens in `count` sequences of random lengths, sm_90a, head dim 128, 16 heads.

    python bench/newvalues_cpu.py [--counts 9 64 256 1024] [--workloads document rm_shared hstu_jagged] [--layers 8]
                                  [--ahead]

With --ahead, each step's plan is made ahead, as a DataLoader worker would (`attn.plan(cu_seqlens=..., **values)`,
pickled and unpickled as from another process, outside the timing), and both calls are given `plan=`: what is left
on the training step is the plan's adoption, the checks and the launches' preparation.

Where a C++ compiler builds maskc's C++ planner (maskc.plan.native) it plans, loaded before the steps;
`MASKC_NATIVE=0` measures the numpy planner instead.

Issue 5 asks that new runtime values cost the attention plus <= 1 ms; on a GPU's host the same code has run
1.5-2.3x slower than on the dev VM (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import pickle
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "bench")]  # (under PYTHONSAFEPATH the script's folder is not there)

import fake_cupy  # noqa: E402
from plan_time import packed_batch  # noqa: E402

import maskc  # noqa: E402

TOKENS = 32768


def batch(rng: np.random.Generator, workload: str, count: int) -> tuple[np.ndarray, dict]:
    """cu_seqlens (int32, as a data loader makes it) of TOKENS tokens in `count` random lengths, and the runtime
    values a user would pass (plan_time.packed_batch)."""
    cu_seqlens, values = packed_batch(rng, workload, count)
    return cu_seqlens.astype(np.int32), values


def mask_file(workload: str) -> Path:
    # A sequence a document: causal inside each sequence of the packed batch.
    return ROOT / "examples" / ("causal.mask" if workload == "document" else f"{workload}.mask")


def _wait_for_native_planner() -> None:
    """The C++ planner loaded before the steps, as it is a second into a run where a C++ compiler builds it
    (maskc.plan.native; a tree from before it plans with numpy throughout)."""
    try:
        from maskc.plan import native
    except ImportError:
        return
    native.library(wait=True)


def time_step(workload: str, count: int, steps: int, layers: int = 1, seed: int = 0,
              ahead: bool = False) -> tuple[float, ...]:
    """Median ms of the forward call and of its backward call, each step with new runtime values: the first
    layer's, and with `layers` > 1 also the other layers' (the same mask and values, tensors of their own).
    `ahead`: the calls are given the step's plan, made ahead."""
    attn = maskc.load(mask_file(workload), arch="sm_90a", head_dim=128, dtype="fp16")
    _wait_for_native_planner()
    rng = np.random.default_rng(seed + count)
    batches = [batch(rng, workload, count) for _ in range(steps)]
    names = (attn.compiled.name, *attn.compiled.backward_names)
    times = {"forward": [], "backward": [], "later forward": [], "later backward": []}
    with pytest.MonkeyPatch.context() as mp:
        record = fake_cupy.install(mp, dict.fromkeys(names, ()))
        tensors = [[fake_cupy.ndarray((TOKENS, 16, 128)) for _ in range(5)] for _ in range(layers)]
        lse = fake_cupy.ndarray((16, TOKENS), np.float32)
        for cu_seqlens, values in batches:
            given = {"plan": pickle.loads(pickle.dumps(attn.plan(cu_seqlens=cu_seqlens, **values)))} if ahead else {}
            for layer, (q, k, v, _, _) in enumerate(tensors):
                start = time.perf_counter()
                attn(q, k, v, cu_seqlens=cu_seqlens, **values, **given)
                times["later forward" if layer else "forward"].append(time.perf_counter() - start)
            for layer, (q, k, v, out, d_out) in enumerate(tensors):  # (in a model, the last layer first)
                start = time.perf_counter()
                attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu_seqlens, **values, **given)
                times["later backward" if layer else "backward"].append(time.perf_counter() - start)
            record.launches.clear()
        fake_cupy.clear_caches()
    return tuple(1e3 * statistics.median(t[len(t) // 5:]) for t in times.values() if t)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workloads", nargs="+", default=["document", "rm_shared", "hstu_jagged"])
    parser.add_argument("--counts", nargs="+", type=int, default=[9, 64, 256, 1024])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--layers", type=int, default=1, help="a model of this many layers calling the mask")
    parser.add_argument("--ahead", action="store_true", help="each step's plan made ahead and given to the calls")
    args = parser.parse_args()
    print(f"host: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"numpy {np.__version__}")
    print(f"new runtime values every step{', plans made ahead' if args.ahead else ''}, {TOKENS} tokens, median ms of "
          "the forward call / its backward call"
          + (f"; then those of layers 2-{args.layers}, whose calls differ only in their tensors" if args.layers > 1
             else ""))
    print(f"{'workload':12s}" + "".join(f"{f'{c} seqs':>16s}" for c in args.counts))
    for workload in args.workloads:
        cells = [time_step(workload, count, args.steps, args.layers, ahead=args.ahead) for count in args.counts]
        print(f"{workload:12s}" + "".join(f"{f'{c[0]:.3f} / {c[1]:.3f}':>16s}" for c in cells))
        if args.layers > 1:
            print(f"{'  later':12s}" + "".join(f"{f'{c[2]:.3f} / {c[3]:.3f}':>16s}" for c in cells))


if __name__ == "__main__":
    main()
