"""The dilated window in four forms on the GPU, to find what examples/dilated_window.mask pays against the grid
written by hand (the twenty-fourth session: forward 0.729 against 0.659 ms, from two calls): the example (a
runtime dilation, laid out as a grid by the residue-grids pass), the example with the dilation a const, the grid
by hand (const d) and the grid by hand with d a runtime value. N = 32768, 16 heads, head dim 128, bf16, window
1024, dilation 4. Checks every form's output and gradients against the example's (the same mask, so they agree
to rounding) and the example's sampled rows against float32, then times forward and backward (median ms), the
forms alternating, two rounds.

    python docs/experiments/s25/dilated_forms.py
"""

from pathlib import Path

import torch
from triton.testing import do_bench

import maskc

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
N, HEADS, D, WINDOW, DILATION = 32768, 16, 128, 1024, 4
FORMS = {
    "example": (ROOT / "examples" / "dilated_window.mask", {"window": WINDOW, "dilation": DILATION}),
    "example, const dilation": (HERE / "dilated_const.mask", {"window": WINDOW}),
    "grid, const d": (ROOT / "docs" / "experiments" / "pinned" / "dilated_grid.mask", {"window": WINDOW}),
    "grid, runtime d": (HERE / "dilated_grid_runtime.mask", {"window": WINDOW, "d": DILATION}),
}


def reference_rows(q, k, v, rows):
    """float32 attention of the sampled query rows under the dilated window: [rows, heads, D]."""
    keys = torch.arange(N, device=q.device)
    diff = rows[:, None] - keys[None, :]
    visible = (diff >= 0) & (diff < WINDOW * DILATION) & (diff % DILATION == 0)
    s = torch.einsum("rhd,khd->hrk", q[rows].float(), k.float()) / D**0.5
    s = s.masked_fill(~visible[None], float("-inf"))
    return torch.einsum("hrk,khd->rhd", torch.softmax(s, dim=-1), v.float())


def main():
    torch.manual_seed(0)
    q, k, v, d_out = (torch.randn(1, N, HEADS, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    attn = {name: maskc.load(path, head_dim=D) for name, (path, _) in FORMS.items()}
    rows = torch.randint(0, N, (256,), device="cuda")
    first = None
    for name, (_, values) in FORMS.items():
        qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
        out = attn[name](qg, kg, vg, **values)
        out.backward(d_out)
        got = (out, qg.grad, kg.grad, vg.grad)
        if first is None:
            first = got
            err = (out[0, rows].float() - reference_rows(q[0], k[0], v[0], rows)).abs().max().item()
            print(f"{name:24s} max err of sampled rows vs float32 {err:.2e}")
        else:
            errs = [(a.float() - b.float()).abs().max().item() for a, b in zip(got, first)]
            print(f"{name:24s} max diff vs the example: out {errs[0]:.2e}, dq {errs[1]:.2e}, dk {errs[2]:.2e}, "
                  f"dv {errs[3]:.2e}")
    times = {name: [] for name in FORMS}
    for _ in range(2):
        for name, (_, values) in FORMS.items():
            a = attn[name]
            fwd = do_bench(lambda: a.forward(q, k, v, **values), return_mode="median")
            o, lse = a.forward(q, k, v, **values)
            bwd = do_bench(lambda: a.backward(q, k, v, o, lse, d_out, **values), return_mode="median")
            times[name].append((fwd, bwd))
    print(f"\n{'form':24s} {'fwd ms (two rounds)':>22s} {'bwd ms (two rounds)':>22s}")
    for name, t in times.items():
        print(f"{name:24s} {t[0][0]:10.3f} {t[1][0]:10.3f} {t[0][1]:10.3f} {t[1][1]:10.3f}")


if __name__ == "__main__":
    main()
