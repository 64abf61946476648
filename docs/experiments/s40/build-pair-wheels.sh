#!/usr/bin/env bash
# Builds the paired prototype's wheels into .whl/ from a clean checkout of main (run from the repository root):
# main, and main with docs/experiments/s40/bwd-paired-causal-prototype.patch, its Jinja switch paired_prototype on, as pr (multicast
# and dQ exchange), pq (multicast only), pd (dQ exchange only), p0 (neither: the cluster launch and rank 1's longer
# list alone), and le (main with docs/experiments/s40/bwd-lse-before-wait.patch: the step's LSE read before the
# wgmma wait; for timing beside them). lark and click into .whl/deps. The tree is left as it was.
source docs/experiments/wheel-builds.sh
T=templates/sm90a/attention_bwd.cu.j2 F=maskc/kernels/family.py
wheel main
patched_wheel le docs/experiments/s40/bwd-lse-before-wait.patch
git apply docs/experiments/s40/bwd-paired-causal-prototype.patch
sed -i 's/^PAIRED_PROTOTYPE_BYTES = 0  # 16 + 16 + 16384/PAIRED_PROTOTYPE_BYTES = 16 + 16 + 16384/' $F
cp $T /tmp/pair_template.j2
for v in "pr 1 1" "pq 1 0" "pd 0 1" "p0 0 0"; do
  set -- $v
  sed "s/^{% set paired_prototype = false %}$/{% set paired_prototype = true %}/; s/^#define MASKC_PAIRED_Q 1$/#define MASKC_PAIRED_Q $2/;
       s/^#define MASKC_PAIRED_DQ 1$/#define MASKC_PAIRED_DQ $3/" /tmp/pair_template.j2 > $T
  wheel $1
done
