#!/usr/bin/env bash
# The fortieth session's paired-kernel call (carry .whl; .whl/main = a wheel of main, .whl/deps lark and click,
# .whl/pr = a wheel of main with docs/experiments/s40/bwd-paired-causal-prototype.patch applied (branch s40-pair),
# then `#define MASKC_PAIRED 1` in templates/sm90a/attention_bwd.cu.j2 and PAIRED_PROTOTYPE_BYTES = 16 + 16 + 16384
# in maskc/kernels/family.py). Not run yet: the fortieth session's device time ran out before a machine came. The
# prototype is right for causal.mask over one sequence only: its gradients against float32 first
# (docs/experiments/s40/pair_check.py, main's errors beside), then, unless that timed out, backward probes of causal
# alternating main and pr for ROUNDS rounds.
export TZ=UTC BUILDS="main pr"
source docs/experiments/device-builds.sh > /dev/null 2>&1
(use pr; echo "== pr"; timeout ${CHECK_S:-120} python3 docs/experiments/s40/pair_check.py ${CHECK_N:-4096 8192} 2>&1 | grep -v -i warn | tail -8)
checked=$?
[ -n "${NO_MAIN_CHECK:-}" ] || (use main; echo "== main"; timeout 60 python3 docs/experiments/s40/pair_check.py 4096 2>&1 | grep -v -i warn | tail -4)
if [ $checked = 0 ]; then
  for round in $(seq ${ROUNDS:-3}); do order="main pr"; [ $((round % 2)) = 0 ] && order="pr main"
    for b in $order; do (use $b; echo "== $b round $round"; timeout 90 python3 bench/probe.py --backward ${WORKLOADS:-causal}) 2>&1 \
      | grep -v -i warn >> $OUT/probes.log; done
  done
  python3 docs/experiments/s29/summarize_probes.py $OUT/probes.log | tee $OUT/probes-summary.txt
fi
echo "call took $SECONDS s"
