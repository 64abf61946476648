#!/usr/bin/env bash
# Device calls of the twenty-eighth session. Wheels as for s26-device-call.sh (`pip wheel . --no-deps -w
# .whl/<build>`, lark and click in .whl/deps); carry .whl.
# PART=issue5 (BUILD=main): issue 5's forward table against Flex-Triton and SDPA in one run, the short-N sweep and
# the first call (bench/harness.py). PART=newvalues: the host time of new runtime values on this machine's host.
# PART=pers (BUILDS="main pers", pers = the persistent dK/dV kernel, branch s28-persistent-dkdv): the backward's GPU
# tests on pers, then backward probes alternating (ROUNDS rounds), then the item cost on each build (ITEMCOST=0: not).
# PART=timeline (BUILDS=tl, a wheel of the branch s28-timeline = main's kernel with docs/experiments/s28/bwd-timeline.patch):
# where a dK/dV CTA's time goes (docs/experiments/s28/timeline.py). With BUILDS=tlp BUILD=tlp
# TIMELINE_ARGS=--persistent: the persistent kernel's pairs (branch s28-timeline-persistent, bwd-timeline-persistent.patch).
source docs/experiments/device-builds.sh  # (the GPU line, BUILDS installed, use BUILD)
case "${PART:-issue5}" in
issue5)
  (use ${BUILD:-main}; timeout ${HARNESS_S:-420} python3 bench/harness.py --systems maskc flex-triton sdpa-flash \
      --sweep --first-call --json $OUT/harness-forward.json --png $OUT/harness-forward.png 2>&1) | tee $OUT/harness-forward.log | tail -40 ;;
newvalues)
  for round in $(seq ${ROUNDS:-2}); do (use ${BUILD:-main}; echo "== round $round"
      timeout 60 python3 bench/newvalues_cpu.py --counts 12 64 --workloads document rm_shared hstu_jagged 2>&1 | tail -4
      timeout 60 python3 bench/newvalues_cpu.py --counts 12 64 --workloads document rm_shared hstu_jagged --ahead 2>&1 | tail -4) \
      | tee -a $OUT/newvalues.log; done ;;
pers)
  (use pers; timeout ${TESTS_S:-240} python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider -W ignore::DeprecationWarning -rf tests/gpu/test_backward.py \
     > $OUT/pytest-backward-pers.log 2>&1
   echo "backward tests (pers): $(tail -1 $OUT/pytest-backward-pers.log)"; grep -E "^FAILED" $OUT/pytest-backward-pers.log | head)
  for round in $(seq ${ROUNDS:-1}); do for b in ${BUILDS}; do (use $b; echo "== $b round $round"; timeout 150 python3 bench/probe.py --backward \
      ${WORKLOADS:-rm_shared document hstu_jagged causal shared_prompt hstu}) 2>&1 | grep -v -i warn | tee -a $OUT/probes.log; done; done
  [ "${ITEMCOST:-1}" = 1 ] && for b in ${BUILDS}; do (use $b; echo "== $b"; timeout ${ITEM_S:-120} python3 docs/experiments/s26/item_cost.py 2>&1 | grep -v -i warn) | tee -a $OUT/item-cost.log; done ;;
timeline)
  (use ${BUILD:-tl}; timeout ${TIMELINE_S:-300} python3 docs/experiments/s28/timeline.py ${TIMELINE_ARGS:-} 2>&1) | tee $OUT/timeline.log ;;
esac
