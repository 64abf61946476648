#!/usr/bin/env bash
# The twenty-fifth session's device calls. Wheels: `pip wheel . --no-deps -w .whl/main` (and .whl/<build> for any
# other build), lark and click in .whl/deps; carry .whl. A build is installed once per machine into /tmp/site-<build>.
# PART=suite: the whole GPU suite on main (48a5219's load helpers had not run on a GPU), then the forward probes of
# the grid masks. PART=qrow: query rows from the tile's slots (BUILDS="rows qrow"). PART=forms: the dilated window's four forms (docs/experiments/s25/dilated_forms.py). PART=table: issue 6's table (fwd+bwd) and issue 5's forward table, maskc against Flex-Triton.
source docs/experiments/device-builds.sh  # (the GPU line, BUILDS installed, use BUILD)
case "${PART:-suite}" in
suite)
  (use main; python3 -c "import torch, triton, cupy, maskc; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__, maskc.__file__)" | tee -a $OUT/gpu.txt
   timeout ${SUITE_S:-400} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning -rf tests \
     > $OUT/pytest-suite.log 2>&1
   echo "suite (main): $(tail -1 $OUT/pytest-suite.log)"; grep -E "^FAILED" $OUT/pytest-suite.log | head
   timeout 90 python3 bench/probe.py clear clear_text natten2d dilated_window global_window 2>&1 | grep -v -i warn | tee $OUT/probes.log) ;;
table)
  (use ${BUILD:-main}; timeout 330 python3 bench/harness.py --backward --systems maskc flex-triton --workloads causal shared_prompt hstu \
     document rm_shared clear clear_text 2>&1 | grep -v -i warn | tail -40 | tee $OUT/harness-backward.log
   timeout 200 python3 bench/harness.py --systems maskc flex-triton 2>&1 | grep -v -i warn | tail -30 | tee $OUT/harness-forward.log) ;;
forms)  # the dilated window's four forms (docs/experiments/s25/dilated_forms.py)
  (use main; timeout 300 python3 docs/experiments/s25/dilated_forms.py 2>&1 | grep -v -i warn | tee $OUT/dilated-forms.log) ;;
rows)  # BUILDS="main rows": the grid tests and random masks on rows (the residue grid's rules in rows, tile slots by
        # block), then the dilated window's forms and the grid masks' probes on both, alternating
  (use rows; timeout ${TESTS_S:-170} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning -rf tests/gpu \
     -k "pinned or dilated or natten or video or clear or grid or box or random or example" > $OUT/pytest-rows.log 2>&1
   echo "grid tests (rows): $(tail -1 $OUT/pytest-rows.log)"; grep -E "^FAILED" $OUT/pytest-rows.log | head)
  for b in main rows; do (use $b; echo "== $b"; timeout 120 python3 docs/experiments/s25/dilated_forms.py) 2>&1 | grep -v -i warn | tee -a $OUT/dilated-forms.log; done
  for b in main rows; do (use $b; echo "== $b"; timeout 60 python3 bench/probe.py clear_text clear natten2d; timeout 80 python3 bench/probe.py --backward clear_text clear natten2d) 2>&1 | grep -v -i warn | tee -a $OUT/probes.log; done ;;
qrow)  # BUILDS="rows qrow": the grid masks' kernel tests on qrow (query rows from the tile's slots), then forward
        # probes of the grid masks alternating (rows = 7a8dc98: the same kernels as qrow's parent for these masks)
  (use qrow; timeout ${TESTS_S:-150} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning -rf \
     tests/gpu/test_kernels.py tests/gpu/test_backward.py -k "clear or natten or video or dilated or grid or pinned or box" \
     > $OUT/pytest-qrow.log 2>&1
   echo "grid kernel tests (qrow): $(tail -1 $OUT/pytest-qrow.log)"; grep -E "^FAILED" $OUT/pytest-qrow.log | head)
  for round in 1 2; do for b in rows qrow; do (use $b; echo "== $b round $round"; timeout 60 python3 bench/probe.py \
      clear_text clear natten2d video3d) 2>&1 | grep -v -i warn | tee -a $OUT/probes-qrow.log; done; done ;;
dilated)
  for round in 1 2; do for b in ${BUILDS}; do (use $b; echo "== $b round $round"; timeout 100 python3 docs/experiments/pinned/time_dilated.py) 2>&1 | grep -v -i warn | tee -a $OUT/dilated.log; done; done ;;
esac
