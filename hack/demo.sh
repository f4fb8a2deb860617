#!/usr/bin/env bash
# The demo: bring up the local clusters (one manager and two workers, each a
# real Kubernetes control plane built from Go modules, wired for MultiKueue),
# start our controller on each, submit a Job and a Tekton PipelineRun to the
# manager and show them being dispatched to a worker and finishing.
# Installs what it needs (virtualenv, Python dependencies, binaries) by itself;
# a cold build of the binaries prints what it builds and a progress line every
# 30 seconds. The clusters and the controllers keep running afterwards, so
# another Job submitted to the manager is dispatched too; stop them all with:
#   ~/.cache/multikueue/venv/bin/multikueue dev clusters down
# (the virtualenv is not on your PATH: the demo's closing lines use that full path).
#
# --kind: the same on kind clusters with the controllers deployed in them from
# the image (kind-configs/up.sh brings them up first, or reuses them; needs
# Docker, root on a machine where the node image must be built offline);
# remove them with kind-configs/down.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh

for arg in "$@"; do
  if [ "$arg" = "--kind" ]; then
    kind-configs/up.sh
    source "$MULTIKUEUE_CACHE/venv/bin/activate"
    echo "--- the demo on kind: a Job and a PipelineRun dispatched from the manager to a worker"
    exec multikueue dev demo "$@"
  fi
done
ensure_venv
echo "--- building (or reusing) the local cluster binaries"
multikueue dev build
echo "--- the demo: a Job and a PipelineRun dispatched from the manager to a worker"
multikueue dev demo "$@"
