#!/usr/bin/env bash
# Delete the kind clusters created by up.sh.
set -euo pipefail
for name in manager worker1 worker2; do
  kind delete cluster --name "multikueue-$name" || true
done
rm -rf "$(cd "$(dirname "$0")" && pwd)/.state"
