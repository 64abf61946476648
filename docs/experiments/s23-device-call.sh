#!/usr/bin/env bash
# The twenty-third session's device call. Part 1: the pinned tests, then the GPU suite, on the xpin build (main
# df810be + the residue-grids pass + x pinned on sm_90a where every segment is a grid or a grid's last row).
# Part 2: the dilated window's two forms on base (0842145) and xpin (docs/experiments/pinned/time_dilated.py),
# Flex-Triton on the same workload, the per-frame windows and the hd 256 forward probes of base and xpin.
# Part 3 (after part 2 showed packed batches 2x slower on xpin): the grid tests and the dilated timing again, with
# boxes for grids that differ in rows only.
# Build the wheels first: `pip wheel . --no-deps -w .whl/xpin` on the xpin branch, the same at 0842145 into
# .whl/base, lark and click into .whl/deps; run as `OUT=$OUT PART=1 bash docs/experiments/s23-device-call.sh` (carry
# .whl), then PART=2 on the same warm machine (each part fits one call's 600 s).
set -uo pipefail
export PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw,clocks.sm --format=csv,noheader | tee $OUT/gpu.txt
for b in base xpin; do [ -d /tmp/site-$b ] && continue; rm -rf /tmp/site-$b; python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site-$b .whl/deps/*.whl .whl/$b/*.whl; done
use() { export PYTHONPATH=/tmp/site-$1 PATH=/tmp/site-$1/bin:$PATH MASKC_CACHE_DIR=/tmp/mc-$1 MASKC_COMMIT=$1; }
if [ "${PART:-1}" = 3 ]; then  # after part 2: boxes for grids that differ in rows only (grid_boxes 2)
(use xpin; timeout 150 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -W ignore::DeprecationWarning tests/gpu \
    -k "pinned or dilated or natten or video or clear or grid" > $OUT/pytest-grids.log 2>&1
 echo "grid tests (xpin): $(tail -1 $OUT/pytest-grids.log)"
 echo "== xpin dilated"; timeout 100 python3 docs/experiments/pinned/time_dilated.py 2>&1 | grep -v -i warn | tee -a $OUT/dilated.log)
elif [ "${PART:-1}" = 1 ]; then
(use xpin; python3 -c "import torch, triton, cupy, maskc; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__, maskc.__file__)" | tee -a $OUT/gpu.txt
 timeout 100 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -W ignore::DeprecationWarning tests/gpu/test_backward.py -k pinned > $OUT/pytest-pinned.log 2>&1
 echo "pinned (xpin): $(tail -1 $OUT/pytest-pinned.log)"
 timeout ${SUITE_S:-230} python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -W ignore::DeprecationWarning tests > $OUT/pytest-xpin.log 2>&1
 echo "suite (xpin): $(tail -1 $OUT/pytest-xpin.log)")
else
for b in base xpin; do (use $b; echo "== $b dilated"; timeout 100 python3 docs/experiments/pinned/time_dilated.py) 2>&1 | grep -v -i warn | tee -a $OUT/dilated.log; done
(use xpin; timeout 120 python3 bench/harness.py --workloads dilated_window --systems maskc flex-triton --backward 2>&1 | grep -v -i warn | tail -12 | tee $OUT/harness-dilated.log)
for b in base xpin; do (use $b; echo "== $b vsp (t pinned in xpin)"; timeout 40 python3 bench/mask_time.py docs/experiments/pinned/frame_windows.mask video3d) 2>&1 | grep -v -i warn | tee -a $OUT/vsp.log; done
for b in base xpin; do (use $b; echo "== $b"; timeout 45 python3 bench/probe.py --head-dim 256 causal clear_text document) 2>&1 | grep -v -i warn | tee -a $OUT/probe-hd256.log; done
fi
grep -E "failed|FAILED|Error" $OUT/pytest-*.log 2>/dev/null | head -20
