#!/usr/bin/env bash
# The thirty-ninth session's device calls (carry .whl; .whl/main = a wheel of main, .whl/deps lark and click,
# .whl/dl = main with docs/experiments/s38/bwd-dq-by-last-share.patch (hopper_fused_last), .whl/dz = dl whose
# hopper_fused_last keeps dq_accum and dq_count zero between calls (branch s39-dq-zero: prep zeroes nothing)).
# Run with the patch applied to the working tree (its GPU tests of hopper_fused_last).
# PART=last: the GPU tests of hopper_fused_last of dl and dz, then issue 6's harness on WORKLOADS, alternating
# dl's hopper_fused (main's default pass), dl's hopper_fused_last and dz's hopper_fused_last, up to ROUNDS rounds
# while the call has time. On an H200, issue 6's table (main) comes first.
export BUILDS="dl dz"
source docs/experiments/device-builds.sh > /dev/null 2>&1
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ -z "${NO_TABLE:-}" ]; then
  echo "== H200: issue 6's table first"; ( PART=table timeout 330 bash docs/experiments/s38-device-call.sh 2>&1 | tail -22 )
  export BUILDS="dl dz" TESTED=dz; source docs/experiments/device-builds.sh > /dev/null 2>&1
fi
for b in ${TESTED:-dl dz}; do use $b
  timeout ${TESTS_S:-150} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning -rf \
    tests/gpu/test_backward.py -k "hopper_fused_last" > $OUT/pytest-$b.log 2>&1
  echo "tests ($b, hopper_fused_last): $(tail -1 $OUT/pytest-$b.log)"; grep -E "FAILED|ERROR|Error" $OUT/pytest-$b.log | head -6
done
for r in $(seq ${ROUNDS:-2}); do
  [ $SECONDS -gt ${STOP_AFTER:-420} ] && { echo "(no time for round $r)"; break; }
  for run in dl:hopper_fused dl:hopper_fused_last dz:hopper_fused_last; do
    b=${run%%:*}; kernels=${run#*:}; use $b
    timeout 100 python3 bench/harness.py --backward --systems maskc --backward-kernels $kernels \
      --workloads ${WORKLOADS:-rm_shared document causal} > $OUT/harness-$b-$kernels-$r.log 2>&1
    echo "== $b $kernels round $r"; grep -E "backward ok|FAIL|err" $OUT/harness-$b-$kernels-$r.log | grep -v -i warn | \
      sed -E 's/ +maskc +ok +/ fwd /; s/err [^|]*\| backward ok//; s/dQ err.*//' | cut -c1-120
  done
done
echo "call took $SECONDS s"
