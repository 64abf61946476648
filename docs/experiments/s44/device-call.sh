#!/usr/bin/env bash
# The forty-fourth session's device call for a dK/dV producer change (carry .whl; wheels from
# docs/experiments/s44/build-wheels.sh: main, rg, un). B (default un): the build to measure against main.
#   1. B's backward GPU tests, then backward probes of main and B alternating, ROUNDS rounds (capped clocks);
#   2. the dK/dV kernel under ncu at locked clocks (elapsed cycles; repeatable to 0.1-0.3%) for each workload in
#      NCU_WORKLOADS, main's too unless NCU_MAIN=0 (call 4 has main's hstu and causal, on another card);
#   3. the tests' line last, so that the tool's output tail keeps it (call 5, rg, lost it).
# Call 5 ran the first version of this script with B=rg, NCU_WORKLOADS="hstu causal", NCU_MAIN=0.
export TZ=UTC B=${B:-un}
TESTED=$B BUILDS="main $B" ROUNDS=${ROUNDS:-3} TESTS_S=60 STOP_AFTER=${STOP_AFTER:-160} \
  WORKLOADS="hstu causal shared_prompt rm_shared document" bash docs/experiments/s40-device-call.sh > $OUT/call.log 2>&1
tail -9 $OUT/call.log
source docs/experiments/device-builds.sh > /dev/null 2>&1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
builds=$B; [ "${NCU_MAIN:-1}" = 1 ] && builds="main $B"
for w in ${NCU_WORKLOADS:-hstu rm_shared document causal}; do for b in $builds; do (use $b
  timeout 40 $NCU --section SpeedOfLight -k regex:dkdv --launch-skip 1 --launch-count 1 python3 bench/probe.py --ncu $w \
    > $OUT/ncu-$b-$w.txt 2>&1; echo "$b $w (ncu): $(grep -E 'Elapsed Cycles' $OUT/ncu-$b-$w.txt | tr -s ' ')"); done; done
grep "backward tests" $OUT/call.log
