#!/usr/bin/env bash
# Device calls of the thirty-second session (wheels and BUILDS as in s29-device-call.sh; carry .whl).
# PART=clocked (BUILD, then BUILDS for the A/B): issue 6's table on BUILD with the GPU's clocks, power and clock
# event reasons sampled every 200 ms ($OUT/clocks.csv, summarised by docs/experiments/s32/clocks.py), then the
# backward probes of BUILDS (ROUNDS rounds, WORKLOADS), the sampler still running.
# PART=producer: is the fused dK/dV kernel's producer warp on the consumers' path? Backward probes, with the clocks
# sampled, of main32 (a wheel of main at 55ee5cb), pdi (branch s32-producer-delay at 3c7a534: the producer idles 300
# cycles a step after its wait for a free stage, before the Q and dO copies) and pda (de03f24: 300 cycles before it
# publishes the step's statistics); docs/experiments/s32/bwd-producer-delay.patch is the second. A step is ~3,900
# cycles (s31's counters): a build 300 cycles a step slower is ~7% slower where the producer is on the path.
# Any other PART: docs/experiments/s30-device-call.sh's.
sample_clocks() {  # in the background, into $OUT/clocks.csv; its pid in $sampler
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv -lms 200 > $OUT/clocks.csv 2>&1 & sampler=$!
}
case "${PART:-clocked}" in
clocked)
  sample_clocks
  BUILDS="${BUILDS:-main}" PART=table bash docs/experiments/s29-device-call.sh 2>&1 | tail -${TABLE_LINES:-22}
  python3 docs/experiments/s32/clocks.py $OUT/clocks.csv | tee $OUT/clocks-table.txt
  if [ "${ROUNDS:-0}" != 0 ]; then
    PART=compare bash docs/experiments/s29-device-call.sh 2>&1 | tail -8
    python3 docs/experiments/s32/clocks.py $OUT/clocks.csv | tee $OUT/clocks-all.txt
  fi
  kill $sampler ;;
producer)
  sample_clocks
  PART=compare BUILDS="${BUILDS:-main32 pdi pda}" ROUNDS=${ROUNDS:-2} \
    WORKLOADS="${WORKLOADS:-shared_prompt document causal full}" bash docs/experiments/s29-device-call.sh 2>&1 | tail -6
  python3 docs/experiments/s32/clocks.py $OUT/clocks.csv | tee $OUT/clocks-all.txt
  kill $sampler ;;
*) exec bash docs/experiments/s30-device-call.sh ;;
esac
