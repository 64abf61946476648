#!/usr/bin/env bash
# Device call for docs/experiments/bwd-portable-dq-slice32-hd64.patch (prepared in the twenty-first session, not
# run). The portable dQ kernel spills 216-448 bytes at head dim 64 (ptxas, every example: its 64-key slice holds S
# and dP for 64 keys each in 255 registers); the patch takes 32-key slices at hd 64 too, as at hd 128, and the
# spills go (causal 215 registers, hstu 254, natten2d 246). Predicted: the portable backward at hd 64 faster by
# what the spills cost in its main loop (local memory per slice), the dK/dV kernel unchanged. Build the wheels
# first: `pip wheel . --no-deps -w .whl/main` on main and the same with the patch applied in a worktree into
# .whl/s32; .whl/deps holds lark and click. Run as `OUT=$OUT bash <this file>` from the repository.
set -uo pipefail
export PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw,clocks.sm --format=csv,noheader | tee $OUT/gpu.txt
for b in main s32; do rm -rf /tmp/site-$b; python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site-$b .whl/deps/*.whl .whl/$b/*.whl; done
use() { export PYTHONPATH=/tmp/site-$1 PATH=/tmp/site-$1/bin:$PATH MASKC_CACHE_DIR=/tmp/mc-$1 MASKC_COMMIT=$1; }
# The portable pass's gradients at hd 64 (its own family on sm_80-89; on the H200 as sm_90 and sm_90a:portable).
(use s32; timeout 200 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -W ignore::DeprecationWarning \
    tests/gpu/test_backward.py -k "hd64 and (sm_90-default or portable)" > $OUT/pytest-s32.log 2>&1
 echo "s32 portable hd64 gradients: $(tail -1 $OUT/pytest-s32.log)")
for b in main s32 main s32; do (use $b; echo "== $b"; timeout 90 python3 bench/bwd_kernels.py --head-dim 64 \
    --archs sm_90 sm_90a:portable --workloads causal document hstu full) 2>&1 | grep -v -i warn | tee -a $OUT/bwd-s32.log; done
