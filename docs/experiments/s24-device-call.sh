#!/usr/bin/env bash
# The twenty-fourth session's device calls. Wheels: `pip wheel . --no-deps -w .whl/main` (and .whl/<build> for any
# other build), lark and click in .whl/deps; carry .whl. PART=fuzz: the random masks at depth on main (first run
# since the nineteenth session's failure and its fix, 9db6979). PART=dilated: the packed dilated window's backward
# (docs/experiments/pinned/time_dilated.py) on each build in BUILDS, alternating. PART=boxes: the grid tests on the
# box build (whole-box copies of every tile of the grid block), then the dilated window on main and box.
source docs/experiments/device-builds.sh  # (the GPU line, BUILDS installed, use BUILD)
case "${PART:-fuzz}" in
fuzz)
  (use main; python3 -c "import torch, triton, cupy, maskc; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__, maskc.__file__)" | tee -a $OUT/gpu.txt
   MASKC_GPU_FUZZ_LOG=$OUT/fuzz-fails.txt MASKC_GPU_FUZZ_EXAMPLES=${FUZZ_EXAMPLES:-25} timeout ${FUZZ_TIMEOUT:-520} \
     python3 -m pytest -q -m gpu -n 12 -p no:cacheprovider -W ignore::DeprecationWarning -rf \
     tests/gpu/test_random_masks.py > $OUT/fuzz.log 2>&1
   echo "fuzz: $(tail -1 $OUT/fuzz.log)"; grep -E "^(FAILED|PASSED|ERROR)" $OUT/fuzz.log | head
   if [ -s $OUT/fuzz-fails.txt ]; then head -40 $OUT/fuzz-fails.txt; fi) ;;
boxes)  # the grid tests on the box build, then the dilated window on main and box
  (use box; timeout ${TESTS_S:-200} python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -W ignore::DeprecationWarning -rf tests/gpu \
     -k "pinned or dilated or natten or video or clear or grid or box" > $OUT/pytest-grids.log 2>&1
   echo "grid tests (box): $(tail -1 $OUT/pytest-grids.log)"; grep -E "^FAILED" $OUT/pytest-grids.log | head)
  for b in main box; do (use $b; echo "== $b"; timeout 100 python3 docs/experiments/pinned/time_dilated.py) 2>&1 | grep -v -i warn | tee -a $OUT/dilated.log; done ;;
suite)  # the GPU suite on the box build, then the dilated window on main and box
  (use box; timeout ${SUITE_S:-330} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning -rf tests \
     > $OUT/pytest-suite.log 2>&1
   echo "suite (box): $(tail -1 $OUT/pytest-suite.log)"; grep -E "^FAILED" $OUT/pytest-suite.log | head)
  for b in main box; do (use $b; echo "== $b"; timeout 100 python3 docs/experiments/pinned/time_dilated.py) 2>&1 | grep -v -i warn | tee -a $OUT/dilated.log; done ;;
probes)  # grid masks forward and backward, hd 128 (and PROBE_ARGS), alternating main and box
  for round in 1 2; do for b in main box; do (use $b; echo "== $b round $round"; timeout 70 python3 bench/probe.py ${PROBE_ARGS:-} clear clear_text natten2d video3d; timeout 90 python3 bench/probe.py --backward ${PROBE_ARGS:-} clear clear_text natten2d video3d) 2>&1 | grep -v -i warn | tee -a $OUT/probes.log; done; done ;;
s32)  # docs/experiments/bwd-portable-dq-slice32-hd64-call.sh's steps (BUILDS="main s32")
  (use s32; timeout 150 python3 -m pytest -q -m gpu -n 12 -p no:cacheprovider -W ignore::DeprecationWarning \
      tests/gpu/test_backward.py -k "hd64 and (sm_90-default or portable)" > $OUT/pytest-s32.log 2>&1
   echo "s32 portable hd64 gradients: $(tail -1 $OUT/pytest-s32.log)")
  for b in main s32 main s32; do (use $b; echo "== $b"; timeout 70 python3 bench/bwd_kernels.py --head-dim 64 \
      --archs sm_90 sm_90a:portable --workloads causal document hstu full) 2>&1 | grep -v -i warn | tee -a $OUT/bwd-s32.log; done ;;
kinds)  # the forward with one-rule partial tiles specialised (BUILDS="main kinds"): its tests, then probes alternating
  (use kinds; timeout 150 python3 -m pytest -q -m gpu -n 12 -p no:cacheprovider -W ignore::DeprecationWarning -rf \
      tests/gpu/test_kernels.py > $OUT/pytest-kinds.log 2>&1
   echo "kinds forward tests: $(tail -1 $OUT/pytest-kinds.log)"; grep -E "^FAILED" $OUT/pytest-kinds.log | head)
  for round in 1 2; do for b in main kinds; do (use $b; echo "== $b round $round"; timeout 80 python3 bench/probe.py \
      clear clear_text natten2d video3d dilated_window tree global_window) 2>&1 | grep -v -i warn | tee -a $OUT/probes-kinds.log; done; done ;;
kinds-bwd)  # the same for the backward's pair-by-pair masks: gradient tests, then backward probes alternating
  (use kinds; timeout 150 python3 -m pytest -q -m gpu -n 12 -p no:cacheprovider -W ignore::DeprecationWarning -rf \
      tests/gpu/test_backward.py -k "clear or dilated or natten or video or grid or pinned or tree or global" > $OUT/pytest-kinds-bwd.log 2>&1
   echo "kinds backward tests: $(tail -1 $OUT/pytest-kinds-bwd.log)"; grep -E "^FAILED" $OUT/pytest-kinds-bwd.log | head)
  for round in 1 2; do for b in main kinds; do (use $b; echo "== $b round $round"; timeout 80 python3 bench/probe.py --backward \
      clear_text dilated_window clear tree global_window; timeout 60 python3 bench/probe.py --backward --backward-kernels hopper \
      clear_text dilated_window) 2>&1 | grep -v -i warn | tee -a $OUT/probes-kinds-bwd.log; done; done ;;
harness)  # the dilated window against Flex-Triton, forward and backward, on the box build (now main)
  (use box; timeout 200 python3 bench/harness.py --workloads dilated_window natten2d video3d --systems maskc flex-triton --backward 2>&1 \
     | grep -v -i warn | tail -30 | tee $OUT/harness.log) ;;
dilated)
  for round in 1 2; do for b in ${BUILDS}; do (use $b; echo "== $b round $round"; timeout 100 python3 docs/experiments/pinned/time_dilated.py) 2>&1 | grep -v -i warn | tee -a $OUT/dilated.log; done; done ;;
esac
