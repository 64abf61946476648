#!/usr/bin/env bash
# The forty-sixth session's device call (carry .whl; .whl/main, pk, pkr from WHICH=persistent
# docs/experiments/s45/build-wheels.sh). On an H200, issue 6's table on main first (its targets are H200 figures);
# on an H100, the persistent dK/dV builds pk and pkr against main (docs/experiments/s45/device-call.sh with the
# variables given to this script).
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ "${TABLE:-1}" = 1 ]; then
  echo "H200: issue 6's table on main"
  PART=table WORKLOADS="${TABLE_WORKLOADS:-causal shared_prompt hstu document rm_shared clear clear_text}" \
    timeout ${TABLE_S:-400} bash docs/experiments/s38-device-call.sh
else
  bash docs/experiments/s45/device-call.sh
fi
