#!/usr/bin/env bash
# Device call for docs/experiments/fwd-head-group-by-head-dim.patch (prepared in the fifteenth session, not run).
# The fourteenth session's head groups of two heads cost head dim 64 2-3% on causal and document (hstu +4%); this
# patch makes them four heads at 64. Build the wheels first: `pip wheel . --no-deps -w .whl/main` on main and the
# same with the patch applied in a worktree into .whl/hg; .whl/deps holds lark and click. Run as
# `OUT=$OUT bash <this file>` from the repository.
set -uo pipefail
export PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw,clocks.sm --format=csv,noheader | tee $OUT/gpu.txt
for b in main hg; do rm -rf /tmp/site-$b; python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site-$b .whl/deps/*.whl .whl/$b/*.whl; done
use() { export PYTHONPATH=/tmp/site-$1 PATH=/tmp/site-$1/bin:$PATH MASKC_CACHE_DIR=/tmp/mc-$1 MASKC_COMMIT=$1; }
(use hg; timeout 120 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -W ignore::DeprecationWarning tests/gpu/test_kernels.py -k "hd64" > $OUT/pytest-hg.log 2>&1; echo "hg hd64 tests: $(tail -1 $OUT/pytest-hg.log)")
for b in main hg main hg; do (use $b; echo "== $b"; timeout 60 python3 bench/probe.py --head-dim 64 causal document hstu shared_prompt full) 2>&1 | grep -v -i warn | tee -a $OUT/probe-hg.log; done
