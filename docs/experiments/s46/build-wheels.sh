#!/usr/bin/env bash
# The forty-sixth session's builds into .whl/ from a clean checkout of main (run from the repository root): main,
# and tl = main with docs/experiments/s46/bwd-tail-heads.patch (the Hopper backward kernels' last `tail_heads`
# heads item-major together, where head-major would leave the last head's longest items running alone:
# shared_prompt, document and rm_shared take 2, the other anchors 1, which is main's order). Also lark and click
# into .whl/deps.
source docs/experiments/wheel-builds.sh
wheel main
patched_wheel tl docs/experiments/s46/bwd-tail-heads.patch
