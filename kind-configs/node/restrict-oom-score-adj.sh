#!/bin/sh
# ExecStartPre of containerd on the multikueue kind node (containerd.service.d/
# 10-multikueue.conf). Lowering a process's oom_score_adj needs
# CAP_SYS_RESOURCE; on a machine whose capability bounding set lacks it (the
# node container cannot have it either), every pod sandbox fails ("can't get
# final child's PID from pipe") because the kubelet asks for a negative
# oom_score_adj. There, make containerd clamp the requested value to its own
# (restrict_oom_score_adj, what kind sets for rootless nodes). Elsewhere the
# config is left as kind ships it.
set -eu
bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
if [ $(((0x$bnd >> 24) & 1)) -eq 0 ]; then
  sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' /etc/containerd/config.toml
fi
