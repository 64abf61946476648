"""Why bench/harness.py's backward (autograd: `kept.backward(d_out, retain_graph=True)`) timed ~10% below
bench/probe.py's (`attn.backward(...)` called directly) on the same card (H100, s31: causal 502.9 against 553-565
TFLOP/s). Per workload: both ways under the harness's do_bench settings, then each way's CUDA kernels under the
profiler (name, calls, total us per backward), so that any extra kernel or a slower one shows.

    python docs/experiments/s32/bwd_paths.py causal hstu
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import harness  # noqa: E402
import probe  # noqa: E402


def kernels(fn, reps: int = 5) -> dict:
    """{kernel name: (calls, total us)} per call of fn, from the profiler."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    table: dict = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            row = table[e.name[:60]]
            row[0] += 1
            row[1] += e.device_time
    return {k: (c / reps, us / reps) for k, (c, us) in table.items()}


def main() -> None:
    for name in sys.argv[1:] or ["causal", "hstu"]:
        w, attn, q, k, v, d_out, cu_seqlens, params = probe.call(name, 128)
        for x in (q, k, v):
            x.requires_grad_()
        out, lse = attn(q, k, v, cu_seqlens=cu_seqlens, return_lse=True, **params)

        def direct():
            return attn.backward(q, k, v, out.detach(), lse, d_out, cu_seqlens=cu_seqlens, **params)

        kept = attn(q, k, v, cu_seqlens=cu_seqlens, **params)

        def autograd():
            kept.backward(d_out, retain_graph=True)

        leaves = (q, k, v)
        rows = {}
        for label, fn in (("direct", direct), ("autograd", autograd), ("direct", direct), ("autograd", autograd)):
            ms = do_bench(fn, grad_to_none=leaves, **harness.BENCH)
            rows.setdefault(label, []).append(ms)
        print(f"== {name}: " + ", ".join(f"{k} {' / '.join(f'{m:.3f}' for m in v)} ms" for k, v in rows.items()))
        for label, fn in (("direct", direct), ("autograd", autograd)):
            for kname, (calls, us) in sorted(kernels(fn).items(), key=lambda kv: -kv[1][1]):
                print(f"   {label:8s} {kname:60s} {calls:4.1f} x {us:9.1f} us")
        for x in (q, k, v):
            x.grad = None


if __name__ == "__main__":
    main()
