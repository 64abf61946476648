# Sourced by the sessions' wheel-building scripts (s40/build-pair-wheels.sh, s42/build-wheels.sh,
# s43/build-wheels.sh, s44/build-wheels.sh, s45/build-wheels.sh, s46/build-wheels.sh), run from the repository root: refuses a tree whose
# templates/, maskc/ or tests/ has changes, puts lark and click into .whl/deps, gives `wheel NAME` (a wheel of the
# tree as it is now into .whl/NAME) and `patched_wheel NAME PATCH` (a wheel of main with PATCH applied, the tree
# restored after it), and restores those three when the script exits, a failed build included (the patches touch
# them).
set -euo pipefail
git diff --quiet -- templates maskc tests || { echo "templates/, maskc/ or tests/ has changes: start from a clean tree"; exit 1; }
wheel() { rm -rf build .whl/$1; pip wheel -q . --no-deps -w .whl/$1; }
mkdir -p .whl/deps && pip download -q --no-deps -d .whl/deps lark click
trap 'git checkout -- templates maskc tests' EXIT
patched_wheel() { git apply $2 && wheel $1 && git checkout -- templates maskc tests; }
