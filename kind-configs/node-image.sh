#!/usr/bin/env bash
# Build a kind node image (Kubernetes v1.35.4) without any image registry,
# tagged multikueue/kind-node:v1.35.4 (or $NODE_IMAGE), from:
#   - Debian bookworm packages (debootstrap --variant=minbase): systemd,
#     containerd, runc, containernetworking-plugins, iptables ...;
#   - kind v0.33.0's base-image files (entrypoint, containerd config, systemd
#     units, kubelet drop-ins), read from the Go module cache;
#   - hack/kindnode: one Go program for kubelet, kubeadm, kubectl, kube-proxy,
#     kube-apiserver, kube-controller-manager, kube-scheduler, etcd and the
#     part of crictl kind uses, built from the k8s.io/kubernetes Go modules;
#   - CoreDNS built with `go install`, a pause program of our own
#     (kind-configs/node/pause), and the images kubeadm needs made from them
#     and preloaded into the node's containerd (namespace k8s.io);
#   - kind-configs/node/: the default CNI (a DaemonSet in sh doing kindnetd's
#     basic job: conflist from the node's podCIDR, routes to other nodes),
#     the default-storage manifest, kube-proxy's iptables wrapper.
# docs/kind.md says how it differs from kind's own node image.
#
# Cached: the image carries a label with the hash of its inputs (this script,
# kind-configs/node, hack/kindnode, kind's base files, versions, package
# lists); when an image with that label exists, nothing is done. Debian root
# filesystems and Go binaries are cached in $MULTIKUEUE_CACHE too.
#
# Usage: kind-configs/node-image.sh [--force]
#   --force   rebuild the image even when it is up to date (the cached Debian
#             trees and binaries are reused)
# Environment: NODE_IMAGE (tag), DEBIAN_MIRROR, MULTIKUEUE_CACHE.
# Needs root (debootstrap, chroot) and Docker (started by hack/image.sh
# --engine-only when not running).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh

MULTIKUEUE_CACHE="${MULTIKUEUE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/multikueue}"
KUBERNETES_VERSION=v1.35.4
KIND_VERSION=v0.33.0
COREDNS_VERSION=v1.13.1 # what kubeadm v1.35 deploys (kubeadm config images list)
PAUSE_VERSION=3.10.1
ETCD_TAG=3.6.6-0 # the tag kubeadm asks for; hack/kindnode/go.mod pins go.etcd.io/etcd v3.6.6 to match
NODE_IMAGE="${NODE_IMAGE:-multikueue/kind-node:$KUBERNETES_VERSION}"
SUITE=bookworm
WORK="$MULTIKUEUE_CACHE/kind-node"
STEP_LOG_DIR="$WORK/logs"
BIN="$MULTIKUEUE_CACHE/bin"
LABEL=io.multikueue.kind-node.inputs

# The node: what kind's images/base/Dockerfile installs, from Debian (crictl
# comes from hack/kindnode, fuse-overlayfs and nfs/iscsi clients are left out).
NODE_PACKAGES=systemd,containerd,runc,containernetworking-plugins,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,e2fsprogs
# The Kubernetes component images (one image, several tags): kube-proxy needs
# iptables/nftables userland, the CNI DaemonSet (default-cni.yaml) iproute2;
# the others only need the binary.
IMAGES_PACKAGES=iptables,nftables,conntrack,iproute2
IMAGES_EXCLUDE=apt,e2fsprogs,tzdata

force=false
case "${1:-}" in
  --force) force=true ;;
  -h | --help) sed -n '/^# Usage:/,/^# Needs root/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "unknown argument: $1" >&2; exit 2 ;;
esac

mkdir -p "$WORK/logs" "$WORK/bin" "$BIN"
export DEBIAN_FRONTEND=noninteractive


die() {
  echo "error: $*" >&2
  exit 1
}

total=$SECONDS

# --- the engine and kind's sources ----------------------------------------------

