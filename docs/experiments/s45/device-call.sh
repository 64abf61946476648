#!/usr/bin/env bash
# The forty-fifth session's device call (carry .whl; wheels from docs/experiments/s45/build-wheels.sh).
# Call 1 (H100, 10:08 UTC) ran it with every build but main missing from ncu's runs (BUILDS was set too late).
#   0. a smoke run of each build in NCU_BUILDS but main (forward and backward of causal and rm_shared, SMOKE_S);
#   1. the dK/dV kernel under ncu at locked clocks (elapsed cycles; repeatable to 0.1-0.3%) for each of NCU_BUILDS
#      on each of NCU_WORKLOADS (the most telling reading, so first);
#   2. TESTED's backward GPU tests (default rw), then, while time is left, backward probes of main and B (default
#      rw) alternating, ROUNDS rounds (capped clocks);
#      (PHASE2=0: none of it; TESTED= : no tests); SUITE=1: the whole GPU suite on SUITE_BUILD (default main) before it;
#   3. the ncu table and the tests' lines last, so that the tool's output tail keeps them.
export TZ=UTC B=${B:-rw}
BUILDS="main $B ${NCU_BUILDS:-ur sh rw}" source docs/experiments/device-builds.sh > /dev/null 2>&1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
# A build whose kernels hang (a barrier protocol's deadlock) or fail on a forward and backward of causal and
# rm_shared within SMOKE_S (120) s is left out of the rest, rather than costing ncu's timeout on every workload
# (the forty-sixth session: pk's first run on a fresh machine was cut at 60 s; in the next call it took 5 s).
ncu_builds=""
for b in ${NCU_BUILDS:-main ur sh rw}; do
  if [ $b = main ] || (use $b; timeout ${SMOKE_S:-120} python3 bench/probe.py --ncu causal rm_shared > $OUT/smoke-$b.log 2>&1); then
    ncu_builds="$ncu_builds $b"
  else echo "$b: left out, its smoke run failed or hung (rc $?; smoke-$b.log)" >> $OUT/ncu.txt; fi
done
for w in ${NCU_WORKLOADS:-hstu causal rm_shared document}; do for b in $ncu_builds; do (use $b
  timeout 40 $NCU --section SpeedOfLight -k regex:dkdv --launch-skip 1 --launch-count 1 python3 bench/probe.py --ncu $w \
    > $OUT/ncu-$b-$w.txt 2>&1; echo "$b $w (ncu): $(grep -E 'Elapsed Cycles' $OUT/ncu-$b-$w.txt | tr -s ' ')") >> $OUT/ncu.txt; done; done
echo "ncu done at $SECONDS s" >> $OUT/ncu.txt
if [ "${SUITE:-0}" = 1 ]; then sb=${SUITE_BUILD:-main}; (use $sb  # the whole GPU suite on SUITE_BUILD
  timeout ${SUITE_S:-280} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning -rf \
    --durations=10 tests > $OUT/pytest-suite-$sb.log 2>&1
  echo "GPU suite ($sb): $(tail -1 $OUT/pytest-suite-$sb.log)" >> $OUT/ncu.txt
  grep -E "FAILED|ERROR" $OUT/pytest-suite-$sb.log | head -8 >> $OUT/ncu.txt); fi
[ "${PHASE2:-1}" = 1 ] && TESTED=${TESTED-$B} BUILDS="main $B" ROUNDS=${ROUNDS:-3} TESTS_S=${TESTS_S:-90} STOP_AFTER=${STOP_AFTER:-300} \
  WORKLOADS="hstu causal shared_prompt rm_shared document" bash docs/experiments/s40-device-call.sh > $OUT/call.log 2>&1
[ -f $OUT/call.log ] && tail -9 $OUT/call.log
cat $OUT/ncu.txt
echo "call took $SECONDS s"
grep -s "backward tests" $OUT/call.log
