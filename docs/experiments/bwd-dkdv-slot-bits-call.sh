#!/usr/bin/env bash
# Device call for docs/experiments/bwd-dkdv-slot-bits.patch (prepared in the eighteenth session, not run: no
# device time was left). The dK/dV kernels' slot bits computed inside the partial step's branch (sb) against
# main (mn): its backward GPU tests, then three alternating rounds of the backward alone. Decide on the rounds:
# the first slot-bits version gained rm_shared 1.7% and lost causal 0.8%, shared_prompt 1.3%, hstu 0.4%.
# Build the wheels first: `pip wheel . --no-deps -w .whl/mn` on main, and the same with the patch applied
# (`git apply docs/experiments/bwd-dkdv-slot-bits.patch` in a worktree) into .whl/sb; .whl/deps holds lark and
# click. Run as `OUT=$OUT bash <this file>` from the repository (the device tool: carry .whl).
set -uo pipefail
export PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw,clocks.sm --format=csv,noheader | tee $OUT/gpu.txt
for b in mn sb; do
    rm -rf /tmp/site-$b
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site-$b .whl/deps/*.whl .whl/$b/*.whl || exit 1
done
use() { export PYTHONPATH=/tmp/site-$1 PATH=/tmp/site-$1/bin:$PATH MASKC_CACHE_DIR=/tmp/mc-$1 MASKC_COMMIT=$1; }
(use sb; timeout 150 python3 -m pytest -q -m gpu -n 12 -p no:cacheprovider -W ignore::DeprecationWarning \
    tests/gpu/test_backward.py -k sm_90a > $OUT/pytest-bwd-sb.log 2>&1; echo "sb backward tests: $(tail -1 $OUT/pytest-bwd-sb.log)")
W="shared_prompt causal hstu rm_shared document"
for b in mn sb mn sb mn sb; do
    (use $b; echo "== $b"; timeout 100 python3 bench/probe.py --backward $W) 2>&1 | grep -v -i warn | tee -a $OUT/probe-bwd.log
done
