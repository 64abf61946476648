#!/usr/bin/env bash
# What one GPU session runs (the H200 machine has PyTorch, Triton, CuPy, cuda-bindings and NVRTC but not lark:
# its wheel travels in .whl with maskc's own wheel, built by `pip wheel . --no-deps -w .whl`).
# Results go to $OUT (or ./h200-results): GPU tests, `maskc run` on every example, planner times, anchors.
set -uo pipefail
OUT=${OUT:-h200-results}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1 PATH=/tmp/site/bin:$PATH
export MASKC_CACHE_DIR=${MASKC_CACHE_DIR:-/tmp/maskc-cache}

{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import torch, triton, cupy, numpy, maskc; from maskc.build import nvrtc_version
print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__, 'numpy', numpy.__version__,
      'nvrtc', nvrtc_version(), 'maskc', maskc.__version__, maskc.__file__)"; } | tee "$OUT/env.txt"

timeout 300 python3 -m pytest -q -m gpu tests -p no:cacheprovider -W ignore::DeprecationWarning > "$OUT/pytest.log" 2>&1
tail -3 "$OUT/pytest.log"

for mask in examples/*.mask; do
    timeout 60 maskc run "$mask" --json >> "$OUT/run_examples.jsonl" 2>> "$OUT/run_examples.err" || echo "run failed: $mask"
done
python3 - "$OUT/run_examples.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['mask']:16s} passed={r['passed']} err={r['max_error']:.2e} bound={r['error_bound']:.2e} {r['tflops']:7.1f} TFLOP/s")
PY

timeout 90 python3 bench/plan_time.py --json "$OUT/plan_time.json" > "$OUT/plan_time.log" 2>&1
timeout 300 python3 bench/anchors.py --json "$OUT/anchors.json" > "$OUT/anchors.log" 2>&1
tail -12 "$OUT/anchors.log"
cat "$OUT/plan_time.log"
