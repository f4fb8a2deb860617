#!/usr/bin/env bash
# Create one manager and two worker kind clusters and wire them like
# `multikueue dev clusters up` does for local control planes: CRDs everywhere,
# worker access (config/worker-access) on each worker, and on the manager a
# kubeconfig Secret plus a MultiKueueCluster per worker.
#
# Needs Docker and kind. Kubeconfigs are written to kind-configs/.state/.
# The worker kubeconfigs stored on the manager use the clusters' addresses on
# the "kind" Docker network (kind get kubeconfig --internal), so a controller
# running inside the manager cluster reaches them; pass --host to use the
# 127.0.0.1 addresses instead when the controller runs on this machine.
# Then run the e2e suite against them: pytest -m e2e --clusters kind
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/.."
source hack/lib.sh
address=internal
[ "${1:-}" = "--host" ] && address=host

for tool in docker kind; do
  command -v "$tool" >/dev/null || { echo "error: $tool is not installed; kind clusters need Docker and kind (or use: multikueue dev clusters up)" >&2; exit 1; }
done
ensure_venv
state="$here/.state"
mkdir -p "$state"
for name in manager worker1 worker2; do
  if ! kind get clusters | grep -qx "multikueue-$name"; then
    kind create cluster --config "$here/$name.yaml" ${KIND_IMAGE:+--image "$KIND_IMAGE"}
  fi
  kind get kubeconfig --name "multikueue-$name" > "$state/$name.kubeconfig"
done
args=()
for name in worker1 worker2; do
  if [ "$address" = internal ]; then
    server="$(kind get kubeconfig --internal --name "multikueue-$name" | sed -n 's/^ *server: //p' | head -1)"
  else
    server=""
  fi
  args+=(--worker "$name=$state/$name.kubeconfig${server:+@$server}")
done
multikueue dev wire --manager "$state/manager.kubeconfig" "${args[@]}"
echo "kind clusters are wired; kubeconfigs in $state"
