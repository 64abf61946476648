"""Summarises an `nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,
clocks_event_reasons.active --format=csv -lms 200` log: over the samples drawing more than 300 W (a kernel
running), the SM clocks, the power and the clock event reasons (0x4: software power cap; 0x20: software thermal
slowdown; 0x40: hardware thermal; 0x80: hardware power brake).

    python docs/experiments/s32/clocks.py clocks.csv
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import Counter


def main(path: str) -> None:
    rows = [r for r in csv.reader(open(path)) if len(r) >= 6 and r[1].strip().endswith("MHz")]
    busy = [r for r in rows if float(r[3].split()[0]) > 300]
    if not busy:
        print(f"{len(rows)} samples, none over 300 W")
        return
    clocks = [int(r[1].split()[0]) for r in busy]
    power = [float(r[3].split()[0]) for r in busy]
    print(f"{len(rows)} samples, {len(busy)} over 300 W: SM clock median {statistics.median(clocks)} MHz, "
          f"min {min(clocks)}, below 1900 MHz in {sum(c < 1900 for c in clocks)}; power median "
          f"{statistics.median(power):.0f} W, max {max(power):.0f} W; max temperature "
          f"{max(int(r[4]) for r in busy)} C")
    print("clock event reasons:", ", ".join(f"{k} x {n}" for k, n in Counter(r[5].strip() for r in busy).most_common()))


if __name__ == "__main__":
    main(sys.argv[1])
