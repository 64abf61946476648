#!/usr/bin/env bash
# What one GPU session runs (the H200 machine has PyTorch, Triton, CuPy, cuda-bindings and NVRTC but not lark:
# its wheel travels in .whl with maskc's own wheel, built by `pip wheel . --no-deps -w .whl`).
# Results go to $OUT (or ./h200-results): env.txt, pytest.log, run_examples.jsonl, misc.log
# (errors of `maskc run`, planner table), plan_time.json, bench.json, bench.png, bench.log.
#
# STAGES picks what runs (default: the first four, ~10 minutes; the GPU tool allows 10 minutes a command, so split
# a session into calls: STAGES="tests examples plan", then STAGES=bench, then STAGES=training).
# host: the host side of a call on the GPU machine (bench/percall.py: the repeated forward's pieces, the
# backward repeated and checked, an eager autograd step), in host.log.
# fuzz: random masks at depth on every pass (FUZZ_EXAMPLES a test, default 25), failing examples in fuzz-fails.txt.
# training: every backward pass side by side (bench/families.py --backward), the harness's --backward table for
# maskc and Flex-Triton, and 100 steps of examples/train_reward_model.py (training.log, train.png). more: the examples
# outside ANCHORS.md against Flex-Triton, forward and backward (more.log, more.json). HARNESS_ARGS adds options to
# bench/harness.py (e.g. "--family sm90a"); MASKC_COMMIT names the commit when .git does not travel.
set -uo pipefail
OUT=${OUT:-h200-results}
STAGES=${STAGES:-tests examples plan bench}
mkdir -p "$OUT"
rm -rf /tmp/site  # a warm machine keeps the last session's install: never test a stale wheel
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
export MASKC_CACHE_DIR=${MASKC_CACHE_DIR:-/tmp/maskc-cache}
export MASKC_COMMIT=${MASKC_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}
has() { [[ " $STAGES " == *" $1 "* ]]; }

{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import torch, triton, cupy, numpy, maskc; from maskc.build import nvrtc_version
print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__, 'numpy', numpy.__version__,
      'nvrtc', nvrtc_version(), 'maskc', maskc.__version__, maskc.__file__)"
  echo "commit ${MASKC_COMMIT:-unknown}, stages: $STAGES, harness args: ${HARNESS_ARGS:-none}"; } | tee "$OUT/env.txt"

if has tests; then
    timeout 300 python3 -m pytest -q -m gpu tests -p no:cacheprovider -W ignore::DeprecationWarning > "$OUT/pytest.log" 2>&1
    tail -3 "$OUT/pytest.log"
fi

if has examples; then
    for mask in examples/*.mask; do
        timeout 60 maskc run "$mask" --json >> "$OUT/run_examples.jsonl" 2>> "$OUT/misc.log" || echo "run failed: $mask"
    done
    python3 - "$OUT/run_examples.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['mask']:16s} passed={r['passed']} err={r['max_error']:.2e} bound={r['error_bound']:.2e} {r['tflops']:7.1f} TFLOP/s")
PY
fi

if has plan; then
    timeout 90 python3 bench/plan_time.py --ahead --json "$OUT/plan_time.json" 2>&1 | tee -a "$OUT/misc.log"
    timeout 150 python3 bench/plan_time.py --packed 2>&1 | tee -a "$OUT/misc.log"  # batches of 1-1024 sequences, images
    timeout 120 python3 bench/newvalues_cpu.py --steps 40 2>&1 | tee -a "$OUT/misc.log"  # a step's first call, new values
    timeout 90 python3 bench/newvalues_cpu.py --steps 20 --counts 9 64 --layers 8 2>&1 | tee -a "$OUT/misc.log"  # + layers 2-8
    timeout 90 python3 bench/plan_time.py --lists 2>&1 | tee -a "$OUT/misc.log"  # document ids, flags, members' lists
fi

if has host; then
    { timeout 120 python3 bench/percall.py pieces; timeout 120 python3 bench/percall.py backward; } \
        > "$OUT/host.log" 2>&1
    cat "$OUT/host.log"
fi

if has training; then
    timeout 150 python3 bench/families.py --backward --archs sm_90a sm_90a:hopper sm_90a:portable \
        --workloads causal document shared_prompt > "$OUT/training.log" 2>&1
    timeout 240 python3 bench/harness.py --backward --systems maskc flex-triton \
        --workloads causal document rm_shared --json "$OUT/bench_backward.json" >> "$OUT/training.log" 2>&1
    timeout 150 python3 examples/train_reward_model.py --steps 100 --png "$OUT/train.png" >> "$OUT/training.log" 2>&1
    grep -E "^(workload|causal|document|shared_prompt)|time per step|largest gap|fwd\+bwd|backward alone" "$OUT/training.log" | tail -30
fi

if has fuzz; then
    # Random masks at depth on every pass (tests/gpu/test_random_masks.py): each failing example goes to fuzz-fails.txt
    # as it fails, since a time limit can stop pytest before hypothesis reports it.
    MASKC_GPU_FUZZ_LOG="$OUT/fuzz-fails.txt" MASKC_GPU_FUZZ_EXAMPLES=${FUZZ_EXAMPLES:-25} timeout "${FUZZ_TIMEOUT:-450}" \
        python3 -m pytest -q -m gpu -n 12 --maxfail=1 -p no:cacheprovider -W ignore::DeprecationWarning \
        tests/gpu/test_random_masks.py > "$OUT/fuzz.log" 2>&1
    tail -1 "$OUT/fuzz.log"
    [ -s "$OUT/fuzz-fails.txt" ] && head -60 "$OUT/fuzz-fails.txt"
fi

if has more; then
    timeout 300 python3 bench/harness.py --backward --workloads more --systems maskc flex-triton \
        --json "$OUT/more.json" > "$OUT/more.log" 2>&1
    grep -A11 -E "^workloads, N = [0-9]+: (forward|fwd\+bwd)" "$OUT/more.log" | grep -v "^time" | head -24
fi

# Last, so that its tables end the output (the GPU tool returns the tail).
if has bench; then
    # shellcheck disable=SC2086 # HARNESS_ARGS is a list of options
    timeout "${BENCH_TIMEOUT:-540}" python3 bench/harness.py --sweep --first-call --json "$OUT/bench.json" \
        --png "$OUT/bench.png" ${HARNESS_ARGS:-} > "$OUT/bench.log" 2>&1
    echo "harness exit code $?"
    if grep -q '^=====' "$OUT/bench.log"; then sed -n '/^=====/,$p' "$OUT/bench.log"; else tail -40 "$OUT/bench.log"; fi
fi
