#!/usr/bin/env bash
# Run the whole test suite (unit, integration, e2e) against real local clusters.
#
# Installs what it needs by itself: a virtualenv with the package and its dev
# extras, and the Kubernetes control-plane binaries built from Go modules
# (cached outside the repository in ${MULTIKUEUE_CACHE:-~/.cache/multikueue}).
#
# Without arguments it runs these passes: the whole suite with the controllers
# as processes, then the image pass: the container image built by
# hack/image.sh (Docker installed and started if needed), its tests, the
# install on a bare cluster, and the MultiKueue e2e tests plus the leader's
# container killed, with every controller from the image installed by
# config/default and config/worker (--controllers image); then three kind
# passes (kind-configs/up.sh: kind and the offline node image built when
# missing): the e2e tests marked upstream_worker on kind clusters whose worker2
# runs upstream Kueue (--upstream-worker worker2), those marked upstream_manager
# on kind clusters whose manager runs upstream Kueue (--upstream-manager), then
# the e2e suite on kind clusters running this project's controller everywhere;
# the clusters are removed at the end.
# Extra arguments go to pytest instead, for one pass, e.g. `hack/test.sh -m unit`.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh

ensure_venv
echo "--- building (or reusing) the local cluster binaries"
multikueue dev build

run_pytest() {
  set +e
  python -m pytest "$@"
  local code=$?
  set -e
  if [ "$code" -eq 5 ]; then
    echo "pytest collected no tests: treating that as a failure" >&2
    return 1
  fi
  return "$code"
}

if [ "$#" -gt 0 ]; then
  echo "--- running the tests"
  run_pytest "$@"
  exit $?
fi

if ! command -v zsh >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "--- installing zsh (tests/cli/test_listing.py runs the zsh completion script)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zsh; } ||
    echo "zsh could not be installed: its completion test is skipped and says so"
fi
echo "--- running the tests (controllers as processes)"
code=0
run_pytest || code=$?
echo "--- running the image pass (controllers from the image; hack/image.sh builds it)"
run_pytest --controllers image tests/image e2e/test_install.py e2e/test_multikueue.py \
  "e2e/test_faults.py::test_leader_container_killed_standby_takes_over" || code=$?
kind_pass() {
  kind-configs/down.sh
  kind-configs/up.sh "$@" && run_pytest -m e2e --clusters kind e2e
}
echo "--- kind pass 1: worker2 runs upstream Kueue (kind-configs/up.sh --upstream-worker worker2)"
kind_pass --upstream-worker worker2 || code=$?
echo "--- kind pass 2: the manager runs upstream Kueue, the workers ours (kind-configs/up.sh --upstream-manager)"
kind_pass --upstream-manager || code=$?
echo "--- kind pass 3: this project's controller on every kind cluster (kind-configs/up.sh)"
kind_pass || code=$?
kind-configs/down.sh || code=$?
exit "$code"
