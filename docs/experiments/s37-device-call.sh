#!/usr/bin/env bash
# The thirty-seventh session's device call (carry .whl; wheels: main = e0a9b3a, ms = main with the packed members run
# as sequences of their own, maskc/plan/members.py). Document's forward and dK/dV kernels under ncu, clocks locked to
# base (`--section SpeedOfLight`: the elapsed cycles repeat to 0.1-0.3%), on each build; the forward and backward
# GPU tests of document on ms; then issue 6's harness on document, ms then main (capped clocks: 2-4% between calls).
export BUILDS="main ms"
source docs/experiments/device-builds.sh > /dev/null 2>&1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for b in main ms; do (use $b
  timeout 90 $NCU --section SpeedOfLight -k regex:"fwd_sm90a|dkdv" --launch-skip 2 --launch-count 2 \
    python3 bench/probe.py --ncu document > $OUT/ncu-$b-document.txt 2>&1
  echo "== $b"; grep -E "^  maskc_|Elapsed Cycles|Duration" $OUT/ncu-$b-document.txt | sed 's/(.*//' | cut -c1-90); done
(use ms; timeout 150 python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning -rf \
  tests/gpu/test_kernels.py tests/gpu/test_backward.py -k document > $OUT/pytest-ms.log 2>&1
  echo "tests (ms): $(tail -1 $OUT/pytest-ms.log)"; grep FAILED $OUT/pytest-ms.log | head)
for b in ms main; do (use $b; echo "== harness $b"
  timeout 90 python3 bench/harness.py --backward --systems maskc --workloads document > $OUT/harness-$b.log 2>&1
  grep -v -i warn $OUT/harness-$b.log | grep -i -E "^document|tflop|time|fwd|bwd|backward|forward" | cut -c1-100)
done
