#!/usr/bin/env bash
# A wheel of main into .whl/main (and lark and click into .whl/deps), from a clean checkout, run from the repository
# root: what docs/experiments/s48/table-call.sh installs. (The forty-eighth session built main at b9bcd06 with fg4 =
# main + docs/experiments/s47/fwd-last-group-four-heads.patch, which landed as 168c3e5, and sil = main +
# docs/experiments/s48/fwd-short-items-last.patch; both patches apply to b9bcd06, not to main since fg4.)
source docs/experiments/wheel-builds.sh
wheel main
