#!/usr/bin/env bash
# Regenerates requirements.lock: every Python package the set-up scripts
# install (pyproject.toml's dependencies, its `dev` extra and its build
# requirements), pinned with the sha256 of each of its files on the index.
#
#   hack/update-lock.sh                 # after editing pyproject.toml: keeps the other pins
#   hack/update-lock.sh --upgrade       # move every pin to the newest allowed version
#   hack/update-lock.sh --upgrade-package rich
#
# `uv pip compile --universal` writes one file for every Python >= 3.11 and
# platform (markers where they differ), which pip-tools' pip-compile cannot:
# it resolves for the interpreter it runs on. uv runs from a throwaway
# virtualenv in the cache (pinned version), never from the project's venv, so
# the lock does not depend on what happens to be installed there. Extra
# arguments go to `uv pip compile`.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh

UV_VERSION=0.13.9
tools="$MULTIKUEUE_CACHE/lock-tools"
if [ ! -x "$tools/bin/uv" ] || [ "$("$tools/bin/uv" --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  echo "--- installing uv $UV_VERSION into $tools"
  "${PYTHON:-python3}" -m venv "$tools"
  "$tools/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi

# Build requirements are locked too: ensure_venv installs them from the lock and
# builds the editable install without isolation, so nothing unpinned is fetched.
build_requires=$("${PYTHON:-python3}" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')
echo "--- resolving into $LOCK_FILE"
echo "$build_requires" | "$tools/bin/uv" pip compile pyproject.toml - \
  --extra dev --generate-hashes --universal --python-version 3.11 \
  --custom-compile-command "hack/update-lock.sh" \
  --quiet -o "$LOCK_FILE" "$@"
echo "    $(grep -c '^[A-Za-z0-9]' "$LOCK_FILE") packages pinned; commit $LOCK_FILE with pyproject.toml"
