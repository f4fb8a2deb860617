"""Fake nodes for full local clusters.

kwok plays the kubelet for nodes annotated ``kwok.x-k8s.io/node: fake``: it
marks them Ready and moves their pods through Running to Succeeded (pods owned
by a Job complete; others keep running), so Jobs finish without containers.
"""

from __future__ import annotations

import time

from kubernetes import client
from kubernetes.client.rest import ApiException

from multikueue.dev.errors import DevEnvironmentError

KWOK_ANNOTATION = "kwok.x-k8s.io/node"


def fake_node(name: str, cpu: str = "32", memory: str = "256Gi", pods: str = "250") -> client.V1Node:
    capacity = {"cpu": cpu, "memory": memory, "pods": pods}
    return client.V1Node(
        metadata=client.V1ObjectMeta(
            name=name,
            annotations={KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            labels={
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/role": "agent",
                "type": "kwok",
            },
        ),
        spec=client.V1NodeSpec(),
        status=client.V1NodeStatus(allocatable=capacity, capacity=capacity),
    )


def create_fake_nodes(api: client.ApiClient, count: int, prefix: str = "kwok-node") -> list[str]:
    core = client.CoreV1Api(api)
    names = []
    for i in range(count):
        name = f"{prefix}-{i}"
        try:
            core.create_node(fake_node(name))
        except ApiException as exc:
            if exc.status != 409:
                raise
        names.append(name)
    return names


def wait_default_service_account(api: client.ApiClient, timeout: float = 60) -> None:
    """Wait for the controller-manager to create ``default/default``.

    Pods cannot be created before it exists, so a Job submitted too early
    would sit without pods for a while.
    """
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    while True:
        try:
            core.read_namespaced_service_account("default", "default")
            return
        except ApiException as exc:
            if exc.status != 404:
                raise
        if time.monotonic() > deadline:
            raise DevEnvironmentError(
                f"the default ServiceAccount did not appear within {timeout:.0f}s: "
                "is kube-controller-manager running? See its log in the cluster folder."
            )
        time.sleep(0.2)


def wait_nodes_schedulable(api: client.ApiClient, names: list[str], timeout: float = 60) -> None:
    """Wait until kwok reports the nodes Ready and the not-ready taint is gone.

    The apiserver taints new nodes ``node.kubernetes.io/not-ready`` until the
    node lifecycle controller sees them Ready; a Job submitted before that has
    its pods backed off by the scheduler for a while.
    """
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    while True:
        pending = []
        for name in names:
            node = core.read_node(name)
            ready = any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
            tainted = any(t.key == "node.kubernetes.io/not-ready" for t in (node.spec.taints or []))
            if not ready or tainted:
                pending.append(name)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise DevEnvironmentError(
                f"nodes {', '.join(pending)} not schedulable after {timeout:.0f}s: are kwok and "
                "kube-controller-manager running? See their logs in the cluster folder."
            )
        time.sleep(0.2)
