#!/usr/bin/env bash
# The twenty-sixth session's device calls. Wheels: `pip wheel . --no-deps -w .whl/<build>` for each build in BUILDS,
# lark and click in .whl/deps; carry .whl. PART=skip (BUILDS="main skip"): the backward's GPU tests on skip (a
# consumer's products skipped where none of its keys sees a query of a partial step), then backward probes of the
# interval masks, alternating (TESTED=pdp: P^T under dP^T, the same steps). PART=probes: only the probes (ROUNDS rounds). PART=portable (BUILDS="base main",
# base = de3d4a6, the twenty-fifth session's start): the portable family's forward and backward (harness, checked)
# on the grid masks whose tile slots and query rows that session changed, alternating. PART=suite: the GPU suite on
# main and the host time of new runtime values on the GPU machine's host. PART=fuzz: the random masks at depth.
# PART=itemcost: what a work item costs beyond its tiles (docs/experiments/s26/item_cost.py).
# PART=first: next session's first call, all three in one (the suite, the random masks, the item cost; ~8 minutes).
source docs/experiments/device-builds.sh  # (the GPU line, BUILDS installed, use BUILD)
WORKLOADS=${WORKLOADS:-rm_shared document hstu_jagged causal}
TESTED=${TESTED:-skip}  # the build whose backward tests run first (PART=skip)
case "${PART:-skip}" in
skip)
  (use $TESTED; python3 -c "import torch, triton, cupy, maskc; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)" | tee -a $OUT/gpu.txt
   timeout ${TESTS_S:-240} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning -rf tests/gpu/test_backward.py \
     > $OUT/pytest-skip.log 2>&1
   echo "backward tests ($TESTED): $(tail -1 $OUT/pytest-skip.log)"; grep -E "^FAILED" $OUT/pytest-skip.log | head) ;&
probes)
  for round in $(seq ${ROUNDS:-1}); do for b in ${BUILDS}; do (use $b; echo "== $b round $round"; timeout 150 python3 bench/probe.py --backward $WORKLOADS) 2>&1 | grep -v -i warn | tee -a $OUT/probes.log; done; done ;;
portable)
  for round in $(seq ${ROUNDS:-2}); do for b in ${BUILDS}; do (use $b; echo "== $b round $round"; timeout 140 python3 bench/harness.py \
      --family sm80 --backward --backward-kernels portable --systems maskc --workloads ${PORTABLE_WORKLOADS:-clear clear_text natten2d}) 2>&1 \
      | grep -v -i warn | grep -v "^m/flex" | tee -a $OUT/portable.log; done; done ;;
suite)  # the whole GPU suite on main (the host-speed commits changed the tables' upload and the launches' packing),
        # then the host time of new runtime values on this machine's host
  (use ${BUILD:-main}; timeout ${SUITE_S:-330} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning -rf tests \
     > $OUT/pytest-suite.log 2>&1
   echo "suite (${BUILD:-main}): $(tail -1 $OUT/pytest-suite.log)"; grep -E "^FAILED" $OUT/pytest-suite.log | head
   for r in 1 2; do timeout 60 python3 bench/newvalues_cpu.py --counts 12 64 --workloads document rm_shared hstu_jagged 2>&1 | tail -4; done \
     | tee $OUT/newvalues.log) ;;
newvalues)  # BUILDS="s25end merged": the host time of new runtime values, alternating (ROUNDS rounds)
  for round in $(seq ${ROUNDS:-3}); do for b in ${BUILDS}; do (use $b; echo "== $b round $round"; timeout 60 python3 bench/newvalues_cpu.py \
      --counts 12 64 --workloads document rm_shared hstu_jagged 2>&1 | tail -4) | tee -a $OUT/newvalues.log; done; done ;;
first)
  PART=suite bash "$0"; PART=fuzz FUZZ_S=${FUZZ_S:-200} bash "$0"; PART=itemcost bash "$0" ;;
fuzz)  # random masks at depth on every pass (tests/gpu/test_random_masks.py) on ${BUILD:-main}
  (use ${BUILD:-main}; MASKC_GPU_FUZZ_LOG=$OUT/fuzz-fails.txt MASKC_GPU_FUZZ_EXAMPLES=${FUZZ_EXAMPLES:-20} timeout ${FUZZ_S:-280} \
     python3 -m pytest -q -m gpu -n 12 --maxfail=1 -p no:cacheprovider -W ignore::DeprecationWarning tests/gpu/test_random_masks.py \
     > $OUT/fuzz.log 2>&1; echo "fuzz (${BUILD:-main}): $(tail -1 $OUT/fuzz.log)"; [ -s $OUT/fuzz-fails.txt ] && head -40 $OUT/fuzz-fails.txt) ;;
itemcost)  # what a work item costs beyond its tiles (docs/experiments/s26/item_cost.py), on ${BUILD:-main}
  (use ${BUILD:-main}; timeout ${ITEM_S:-200} python3 docs/experiments/s26/item_cost.py ${ITEM_ARGS:-} 2>&1 | grep -v -i warn \
     | tee $OUT/item-cost.log) ;;
esac
