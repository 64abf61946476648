#!/usr/bin/env bash
# The forty-seventh session's builds into .whl/ from a clean checkout of main (run from the repository root): main,
# and fg4 = main with docs/experiments/s47/fwd-last-group-four-heads.patch (the Hopper forward's last head group
# four heads instead of two; a constant, to test the forward tail model before any rule). Also lark and click into
# .whl/deps.
source docs/experiments/wheel-builds.sh
wheel main
patched_wheel fg4 docs/experiments/s47/fwd-last-group-four-heads.patch