bash hack/image.sh --engine-only
# kind starts its nodes with --privileged: on a machine whose capability
# bounding set is incomplete that needs hack/image.sh's runc wrapper.
bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
if [ $(((16#$bnd >> 24) & 1)) -eq 0 ] && [ "$(docker info -f '{{.DefaultRuntime}}')" != runc-nocap ]; then
  echo "warning: this machine lacks CAP_SYS_RESOURCE and the running dockerd's default runtime is not" >&2
  echo "    runc-nocap: kind's privileged nodes will not start. Stop dockerd and run hack/image.sh --engine-only." >&2
fi

KIND_SRC=$(cd hack/kindnode && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)
[ -d "$KIND_SRC/images/base/files" ] || die "kind $KIND_VERSION sources not found ($KIND_SRC)"
KIND_FILES="$KIND_SRC/images/base/files"

hash_files() { LC_ALL=C sort | xargs -d '\n' sha256sum | sed 's/  .*\//  /'; }

kindnode_hash=$({ echo "$KUBERNETES_VERSION"; find hack/kindnode -type f | hash_files; } | sha256sum | cut -c1-12)
pause_hash=$(sha256sum kind-configs/node/pause/main.go | cut -c1-12)
node_debian_key=$(echo "$SUITE $NODE_PACKAGES" | sha256sum | cut -c1-12)
images_debian_key=$(echo "$SUITE $IMAGES_PACKAGES $IMAGES_EXCLUDE" | sha256sum | cut -c1-12)
inputs=$({
  echo "$KUBERNETES_VERSION $KIND_VERSION $COREDNS_VERSION $PAUSE_VERSION $ETCD_TAG"
  echo "$kindnode_hash $pause_hash $node_debian_key $images_debian_key"
  sha256sum kind-configs/node-image.sh hack/lib.sh | cut -d' ' -f1
  find kind-configs/node -type f | hash_files
  (cd "$KIND_FILES" && find . -type f | hash_files)
} | sha256sum | cut -c1-16)

have=$(docker image inspect -f "{{index .Config.Labels \"$LABEL\"}}" "$NODE_IMAGE" 2>/dev/null || true)
if [ "$have" = "$inputs" ] && ! $force; then
  echo "--- $NODE_IMAGE is up to date (inputs $inputs); nothing to do ($((SECONDS - total))s)"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || die "building the node image needs root (debootstrap, chroot)"
echo "--- building $NODE_IMAGE (inputs $inputs)"

# --- Go binaries ----------------------------------------------------------------

KINDNODE="$BIN/kindnode-$KUBERNETES_VERSION-$kindnode_hash"
COREDNS="$WORK/bin/coredns-$COREDNS_VERSION"
PAUSE="$WORK/bin/pause-$pause_hash"

build_kindnode() {
  cd hack/kindnode
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w \
    -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION \
    -X k8s.io/component-base/version.gitMajor=1 \
    -X k8s.io/component-base/version.gitMinor=35 \
    -X k8s.io/component-base/version.gitTreeState=clean \
    -X k8s.io/component-base/version.gitCommit=0000000000000000000000000000000000000000 \
    -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z" \
    -o "$KINDNODE.tmp" .
  mv "$KINDNODE.tmp" "$KINDNODE"
  # older builds of the same release
  find "$BIN" -maxdepth 1 -name "kindnode-$KUBERNETES_VERSION-*" ! -name "$(basename "$KINDNODE")" -delete
}

build_coredns() {
  local gobin="$WORK/gobin"
  mkdir -p "$gobin"
  (cd /tmp && CGO_ENABLED=0 GOBIN="$gobin" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION")
  mv "$gobin/coredns" "$COREDNS"
}

build_pause() {
  (cd kind-configs/node/pause && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$PAUSE" main.go)
}

[ -x "$KINDNODE" ] || step "go build hack/kindnode (kubelet, kubeadm, kube-*, etcd; long the first time)" build_kindnode
[ -x "$COREDNS" ] || step "go install github.com/coredns/coredns@$COREDNS_VERSION" build_coredns
[ -x "$PAUSE" ] || step "go build pause" build_pause

# --- Debian trees (cached as tarballs) ------------------------------------------

# remove_tree DIR: a failed debootstrap can leave /proc, /sys (or bind mounts
# of /dev) mounted inside its target; unmount them first, never cross them.
remove_tree() {
  local dir="$1" m
  [ -e "$dir" ] || return 0
  for m in $(findmnt -rn -o TARGET | grep -F "$dir/" | sort -r); do
    umount -l "$m" || true
  done
  rm -rf --one-file-system "$dir"
}

# debian_tree TARBALL PACKAGES EXCLUDE
debian_tree() {
  local tarball="$1" packages="$2" exclude="$3"
  local rootfs="$tarball.d"
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends debootstrap; }
  remove_tree "$rootfs"
  mkdir -p "$rootfs"
  slim_dpkg "$rootfs"
  local rc=0
  debootstrap --variant=minbase --include="$packages" ${exclude:+--exclude="$exclude"} \
    "$SUITE" "$rootfs" "$(debian_mirror)" || rc=$?
  if [ "$rc" -ne 0 ]; then
    tail -n 30 "$rootfs/debootstrap/debootstrap.log" 2>/dev/null || true
    remove_tree "$rootfs"
    return "$rc"
  fi
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/log/* "$rootfs"/tmp/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* "$rootfs"/usr/share/info/*
  rm -f "$rootfs/etc/hostname" "$rootfs/etc/resolv.conf"
  tar --numeric-owner -C "$rootfs" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  remove_tree "$rootfs"
}

NODE_TREE="$WORK/debian-node-$node_debian_key.tar"
IMAGES_TREE="$WORK/debian-images-$images_debian_key.tar"
[ -f "$NODE_TREE" ] || step "debootstrap $SUITE for the node (+ $NODE_PACKAGES)" debian_tree "$NODE_TREE" "$NODE_PACKAGES" ""
[ -f "$IMAGES_TREE" ] || step "debootstrap $SUITE for the Kubernetes images (+ $IMAGES_PACKAGES)" debian_tree "$IMAGES_TREE" "$IMAGES_PACKAGES" "$IMAGES_EXCLUDE"

# --- the images kubeadm needs -------------------------------------------------------

BUILD="$WORK/build"
K8S_IMAGES=(
  "registry.k8s.io/kube-apiserver:$KUBERNETES_VERSION"
  "registry.k8s.io/kube-controller-manager:$KUBERNETES_VERSION"
  "registry.k8s.io/kube-scheduler:$KUBERNETES_VERSION"
  "registry.k8s.io/kube-proxy:$KUBERNETES_VERSION"
  "registry.k8s.io/etcd:$ETCD_TAG"
)
PAUSE_IMAGE="registry.k8s.io/pause:$PAUSE_VERSION"
COREDNS_IMAGE="registry.k8s.io/coredns/coredns:$COREDNS_VERSION"
IMAGES_TAR="$WORK/images-$inputs.tar"

make_images() {
  remove_tree "$BUILD"
  mkdir -p "$BUILD/k8s" "$BUILD/pause" "$BUILD/coredns"
  # One image for all Kubernetes components (the static pods and kube-proxy
  # name their command): Debian with iptables + kindnode and its names.
  local r="$BUILD/k8s"
  tar -C "$r" -xf "$IMAGES_TREE"
  rm -rf "$r"/usr/share/doc/* "$r"/usr/lib/*-linux-gnu/gconv "$r"/var/cache/debconf/*-old "$r"/var/lib/dpkg/*-old
  install -m 0755 "$KINDNODE" "$r/usr/local/bin/kindnode"
  local p
  for p in kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd kubectl; do
    ln -sf kindnode "$r/usr/local/bin/$p"
  done
  install -m 0755 kind-configs/node/images/iptables-wrapper "$r/usr/sbin/iptables-wrapper"
  for p in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    ln -sf iptables-wrapper "$r/usr/sbin/$p"
  done
  tar --numeric-owner -C "$r" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --message "Kubernetes $KUBERNETES_VERSION components (hack/kindnode) on Debian $SUITE (kind-configs/node-image.sh)" \
    - "${K8S_IMAGES[0]}"
  for p in "${K8S_IMAGES[@]:1}"; do docker tag "${K8S_IMAGES[0]}" "$p"; done

  install -m 0755 "$PAUSE" "$BUILD/pause/pause"
  tar --numeric-owner --owner=0 --group=0 -C "$BUILD/pause" -c pause | docker import \
    --change 'ENTRYPOINT ["/pause"]' --change 'USER 65535:65535' \
    --message "pause (kind-configs/node/pause)" - "$PAUSE_IMAGE"

  mkdir -p "$BUILD/coredns/etc"
  install -m 0755 "$COREDNS" "$BUILD/coredns/coredns"
  echo 'root:x:0:0:root:/root:/sbin/nologin' >"$BUILD/coredns/etc/passwd"
  echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >>"$BUILD/coredns/etc/passwd"
  tar --numeric-owner --owner=0 --group=0 -C "$BUILD/coredns" -c . | docker import \
    --change 'ENTRYPOINT ["/coredns"]' --change 'EXPOSE 53 53/udp' \
    --message "CoreDNS $COREDNS_VERSION (go install)" - "$COREDNS_IMAGE"

  rm -f "$WORK"/images-*.tar
  docker save -o "$IMAGES_TAR.tmp" "${K8S_IMAGES[@]}" "$PAUSE_IMAGE" "$COREDNS_IMAGE"
  mv "$IMAGES_TAR.tmp" "$IMAGES_TAR"
  # Not left in Docker under registry.k8s.io names: on a machine that can pull,
  # they would pass for the real images.
  docker image rm "${K8S_IMAGES[@]}" "$PAUSE_IMAGE" "$COREDNS_IMAGE"
  remove_tree "$BUILD"
}

[ -f "$IMAGES_TAR" ] || step "making the images kubeadm needs (${#K8S_IMAGES[@]} tags of one, pause, coredns)" make_images

# --- the node's root filesystem ---------------------------------------------------

ROOTFS="$WORK/rootfs"

assemble_rootfs() {
  local r="$ROOTFS" f
  remove_tree "$r"
  mkdir -p "$r"
  tar -C "$r" -xf "$NODE_TREE"

  # kind's base image files, as its Dockerfile copies them.
  install -m 0755 "$KIND_FILES"/usr/local/bin/* "$r/usr/local/bin/"
  mkdir -p "$r/kind/bin" "$r/etc/containerd" "$r/etc/default" "$r/etc/sysctl.d" \
    "$r/etc/systemd/system/kubelet.service.d"
  install -m 0644 "$KIND_FILES"/kind/README.txt "$r/kind/"
  install -m 0755 "$KIND_FILES"/kind/bin/* "$r/kind/bin/"
  install -m 0644 "$KIND_FILES"/etc/crictl.yaml "$r/etc/"
  install -m 0644 "$KIND_FILES"/etc/containerd/* "$r/etc/containerd/"
  install -m 0644 "$KIND_FILES"/etc/default/* "$r/etc/default/"
  install -m 0644 "$KIND_FILES"/etc/sysctl.d/* "$r/etc/sysctl.d/"
  for f in "$KIND_FILES"/etc/systemd/system/*; do
    [ -f "$f" ] && install -m 0644 "$f" "$r/etc/systemd/system/"
  done
  install -m 0644 "$KIND_FILES"/etc/systemd/system/kubelet.service.d/* "$r/etc/systemd/system/kubelet.service.d/"

  # Kind's package step, minus the packages: trim systemd to what a node needs.
  find "$r/lib/systemd/system/sysinit.target.wants/" -name "systemd-tmpfiles-setup.service" -delete
  rm -f "$r"/lib/systemd/system/multi-user.target.wants/* "$r"/etc/systemd/system/*.wants/* \
    "$r"/lib/systemd/system/local-fs.target.wants/* "$r"/lib/systemd/system/sockets.target.wants/*udev* \
    "$r"/lib/systemd/system/sockets.target.wants/*initctl* "$r"/lib/systemd/system/basic.target.wants/*
  echo "ReadKMsg=no" >>"$r/etc/systemd/journald.conf"
  [ -e "$r/sbin/init" ] || ln -s /usr/lib/systemd/systemd "$r/sbin/init"
  chroot "$r" systemctl enable kubelet.service containerd.service undo-mount-hacks.service
  chroot "$r" systemctl mask systemd-binfmt.service
  mkdir -p "$r/etc/kubernetes/manifests"

  # Debian puts containerd in /usr/bin and the CNI plugins in /usr/lib/cni;
  # kind's units and containerd's defaults look in /usr/local/bin and /opt/cni/bin.
  ln -sf /usr/bin/containerd "$r/usr/local/bin/containerd"
  mkdir -p "$r/opt/cni/bin"
  for f in "$r"/usr/lib/cni/*; do ln -sf "/usr/lib/cni/$(basename "$f")" "$r/opt/cni/bin/"; done
  sed -i "s|sandbox_image = .*|sandbox_image = \"$PAUSE_IMAGE\"|" "$r/etc/containerd/config.toml"
  # No CAP_SYS_RESOURCE (this machine): containerd must not lower oom_score_adj.
  install -m 0755 kind-configs/node/restrict-oom-score-adj.sh "$r/kind/bin/"
  mkdir -p "$r/etc/systemd/system/containerd.service.d"
  install -m 0644 kind-configs/node/containerd-10-multikueue.conf "$r/etc/systemd/system/containerd.service.d/10-multikueue.conf"
  ctr oci spec |
    jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
    jq 'del(.process.rlimits)' >"$r/etc/containerd/cri-base.json"

  # Kubernetes.
  install -m 0755 "$KINDNODE" "$r/usr/local/bin/kindnode"
  for f in kubelet kubeadm kubectl; do ln -sf /usr/local/bin/kindnode "$r/usr/bin/$f"; done
  ln -sf /usr/local/bin/kindnode "$r/usr/local/bin/crictl"
  echo -n "$KUBERNETES_VERSION" >"$r/kind/version"
  mkdir -p "$r/kind/manifests" "$r/etc/cni/net.d"
  sed "s/KUBERNETES_VERSION/$KUBERNETES_VERSION/" kind-configs/node/default-cni.yaml >"$r/kind/manifests/default-cni.yaml"
  install -m 0644 kind-configs/node/default-storage.yaml "$r/kind/manifests/default-storage.yaml"
  rm -rf "$r"/usr/share/doc/* "$r"/var/cache/debconf/*-old "$r"/var/lib/dpkg/*-old
}

# Preload the images into the node's containerd store (namespace k8s.io) with
# a throw-away containerd on this machine whose root is the node's
# /var/lib/containerd, as kind's own build does inside a build container.
preload_images() {
  local tmp
  tmp=$(mktemp -d /tmp/kind-node-containerd.XXXXXX)
  cat >"$tmp/config.toml" <<EOF
version = 2
root = "$ROOTFS/var/lib/containerd"
state = "$tmp/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$tmp/containerd.sock"
EOF
  containerd --config "$tmp/config.toml" >"$tmp/containerd.log" 2>&1 &
  local pid=$! i
  for i in $(seq 1 30); do
    [ -S "$tmp/containerd.sock" ] && ctr --address "$tmp/containerd.sock" version >/dev/null 2>&1 && break
    sleep 1
  done
  local rc=0
  ctr --address "$tmp/containerd.sock" --namespace=k8s.io images import \
    --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests "$IMAGES_TAR" || rc=$?
  ctr --address "$tmp/containerd.sock" --namespace=k8s.io images list -q || rc=$?
  kill "$pid"
  wait "$pid" || true
  [ "$rc" -eq 0 ] || { cat "$tmp/containerd.log"; return "$rc"; }
  rm -rf "$tmp"
}

import_node() {
  # docker import (20.10) takes no STOPSIGNAL: a metadata-only build adds it and the label.
  tar --numeric-owner -C "$ROOTFS" -c . | docker import \
    --change 'ENV container=docker' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
    --message "kind node $KUBERNETES_VERSION built offline (kind-configs/node-image.sh)" \
    - "$NODE_IMAGE-rootfs"
  printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\nLABEL %s=%s\n' "$NODE_IMAGE-rootfs" "$LABEL" "$inputs" |
    docker build -t "$NODE_IMAGE" -
  docker image rm "$NODE_IMAGE-rootfs"
  remove_tree "$ROOTFS"
}

previous=$(docker image inspect -f '{{.Id}}' "$NODE_IMAGE" 2>/dev/null || true)
step "assembling the node's root filesystem" assemble_rootfs
step "preloading the images into the node's containerd" preload_images
step "importing it as $NODE_IMAGE" import_node
rm -f "$IMAGES_TAR"
if [ -n "$previous" ] && [ "$previous" != "$(docker image inspect -f '{{.Id}}' "$NODE_IMAGE")" ]; then
  docker image rm "$previous" >/dev/null 2>&1 || true
fi
size=$(docker image inspect -f '{{.Size}}' "$NODE_IMAGE")
echo "--- $NODE_IMAGE: $((size / 1000000)) MB, built in $((SECONDS - total))s"
