#!/usr/bin/env bash
# The forty-fifth session's builds into .whl/ from a clean checkout of main (run from the repository root): main;
# un = main with docs/experiments/s44/bwd-item-values-uniform.patch (the forty-fourth session's, not measured
# there); rk = main with docs/experiments/s45/bwd-step-row-keys.patch (where every rule is an interval of keys, the
# dK/dV producer stores each query's RowKeys, not its whole MaskRow); ur = both. Whole-kernel local accesses on
# this VM (main / un / rk / ur): hstu 97 / 37 / 34 / 40, shared_prompt and rm_shared 51 / 37 / 39 / 36, document
# 37 / 30 / 78 / 23 (rk: the consumers spill 11), causal 11 / 9 / 11 / 9. On top of ur: sh
# (docs/experiments/s45/bwd-uniform-row-keys-step-segment.patch: the producer finds the segment of a partial step's
# first query once and gives it to every row inside it) and rw (.../bwd-uniform-row-keys-row-warps.patch: the
# rows computed by the producer warpgroup's third and fourth warps, a query a thread, apart from the producer
# warp; hstu's producer step loop 249 -> 136 SASS instructions, its local accesses 22 -> 4, the row warps' loop 6).
# After ur landed (39c5ea8), with WHICH=after: main and, on it, u1 and u2 (.../bwd-uniform-u1.patch: only the
# MaskSeq read through uniform(); u2: only the scalars; shared_prompt's producer step loop ur / u1 / u2: 261 / 260
# / 284 SASS instructions, 20 / 19 / 28 local accesses). WHICH=persistent: main, pk (the persistent dK/dV kernel
# built at the session's end) and pkr (pk with the rows computed by two row warps), neither run on a GPU yet
# (docs/training.md, forty-fifth session). Also lark and click into
# .whl/deps.
source docs/experiments/wheel-builds.sh
wheel main
if [ "${WHICH:-}" = after ]; then
  patched_wheel u1 docs/experiments/s45/bwd-uniform-u1.patch
  patched_wheel u2 docs/experiments/s45/bwd-uniform-u2.patch
  exit 0
fi
if [ "${WHICH:-}" = persistent ]; then  # main, pk and pkr (the two persistent patches)
  patched_wheel pk docs/experiments/s45/bwd-persistent-dkdv-uniform.patch
  patched_wheel pkr docs/experiments/s45/bwd-persistent-dkdv-uniform-row-warps.patch
  exit 0
fi
patched_wheel un docs/experiments/s44/bwd-item-values-uniform.patch
patched_wheel rk docs/experiments/s45/bwd-step-row-keys.patch
patched_wheel ur docs/experiments/s45/bwd-uniform-and-row-keys.patch
patched_wheel sh docs/experiments/s45/bwd-uniform-row-keys-step-segment.patch
patched_wheel rw docs/experiments/s45/bwd-uniform-row-keys-row-warps.patch
