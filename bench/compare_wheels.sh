#!/usr/bin/env bash
# Several builds of maskc side by side on one GPU machine (a development probe): for each folder .whl/NAME/
# holding one maskc wheel, install it (with the wheels of .whl/deps/: lark, click), run the backward gradient
# tests (TESTS, a pytest -k expression) and time each backward kernel (bench/bwd_kernels.py with ARCHS and
# WORKLOADS, plus KERNEL_ARGS, e.g. "--head-dim 64"). Results in $OUT/NAME-tests.log and $OUT/NAME-kernels.log;
# the kernel tables are printed. For the forward: TEST_FILE=tests/gpu/test_kernels.py TESTS=sm_90a, and
# HARNESS="causal document ..." adds the harness's forward table (bench/harness.py --systems maskc) per build;
# KERNELS=0 skips the backward kernel timings.
#
#   for b in main fused-split-barrier; do (cd ../wt/$b && pip wheel -q . --no-deps -w $OLDPWD/.whl/$b); done
#   OUT=... bash bench/compare_wheels.sh main fused-split-barrier      (the GPU tool: carry .whl)
set -uo pipefail
OUT=${OUT:-compare-results}
TESTS=${TESTS:-sm_90a and not portable}  # the default (fused at hd128) and the Hopper pair
ARCHS=${ARCHS:-sm_90a sm_90a:hopper}
WORKLOADS=${WORKLOADS:-causal hstu shared_prompt document}
mkdir -p "$OUT"
export PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
for name in "$@"; do
    rm -rf /tmp/site /tmp/maskc-compare-cache
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site \
        .whl/deps/*.whl ".whl/$name"/*.whl || { echo "$name: install failed"; continue; }
    export MASKC_CACHE_DIR=/tmp/maskc-compare-cache MASKC_COMMIT=$name
    timeout "${TEST_TIMEOUT:-120}" python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider -W ignore::DeprecationWarning \
        "${TEST_FILE:-tests/gpu/test_backward.py}" -k "$TESTS" > "$OUT/$name-tests.log" 2>&1
    echo "$name: $(tail -1 "$OUT/$name-tests.log")"
    if [ -n "${HARNESS:-}" ]; then
        # shellcheck disable=SC2086 # word list
        timeout "${BENCH_TIMEOUT:-150}" python3 bench/harness.py --systems maskc --workloads $HARNESS \
            > "$OUT/$name-harness.log" 2>&1
        grep -A "$(( $(wc -w <<< "$HARNESS") + 1 ))" "^workload" "$OUT/$name-harness.log" | head -n "$(( $(wc -w <<< "$HARNESS") + 1 ))"
    fi
    [ "${KERNELS:-1}" = 0 ] && continue
    # shellcheck disable=SC2086 # word lists
    timeout "${BENCH_TIMEOUT:-150}" python3 bench/bwd_kernels.py --workloads $WORKLOADS --archs $ARCHS ${KERNEL_ARGS:-} 2>&1 \
        | grep -v "^(" | grep -vi warn > "$OUT/$name-kernels.log"
    cat "$OUT/$name-kernels.log"
done
