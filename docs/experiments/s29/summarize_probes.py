"""Per workload and direction, each build's TFLOP/s over the rounds of a probes log (s29-device-call.sh
PART=compare), and each build's median against the first build's, so that an A/B reads at a glance.

    python docs/experiments/s29/summarize_probes.py probes.log
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict

HEADER = re.compile(r"^== (\S+) round (\d+)")
ROW = re.compile(r"^(\S+)\s+(fwd|bwd)\s+([\d.]+) TFLOP/s")


def read(lines) -> tuple[list[str], dict]:
    """The builds in their first order, and {(workload, direction): {build: [TFLOP/s per round]}}."""
    builds, runs, build = [], defaultdict(lambda: defaultdict(list)), None
    for line in lines:
        if m := HEADER.match(line):
            build = m.group(1)
            if build not in builds:
                builds.append(build)
        elif (m := ROW.match(line)) and build is not None:
            runs[(m.group(1), m.group(2))][build].append(float(m.group(3)))
    return builds, runs


def main() -> None:
    with open(sys.argv[1]) as f:
        builds, runs = read(f)
    if not builds:
        raise SystemExit(f"no '== BUILD round N' blocks in {sys.argv[1]}")
    base = builds[0]
    print(f"{'workload':16s} dir  " + "  ".join(f"{b + ' (rounds)':>28s}" for b in builds) + "  median vs " + base)
    for (workload, direction), per_build in runs.items():
        cells = ["/".join(f"{x:.1f}" for x in per_build.get(b, [])) or "-" for b in builds]
        ratios = [statistics.median(per_build[b]) / statistics.median(per_build[base]) - 1
                  for b in builds[1:] if per_build.get(b) and per_build.get(base)]
        print(f"{workload:16s} {direction}  " + "  ".join(f"{c:>28s}" for c in cells) + "  "
              + " ".join(f"{r:+.1%}" for r in ratios))


if __name__ == "__main__":
    main()
