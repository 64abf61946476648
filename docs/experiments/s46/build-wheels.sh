#!/usr/bin/env bash
# The forty-sixth session's builds into .whl/ from a clean checkout of main (run from the repository root): main,
# and (until it landed as a92fd58 in the forty-seventh session) tl = main with docs/experiments/s46/bwd-tail-heads.patch
# (the Hopper backward kernels' last `tail_heads` heads item-major together). On main from a92fd58 on, the patch is
# already in: only main is built. Also lark and click into .whl/deps.
source docs/experiments/wheel-builds.sh
wheel main
if git apply --check docs/experiments/s46/bwd-tail-heads.patch 2>/dev/null; then
  patched_wheel tl docs/experiments/s46/bwd-tail-heads.patch
fi
