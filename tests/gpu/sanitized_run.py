"""What tests/gpu/test_sanitizer.py runs under compute-sanitizer: the forward and backward pass of every
example at its small, ragged configuration (tests/small_configs.py), for every kernel family and backward pass
this GPU has, in one process (so each tool starts once). Checks nothing itself: the tool reports what the
kernels did wrong. `--only NAME ...` runs some examples.

    compute-sanitizer --tool racecheck python tests/gpu/sanitized_run.py [--only causal hstu]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # small_configs

import maskc  # noqa: E402
from small_configs import SMALL  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def passes() -> list[tuple[str, str | None]]:
    """(arch, backward kernels) for every pair of kernels this GPU runs, as the GPU tests choose them."""
    major, minor = torch.cuda.get_device_capability()
    found = [(f"sm_{major}{minor}", None)]
    if (major, minor) == (9, 0):
        found += [("sm_90a", None), ("sm_90a", "portable"), ("sm_90a", "hopper")]
    return found


def run(name: str, arch: str, backward_kernels: str | None, heads=(4, 2)) -> None:
    consts, sequences = SMALL[name]
    options = {"backward_kernels": backward_kernels} if backward_kernels else {}
    attn = maskc.load(EXAMPLES / f"{name}.mask", arch=arch, **options, **consts)
    values, layouts = attn.compiled.bind(sequences)
    lengths = [lay.n for lay in layouts]
    params = {p.name: [val.arrays[p.name].tolist() if p.type.depth else val.scalars[p.name] for val in values]
              for p in attn.program.runtime_params}
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, d_out = (torch.randn(sum(lengths), heads[0], 128, device="cuda", dtype=torch.bfloat16, generator=gen)
                for _ in range(2))
    k, v = (torch.randn(sum(lengths), heads[1], 128, device="cuda", dtype=torch.bfloat16, generator=gen)
            for _ in range(2))
    out, lse = attn(q, k, v, cu_seqlens=cu, return_lse=True, **params)
    if attn.compiled.options.backward is not None:
        attn.backward(q, k, v, out, lse, d_out, cu_seqlens=cu, **params)
    torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=sorted(SMALL))
    args = ap.parse_args()
    for name in args.only:
        for arch, backward_kernels in passes():
            run(name, arch, backward_kernels)
            print(f"ran {name} {arch} {backward_kernels or 'default'}", flush=True)


if __name__ == "__main__":
    main()
