"""Why bench/harness.py's backward (autograd: `kept.backward(d_out, retain_graph=True)`) timed ~10% below
bench/probe.py's (`attn.backward(...)` called directly) on the same card (H100, s31: causal 502.9 against 553-565
TFLOP/s). Per workload: both ways under the harness's do_bench settings, then each way's CUDA kernels under the
profiler (name, mean us per backward), so that any extra kernel or a slower one shows.

    python docs/experiments/s32/bwd_paths.py causal hstu
"""

from __future__ import annotations

import sys
from pathlib import Path

from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import harness  # noqa: E402
import probe  # noqa: E402
from bwd_kernels import kernel_times  # noqa: E402


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
            for kname, ms in sorted(kernel_times(fn, 5).items(), key=lambda kv: -kv[1]):
                print(f"   {label:8s} {kname[:60]:60s} {1e3 * ms:9.1f} us")
        for x in (q, k, v):
            x.grad = None


if __name__ == "__main__":
    main()
