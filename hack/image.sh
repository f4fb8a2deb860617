#!/usr/bin/env bash
# Build the controller image (Dockerfile at the repository root), by default
# tagged multikueue:dev, and print its size.
#
# Works on a machine without a running Docker engine and without access to an
# image registry:
#   1. if `docker info` fails, installs docker.io when dockerd is missing and
#      starts dockerd in the background (its log and pid in
#      $MULTIKUEUE_CACHE/docker), with overlay2 storage where overlayfs mounts
#      on /var/lib/docker (else vfs), and, when this machine's capability
#      bounding set is incomplete (`docker run --privileged` fails: kind), the
#      runc wrapper hack/docker/runc-nocap as its default runtime;
#   2. the base image: $BASE_IMAGE (or --base) if given; else the public
#      python:3.12-slim-bookworm when present locally; else the offline base
#      multikueue-base:bookworm when present; else tries to pull the public one
#      (short timeout); else makes the offline base once: a trimmed Debian
#      bookworm (debootstrap --variant=minbase, python3, python3-venv) imported
#      with `docker import`;
#   3. docker build --network host --build-arg BASE_IMAGE=<base> -t <tag> .
#
# Idempotent: a second run reuses the engine, the base and the build cache.
# Needs root when it has to install packages, run debootstrap or start dockerd.
# Each long step prints its elapsed time; its output goes to a log in
# $MULTIKUEUE_CACHE/docker/logs, whose tail is shown when it fails.
#
# Usage: hack/image.sh [-t|--tag TAG] [--base IMAGE] [--pull] [--rebuild-base] [--engine-only]
#   -t, --tag TAG     image tag (default $IMAGE or multikueue:dev)
#   --base IMAGE      base image to build on (default $BASE_IMAGE, else chosen as above)
#   --pull            try to pull the public base even when the offline base exists
#   --rebuild-base    make the offline base again (e.g. for security updates)
#   --engine-only     only make sure the Docker engine runs (step 1), build nothing
# Environment: IMAGE, BASE_IMAGE, PUBLIC_BASE, OFFLINE_BASE, PULL_TIMEOUT (seconds),
#   DEBIAN_MIRROR (default: the mirror apt uses here, else deb.debian.org),
#   DOCKER_STORAGE_DRIVER (for a dockerd this script starts; default overlay2 where it works, else vfs),
#   BUILD_CA_CERTS (PEM file pip trusts in the build; default the host's local CAs).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh

MULTIKUEUE_CACHE="${MULTIKUEUE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/multikueue}"
DOCKER_STATE="$MULTIKUEUE_CACHE/docker"
LOG_DIR="$DOCKER_STATE/logs"
STEP_LOG_DIR="$LOG_DIR"

IMAGE="${IMAGE:-multikueue:dev}"
BASE_IMAGE="${BASE_IMAGE:-}"
PUBLIC_BASE="${PUBLIC_BASE:-python:3.12-slim-bookworm}"
OFFLINE_BASE="${OFFLINE_BASE:-multikueue-base:bookworm}"
PULL_TIMEOUT="${PULL_TIMEOUT:-20}"
# Storage driver of a dockerd this script starts; empty: overlay2 where the
# kernel can mount overlayfs on /var/lib/docker, else vfs (vfs works everywhere
# but copies the whole image for each container: seconds per `docker run`).
DOCKER_STORAGE_DRIVER="${DOCKER_STORAGE_DRIVER:-}"
SUITE=bookworm
try_pull=false
rebuild_base=false
engine_only=false

usage() { sed -n '/^# Usage:/,/^# Environment/p' "$0" | sed 's/^# \{0,1\}//' | sed '$d'; }

die() {
  echo "error: $*" >&2
  exit 1
}

