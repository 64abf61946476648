#!/usr/bin/env bash
# Device call for docs/experiments/bwd-grouped-key-items.patch (prepared in the fifteenth session, not run: no
# device was lent after its second call). Key items grouped by the query tiles they read (gk) against main (bn).
# Build the wheels first: `pip wheel . --no-deps -w .whl/bn` on main, and the same with the patch applied in a
# worktree into .whl/gk; .whl/deps holds lark and click. Run as `OUT=$OUT bash <this file>` from the repository.
set -uo pipefail
export PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw,clocks.sm --format=csv,noheader | tee $OUT/gpu.txt
for b in bn gk; do rm -rf /tmp/site-$b; python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site-$b .whl/deps/*.whl .whl/$b/*.whl; done
use() { export PYTHONPATH=/tmp/site-$1 PATH=/tmp/site-$1/bin:$PATH MASKC_CACHE_DIR=/tmp/mc-$1 MASKC_COMMIT=$1; }
(use gk; timeout 110 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -W ignore::DeprecationWarning tests/gpu/test_backward.py -k "hd128_packed or padded or gqa or longer" > $OUT/pytest-bwd-gk.log 2>&1; echo "gk backward tests: $(tail -1 $OUT/pytest-bwd-gk.log)")
W="document rm_shared hstu_jagged shared_prompt clear_text causal"
for b in bn gk bn gk; do (use $b; echo "== $b"; timeout 60 python3 bench/probe.py --backward $W) 2>&1 | grep -v -i warn | tee -a $OUT/probe-bwd.log; done
for b in bn gk; do (use $b; echo "== $b hd64"; timeout 50 python3 bench/probe.py --backward --head-dim 64 document rm_shared hstu_jagged) 2>&1 | grep -v -i warn | tee -a $OUT/probe-bwd-hd64.log; done
