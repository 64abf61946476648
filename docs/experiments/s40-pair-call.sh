#!/usr/bin/env bash
# The paired dK/dV kernel's prototype on the GPU (carry .whl, built by docs/experiments/s40/build-pair-wheels.sh:
# main, pr, pq, pd, p0). Not run yet: the fortieth session's device time ran out before a machine came. The
# prototype is right for causal.mask over one sequence only. First the gradients of each of TESTED (default "pq
# pd pr") against float32 (docs/experiments/s40/pair_check.py at CHECK_N, PyTorch's bf16 errors as the bar); a
# build whose check times out (a hang) is dropped from the timing. Then causal's backward, probes alternating over
# BUILDS (default "main p0 pq pd pr le"; le is timed only, its GPU tests are for later) for ROUNDS rounds.
# Where little device time is left, a shorter form: TESTED=pr CHECK_N=8192 BUILDS="main pr pd".
export TZ=UTC BUILDS="${BUILDS:-main p0 pq pd pr le}"
source docs/experiments/device-builds.sh > /dev/null 2>&1
timed="main" failed=""
for b in ${TESTED:-pq pd pr}; do
  # pr holds both halves: where either hung, pr would too (and would cost CHECK_S more)
  [ "$b" = pr ] && [ -n "$failed" ] && { echo "(pr not checked:$failed failed)"; failed="$failed pr"; continue; }
  (use $b; echo "== $b"; timeout ${CHECK_S:-90} python3 docs/experiments/s40/pair_check.py ${CHECK_N:-4096 8192} 2>&1 \
    | grep -v -i warn | tail -8) && timed="$timed $b" || { echo "($b: check timed out or failed to run)"; failed="$failed $b"; }
done
for b in $BUILDS; do case " $timed ${TESTED:-pq pd pr} " in *" $b "*) ;; *) timed="$timed $b" ;; esac; done
for round in $(seq ${ROUNDS:-2}); do order=$(echo $BUILDS | tr ' ' '\n' | grep -x -F -f <(echo $timed | tr ' ' '\n'))
  [ $((round % 2)) = 0 ] && order=$(echo "$order" | tac)
  for b in $order; do (use $b; echo "== $b round $round"; timeout 90 python3 bench/probe.py --backward ${WORKLOADS:-causal}) 2>&1 \
    | grep -v -i warn >> $OUT/probes.log; done
done
python3 docs/experiments/s29/summarize_probes.py $OUT/probes.log | tee $OUT/probes-summary.txt
echo "call took $SECONDS s"
