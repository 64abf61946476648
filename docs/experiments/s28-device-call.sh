#!/usr/bin/env bash
# Device calls of the twenty-eighth session. Wheels as for s26-device-call.sh (`pip wheel . --no-deps -w
# .whl/<build>`, lark and click in .whl/deps); carry .whl.
# PART=issue5 (BUILD=main): issue 5's forward table against Flex-Triton and SDPA in one run, the short-N sweep and
# the first call (bench/harness.py), then the host time of new runtime values on this machine's host.
source docs/experiments/device-builds.sh  # (the GPU line, BUILDS installed, use BUILD)
case "${PART:-issue5}" in
issue5)
  (use ${BUILD:-main}; timeout ${HARNESS_S:-420} python3 bench/harness.py --systems maskc flex-triton sdpa-flash \
      --sweep --first-call --json $OUT/harness-forward.json --png $OUT/harness-forward.png 2>&1) | tee $OUT/harness-forward.log | tail -40 ;;
newvalues)
  for round in $(seq ${ROUNDS:-2}); do (use ${BUILD:-main}; echo "== round $round"
      timeout 60 python3 bench/newvalues_cpu.py --counts 12 64 --workloads document rm_shared hstu_jagged 2>&1 | tail -4
      timeout 60 python3 bench/newvalues_cpu.py --counts 12 64 --workloads document rm_shared hstu_jagged --ahead 2>&1 | tail -4) \
      | tee -a $OUT/newvalues.log; done ;;
esac
# PART=timeline (BUILDS=tl, a wheel with docs/experiments/s28/bwd-timeline.patch applied): where a dK/dV CTA's time
# goes (docs/experiments/s28/timeline.py).
case "${PART}" in
timeline)
  (use ${BUILD:-tl}; timeout ${TIMELINE_S:-300} python3 docs/experiments/s28/timeline.py ${TIMELINE_ARGS:-} 2>&1) | tee $OUT/timeline.log ;;
esac
