# Shared by hack/*.sh: a virtualenv in the cache folder with this checkout installed.
MULTIKUEUE_CACHE="${MULTIKUEUE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/multikueue}"
export MULTIKUEUE_CACHE

# The pinned Python dependencies, with their hashes (hack/update-lock.sh writes it).
LOCK_FILE="${LOCK_FILE:-requirements.lock}"

# ensure_venv: a virtualenv in the cache folder holding exactly the packages of
# $LOCK_FILE (hash-checked) and this checkout (editable), activated. The
# install runs only when the lock, the packaging sections of pyproject.toml
# ([project], [build-system], [tool.setuptools]: not pytest's or the linters'
# settings) or the Python changed since the last one (their hash is kept in
# the venv's stamp file): a run with nothing to install neither reaches the
# index nor prints pip's lines.
ensure_venv() {
  local python="${PYTHON:-python3}"
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "error: Python 3.11 or newer is needed (found: $("$python" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
    exit 1
  fi
  local venv="$MULTIKUEUE_CACHE/venv"
  if [ ! -x "$venv/bin/python" ]; then
    echo "--- creating a virtualenv in $venv"
    "$python" -m venv "$venv"
  fi
  # shellcheck disable=SC1091
  source "$venv/bin/activate"
  local stamp="$venv/.multikueue-install" want
  want=$({
    python -c 'import sys; print(sys.executable, sys.version)'
    pwd
    cat "$LOCK_FILE"
    python -c 'import json, tomllib; d = tomllib.load(open("pyproject.toml", "rb")); print(json.dumps([d.get("project"), d.get("build-system"), d.get("tool", {}).get("setuptools")], sort_keys=True))'
  } | sha256sum | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  echo "--- installing multikueue and its pinned dependencies ($LOCK_FILE) into $venv"
  local start=$SECONDS
  rm -f "$stamp"
  # --require-hashes: every package, the build requirements included, must match the lock.
  python -m pip install --quiet --disable-pip-version-check --require-hashes -r "$LOCK_FILE"
  # No build isolation: setuptools and wheel come from the lock, not a fresh unpinned download.
  python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
  echo "$want" >"$stamp"
  echo "    done in $((SECONDS - start))s"
}

# Seconds between two "still ..." lines of a running step.
STEP_PROGRESS_SECONDS="${STEP_PROGRESS_SECONDS:-30}"

# step DESCRIPTION COMMAND [ARG...]: runs the command (a function is fine) with
# its output in a log file under $STEP_LOG_DIR, prints the elapsed time (and a
# progress line every $STEP_PROGRESS_SECONDS while it runs), and on
# failure the log's tail, then exits. The command runs as a background job and
# is waited for, so that `set -e` still applies inside a function (it would not
# in an `if` or `||` context). Used by hack/image.sh and kind-configs/node-image.sh.
step() {
  local what="$1"
  shift
  mkdir -p "$STEP_LOG_DIR"
  local log
  log="$STEP_LOG_DIR/$(date +%Y%m%d-%H%M%S)-$(echo "$what" | tr -c 'a-zA-Z0-9\n' '-' | cut -c1-40).log"
  local start=$SECONDS
  echo "--- $what"
  ("$@") </dev/null >"$log" 2>&1 &
  local pid=$! rc=0 next=$((SECONDS + STEP_PROGRESS_SECONDS))
  # A line every STEP_PROGRESS_SECONDS while it runs: a cold debootstrap or go
  # build takes minutes, and a silent terminal looks hung.
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ "$SECONDS" -ge "$next" ] && kill -0 "$pid" 2>/dev/null; then
      echo "    ... still $what: $((SECONDS - start))s elapsed (log: $log)"
      next=$((SECONDS + STEP_PROGRESS_SECONDS))
    fi
  done
  wait "$pid" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "error: $what failed (exit $rc) after $((SECONDS - start))s; last lines of $log:" >&2
    tail -n 40 "$log" | sed 's/^/    /' >&2
    exit 1
  fi
  echo "    done in $((SECONDS - start))s"
}

# debian_mirror: $DEBIAN_MIRROR, else the first Debian main archive apt uses
# here (one-line or deb822 format), else deb.debian.org. For debootstrap in
# hack/image.sh and kind-configs/node-image.sh.
debian_mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then
    echo "$DEBIAN_MIRROR"
    return
  fi
  local m
  m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
    grep -Eo '(https?://[^ ]+/debian)/?( |$)' | grep -v security | head -n 1 | tr -d ' ' || true)
  echo "${m:-http://deb.debian.org/debian}"
}

# slim_dpkg ROOTFS: docs, man pages and translations are never unpacked into
# ROOTFS (dpkg path-exclude), during debootstrap's second stage nor by later
# apt-get installs; copyright files are kept.
slim_dpkg() {
  mkdir -p "$1/etc/dpkg/dpkg.cfg.d"
  cat >"$1/etc/dpkg/dpkg.cfg.d/01-multikueue-slim" <<'CFG'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-exclude=/usr/share/lintian/*
path-exclude=/usr/share/linda/*
CFG
}
