"""GPU: the gradients of causal.mask (one sequence, 16 heads, hd 128, bf16) from the installed maskc against float32
autograd of the same attention, beside PyTorch's own bf16 SDPA errors (the bar): for a prototype build whose
kernels the GPU suite cannot judge (s40-pair: plain causal over one sequence only).

    python docs/experiments/s40/pair_check.py [N ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import maskc

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def check(n: int, heads: int = 16, d: int = 128) -> bool:
    torch.manual_seed(n)
    q, k, v, d_out = (torch.randn(n, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    cu = torch.tensor([0, n], dtype=torch.int32)
    attn = maskc.load(EXAMPLES / "causal.mask", head_dim=d, dtype="bf16")
    out, lse = attn(q, k, v, cu_seqlens=cu, return_lse=True)
    grads = attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu)

    def sdpa(dtype):
        x = [t.to(dtype).permute(1, 0, 2).unsqueeze(0).requires_grad_() for t in (q, k, v)]
        o = F.scaled_dot_product_attention(*x, is_causal=True)
        o.backward(d_out.to(dtype).permute(1, 0, 2).unsqueeze(0))
        return [t.grad[0].permute(1, 0, 2).float() for t in x]

    ref = sdpa(torch.float32)
    bar = sdpa(torch.bfloat16)
    ok = True
    for name, g, r, b in zip(("dq", "dk", "dv"), grads, ref, bar):
        err, bar_err = (g.float() - r).abs().max().item(), (b - r).abs().max().item()
        good = err <= 3 * bar_err + 1e-3 and torch.isfinite(g).all().item()
        ok &= good
        print(f"N={n:6d} {name}: max|maskc - fp32| {err:.3e}   max|torch bf16 - fp32| {bar_err:.3e}   {'ok' if good else 'WRONG'}")
    return ok


if __name__ == "__main__":
    results = [check(int(a)) for a in (sys.argv[1:] or ["4096", "8192"])]
    print("all ok" if all(results) else "SOME WRONG")
