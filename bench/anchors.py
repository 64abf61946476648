"""The ANCHORS.md workloads on one GPU: maskc, FlexAttention (Triton backend) and SDPA side by side.

Forward, bf16, batch 1 (packed workloads: their sequences back to back, as one packed batch), 16 heads,
head dim 128, N = 32768, median of do_bench(warmup=25, rep=200). Effective TFLOP/s = 4 * visible pairs *
head_dim * heads / time, with the visible pairs counted exactly by maskc's kernel (q = 0 makes every
visible score 0, so exp(LSE) is the number of keys a row sees). Before timing, maskc's output is checked
against a float32 reference on a sample of rows with fresh random inputs.

    python bench/anchors.py [--json out.json] [--workloads causal document ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from triton.testing import do_bench

import maskc

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
H, D, N = 16, 128, 32768
DOCS = [2053, 328, 850, 361, 2568, 1799, 1174, 5864, 2613, 5035, 6306, 3817]
RM_GROUPS = [[1299, 838, 320, 517, 376], [2038, 716, 739, 923, 644], [1453, 352, 755, 285, 655],
             [1910, 878, 258, 968, 712], [1569, 994, 490, 861, 360], [1674, 287, 278, 282, 921],
             [1042, 646, 958, 477, 688], [1083, 796, 483, 704, 763], [776]]
JAGGED = [7955, 7809, 8202, 8802]


def ids_from_lengths(lengths, device):
    return torch.repeat_interleave(torch.arange(len(lengths), device=device), torch.tensor(lengths, device=device))


def flex_mask_mods(device):
    """ANCHORS.md's definitions, written as FlexAttention mask_mods over one packed sequence of N tokens."""
    doc = ids_from_lengths(DOCS, device)
    sp_seg = ids_from_lengths([8192] + [4096] * 6, device)
    rm_lengths = [x for g in RM_GROUPS for x in g]
    rm_seg = ids_from_lengths(rm_lengths, device)
    rm_group = ids_from_lengths([sum(g) for g in RM_GROUPS], device)
    rm_prompt = torch.tensor([i == 0 for g in RM_GROUPS for i in range(len(g))], device=device)[rm_seg]
    hj_seq = ids_from_lengths(JAGGED, device)
    hj_start = torch.tensor(np.concatenate([[0], np.cumsum(JAGGED)[:-1]]), device=device)[hj_seq]
    hj_len = torch.tensor(JAGGED, device=device)[hj_seq]
    U = N - 2048

    def clear(q, k, w=256, r2=256, strict=False):
        dy, dx = q // w - k // w, q % w - k % w
        d = dy * dy + dx * dx
        return d < r2 if strict else d <= r2

    def hstu_jagged(b, h, q, k):
        lq, lk = q - hj_start[q], k - hj_start[k]
        u = hj_len[q] - 256
        same = hj_seq[q] == hj_seq[k]
        return same & (((lk < u) & ((lq < 6) | (lq >= u) | (lk <= lq))) | (q == k))

    def clear_text(b, h, q, k):
        image = (q >= 512) & (k >= 512)
        return (q < 512) | (k < 512) | (image & clear(q - 512, k - 512, w=252, strict=True))

    return {
        "full": lambda b, h, q, k: q >= 0,
        "causal": lambda b, h, q, k: k <= q,
        "sliding_window": lambda b, h, q, k: (k <= q) & (q - k < 4096),
        "document": lambda b, h, q, k: (doc[q] == doc[k]) & (k <= q),
        "shared_prompt": lambda b, h, q, k: (k <= q) & ((k < 8192) | (sp_seg[q] == sp_seg[k])),
        "rm_shared": lambda b, h, q, k: (k <= q) & (rm_group[q] == rm_group[k]) & (rm_prompt[k] | (rm_seg[q] == rm_seg[k])),
        "hstu": lambda b, h, q, k: ((k <= q) & (k < U)) | (k == q),
        "hstu_jagged": hstu_jagged,
        "clear": lambda b, h, q, k: clear(q, k),
        "clear_text": clear_text,
    }


def maskc_batch(attn):
    """The ANCHORS configuration of an example: its default batch (packed), else one sequence."""
    program = attn.program
    if program.batch:
        sequences = [dict(line) for line in program.batch]
    else:
        sequences = [{}]
    values, layouts = attn.compiled.bind(sequences)
    lengths = [lay.n for lay in layouts]
    params = {p.name: [v.arrays[p.name].tolist() if p.type.depth else v.scalars[p.name] for v in values]
              for p in program.runtime_params}
    return lengths, params, values, layouts


