#!/usr/bin/env bash
# The demo: bring up the local clusters (one manager and two workers, each a
# real Kubernetes control plane built from Go modules, wired for MultiKueue),
# start our controller on each, submit a Job and a Tekton PipelineRun to the
# manager and show them being dispatched to a worker and finishing.
# Installs what it needs (virtualenv, Python dependencies, binaries) by itself.
# The clusters keep running afterwards; stop them with:
#   ~/.cache/multikueue/venv/bin/multikueue dev clusters down
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh

ensure_venv
echo "--- building (or reusing) the local cluster binaries"
multikueue dev build
echo "--- the demo: a Job and a PipelineRun dispatched from the manager to a worker"
multikueue dev demo "$@"
