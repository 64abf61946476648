#!/usr/bin/env bash
# Device calls of the thirtieth session (wheels and BUILDS as in s29-device-call.sh; carry .whl).
# PART=fwdtimeline (BUILDS=ftl BUILD=ftl: a wheel of branch s30-fwd-timeline = main + docs/experiments/s30/
# fwd-timeline.patch): where a forward item's time goes (docs/experiments/s30/fwd_timeline.py).
# PART=both: in one call, BWD_TEST's kernel and backward tests with the backward A/B of BWD_BUILDS (default "main ps",
# under $OUT/bwd), then FWD_TEST's kernel tests with the forward A/B of FWD_BUILDS (default "main fov", under $OUT/fwd;
# the item cost of each with ITEMCOST=1), ROUNDS each.
# Any other PART: docs/experiments/s29-device-call.sh's.
case "${PART:-compare}" in
fwdtimeline)
  source docs/experiments/device-builds.sh
  (use ${BUILD:-ftl}; timeout ${TIMELINE_S:-300} python3 docs/experiments/s30/fwd_timeline.py ${TIMELINE_ARGS:-} 2>&1) \
    | grep -v -i warn | tee $OUT/fwd-timeline.log ;;
both)
  mkdir -p $OUT/bwd $OUT/fwd
  OUT=$OUT/bwd ITEMCOST=0 PART=compare BUILDS="${BWD_BUILDS:-main ps}" TEST=${BWD_TEST:-main} TESTS="tests/gpu/test_kernels.py tests/gpu/test_backward.py" \
    TESTS_S=200 WORKLOADS="rm_shared document causal shared_prompt hstu" bash docs/experiments/s29-device-call.sh 2>&1 | tail -14
  OUT=$OUT/fwd PART=compare BUILDS="${FWD_BUILDS:-main fov}" TEST=${FWD_TEST:-fov} TESTS="tests/gpu/test_kernels.py" TESTS_S=150 FORWARD=1 \
    BACKWARD=0 WORKLOADS="document rm_shared hstu_jagged causal hstu" bash docs/experiments/s29-device-call.sh 2>&1 | tail -22 ;;
*) exec bash docs/experiments/s29-device-call.sh ;;
esac
