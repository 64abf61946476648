#!/usr/bin/env bash
# The forty-third session's builds into .whl/ from a clean checkout of main (run from the repository root): main,
# and main with the fortieth session's stmatrix patch whole and in its two halves, to say which half made it slower
# (docs/experiments/s40/bwd-stmatrix-stats-pairs.patch measured -0.8 to -5.1% on the H100):
#   st: both halves (the s40 patch)
#   ss: dS^T stored by stmatrix.x4 only (docs/experiments/s43/bwd-stmatrix-only.patch)
#   sl: each query's LSE and delta side by side, read in one 16-byte load only (bwd-stats-pairs-only.patch)
# and lark and click into .whl/deps. The tree is left as it was.
source docs/experiments/wheel-builds.sh
wheel main
patched_wheel st docs/experiments/s40/bwd-stmatrix-stats-pairs.patch
patched_wheel ss docs/experiments/s43/bwd-stmatrix-only.patch
patched_wheel sl docs/experiments/s43/bwd-stats-pairs-only.patch