def check_sample(attn, q, k, v, cu, params, lengths, values, layouts, rows=256):
    """Max |O - O_ref| on a random sample of rows (float32 reference) and the bf16-reference bound."""
    out = attn(q, k, v, cu_seqlens=cu, **params)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    rng = np.random.default_rng(0)
    worst, bound = 0.0, 0.0
    for b, (lay, val) in enumerate(zip(layouts, values)):
        n = lay.n
        pick = np.sort(rng.choice(n, size=min(rows, n), replace=False))
        from maskc.tools.reference import visible

        mask = torch.from_numpy(visible(attn.program, lay, val, pick[:, None], np.arange(n)[None, :])).cuda()
        sl = slice(offsets[b], offsets[b + 1])
        qb, kb, vb = q[sl][pick].transpose(0, 1), k[sl].transpose(0, 1), v[sl].transpose(0, 1)
        s = (qb.float() @ kb.float().transpose(1, 2)) / math.sqrt(D)
        s = s.masked_fill(~mask, float("-inf"))
        ref = (torch.softmax(s, -1).nan_to_num(0) @ vb.float()).transpose(0, 1)
        s16 = (qb @ kb.transpose(1, 2)).float() / math.sqrt(D)
        low = (torch.softmax(s16.masked_fill(~mask, float("-inf")), -1).nan_to_num(0).to(q.dtype) @ vb).transpose(0, 1)
        worst = max(worst, (out[sl][pick].float() - ref).abs().max().item())
        bound = max(bound, 2 * (low.float() - ref).abs().max().item() + 1e-5)
    return worst, bound


def run(name, flex_mods, flex_compiled):
    attn = maskc.load(EXAMPLES / f"{name}.mask", head_dim=D, dtype="bf16")
    lengths, params, values, layouts = maskc_batch(attn)
    total = sum(lengths)
    assert total == N, (name, total)
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)
    q, k, v = (torch.randn(total, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    # Exact visible count with maskc's own kernel.
    _, lse = attn(torch.zeros_like(q), k, v, cu_seqlens=cu, return_lse=True, **params)
    visible_pairs = torch.exp(lse.double()).round().sum().item() / H
    err, bound = check_sample(attn, q, k, v, cu, params, lengths, values, layouts)

    plan_ms = []
    sequences = attn.sequences(lengths, params)
    for _ in range(20):
        t0 = time.perf_counter()
        attn.compiled.plan(sequences)
        plan_ms.append(1e3 * (time.perf_counter() - t0))

    t_maskc = do_bench(lambda: attn(q, k, v, cu_seqlens=cu, **params), warmup=25, rep=200, return_mode="median")

    qf, kf, vf = (x.unsqueeze(0).transpose(1, 2).contiguous() for x in (q, k, v))  # [1, H, N, D]
    t0 = time.perf_counter()
    block_mask = create_block_mask(flex_mods[name], None, None, N, N, device="cuda")
    torch.cuda.synchronize()
    bm_build = [1e3 * (time.perf_counter() - t0)]
    for _ in range(5):
        t0 = time.perf_counter()
        create_block_mask(flex_mods[name], None, None, N, N, device="cuda")
        torch.cuda.synchronize()
        bm_build.append(1e3 * (time.perf_counter() - t0))
    t_flex = do_bench(lambda: flex_compiled(qf, kf, vf, block_mask=block_mask), warmup=25, rep=200, return_mode="median")

    def tflops(ms):
        return 4 * visible_pairs * D * H / (ms * 1e-3) / 1e12

    row = dict(workload=name, visible=visible_pairs / N / N, maskc_ms=t_maskc, maskc_tflops=tflops(t_maskc),
               flex_triton_ms=t_flex, flex_triton_tflops=tflops(t_flex), ratio=t_flex / t_maskc,
               max_err=err, err_bound=bound, plan_ms_median=statistics.median(plan_ms),
               blockmask_ms_median=statistics.median(bm_build[1:]))
    if name in ("full", "causal"):
        qs, ks, vs = (x.unsqueeze(0).transpose(1, 2) for x in (q, k, v))
        t_sdpa = do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=name == "causal"),
                          warmup=25, rep=200, return_mode="median")
        row.update(sdpa_ms=t_sdpa, sdpa_tflops=tflops(t_sdpa))
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--workloads", nargs="*", default=list(flex_mask_mods("cpu")))
    args = parser.parse_args()
    torch.manual_seed(0)
    # One compiled flex_attention serves every mask; each mask_mod is a new specialisation.
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = 512
    mods = flex_mask_mods("cuda")
    flex_compiled = torch.compile(flex_attention)
    rows = []
    for name in args.workloads:
        row = run(name, mods, flex_compiled)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\nGPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, maskc {maskc.__version__}")
    print(f"{'workload':15s} {'visible':>8s} {'maskc':>8s} {'flex':>8s} {'ratio':>6s} {'err':>9s} {'bound':>9s} "
          f"{'plan ms':>8s} {'BM ms':>7s}")
    for r in rows:
        print(f"{r['workload']:15s} {100 * r['visible']:7.2f}% {r['maskc_tflops']:8.1f} {r['flex_triton_tflops']:8.1f} "
              f"{r['ratio']:6.2f} {r['max_err']:9.2e} {r['err_bound']:9.2e} {r['plan_ms_median']:8.2f} "
              f"{r['blockmask_ms_median']:7.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
