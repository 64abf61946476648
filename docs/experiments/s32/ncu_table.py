"""A few metrics of `ncu --set full` text reports side by side (one column a report): where a dK/dV kernel's
cycles go. `python docs/experiments/s32/ncu_table.py ncu-*.txt`"""

from __future__ import annotations

import re
import sys
from pathlib import Path

METRICS = ("Duration", "SM Frequency", "Elapsed Cycles", "DRAM Throughput", "L2 Hit Rate", "L1/TEX Hit Rate",
           "L2 Cache Throughput", "Memory Throughput", "Compute (SM) Throughput", "Executed Ipc Active",
           "Issue Slots Busy", "Executed Instructions", "No Eligible", "Active Warps Per Scheduler",
           "Eligible Warps Per Scheduler", "Warp Cycles Per Issued Instruction", "Registers Per Thread",
           "Local Memory Spilling Requests", "Mem Busy", "Max Bandwidth", "L2 Compression Success Rate")


def values(path: Path) -> dict:
    found = {}
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"\s+(\S.*?\S)\s{2,}(\S+)?\s+([\d,.]+)\s*$", line)
        if m and m.group(1) in METRICS and m.group(1) not in found:
            found[m.group(1)] = m.group(3) + (f" {m.group(2)}" if m.group(2) else "")
    return found


def main(paths: list[str]) -> None:
    reports = [(Path(p).stem.removeprefix("ncu-"), values(Path(p))) for p in paths]
    print(f"{'metric':36s}" + "".join(f"{name:>24s}" for name, _ in reports))
    for metric in METRICS:
        print(f"{metric:36s}" + "".join(f"{v.get(metric, '-'):>24s}" for _, v in reports))


if __name__ == "__main__":
    main(sys.argv[1:])
