#!/usr/bin/env bash
# The dK/dV kernel of each build in BUILDS under `ncu --set full` (clocks locked to base, so the power cap is out of
# the picture) on each workload in WORKLOADS: $OUT/ncu-<build>-<workload>.txt, then a table of the metrics that
# tell where a build's cycles go (duration and cycles, DRAM, L2 hit rate, issue activity, instructions).
# SASS=1: instead, each kernel's SASS with its stall samples ($OUT/sass-<build>-<workload>.csv, from a report with
# --import-source), grouped by bench/ncu_sass_groups.py. Wheels as in s29-device-call.sh; carry .whl.
source docs/experiments/device-builds.sh
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
if [ "${SASS:-0}" = 1 ]; then
  for w in ${WORKLOADS:-shared_prompt}; do for b in ${BUILDS:-stag ps32n}; do (use $b
    timeout ${NCU_S:-200} $NCU --set full --import-source yes -k regex:dkdv --launch-skip ${SKIP:-1} --launch-count 1 \
      -o /tmp/rep-$b-$w -f python3 bench/probe.py --ncu $w > /dev/null 2>&1
    $NCU -i /tmp/rep-$b-$w.ncu-rep --page source --csv --print-source sass > $OUT/sass-$b-$w.csv 2>&1
    echo "== $b $w"; python3 bench/ncu_sass_groups.py $OUT/sass-$b-$w.csv 2>&1 | tail -${GROUP_LINES:-14}); done; done
  exit 0
fi
for w in ${WORKLOADS:-shared_prompt full}; do for b in ${BUILDS:-stag ps32n}; do (use $b
  timeout ${NCU_S:-200} $NCU --set full -k regex:dkdv --launch-skip ${SKIP:-1} --launch-count 1 \
    python3 bench/probe.py --ncu $w > $OUT/ncu-$b-$w.txt 2>&1; echo "$b $w: rc $?"); done; done
python3 docs/experiments/s32/ncu_table.py $OUT/ncu-*.txt
