#!/usr/bin/env bash
# Device calls of the thirty-third session (carry .whl; wheels as for s29-device-call.sh).
# PART=compare (default): s29-device-call.sh's compare (BUILDS, TEST, ROUNDS, WORKLOADS, PROBE_ARGS) with the GPU's
#   clocks sampled, summarised last (docs/experiments/s32/clocks.py). Calls 2, 3, 6, 8, e.g.
#   BUILDS="main32 pre" TEST=pre ROUNDS=3 WORKLOADS="shared_prompt document causal full rm_shared hstu".
# PART=headdims: main32 against pre at head dims 64 and 256 (call 7), two rounds each.
# Any other PART: docs/experiments/s32-device-call.sh's.
case "${PART:-compare}" in
compare)
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv -lms 200 > $OUT/clocks.csv 2>&1 & sampler=$!
  PART=compare bash docs/experiments/s29-device-call.sh 2>&1 | tail -12
  python3 docs/experiments/s32/clocks.py $OUT/clocks.csv
  kill $sampler ;;
headdims)
  for hd in 64 256; do
    PART=compare BUILDS="${BUILDS:-main32 pre}" ROUNDS=2 PROBE_ARGS="--head-dim $hd" \
      WORKLOADS="${WORKLOADS:-document rm_shared causal shared_prompt}" bash docs/experiments/s29-device-call.sh 2>&1 | tail -5
    mv $OUT/probes.log $OUT/probes-hd$hd.log; mv $OUT/probes-summary.txt $OUT/probes-summary-hd$hd.txt
  done ;;
*) exec bash docs/experiments/s32-device-call.sh ;;
esac
