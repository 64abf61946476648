#!/usr/bin/env bash
# Device calls prepared in the thirty-first session (wheels as in s29-device-call.sh; carry .whl).
# PART=rotated: the backward's GPU tests on `rot` (branch s31-rotated-visits: main's fused dK/dV kernel walks each key
# tile's query tiles from the (k_tile mod count)-th on) and on `psrot` (branch s31-pers-rot: the persistent kernel,
# the same), then backward probes of main, rot, ps and psrot, ROUNDS rounds with the order alternating. The question:
# main's full backward ran at 515 TFLOP/s and the persistent kernel's at 577 (H100, s31 call 8); do the CTAs of a
# head reducing into one query tile's dq_accum at once (main's order) cost that?
# PART=waits (BUILDS="wm wp"): docs/experiments/s31/bwd_waits.py on each (--persistent for wp and wpi).
# Any other PART: docs/experiments/s30-device-call.sh's.
case "${PART:-rotated}" in
rotated)
  for t in ${TESTS_ON:-rot psrot}; do
    OUT=$OUT PART=compare BUILDS=$t TEST=$t TESTS=tests/gpu/test_backward.py TESTS_S=${TESTS_S:-120} ROUNDS=0 \
      bash docs/experiments/s29-device-call.sh 2>&1 | grep -E "^tests|^FAILED"
  done
  PART=compare BUILDS="${BUILDS:-main rot ps psrot}" ROUNDS=${ROUNDS:-2} \
    WORKLOADS="${WORKLOADS:-full shared_prompt causal document hstu rm_shared}" bash docs/experiments/s29-device-call.sh 2>&1 | tail -8 ;;
waits)
  source docs/experiments/device-builds.sh
  for b in ${BUILDS:-wm wp}; do (use $b; a=""; [ $b != wm ] && a=--persistent
    timeout 120 python3 docs/experiments/s31/bwd_waits.py $a 2>&1 | grep -v -i warn) | tee -a $OUT/waits.log; done ;;
*) exec bash docs/experiments/s30-device-call.sh ;;
esac