while [ $# -gt 0 ]; do
  case "$1" in
    -t | --tag) [ $# -ge 2 ] || die "$1 needs a value"; IMAGE="$2"; shift 2 ;;
    --base) [ $# -ge 2 ] || die "$1 needs a value"; BASE_IMAGE="$2"; shift 2 ;;
    --pull) try_pull=true; shift ;;
    --rebuild-base) rebuild_base=true; shift ;;
    --engine-only) engine_only=true; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

mkdir -p "$LOG_DIR"
export DEBIAN_FRONTEND=noninteractive


need_root() {
  [ "$(id -u)" -eq 0 ] || die "$1 needs root (run this script as root, or start a Docker engine yourself)"
}

apt_install() {
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "$@"
}

image_present() { docker image inspect "$1" >/dev/null 2>&1; }

# --- 1. the Docker engine -------------------------------------------------------

# A runc wrapper (hack/docker/runc-nocap) as dockerd's default runtime when
# this machine's capability bounding set lacks a capability: `docker run
# --privileged` (kind's nodes) fails there otherwise. Installed into the cache
# folder, so the engine does not depend on where this checkout is.
NOCAP_RUNTIME=runc-nocap

caps_incomplete() {
  local bnd last
  bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status 2>/dev/null || true)
  last=$(cat /proc/sys/kernel/cap_last_cap 2>/dev/null || true)
  [ -n "$bnd" ] && [ -n "$last" ] || return 1
  [ $((16#$bnd)) -ne $(((1 << (last + 1)) - 1)) ]
}

install_nocap_runtime() {
  local python
  python=$(command -v /usr/bin/python3 python3 | head -n 1)
  [ -n "$python" ] || die "python3 is needed for the runc wrapper"
  mkdir -p "$DOCKER_STATE/bin"
  { echo "#!$python"; tail -n +2 hack/docker/runc-nocap; } >"$DOCKER_STATE/bin/$NOCAP_RUNTIME.tmp"
  chmod +x "$DOCKER_STATE/bin/$NOCAP_RUNTIME.tmp"
  mv "$DOCKER_STATE/bin/$NOCAP_RUNTIME.tmp" "$DOCKER_STATE/bin/$NOCAP_RUNTIME"
}

# overlay2 when the kernel can mount overlayfs where dockerd keeps its data,
# else vfs (works everywhere but copies a whole image per container).
default_storage_driver() {
  local root=/var/lib/docker d
  mkdir -p "$root"
  d=$(mktemp -d "$root/overlay-probe.XXXXXX")
  mkdir -p "$d/l" "$d/u" "$d/w" "$d/m"
  if mount -t overlay overlay -o "lowerdir=$d/l,upperdir=$d/u,workdir=$d/w" "$d/m" 2>/dev/null; then
    umount "$d/m"
    rm -rf "$d"
    echo overlay2
  else
    rm -rf "$d"
    echo vfs
  fi
}

start_dockerd() {
  local pidfile="$DOCKER_STATE/dockerd.pid"
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "dockerd already started (pid $(cat "$pidfile")), waiting for it"
  else
    local runtime_flags=()
    if caps_incomplete; then
      install_nocap_runtime
      runtime_flags=(--add-runtime "$NOCAP_RUNTIME=$DOCKER_STATE/bin/$NOCAP_RUNTIME" --default-runtime "$NOCAP_RUNTIME")
      echo "capability bounding set incomplete: default runtime $NOCAP_RUNTIME (hack/docker/runc-nocap)"
    fi
    # Own session: the engine outlives this script and its process group.
    setsid dockerd --storage-driver="$DOCKER_STORAGE_DRIVER" --pidfile "$pidfile" ${runtime_flags[@]+"${runtime_flags[@]}"} \
      </dev/null >>"$DOCKER_STATE/dockerd.log" 2>&1 &
  fi
  local i
  for i in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
      echo "engine ready after ${i}s"
      return 0
    fi
    if [ "$i" -gt 2 ] && ! pgrep -x dockerd >/dev/null; then
      echo "dockerd exited; last lines of $DOCKER_STATE/dockerd.log:"
      tail -n 20 "$DOCKER_STATE/dockerd.log"
      return 1
    fi
    sleep 1
  done
  echo "docker info still fails after 60s; see $DOCKER_STATE/dockerd.log"
  return 1
}

ensure_engine() {
  if ! command -v docker >/dev/null; then
    need_root "installing the Docker client"
    step "installing docker.io (client and engine)" apt_install docker.io
  fi
  if docker info >/dev/null 2>&1; then
    echo "--- Docker engine: running ($(docker info -f '{{.ServerVersion}}, storage {{.Driver}}, runtime {{.DefaultRuntime}}'))"
    if caps_incomplete && [ "$(docker info -f '{{.DefaultRuntime}}')" != "$NOCAP_RUNTIME" ]; then
      echo "    note: this machine's capability bounding set is incomplete and the running engine's default"
      echo "    runtime is not $NOCAP_RUNTIME: 'docker run --privileged' (kind) fails; stop dockerd and run this again"
    fi
    return 0
  fi
  if ! command -v dockerd >/dev/null; then
    need_root "installing dockerd"
    step "installing docker.io (dockerd is missing)" apt_install docker.io
  fi
  need_root "starting dockerd"
  [ -n "$DOCKER_STORAGE_DRIVER" ] || DOCKER_STORAGE_DRIVER=$(default_storage_driver)
  step "starting dockerd ($DOCKER_STORAGE_DRIVER storage; log $DOCKER_STATE/dockerd.log)" start_dockerd
}

# --- 2. the base image ------------------------------------------------------------

# What the builder and the controller need on top of minbase. ca-certificates:
# pip reaches PyPI over HTTPS in the builder stage. libstdc++6: google-re2's
# extension (cel-python) links it; minbase has it only through apt.
BASE_PACKAGES=python3,python3-venv,ca-certificates,libstdc++6
# Left out of minbase: nothing in the image installs packages, so apt (and the
# libraries only it needs: gnutls, gcrypt, gpgv, libsystemd ... about 18 MB) is
# not there; dpkg and its database stay, so scanners still see what is
# installed. No file systems to make (e2fsprogs); the venv brings its own
# time-zone data (tzdata on PyPI) and containers run in UTC anyway.
BASE_EXCLUDE=apt,e2fsprogs,tzdata

make_rootfs() {
  local rootfs="$1"
  command -v debootstrap >/dev/null || apt_install debootstrap
  rm -rf "$rootfs"
  mkdir -p "$rootfs"
  slim_dpkg "$rootfs"
  debootstrap --variant=minbase --include="$BASE_PACKAGES" --exclude="$BASE_EXCLUDE" \
    "$SUITE" "$rootfs" "$(debian_mirror)"
}

trim_rootfs() {
  local rootfs="$1"
  rm -rf "$rootfs"/var/lib/apt "$rootfs"/var/cache/apt \
    "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/lib/dpkg/*-old \
    "$rootfs"/var/log/* "$rootfs"/tmp/* "$rootfs"/root/.cache
  find "$rootfs/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
  find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
    "$rootfs"/usr/share/lintian "$rootfs"/usr/share/linda "$rootfs"/usr/share/perl5/*/*.pod \
    "$rootfs"/usr/share/common-licenses
  # glibc's iconv modules (8 MB): Python has its own codecs and the C.UTF-8
  # locale does not need them. lib2to3, pydoc's help topics and CPython's test
  # helpers: never used here. debconf's template cache: rebuilt when needed.
  rm -rf "$rootfs"/usr/lib/*-linux-gnu/gconv "$rootfs"/usr/lib/python3.*/lib2to3 \
    "$rootfs"/usr/lib/python3.*/pydoc_data "$rootfs"/usr/lib/python3.*/test \
    "$rootfs"/var/cache/debconf/templates.dat*
  # debootstrap leaves the build host's name and resolver: the container's own are mounted.
  rm -f "$rootfs/etc/hostname" "$rootfs/etc/resolv.conf"
  echo "du: $(du -sh "$rootfs" | cut -f1)"
}

import_rootfs() {
  local rootfs="$1"
  tar --numeric-owner -C "$rootfs" -c . |
    docker import \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' \
      --change 'CMD ["python3"]' \
      --message "Debian $SUITE minbase (without apt) with python3 (hack/image.sh)" \
      - "$OFFLINE_BASE"
}

make_offline_base() {
  need_root "making the offline base (debootstrap, chroot)"
  local rootfs="$DOCKER_STATE/rootfs-$SUITE"
  local previous
  previous=$(docker image inspect -f '{{.Id}}' "$OFFLINE_BASE" 2>/dev/null || true)
  step "debootstrap $SUITE minbase + $BASE_PACKAGES from $(debian_mirror)" make_rootfs "$rootfs"
  step "trimming the root filesystem" trim_rootfs "$rootfs"
  step "importing it as $OFFLINE_BASE" import_rootfs "$rootfs"
  rm -rf "$rootfs"
  # The base it replaces, unless images built on it still use it.
  if [ -n "$previous" ]; then
    docker image rm "$previous" >/dev/null 2>&1 || true
  fi
}

choose_base() {
  if [ -n "$BASE_IMAGE" ]; then
    if ! image_present "$BASE_IMAGE"; then
      step "pulling $BASE_IMAGE" docker pull -q "$BASE_IMAGE"
    fi
    return
  fi
  if image_present "$PUBLIC_BASE"; then
    BASE_IMAGE="$PUBLIC_BASE"
    return
  fi
  if image_present "$OFFLINE_BASE" && ! $try_pull && ! $rebuild_base; then
    BASE_IMAGE="$OFFLINE_BASE"
    echo "--- base: $OFFLINE_BASE (made earlier; --pull tries $PUBLIC_BASE again)"
    return
  fi
  if ! $rebuild_base; then
    echo "--- trying to pull $PUBLIC_BASE (${PULL_TIMEOUT}s at most)"
    if timeout "$PULL_TIMEOUT" docker pull -q "$PUBLIC_BASE" >"$LOG_DIR/pull.log" 2>&1; then
      BASE_IMAGE="$PUBLIC_BASE"
      return
    fi
    echo "    not reachable ($(tail -n 1 "$LOG_DIR/pull.log" | cut -c1-120)); using the offline base"
  fi
  if $rebuild_base || ! image_present "$OFFLINE_BASE"; then
    make_offline_base
  fi
  BASE_IMAGE="$OFFLINE_BASE"
}

# --- 3. the image -----------------------------------------------------------------

# Local CAs this host trusts (a TLS-intercepting proxy's, a company's): pip in
# the builder stage needs them to reach PyPI. $BUILD_CA_CERTS names a PEM file
# to use instead; empty (BUILD_CA_CERTS=) passes none.
extra_ca_certs() {
  if [ -n "${BUILD_CA_CERTS+set}" ]; then
    [ -z "$BUILD_CA_CERTS" ] || cat "$BUILD_CA_CERTS"
    return
  fi
  local f
  for f in /usr/local/share/ca-certificates/*.crt /usr/local/share/ca-certificates/*/*.crt; do
    [ -f "$f" ] && cat "$f"
  done
  return 0
}

build_image() {
  # --network host: the default bridge may have no DNS here; pip needs PyPI.
  # The classic builder is used when buildx is not installed.
  docker build --network host \
    --build-arg BASE_IMAGE="$BASE_IMAGE" \
    --build-arg EXTRA_CA_CERTS="$(extra_ca_certs)" \
    -t "$IMAGE" .
}

total=$SECONDS
ensure_engine
if $engine_only; then
  exit 0
fi
choose_base
echo "--- base image: $BASE_IMAGE"
step "docker build -t $IMAGE" build_image
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
echo "--- $IMAGE: $((size / 1000000)) MB ($size bytes), ready in $((SECONDS - total))s"
