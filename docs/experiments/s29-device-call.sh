#!/usr/bin/env bash
# Device calls of the twenty-ninth session. Wheels as for s26-device-call.sh (`pip wheel . --no-deps -w
# .whl/<build>`, lark and click in .whl/deps); carry .whl.
# PART=compare (BUILDS="main stg", TEST=stg): the backward's GPU tests on TEST, then backward probes (and forward
# ones with FORWARD=1; BACKWARD=0: none of the backward's; PROBE_ARGS: more of bench/probe.py's options, e.g.
# "--head-dim 64" or "--backward-kernels hopper") alternating over BUILDS for ROUNDS rounds, then the item cost on
# each build (ITEMCOST=1).
# PART=suite (BUILD): the whole GPU suite. PART=table (BUILD): issue 6's table (bench/harness.py --backward).
source docs/experiments/device-builds.sh  # (the GPU line, BUILDS installed, use BUILD)
case "${PART:-compare}" in
compare)
  [ -n "${TEST:-}" ] && (use $TEST; timeout ${TESTS_S:-240} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning \
      -rf ${TESTS:-tests/gpu/test_backward.py} > $OUT/pytest-$TEST.log 2>&1
    echo "tests ($TEST): $(tail -1 $OUT/pytest-$TEST.log)"; grep -E "^FAILED" $OUT/pytest-$TEST.log | head)
  # Rounds alternate the builds' order (A B, B A, ...): the cards' clocks drift down over a call (the H200's
  # probes fell 2% from round 1 to 2 on both builds in call 3), which favoured the build timed first.
  for round in $(seq ${ROUNDS:-2}); do order=$BUILDS; [ $((round % 2)) = 0 ] && order=$(echo $BUILDS | tr ' ' '\n' | tac | tr '\n' ' ')
    for b in $order; do (use $b; echo "== $b round $round"
      [ "${FORWARD:-0}" = 1 ] && timeout 150 python3 bench/probe.py ${PROBE_ARGS:-} ${WORKLOADS:-rm_shared document hstu_jagged causal shared_prompt hstu}
      [ "${BACKWARD:-1}" = 1 ] && timeout 150 python3 bench/probe.py --backward ${PROBE_ARGS:-} ${WORKLOADS:-rm_shared document hstu_jagged causal shared_prompt hstu}) 2>&1 \
      | grep -v -i warn | tee -a $OUT/probes.log; done; done
  python3 docs/experiments/s29/summarize_probes.py $OUT/probes.log | tee $OUT/probes-summary.txt
  [ "${ITEMCOST:-0}" = 1 ] && for b in ${BUILDS}; do (use $b; echo "== $b"; timeout ${ITEM_S:-120} python3 docs/experiments/s26/item_cost.py 2>&1 | grep -v -i warn) | tee -a $OUT/item-cost.log; done ;;
suite)
  (use ${BUILD:-main}; timeout ${SUITE_S:-540} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning -rf tests/gpu \
     > $OUT/pytest-gpu-suite.log 2>&1; echo "GPU suite (${BUILD:-main}): $(tail -1 $OUT/pytest-gpu-suite.log)"; grep -E "^FAILED" $OUT/pytest-gpu-suite.log | head) ;;
table)
  (use ${BUILD:-main}; timeout ${HARNESS_S:-540} python3 bench/harness.py --backward --systems maskc \
      --workloads ${WORKLOADS:-causal shared_prompt hstu document rm_shared clear clear_text} --json $OUT/harness-backward.json 2>&1) \
      | tee $OUT/harness-backward.log | tail -30 ;;
esac
