"""A first look at speed: a few workloads at N = 32768, maskc against SDPA where SDPA applies."""
import time

import torch
from triton.testing import do_bench

import maskc

N, H, D = 32768, 16, 128
rows = []
for name, params in [("full", {}), ("causal", {}), ("document", {}), ("hstu", {}), ("clear", {})]:
    attn = maskc.load(f"examples/{name}.mask", head_dim=D, dtype="bf16")
    q, k, v = (torch.randn(1, N, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    t0 = time.perf_counter(); out = attn(q, k, v); torch.cuda.synchronize(); first = time.perf_counter() - t0
    # exact visible count: with q = 0 every visible score is 0, so exp(lse) counts the visible keys of a row
    _, lse = attn(torch.zeros_like(q), k, v, return_lse=True)
    visible = torch.exp(lse.double()).round().sum().item() / H
    ms = do_bench(lambda: attn(q, k, v), warmup=25, rep=200, return_mode="median")
    tflops = 4 * visible * D * H / (ms * 1e-3) / 1e12
    rows.append((name, visible / N / N, ms, tflops, first))
    print(f"{name:10s} visible={visible/N/N:6.3f} {ms:8.3f} ms {tflops:7.1f} TFLOP/s  first call {first:.2f}s", flush=True)
for causal in (False, True):
    q, k, v = (torch.randn(1, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ms = do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal), warmup=25, rep=200, return_mode="median")
    frac = 0.5 if causal else 1.0
    print(f"SDPA causal={causal} {ms:.3f} ms {4*frac*N*N*D*H/(ms*1e-3)/1e12:.1f} TFLOP/s")
