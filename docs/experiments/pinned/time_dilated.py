"""The dilated window two ways on the GPU: examples/dilated_window.mask (`(q - k) % dilation == 0` on a plain
segment, which the residue-grids pass lays out as a grid of `dilation` columns) and dilated_grid.mask (written as
that grid). Checks each output against a float32 reference on sampled rows and the two forms' gradients against
each other, then times both (median ms, forward and backward) with the maskc on the path, and the example on a packed
batch of eight sequences whose lengths are not multiples of the dilation: run it once per build to compare builds. N = 32768, 16 heads, head dim 128, bf16, window 1024, dilation 4 (the harness's
dilated_window workload).

    python docs/experiments/pinned/time_dilated.py
"""

from pathlib import Path

import torch
from triton.testing import do_bench

import maskc

HERE = Path(__file__).resolve().parent
N, HEADS, D, WINDOW, DILATION = 32768, 16, 128, 1024, 4


def reference_rows(q, k, v, rows, cu):
    """float32 attention of the sampled query rows under the dilated window, inside each row's sequence of the
    packed batch `cu` (cumulative lengths): [rows, heads, D]."""
    qf, kf, vf = (x.float() for x in (q[rows], k, v))
    keys = torch.arange(N, device=q.device)
    seq = torch.searchsorted(cu, rows, right=True) - 1
    diff = rows[:, None] - keys[None, :]
    same = (keys[None, :] >= cu[seq][:, None]) & (keys[None, :] < cu[seq + 1][:, None])
    visible = same & (diff >= 0) & (diff < WINDOW * DILATION) & (diff % DILATION == 0)
    s = torch.einsum("rhd,khd->hrk", qf, kf) / D**0.5
    s = s.masked_fill(~visible[None], float("-inf"))
    return torch.einsum("hrk,khd->rhd", torch.softmax(s, dim=-1), vf)


def visible_pairs(lengths) -> int:
    """A full window but the first rows of each sequence: sum over q of min(window, q // dilation + 1)."""
    total = 0
    for n in lengths:
        full = max(0, n - WINDOW * DILATION)
        head = min(n, WINDOW * DILATION)
        total += full * WINDOW + sum(min(WINDOW, r // DILATION + 1) for r in range(head))
    return total


def main():
    torch.manual_seed(0)
    q, k, v, d_out = (torch.randn(N, HEADS, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    example = maskc.load(HERE.parents[2] / "examples" / "dilated_window.mask", head_dim=D)
    grid = maskc.load(HERE / "dilated_grid.mask", head_dim=D)
    # Eight packed sequences of lengths that are not multiples of the dilation: the grid form cannot take them.
    packed = [4093, 6001, 2047, 5555, 3001, 4441, 3333]
    packed.append(N - sum(packed))
    cases = {"example": (example, [N], {"window": WINDOW, "dilation": DILATION}),
             "grid": (grid, [N], {"window": WINDOW}),
             "packed": (example, packed, {"window": [WINDOW] * len(packed), "dilation": [DILATION] * len(packed)})}
    rows = torch.randint(0, N, (256,), device="cuda")
    results = {}
    for name, (attn, lengths, values) in cases.items():
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        out, lse = attn(q, k, v, cu_seqlens=cu, return_lse=True, **values)
        err = (out[rows].float() - reference_rows(q, k, v, rows, cu.cuda().long())).abs().max().item()
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
        attn(*leaves, cu_seqlens=cu, **values).backward(d_out)
        results[name] = {"err": err, "grads": [x.grad for x in leaves], "pairs": visible_pairs(lengths)}
        fwd = do_bench(lambda: attn(q, k, v, cu_seqlens=cu, **values), warmup=50, rep=300, return_mode="median")
        bwd = do_bench(lambda: attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu, **values), warmup=30, rep=200,
                       return_mode="median")
        results[name] |= {"fwd": fwd, "bwd": bwd}
    print(f"dilated window, N {N}, window {WINDOW}, dilation {DILATION}, {HEADS} heads, hd {D}, bf16; "
          f"maskc {maskc.__file__}")
    for name, r in results.items():
        flops = 4 * r["pairs"] * HEADS * D
        gap = "" if name == "packed" else \
            f"  grads vs example {max((a - b).abs().max().item() for a, b in zip(r['grads'], results['example']['grads'])):.2e}"
        print(f"{name:7s} max err vs fp32 rows {r['err']:.2e}{gap}  "
              f"fwd {r['fwd']:.3f} ms ({flops / r['fwd'] / 1e9:.1f} TFLOP/s)  "
              f"bwd {r['bwd']:.3f} ms ({2.5 * flops / r['bwd'] / 1e9:.1f} TFLOP/s)")


if __name__ == "__main__":
    main()
