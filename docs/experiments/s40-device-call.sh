#!/usr/bin/env bash
# The fortieth session's device call (carry .whl; .whl/main = a wheel of main, .whl/deps lark and click; hq, hr, hb,
# hp = main with docs/experiments/s40/bwd-half-l2-timing-only.patch and its flags TIMING_HALF_Q,
# TIMING_HALF_REDUCTIONS, both, TIMING_PRIVATE_REDUCTIONS: wrong results on purpose). What halving the fused dK/dV
# kernel's L2 traffic (Q and dO copies, dQ's bulk reductions) would give the backward under the power cap: backward
# probes alternating over BUILDS for ROUNDS rounds on WORKLOADS, the clocks sampled, and each build's clock and
# power from its own samples. TESTED: builds whose backward GPU tests run first (st = main with
# docs/experiments/s40/bwd-stmatrix-stats-pairs.patch: the dS^T stores by stmatrix and each query's LSE and delta
# side by side; the consumers' step 499 -> 464 SASS instructions).
export TZ=UTC BUILDS="${BUILDS:-main hq hr hb}"
source docs/experiments/device-builds.sh > /dev/null 2>&1
for b in ${TESTED:-}; do (use $b
  timeout ${TESTS_S:-150} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning -rf \
    tests/gpu/test_backward.py > $OUT/pytest-$b.log 2>&1
  echo "backward tests ($b): $(tail -1 $OUT/pytest-$b.log)"; grep -E "^FAILED|Error" $OUT/pytest-$b.log | head -6); done
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 200 > $OUT/clocks.csv 2>&1 & sampler=$!
for round in $(seq ${ROUNDS:-2}); do order=$BUILDS; [ $((round % 2)) = 0 ] && order=$(echo $BUILDS | tr ' ' '\n' | tac | tr '\n' ' ')
  for b in $order; do
    [ $SECONDS -gt ${STOP_AFTER:-480} ] && { echo "(no time for $b round $round)"; continue; }
    start=$(date +%s.%N)
    (use $b; echo "== $b round $round"; timeout 150 python3 bench/probe.py --backward \
      ${WORKLOADS:-causal shared_prompt hstu rm_shared document}) 2>&1 | grep -v -i warn >> $OUT/probes.log
    echo "$b $start $(date +%s.%N)" >> $OUT/phases.txt
  done
done
kill $sampler
python3 docs/experiments/s40/clocks_by_phase.py $OUT/clocks.csv $OUT/phases.txt | tee $OUT/clocks-by-build.txt
python3 docs/experiments/s29/summarize_probes.py $OUT/probes.log | tee $OUT/probes-summary.txt
echo "call took $SECONDS s"
