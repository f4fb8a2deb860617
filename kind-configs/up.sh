#!/usr/bin/env bash
# Bring up MultiKueue on kind: a manager and two worker kind clusters with this
# project's controller deployed in each from its image, the workers wired on
# the manager, and ready queues (ClusterQueue `cluster-queue`, LocalQueue
# `default/user-queue`). Then try:
#   kubectl --kubeconfig kind-configs/.state/manager.kubeconfig create -f examples/kind/sample-job.yaml
#
# Installs what it needs by itself: the Python environment, the Docker engine
# (hack/image.sh --engine-only), kind (go install, into the cache folder),
# the controller image (hack/image.sh) and, when the public kindest/node image
# cannot be pulled, the offline node image (kind-configs/node-image.sh).
# Running it again reuses what exists (clusters, images) and re-applies the rest.
#
# Usage: kind-configs/up.sh [--node-image IMAGE] [--upstream-worker WORKER] [--upstream-manager]
#   --upstream-worker worker2   run upstream Kueue v0.19.2 on that worker instead of
#                               this project's controller (built from
#                               ../shared/thirdparty/kueue-v0.19.2.tar.gz; about 10
#                               minutes the first time). Repeatable.
#   --upstream-manager          run upstream Kueue v0.19.2 on the manager: its
#                               MultiKueue dispatches to the workers (ours).
# Environment: KIND_NODE_IMAGE (same as --node-image), MULTIKUEUE_CACHE.
# Remove everything with kind-configs/down.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/.."
source hack/lib.sh

KIND_VERSION=v0.33.0
# The public node image of the Kubernetes version the offline image builds.
PUBLIC_NODE_IMAGE=kindest/node:v1.35.4
node_image="${KIND_NODE_IMAGE:-}"
upstream=()
while [ $# -gt 0 ]; do
  case "$1" in
    --node-image) node_image="$2"; shift 2 ;;
    --upstream-worker) upstream+=(--upstream-worker "${2:?--upstream-worker needs a worker name (worker1 or worker2)}"); shift 2 ;;
    --upstream-manager) upstream+=(--upstream-manager); shift ;;
    -h | --help) sed -n '/^# Usage:/,/^# Remove/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

cache="$MULTIKUEUE_CACHE"
export PATH="$cache/bin:$PATH"
started=$SECONDS
say() { echo "--- [$((SECONDS - started))s] $*"; }

ensure_venv
say "Docker engine"
hack/image.sh --engine-only
if ! command -v kind >/dev/null || [ "v$(kind version -q 2>/dev/null)" != "$KIND_VERSION" ]; then
  say "building kind $KIND_VERSION (go install, into $cache/bin)"
  command -v go >/dev/null || { echo "error: kind is not installed and Go is not available to build it" >&2; exit 1; }
  GOBIN="$cache/bin" go install "sigs.k8s.io/kind@$KIND_VERSION"
fi
command -v kubectl >/dev/null || { echo "error: kubectl is not installed (https://kubernetes.io/docs/tasks/tools/)" >&2; exit 1; }

if [ -z "$node_image" ]; then
  if docker image inspect "$PUBLIC_NODE_IMAGE" >/dev/null 2>&1 || timeout 60 docker pull -q "$PUBLIC_NODE_IMAGE" >/dev/null 2>&1; then
    node_image="$PUBLIC_NODE_IMAGE"
  else
    say "$PUBLIC_NODE_IMAGE cannot be pulled: building the offline node image (kind-configs/node-image.sh)"
    kind-configs/node-image.sh
    node_image="multikueue/kind-node:v1.35.4"
  fi
fi
say "controller image (hack/image.sh)"
hack/image.sh
say "clusters on node image $node_image"
multikueue dev kind up --node-image "$node_image" "${upstream[@]}"
say "done"
