#!/usr/bin/env bash
# Device calls prepared in the twenty-seventh session (which had no device). Wheels as for s26-device-call.sh:
# `pip wheel . --no-deps -w .whl/<build>` for each build in BUILDS, lark and click in .whl/deps; carry .whl.
# PART=first (BUILDS=main BUILD=main): s26's first call (the GPU suite, the random masks at depth, the item cost;
# ~8 minutes), then the GPU planner's check. PART=gpuplanner: docs/experiments/gpu_planner/gpu_check.py (kernels.cu
# on the GPU against the host planner: plan_identical's cases, then packed 32K batches with --time; ~1 minute).
# PART=newvalues (BUILDS="base main", base = 65cb0de): the host time of new runtime values on this machine's
# host, without and with plans made ahead, alternating (ROUNDS rounds).
source docs/experiments/device-builds.sh  # (the GPU line, BUILDS installed, use BUILD)
case "${PART:-first}" in
first)
  PART=first bash docs/experiments/s26-device-call.sh; PART=gpuplanner bash "$0" ;;
gpuplanner)
  (use ${BUILD:-main}; timeout ${GPUPLAN_S:-120} python3 docs/experiments/gpu_planner/gpu_check.py --random 2 2>&1 | tail -8
   timeout ${GPUPLAN_S:-120} python3 docs/experiments/gpu_planner/gpu_check.py --packed --random 3 --time 2>&1 | tail -8) \
    | tee $OUT/gpu-planner.log ;;
newvalues)
  for round in $(seq ${ROUNDS:-3}); do for b in ${BUILDS}; do for ahead in "" --ahead; do (use $b; echo "== $b round $round $ahead"
      timeout 60 python3 bench/newvalues_cpu.py --counts 12 64 --workloads document rm_shared hstu_jagged $ahead 2>&1 | tail -4) \
      | tee -a $OUT/newvalues.log; done; done; done ;;
esac
