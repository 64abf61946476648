"""What tiling each document on its own would gain (thirty-seventh session): ANCHORS' document workload run
three ways with the kernels as they are, timed in alternating rounds, outputs and gradients compared:
  one    document.mask over one sequence of 12 documents (the harness's form: tiles cross documents),
  batch  document.mask over a packed batch of 12 sequences of one document each (cu_seqlens),
  causal causal.mask over the same packed batch.
batch and causal tile every document from its first token: the upper bound of a planner that starts a tile at
each member of a family no rule crosses.

    python docs/experiments/s37/document_as_batch.py [ROUNDS]
"""

import sys
from pathlib import Path

import numpy as np
import torch
from triton.testing import do_bench

import maskc

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import harness  # noqa: E402

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
w = harness.make_workload("document")
docs = w.sequences[0]["docs"]
n, heads, d = w.n, 16, 128
torch.manual_seed(0)
q, k, v, d_out = (torch.randn(n, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
one_cu = torch.tensor([0, n], dtype=torch.int32)
doc_cu = torch.tensor([0, *np.cumsum(docs)], dtype=torch.int32)
document = maskc.load(ROOT / "examples/document.mask", head_dim=d, dtype="bf16")
causal = maskc.load(ROOT / "examples/causal.mask", head_dim=d, dtype="bf16")
forms = {
    "one": (document, one_cu, {"docs": [docs]}),
    "batch": (document, doc_cu, {"docs": [[x] for x in docs]}),
    "causal": (causal, doc_cu, {}),
}
pairs = harness.count_pairs(harness.mask_mod(w, lambda a: torch.as_tensor(a, device="cuda")), n, "cuda")

results = {}
for name, (attn, cu, params) in forms.items():
    out, lse = attn(q, k, v, cu_seqlens=cu, return_lse=True, **params)
    grads = attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu, **params)
    results[name] = (out.float(), [g.float() for g in grads])
ref_out, ref_grads = results["one"]
for name, (out, grads) in results.items():
    diffs = [(out - ref_out).abs().max().item()] + [(g - r).abs().max().item() for g, r in zip(grads, ref_grads)]
    print(f"{name:7s} max |diff| from one: out {diffs[0]:.3g}, dq {diffs[1]:.3g}, dk {diffs[2]:.3g}, dv {diffs[3]:.3g}")

times = {(name, part): [] for name in forms for part in ("fwd", "bwd")}
for _ in range(rounds):
    for name, (attn, cu, params) in forms.items():
        out, lse = attn(q, k, v, cu_seqlens=cu, return_lse=True, **params)
        fwd = do_bench(lambda: attn(q, k, v, cu_seqlens=cu, **params), warmup=50, rep=300, return_mode="median")
        bwd = do_bench(lambda: attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu, **params), warmup=50, rep=300,
                       return_mode="median")
        times[(name, "fwd")].append(fwd)
        times[(name, "bwd")].append(bwd)

print("form    fwd TFLOP/s          bwd TFLOP/s          fwd+bwd")
for name in forms:
    f = [harness.tflops(pairs, heads, d, ms) for ms in times[(name, "fwd")]]
    b = [harness.BACKWARD_FLOPS * harness.tflops(pairs, heads, d, ms) for ms in times[(name, "bwd")]]
    fb = [(1 + harness.BACKWARD_FLOPS) * harness.tflops(pairs, heads, d, x + y)
          for x, y in zip(times[(name, "fwd")], times[(name, "bwd")])]
    print(f"{name:7s} {' / '.join(f'{x:.1f}' for x in f):20s} {' / '.join(f'{x:.1f}' for x in b):20s} "
          f"{' / '.join(f'{x:.1f}' for x in fb)}")
