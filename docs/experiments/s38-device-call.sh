#!/usr/bin/env bash
# The thirty-eighth session's device calls (carry .whl; .whl/main = a wheel of main, .whl/deps lark and click).
# PART=tests: the whole GPU suite on main, whose packed calls of document-like masks now run each member as a
# sequence of its own (maskc/plan/members.py), then issue 6's harness on document with the split off
# (MASKC_MEMBERS=0), the "together" reading beside the table's. PART=table: issue 6's table on main with the clocks
# sampled (s32-device-call.sh's PART=clocked).
# PART=last (.whl/dl = main with docs/experiments/s38/bwd-dq-by-last-share.patch): the backward pass hopper_fused_last (dQ rounded by the
# dK/dV CTA whose share lands last; no dq_store kernel): its GPU tests, then issue 6's harness on rm_shared, document
# and causal, the default pass (hopper_fused) and hopper_fused_last alternating, ROUNDS rounds.
export BUILDS="main"
case "${PART:-tests}" in
tests)
  source docs/experiments/device-builds.sh > /dev/null 2>&1
  use main
  timeout ${TESTS_S:-300} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning -rf \
    --durations=10 tests > $OUT/pytest-main.log 2>&1
  echo "tests (main): $(tail -1 $OUT/pytest-main.log)"; grep -E "FAILED|ERROR" $OUT/pytest-main.log | head
  for m in 0 1; do echo "== harness document MASKC_MEMBERS=$m"
    MASKC_MEMBERS=$m timeout 100 python3 bench/harness.py --backward --systems maskc --workloads document \
      > $OUT/harness-members$m.log 2>&1
    grep -v -i warn $OUT/harness-members$m.log | tail -6 | cut -c1-110
  done ;;
table) BUILD=main PART=clocked exec bash docs/experiments/s32-device-call.sh ;;
last)
  export BUILDS="dl"
  source docs/experiments/device-builds.sh > /dev/null 2>&1
  use dl
  timeout ${TESTS_S:-200} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning -rf \
    tests/gpu/test_backward.py -k "hopper_fused_last" > $OUT/pytest-dl.log 2>&1
  echo "tests (dl, hopper_fused_last): $(tail -1 $OUT/pytest-dl.log)"; grep -E "FAILED|ERROR|Error" $OUT/pytest-dl.log | head -8
  for r in $(seq ${ROUNDS:-2}); do for kernels in hopper_fused hopper_fused_last; do
    timeout 120 python3 bench/harness.py --backward --systems maskc --backward-kernels $kernels \
      --workloads ${WORKLOADS:-rm_shared document causal} > $OUT/harness-$kernels-$r.log 2>&1
    echo "== $kernels round $r"; grep -E "backward ok|FAIL|err" $OUT/harness-$kernels-$r.log | grep -v -i warn | \
      sed -E 's/ +maskc +ok +/ fwd /; s/err [^|]*\| backward ok//; s/dQ err.*//' | cut -c1-120
  done; done ;;
esac
