#!/usr/bin/env bash
# Device calls of the thirtieth session (wheels and BUILDS as in s29-device-call.sh; carry .whl).
# PART=fwdtimeline (BUILDS=ftl BUILD=ftl: a wheel of branch s30-fwd-timeline = main + docs/experiments/s30/
# fwd-timeline.patch): where a forward item's time goes (docs/experiments/s30/fwd_timeline.py).
# Any other PART: docs/experiments/s29-device-call.sh's.
case "${PART:-compare}" in
fwdtimeline)
  source docs/experiments/device-builds.sh
  (use ${BUILD:-ftl}; timeout ${TIMELINE_S:-300} python3 docs/experiments/s30/fwd_timeline.py ${TIMELINE_ARGS:-} 2>&1) \
    | grep -v -i warn | tee $OUT/fwd-timeline.log ;;
*) exec bash docs/experiments/s29-device-call.sh ;;
esac
