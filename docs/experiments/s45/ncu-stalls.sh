#!/usr/bin/env bash
# Where main's dK/dV kernel waits, per workload (carry .whl; .whl/main from docs/experiments/s45/build-wheels.sh):
# ncu's warp-state, scheduler and compute-workload sections at locked clocks, one launch each, for WORKLOADS
# (default rm_shared causal: the farthest from its target and the densest), the stall reasons last.
export TZ=UTC
BUILDS=main source docs/experiments/device-builds.sh > /dev/null 2>&1
use main
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for w in ${WORKLOADS:-rm_shared causal}; do
  timeout 90 $NCU --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    -k regex:dkdv --launch-skip 1 --launch-count 1 python3 bench/probe.py --ncu $w > $OUT/ncu-stalls-$w.txt 2>&1
done
for w in ${WORKLOADS:-rm_shared causal}; do echo "== $w"
  grep -E "Elapsed Cycles|Warp Cycles Per Issued|Active Warps Per|Eligible Warps|Issued Warp Per|No Eligible|Executed Ipc A|SM Busy|Issue Slots Busy" \
    $OUT/ncu-stalls-$w.txt | tr -s ' '
  grep -A2 -E "stalled|Stall" $OUT/ncu-stalls-$w.txt | tr -s ' ' | cut -c1-400 | head -12; done
echo "call took $SECONDS s"
