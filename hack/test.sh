#!/usr/bin/env bash
# Run the whole test suite (unit, integration, e2e) against real local clusters.
#
# Installs what it needs by itself: a virtualenv with the package and its dev
# extras, and the Kubernetes control-plane binaries built from Go modules
# (cached outside the repository in ${MULTIKUEUE_CACHE:-~/.cache/multikueue}).
# Extra arguments go to pytest, e.g. `hack/test.sh -m unit`.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh

ensure_venv
echo "--- building (or reusing) the local cluster binaries"
multikueue dev build
echo "--- running the tests"
set +e
python -m pytest "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
  echo "pytest collected no tests: treating that as a failure" >&2
  exit 1
fi
exit "$code"
