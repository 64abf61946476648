"""Per phase of a device call (lines `NAME START END` in epoch seconds), the SM clock and power of the
`nvidia-smi ... -lms 200` samples (docs/experiments/s32/clocks.py's format) taken inside it and drawing over 300 W:
whether a build that moves fewer bytes runs at a higher clock under the power cap.

    python docs/experiments/s40/clocks_by_phase.py clocks.csv phases.txt
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict
from datetime import datetime, timezone


def main(clocks_path: str, phases_path: str) -> None:
    samples = []
    for r in csv.reader(open(clocks_path)):
        if len(r) < 6 or not r[1].strip().endswith("MHz"):
            continue
        t = datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()
        samples.append((t, int(r[1].split()[0]), float(r[3].split()[0]), r[5].strip()))
    by_name = defaultdict(list)
    for line in open(phases_path):
        name, start, end = line.split()
        by_name[name] += [s for s in samples if float(start) <= s[0] <= float(end) and s[2] > 300]
    for name, busy in by_name.items():
        if busy:
            capped = sum(s[3] == "0x0000000000000004" for s in busy)
            print(f"{name:8s} {len(busy):3d} busy samples: SM clock median {statistics.median(s[1] for s in busy):.0f} MHz, "
                  f"power median {statistics.median(s[2] for s in busy):.0f} W, power-capped in {capped}")


if __name__ == "__main__":
    main(*sys.argv[1:])
