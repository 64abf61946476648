#!/usr/bin/env bash
# The forty-eighth session's builds into .whl/ from a clean checkout of main (run from the repository root): main,
# fg4 (docs/experiments/s47/fwd-last-group-four-heads.patch: the Hopper forward's last head group at four heads)
# and sil (docs/experiments/s48/fwd-short-items-last.patch: the short items, a quarter of the longest or less, out
# of their key groups into a last pass over every head; numpy planner only, so MASKC_NATIVE defaults to 0 there).
source docs/experiments/wheel-builds.sh
wheel main
patched_wheel fg4 docs/experiments/s47/fwd-last-group-four-heads.patch
patched_wheel sil docs/experiments/s48/fwd-short-items-last.patch
