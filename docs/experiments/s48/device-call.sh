#!/usr/bin/env bash
# The forty-eighth session's forward A/B (carry .whl; its wheels were main, fg4 and sil at b9bcd06, see
# build-wheels.sh): the Hopper forward's tail, main against fg4 (its last head group at four heads) and sil (the
# short items in a last pass over every head). docs/experiments/s47/device-call.sh with the builds as a variable:
#   1. the forward kernel under ncu at locked clocks (elapsed cycles) for each of BUILDS, the order turned round
#      every other round, on each of WORKLOADS, ROUNDS times;
#   2. each build but main: the forward GPU tests (tests/gpu/test_kernels.py), TESTS_S at most (TESTS=0: none);
#   3. the table last, so that the tool's output tail keeps it.
# Predicted (docs/experiments/s47/forward_tail_model.py; fixed cost 2.3 tiles an item), forward cycles against main:
#   fg4: shared_prompt -1.1%, rm_shared -0.6%, document -0.4%;
#   sil: shared_prompt -1.2%, rm_shared -0.8%, document -0.9%, hstu -0.15%, causal 0;
# both at risk from L2 on causal and hstu.
export TZ=UTC
BUILDS="${BUILDS:-main fg4 sil}"
BUILDS="$BUILDS" source docs/experiments/device-builds.sh > /dev/null 2>&1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for r in $(seq ${ROUNDS:-2}); do
  order="$BUILDS"; [ $((r % 2)) = 0 ] && order=$(echo $BUILDS | tr ' ' '\n' | tac | tr '\n' ' ')
  for w in ${WORKLOADS:-shared_prompt rm_shared document causal hstu}; do for b in $order; do (use $b
    timeout 60 $NCU --section SpeedOfLight -k regex:fwd_sm90a --launch-skip 1 --launch-count 1 python3 bench/probe.py --ncu $w \
      > $OUT/ncu-$b-$w-$r.txt 2>&1
    echo "$b $w round $r: $(grep -E 'Elapsed Cycles' $OUT/ncu-$b-$w-$r.txt | tr -s ' ')") >> $OUT/ncu.txt; done; done
done
echo "ncu done at $SECONDS s" >> $OUT/ncu.txt
if [ "${TESTS:-1}" = 1 ]; then for b in $BUILDS; do [ $b = main ] && continue; (use $b
  timeout ${TESTS_S:-100} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning \
    tests/gpu/test_kernels.py > $OUT/pytest-$b.log 2>&1; echo "$b forward GPU tests: $(tail -1 $OUT/pytest-$b.log)" >> $OUT/ncu.txt); done; fi
python3 - $OUT/ncu.txt <<'PY'
import re, sys, statistics
cycles = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) (\S+) round \d+: .*?([\d,]+)\s*$", line)
    if m and "Elapsed" in line:
        cycles.setdefault((m[2], m[1]), []).append(int(m[3].replace(",", "")))
builds = list(dict.fromkeys(b for _, b in cycles))
for w in dict.fromkeys(w for w, _ in cycles):
    base = statistics.median(cycles.get((w, "main"), [0])) or None
    row = [f"{b} {statistics.median(cycles[(w, b)]):,.0f}" + (f" ({statistics.median(cycles[(w, b)]) / base - 1:+.2%})"
           if base and b != "main" else "") for b in builds if (w, b) in cycles]
    print(f"{w:14s} " + "  ".join(row))
PY
grep -E "tests|done" $OUT/ncu.txt
echo "call took $SECONDS s"
