# Shared by hack/*.sh: a virtualenv in the cache folder with this checkout installed.
MULTIKUEUE_CACHE="${MULTIKUEUE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/multikueue}"
export MULTIKUEUE_CACHE

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
  echo "--- installing multikueue and its dependencies"
  python -m pip install --quiet --disable-pip-version-check --upgrade pip
  python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
}
