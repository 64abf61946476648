"""Where a training step's time goes beyond the kernels (forty-fourth session): the same workload timed five ways
in alternating order, then one autograd step under torch.profiler (its kernels' time against the step's).

  A fwd         attn(q, k, v) direct                       (bench/probe.py's forward)
  B bwd         attn.backward(...) direct                  (bench/probe.py --backward)
  C fwd+bwd     A then B, direct
  D step        attn(q, k, v).backward(d_out) by autograd  (bench/harness.py's fwd+bwd)
  E bwd (ag)    one forward, then .backward(retain_graph=True) repeated (the harness's "backward alone")

    python docs/experiments/s44/step_profile.py [--rounds 2] WORKLOAD ...   (run from the repository root)
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path.cwd() / "bench"))
import harness  # noqa: E402
import probe  # noqa: E402

BENCH = {"warmup": 25, "rep": 200, "return_mode": "median"}


def timings(name: str, rounds: int) -> dict:
    w, attn, q, k, v, d_out, cu, params = probe.call(name, 128)
    pairs = harness.count_pairs(harness.mask_mod(w, lambda a: torch.as_tensor(a, device="cuda")), w.n, "cuda")
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    out, lse = attn(q, k, v, cu_seqlens=cu, return_lse=True, **params)
    kept = attn(*leaves, cu_seqlens=cu, **params)

    def fwd_bwd():
        o, l = attn(q, k, v, cu_seqlens=cu, return_lse=True, **params)
        attn.backward(q, k, v, o, l, d_out, cu_seqlens=cu, **params)

    ways = {
        "A fwd": (lambda: attn(q, k, v, cu_seqlens=cu, **params), 1.0, None),
        "B bwd": (lambda: attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu, **params), 2.5, None),
        "C fwd+bwd": (fwd_bwd, 3.5, None),
        "D step": (lambda: attn(*leaves, cu_seqlens=cu, **params).backward(d_out), 3.5, leaves),
        "E bwd (ag)": (lambda: kept.backward(d_out, retain_graph=True), 2.5, leaves),
    }
    ms = {key: [] for key in ways}
    for r in range(rounds):
        order = list(ways) if r % 2 == 0 else list(reversed(ways))
        for key in order:
            fn, _, grads = ways[key]
            fn()
            torch.cuda.synchronize()
            ms[key].append(do_bench(fn, grad_to_none=grads, **BENCH))
    rows = {key: (ms[key], [work * harness.tflops(pairs, 16, 128, t) for t in ms[key]]) for key, (_, work, _) in ways.items()}

    # One autograd step under the profiler: its kernels' time against the step's own (CUDA events).
    step = ways["D step"][0]
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            for x in leaves:
                x.grad = None
            step()
        end.record()
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels.setdefault(e.name, []).append(e.device_time_total / 1e3)
    return {"rows": rows, "wall3": start.elapsed_time(end), "kernels": kernels}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workloads", nargs="+")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    for name in args.workloads:
        res = timings(name, args.rounds)
        print(f"== {name}")
        for key, (ms, tf) in res["rows"].items():
            print(f"  {key:11s} ms {' / '.join(f'{t:7.3f}' for t in ms)}   TFLOP/s {' / '.join(f'{t:6.1f}' for t in tf)}")
        total = sum(sum(v) for v in res["kernels"].values())
        print(f"  profiled: 3 autograd steps {res['wall3']:.3f} ms by events, kernels {total:.3f} ms, "
              f"gaps {res['wall3'] - total:.3f} ms")
        for kname, times in sorted(res["kernels"].items(), key=lambda kv: -sum(kv[1])):
            print(f"    {len(times):3d} x {np.mean(times):8.3f} ms  {kname[:90]}")


if __name__ == "__main__":
    main()
