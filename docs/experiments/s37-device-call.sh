#!/usr/bin/env bash
# The thirty-seventh session's device call (carry .whl; wheel ms = main with the packed members run as sequences of
# their own, maskc/plan/members.py, which MASKC_MEMBERS=0 turns off: the A/B inside one build). Document's forward
# and dK/dV kernels under ncu, clocks locked to base (`--section SpeedOfLight`: elapsed cycles repeat to 0.1-0.3%),
# apart (1) and together (0); the forward and backward GPU tests of document; with HARNESS=1 then issue 6's harness on
# document, apart then together (capped clocks: 2-4% between calls).
export BUILDS="ms"
source docs/experiments/device-builds.sh > /dev/null 2>&1
use ms
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for m in 1 0; do
  MASKC_MEMBERS=$m timeout 75 $NCU --section SpeedOfLight -k regex:"fwd_sm90a|dkdv" --launch-skip 2 --launch-count 2 \
    python3 bench/probe.py --ncu document > $OUT/ncu-members$m-document.txt 2>&1
  echo "== MASKC_MEMBERS=$m"; grep -E "^  maskc_|Elapsed Cycles|Duration" $OUT/ncu-members$m-document.txt | cut -c1-100
done
timeout 90 python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning -rf \
  tests/gpu/test_kernels.py tests/gpu/test_backward.py -k document > $OUT/pytest-ms.log 2>&1
echo "tests (ms): $(tail -1 $OUT/pytest-ms.log)"; grep FAILED $OUT/pytest-ms.log | head
if [ "${HARNESS:-0}" = 1 ]; then for m in 1 0; do echo "== harness MASKC_MEMBERS=$m"
  MASKC_MEMBERS=$m timeout 90 python3 bench/harness.py --backward --systems maskc --workloads document > $OUT/harness-members$m.log 2>&1
  grep -v -i warn $OUT/harness-members$m.log | grep -i -E "^document|tflop|time|fwd|bwd|backward|forward" | cut -c1-100
done; fi
