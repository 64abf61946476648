"""A checked call's host time, measured without a GPU: the first call of a signature (new tensor addresses, runtime
values whose plan is cached: every layer of a model after the first, in a training step whose lengths are new),
forward and backward, with CuPy, the driver's launch and the TMA encoder faked by tests/fake_cupy.py (arrays are
made-up addresses; the fakes' own time is included, a few us a call). Causal, N = 1024, 16 heads, head dim 128,
fp16, sm_90a (the backward: the fused Hopper pass). Needs no torch.

    python bench/checked_cpu.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "bench")]  # (under PYTHONSAFEPATH the script's folder is not there)

import fake_cupy  # noqa: E402
from timing import us_per_call  # noqa: E402

import maskc  # noqa: E402


def main() -> None:
    attn = maskc.load(ROOT / "examples" / "causal.mask", arch="sm_90a", head_dim=128, dtype="fp16")
    names = (attn.compiled.name, *attn.compiled.backward_names)
    with pytest.MonkeyPatch.context() as mp:
        record = fake_cupy.install(mp, dict.fromkeys(names, ()))  # launches recorded without their arguments
        shape, lse_shape = (1, 1024, 16, 128), (1, 16, 1024)

        def forward():
            q, k, v = (fake_cupy.ndarray(shape) for _ in range(3))
            attn(q, k, v)

        def backward():
            q, k, v, out, d_out = (fake_cupy.ndarray(shape) for _ in range(5))
            attn.backward(q, k, v, out, fake_cupy.ndarray(lse_shape, np.float32), d_out)

        print("us per call, median of 9 loops of 300")
        for name, fn in (("checked forward", forward), ("checked backward", backward)):
            print(f"{name:20s} {us_per_call(fn, 300, 9, warmup=50, before_each_loop=record.launches.clear):7.1f}")
        fake_cupy.clear_caches()


if __name__ == "__main__":
    main()
