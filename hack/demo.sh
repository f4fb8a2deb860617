#!/usr/bin/env bash
# Bring up the local clusters: one manager and two workers, each a real
# Kubernetes control plane built from Go modules, wired for MultiKueue.
# Installs what it needs (virtualenv, Python dependencies, binaries) by itself.
# Stop them with: ~/.cache/multikueue/venv/bin/multikueue dev clusters down
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh

ensure_venv
echo "--- building (or reusing) the local cluster binaries"
multikueue dev build
if multikueue dev clusters status >/dev/null 2>&1; then
  echo "--- local clusters are already running:"
  multikueue dev clusters status
  exit 0
fi
echo "--- starting a manager and two workers"
multikueue dev clusters up --workers 2
echo "--- MultiKueueClusters on the manager:"
if command -v kubectl >/dev/null; then
  kubectl --kubeconfig "$MULTIKUEUE_CACHE/clusters/dev/manager/kubeconfig" get multikueueclusters
fi
