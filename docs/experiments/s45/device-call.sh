#!/usr/bin/env bash
# The forty-fifth session's device call (carry .whl; wheels from docs/experiments/s45/build-wheels.sh).
#   1. TESTED's backward GPU tests (default ur), then backward probes of main and B (default ur) alternating,
#      ROUNDS rounds (capped clocks);
#   2. the dK/dV kernel under ncu at locked clocks (elapsed cycles; repeatable to 0.1-0.3%) for each of NCU_BUILDS
#      on each of NCU_WORKLOADS;
#   3. the tests' lines last, so that the tool's output tail keeps them.
export TZ=UTC B=${B:-ur}
TESTED=${TESTED:-$B} BUILDS="main $B" ROUNDS=${ROUNDS:-3} TESTS_S=60 STOP_AFTER=${STOP_AFTER:-200} \
  WORKLOADS="hstu causal shared_prompt rm_shared document" bash docs/experiments/s40-device-call.sh > $OUT/call.log 2>&1
tail -9 $OUT/call.log
source docs/experiments/device-builds.sh > /dev/null 2>&1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for w in ${NCU_WORKLOADS:-hstu rm_shared document causal}; do for b in ${NCU_BUILDS:-main un rk ur}; do (use $b
  timeout 40 $NCU --section SpeedOfLight -k regex:dkdv --launch-skip 1 --launch-count 1 python3 bench/probe.py --ncu $w \
    > $OUT/ncu-$b-$w.txt 2>&1; echo "$b $w (ncu): $(grep -E 'Elapsed Cycles' $OUT/ncu-$b-$w.txt | tr -s ' ')"); done; done
echo "call took $SECONDS s"
grep "backward tests" $OUT/call.log
