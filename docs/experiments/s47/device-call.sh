#!/usr/bin/env bash
# The forty-seventh session's prepared A/B (carry .whl; wheels from docs/experiments/s47/build-wheels.sh): the
# Hopper forward with its last head group at four heads (fg4) against main.
#   1. the forward kernel under ncu at locked clocks (elapsed cycles; the dK/dV kernel's readings repeated to
#      0.03-0.3% on an H100) for main and fg4, alternating, on each of WORKLOADS, ROUNDS times;
#   2. fg4's forward GPU tests (tests/gpu/test_kernels.py), TESTS_S at most;
#   3. the table last, so that the tool's output tail keeps it.
# Predicted by docs/experiments/s47/forward_tail_model.py: shared_prompt -1.1%, rm_shared -0.6%, document -0.4%
# forward cycles; causal and hstu unchanged by balance, at risk from L2 (four heads' K and V at once at the end).
export TZ=UTC
BUILDS="main fg4" source docs/experiments/device-builds.sh > /dev/null 2>&1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for r in $(seq ${ROUNDS:-2}); do
  order="main fg4"; [ $((r % 2)) = 0 ] && order="fg4 main"
  for w in ${WORKLOADS:-shared_prompt rm_shared document causal hstu}; do for b in $order; do (use $b
    timeout 60 $NCU --section SpeedOfLight -k regex:fwd_sm90a --launch-skip 1 --launch-count 1 python3 bench/probe.py --ncu $w \
      > $OUT/ncu-$b-$w-$r.txt 2>&1
    echo "$b $w round $r: $(grep -E 'Elapsed Cycles' $OUT/ncu-$b-$w-$r.txt | tr -s ' ')") >> $OUT/ncu.txt; done; done
done
(use fg4; timeout ${TESTS_S:-120} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning \
  tests/gpu/test_kernels.py > $OUT/pytest-fg4.log 2>&1; echo "fg4 forward GPU tests: $(tail -1 $OUT/pytest-fg4.log)" >> $OUT/ncu.txt)
cat $OUT/ncu.txt
echo "call took $SECONDS s"
