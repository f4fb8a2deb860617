package main

// kubernetesVersion is the release this program is built from; keep it equal
// to the k8s.io/kubernetes version in go.mod.
const kubernetesVersion = "v1.35.4"
