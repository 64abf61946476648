#!/usr/bin/env bash
# The thirty-sixth session's device call (calls 6 and 10; carry .whl, wheels as for s29-device-call.sh):
#   TESTB="b1 b2"  the backward GPU tests (tests/gpu/test_backward.py) on each build,
#   MB, MW         then the dK/dV kernel under ncu at locked clocks for each build in MB on each workload in MW
#                  (s32/ncu_dkdv.sh; its cycles repeat to 0.1-0.3% between calls),
#   BUILDS, ROUNDS, WORKLOADS  then capped timings (s33-device-call.sh's compare) when ROUNDS is set.
# Everything lands in $OUT/s36.tgz (the tool returns 8 files at most). E.g.
#   TESTB=ks MB="main ks" MW="hstu document rm_shared causal" BUILDS="main ks" ROUNDS=2 \
#     WORKLOADS="hstu document rm_shared causal shared_prompt" bash docs/experiments/s36-device-call.sh
# (Call 1 ran ncu_dkdv.sh itself, BUILDS="main nm" WORKLOADS="document causal", then again with SASS=1; call 5
# the same with SASS=1 for nm on document, then MB="main bt ow ow2 nm" on document and "main ow2" on rm_shared.)
R=$OUT; mkdir -p /tmp/o; export OUT=/tmp/o
for t in ${TESTB:-}; do BUILDS="$t" ROUNDS=0 BACKWARD=0 TEST=$t bash docs/experiments/s29-device-call.sh 2>&1 | grep "tests\|FAILED" | head; done
[ -n "${MB:-}" ] && BUILDS="$MB" WORKLOADS="$MW" bash docs/experiments/s32/ncu_dkdv.sh 2>&1 | grep "rc\|Duration\|Elapsed\|Executed Inst\|Spilling\|metric"
[ "${ROUNDS:-0}" != 0 ] && PART=compare TEST= bash docs/experiments/s33-device-call.sh 2>&1 | tail -14
cd /tmp/o && tar czf $R/s36.tgz .
