#!/usr/bin/env bash
# The twenty-second session's device call (prepared, not run: no device started): the GPU suite on main (new:
# with the pinned-axis tiles), the hd 256 forward probes of base (0842145) and new (2651eaa: Q's address opaque at
# hd 256) alternating, the per-frame windows (t pinned in new) alternating, then random masks at depth.
# Build the wheels first: `pip wheel . --no-deps -w .whl/new` on main, the same at 0842145 into .whl/base, lark and
# click into .whl/deps; run as `OUT=$OUT bash docs/experiments/s22-device-call.sh` from the repository (carry .whl).
set -uo pipefail
export PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw,clocks.sm --format=csv,noheader | tee $OUT/gpu.txt
for b in base new; do rm -rf /tmp/site-$b; python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site-$b .whl/deps/*.whl .whl/$b/*.whl; done
use() { export PYTHONPATH=/tmp/site-$1 PATH=/tmp/site-$1/bin:$PATH MASKC_CACHE_DIR=/tmp/mc-$1 MASKC_COMMIT=$1; }
(use new; python3 -c "import torch, triton, cupy, maskc; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__, maskc.__file__)" | tee -a $OUT/gpu.txt
 timeout ${SUITE_S:-260} python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -W ignore::DeprecationWarning tests > $OUT/pytest-new.log 2>&1
 echo "suite (new): $(tail -1 $OUT/pytest-new.log)")
for b in base new base new; do (use $b; echo "== $b"; timeout 60 python3 bench/probe.py --head-dim 256 causal clear_text document) 2>&1 | grep -v -i warn | tee -a $OUT/probe-hd256.log; done
for b in base new base new; do (use $b; echo "== $b vsp (t pinned in new)"; timeout 60 python3 bench/mask_time.py docs/experiments/pinned/frame_windows.mask video3d) 2>&1 | grep -v -i warn | tee -a $OUT/vsp.log; done
(use new; MASKC_GPU_FUZZ_LOG=$OUT/fuzz-fails.txt MASKC_GPU_FUZZ_EXAMPLES=${FUZZ_EXAMPLES:-12} timeout ${FUZZ_S:-120} \
    python3 -m pytest -q -m gpu -n 12 --maxfail=1 -p no:cacheprovider -W ignore::DeprecationWarning tests/gpu/test_random_masks.py > $OUT/fuzz.log 2>&1
 echo "fuzz (new): $(tail -1 $OUT/fuzz.log)"; [ -s $OUT/fuzz-fails.txt ] && head -40 $OUT/fuzz-fails.txt)
grep -E "failed|FAILED|Error" $OUT/pytest-new.log | head -20
