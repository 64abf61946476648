# Sourced by the sessions' device scripts (s24-device-call.sh, s25-device-call.sh): the GPU's name, driver,
# temperature, power and clock into $OUT/gpu.txt; each build in BUILDS (default main) installed once per machine and wheel
# from .whl/<build> and .whl/deps into /tmp/site-<build>; `use BUILD` puts that build on the path, with a cache
# of its own.
set -uo pipefail
export PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw,clocks.sm --format=csv,noheader | tee -a $OUT/gpu.txt
# (A build is installed again when its wheel changed: a warm machine keeps /tmp from an earlier call, and a new
# wheel under an old name once ran the old one.)
for b in ${BUILDS:-main}; do
  w=$(cat .whl/$b/*.whl | sha1sum | cut -c1-16)
  [ "$(cat /tmp/site-$b/.wheel 2>/dev/null)" = "$w" ] && continue
  rm -rf /tmp/site-$b /tmp/mc-$b
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site-$b .whl/deps/*.whl .whl/$b/*.whl && echo $w > /tmp/site-$b/.wheel
done
use() { export PYTHONPATH=/tmp/site-$1 PATH=/tmp/site-$1/bin:$PATH MASKC_CACHE_DIR=/tmp/mc-$1 MASKC_COMMIT=$1; }
