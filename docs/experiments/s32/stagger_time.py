"""The cost of `by_key.staggered` on the host: the key descriptor of a few ANCHORS workloads (N = 32768, sm_90a,
128 x 128 tiles) with and without the stagger, through the C++ planner and through numpy, median of 20.

    python docs/experiments/s32/stagger_time.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import harness  # noqa: E402

from maskc.compiler import compile_file  # noqa: E402
from maskc.kernels.family import KernelOptions  # noqa: E402
from maskc.plan import native  # noqa: E402
from maskc.plan.by_key import by_key  # noqa: E402


def median_us(fn, repeats: int = 20) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e6 * statistics.median(times)


def main() -> None:
    print(f"C++ planner built: {native.library(wait=True) is not None}")
    for name in ("full", "prefix_lm", "global_window", "clear_text", "causal"):
        w = harness.make_workload(name)
        compiled = compile_file(ROOT / "examples" / f"{name}.mask", KernelOptions(arch="sm_90a"), w.consts)
        desc = compiled.plan([dict(s) for s in w.sequences])[0]
        row = [median_us(lambda: by_key(desc)), median_us(lambda: by_key(desc, stagger=True))]
        with mock.patch.dict(os.environ, {"MASKC_NATIVE": "0"}):
            row += [median_us(lambda: by_key(desc)), median_us(lambda: by_key(desc, stagger=True))]
        print(f"{name:14s} C++ {row[0]:7.0f} -> {row[1]:7.0f} us   numpy {row[2]:7.0f} -> {row[3]:7.0f} us")


if __name__ == "__main__":
    main()
