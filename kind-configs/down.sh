#!/usr/bin/env bash
# Delete the kind clusters of kind-configs/up.sh and their kubeconfigs (kind-configs/.state).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh
cache="$MULTIKUEUE_CACHE"
export PATH="$cache/bin:$PATH"
ensure_venv
multikueue dev kind down
