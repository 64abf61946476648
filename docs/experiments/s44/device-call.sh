#!/usr/bin/env bash
# The forty-fourth session's last call (carry .whl; .whl/main = a wheel of main, .whl/rg = main with
# docs/experiments/s44/bwd-producer-40-registers.patch: the dK/dV kernel's producer warpgroup at 40 registers and
# its consumers at 232, instead of 24 / 240, which takes the producer's per-step spills away on every mask with
# mask rows). rg's backward GPU tests, then backward probes of both builds alternating (capped clocks), then rg's
# dK/dV kernel under ncu at locked clocks on hstu and causal (elapsed cycles: call 4 has main's).
# rg's wheel, from a clean tree: git apply docs/experiments/s44/bwd-producer-40-registers.patch &&
#   pip wheel -q . --no-deps -w .whl/rg; git checkout -- templates
# (Since call 5 the script keeps the first call's output in $OUT/call.log and prints the tests' line last.)
export TZ=UTC
TESTED=rg BUILDS="main rg" ROUNDS=${ROUNDS:-3} TESTS_S=60 STOP_AFTER=${STOP_AFTER:-120} \
  WORKLOADS="hstu causal shared_prompt rm_shared document" bash docs/experiments/s40-device-call.sh > $OUT/call.log 2>&1
tail -9 $OUT/call.log
source docs/experiments/device-builds.sh > /dev/null 2>&1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for w in hstu causal; do (use rg
  timeout 40 $NCU --section SpeedOfLight -k regex:dkdv --launch-skip 1 --launch-count 1 python3 bench/probe.py --ncu $w \
    > $OUT/ncu-rg-$w.txt 2>&1; echo "rg $w (ncu): $(grep -E 'Elapsed Cycles' $OUT/ncu-rg-$w.txt | tr -s ' ')"); done
grep "backward tests" $OUT/call.log  # last, so that the tool's output tail keeps it (the forty-fourth session lost it)
