#!/usr/bin/env bash
# Issue 6's table, TABLES times in one call (carry .whl; .whl/main a wheel of main: `source
# docs/experiments/wheel-builds.sh; wheel main`): bench/harness.py --backward --systems maskc on WORKLOADS, every
# output and dQ checked against float32 first, the clocks sampled every 200 ms. One table moved 1-1.5% between
# calls on the H200 (docs/benchmarks.md, thirty-ninth session), so one call reads it more than once. The card's
# name heads the summary: the targets are H200 figures, an H100's table is a cross-check only.
export TZ=UTC
source docs/experiments/device-builds.sh > /dev/null 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 200 > $OUT/clocks.csv 2>&1 & sampler=$!
W="${WORKLOADS:-causal shared_prompt hstu document rm_shared clear clear_text}"
for t in $(seq ${TABLES:-2}); do (use main
  timeout ${HARNESS_S:-250} python3 bench/harness.py --backward --systems maskc --workloads $W \
    --json $OUT/table$t.json > $OUT/table$t.log 2>&1; echo "table $t done at $SECONDS s"); done
kill $sampler
python3 docs/experiments/s32/clocks.py $OUT/clocks.csv > $OUT/clocks-table.txt 2>&1
python3 - $OUT/table*.log <<'PY'
import re, sys
TARGETS = {"causal": 600, "shared_prompt": 580, "hstu": 590, "document": 480, "rm_shared": 450, "clear": 150,
           "clear_text": 250}
LINE = re.compile(r"^(\w+)\s+maskc\s+ok\s+([\d.]+) TFLOP/s.*fwd\+bwd ([\d.]+) TFLOP/s.*?bwd ([\d.]+) TFLOP/s")
rows, heading = {}, "?"
for path in sys.argv[1:]:
    for line in open(path):
        if " | torch " in line:
            heading = line.strip()  # the harness's first line: the card, the versions, the shape
        if m := LINE.match(line):
            rows.setdefault(m[1], []).append((m[2], m[3], m[4]))
print(heading)
print("fwd+bwd TFLOP/s per table (forward / backward alone), target")
for w, got in rows.items():
    print(f"{w:14s} " + "  ".join(f"{fb} ({f} / {b})" for f, fb, b in got) + f"  target {TARGETS.get(w, '-')}")
PY
grep -hE "FAIL|rror" $OUT/table*.log | head -5
tail -3 $OUT/clocks-table.txt
echo "call took $SECONDS s"
