"""Timing helpers shared by the host-time probes (bench/percall.py, percall_cpu.py, checked_cpu.py)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def us_per_call(fn: Callable[[], object], inner: int, outer: int, warmup: int = 0,
                before_each_loop: Callable[[], object] = lambda: None) -> float:
    """The median over `outer` loops of `inner` calls of `fn`, in us per call, after `warmup` untimed calls;
    `before_each_loop` runs untimed before each loop (a GPU synchronisation, say)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(outer):
        before_each_loop()
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - start) / inner * 1e6)
    return statistics.median(times)
