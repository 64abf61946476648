"""Stall samples of a kernel's SASS from ncu, grouped by how often each instruction ran: instructions that ran
the same number of times are one block of code (the main loop, a partial tile's mask, a work item's prologue
and epilogue), so the groups say which block the warps spend their samples in (a development probe; docs/
training.md's eighteenth session used it to price the dK/dV kernel's mask).

    ncu --set full --import-source yes -k regex:"fwd_sm90a|dkdv" -o rep python3 bench/probe.py --ncu rm_shared
    ncu -i rep.ncu-rep --page source --csv --print-source sass > rep.csv
    python bench/ncu_sass_groups.py rep.csv [more.csv ...]

The samples are of every warp (the producer and the dQ writer too), so a group's share is not its share of the
kernel's time; compare groups of the consumers' code with each other.
"""

from __future__ import annotations

import collections
import csv
import sys


def kernels(path: str) -> dict[str, list[dict]]:
    """Each kernel's SASS rows of an `ncu --page source --csv` export."""
    found: dict[str, list[dict]] = {}
    kernel = header = None
    with open(path) as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                kernel, header = row[1], None
                found[kernel] = []
            elif row[0] == "Address":
                header = row
            elif header and kernel is not None:
                found[kernel].append(dict(zip(header, row)))
    return found


def number(text: str) -> float:
    return float(text.replace(",", "") or 0)


def report(kernel: str, rows: list[dict], groups: int = 8) -> None:
    samples = sum(number(r["Warp Stall Sampling (All Samples)"]) for r in rows)
    executed = sum(number(r["Instructions Executed"]) for r in rows)
    reasons = [h for h in rows[0] if h.startswith("stall_") and "Not Issued" not in h]
    by_reason = collections.Counter({h: sum(number(r[h]) for r in rows) for h in reasons})
    print(f"{kernel}: {len(rows)} SASS instructions, {samples:.0f} stall samples")
    print("  by reason: " + ", ".join(f"{h[6:]} {100 * v / samples:.1f}%" for h, v in by_reason.most_common(8)))
    by_count = collections.defaultdict(lambda: [0, 0.0, 0.0])  # times run -> instructions, samples, executions
    for r in rows:
        group = by_count[number(r["Instructions Executed"])]
        group[0] += 1
        group[1] += number(r["Warp Stall Sampling (All Samples)"])
        group[2] += number(r["Instructions Executed"])
    print("  instructions grouped by how often each ran (warp-level executions), the largest shares of samples:")
    for times, (count, s, e) in sorted(by_count.items(), key=lambda kv: -kv[1][1])[:groups]:
        print(f"    ran {times:10.0f} times: {count:4d} instructions, {100 * s / samples:5.1f}% of samples, "
              f"{100 * e / executed:5.1f}% of executed")


def main() -> None:
    for path in sys.argv[1:]:
        for kernel, rows in kernels(path).items():
            report(kernel, rows)


if __name__ == "__main__":
    main()
