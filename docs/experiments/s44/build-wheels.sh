#!/usr/bin/env bash
# The forty-fourth session's builds into .whl/ from a clean checkout of main (run from the repository root): main;
# rg = main with docs/experiments/s44/bwd-producer-40-registers.patch (measured in call 5: mixed); un = main with
# docs/experiments/s44/bwd-item-values-uniform.patch (the dK/dV kernel's item values, its MaskSeq included, read
# through __shfl_sync so that ptxas keeps them in uniform registers: whole-kernel local accesses on this VM hstu 97
# -> 37, shared_prompt and rm_shared 51 -> 37, document 37 -> 30, causal 11 -> 9, and the consumers' 11 on hstu ->
# 0; the consumers' step loops unchanged but for 2-4 instructions). Also lark and click into .whl/deps. The tree is
# left as it was.
source docs/experiments/wheel-builds.sh
wheel main
patched_wheel rg docs/experiments/s44/bwd-producer-40-registers.patch
patched_wheel un docs/experiments/s44/bwd-item-values-uniform.patch
