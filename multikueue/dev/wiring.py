"""Wire a manager to its workers: CRDs, worker access, kubeconfig Secrets.

This is what a platform admin does by hand when setting up MultiKueue, done
the same way for the local clusters and (through ``kind-configs/up.sh``,
:mod:`multikueue.dev.kind`) for kind clusters:

1. install the ``kueue.x-k8s.io`` CRDs everywhere;
2. on each worker apply ``config/worker-access`` (a ServiceAccount and the
   ClusterRole the manager needs) and request a token for it;
3. on the manager store a kubeconfig with that token and the worker's CA in a
   Secret in ``kueue-system`` and create the matching ``MultiKueueCluster``.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from multikueue.dev import kubeconfig
from multikueue.dev.errors import DevEnvironmentError
from multikueue.dev.paths import source_checkout

CONTROLLER_NAMESPACE = "kueue-system"
FIELD_MANAGER = "multikueue-dev"
WORKER_SERVICE_ACCOUNT = "multikueue-manager"
#: One year: the longest the local apiservers allow (--service-account-max-token-expiration).
TOKEN_SECONDS = 365 * 24 * 3600


@dataclass(frozen=True)
class WorkerEndpoint:
    """A worker as the manager will see it: its name, address and CA, and an admin client to set it up."""

    name: str
    admin_api: client.ApiClient
    server: str
    ca_pem: bytes


@dataclass(frozen=True)
class WorkerAccess:
    """What the manager needs to reach one worker."""

    cluster_name: str
    secret_name: str
    kubeconfig: dict[str, Any]


def load_documents(path: Path) -> list[dict[str, Any]]:
    """All YAML documents of a file or of the ``*.yaml`` files in a folder."""
    files = sorted(p for p in path.glob("*.yaml") if p.name != "kustomization.yaml") if path.is_dir() else [path]
    docs: list[dict[str, Any]] = []
    for file in files:
        docs.extend(d for d in yaml.safe_load_all(file.read_text()) if d)
    return docs


def apply(api: client.ApiClient, documents: Iterable[dict[str, Any]]) -> None:
    """Server-side apply each document (idempotent; later runs update)."""
    dynamic = DynamicClient(api)
    for doc in documents:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        namespace = doc.get("metadata", {}).get("namespace")
        resource.server_side_apply(
            body=doc, name=doc["metadata"]["name"], namespace=namespace, field_manager=FIELD_MANAGER, force_conflicts=True
        )


def install_crds(api: client.ApiClient, documents: Iterable[dict[str, Any]], timeout: float = 60) -> list[str]:
    """Create or update CRDs and wait until each is Established."""
    ext = client.ApiextensionsV1Api(api)
    names: list[str] = []
    for doc in documents:
        name = doc["metadata"]["name"]
        names.append(name)
        try:
            ext.create_custom_resource_definition(doc)
        except ApiException as exc:
            if exc.status != 409:
                raise
            current = ext.read_custom_resource_definition(name)
            doc = {**doc, "metadata": {**doc["metadata"], "resourceVersion": current.metadata.resource_version}}
            ext.replace_custom_resource_definition(name, doc)
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        for name in sorted(pending):
            crd = ext.read_custom_resource_definition(name)
            conditions = crd.status.conditions or [] if crd.status else []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                pending.discard(name)
        if pending and time.monotonic() > deadline:
            raise DevEnvironmentError(f"CRDs not established after {timeout:.0f}s: {', '.join(sorted(pending))}")
        if pending:
            time.sleep(0.2)
    return names


def project_crds() -> list[dict[str, Any]]:
    """The CRDs generated from this project's models."""
    from multikueue.api.crdgen import generate_crds

    return [yaml.safe_load(text) for _, text in sorted(generate_crds().items())]


def without_conversion_webhook(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD with conversion ``None`` (every version still served), as upstream's CRD bases ship.

    For clusters where no controller serves conversion (benchmarks): the API
    server keeps a watch cache per served version, and the cache of a version
    that needs the absent webhook fails to fill and starts over every few
    seconds, each time reading every object of the kind from etcd. On a
    benchmark's manager that is every Workload, every three seconds or so.
    With ``None`` a v1beta1 read gets the stored object under the other
    apiVersion: fine where nothing reads v1beta1.
    """
    return {**crd, "spec": {**crd["spec"], "conversion": {"strategy": "None"}}}


def ensure_namespace(api: client.ApiClient, name: str) -> None:
    try:
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    except ApiException as exc:
        if exc.status != 409:
            raise


def grant_worker_access(worker: WorkerEndpoint) -> WorkerAccess:
    """Apply ``config/worker-access`` on a worker and build the manager's kubeconfig for it.

    The optional ``frameworks/`` role (the adapter catalog's kinds) is applied
    too: the demo and the e2e tests dispatch Tekton PipelineRuns.
    """
    worker_api, cluster_name = worker.admin_api, worker.name
    access = source_checkout() / "config" / "worker-access"
    apply(worker_api, [*load_documents(access), *load_documents(access / "frameworks")])
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS)
    )
    response = client.CoreV1Api(worker_api).create_namespaced_service_account_token(
        WORKER_SERVICE_ACCOUNT, CONTROLLER_NAMESPACE, request
    )
    config = kubeconfig.build_kubeconfig(
        name=cluster_name,
        server=worker.server,
        ca_pem=worker.ca_pem,
        user=f"{WORKER_SERVICE_ACCOUNT}@{cluster_name}",
        token=response.status.token,
    )
    return WorkerAccess(cluster_name=cluster_name, secret_name=f"{cluster_name}-secret", kubeconfig=config)


def register_worker(manager_api: client.ApiClient, access: WorkerAccess) -> None:
    """Store the worker's kubeconfig Secret and its MultiKueueCluster on the manager."""
    ensure_namespace(manager_api, CONTROLLER_NAMESPACE)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": access.secret_name, "namespace": CONTROLLER_NAMESPACE},
        "type": "Opaque",
        "data": {"kubeconfig": base64.b64encode(kubeconfig.dump(access.kubeconfig).encode()).decode()},
    }
    cluster = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "MultiKueueCluster",
        "metadata": {"name": access.cluster_name},
        "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": access.secret_name}}},
    }
    apply(manager_api, [secret, cluster])


def connect_workers(manager_api: client.ApiClient, workers: Iterable[WorkerEndpoint]) -> list[WorkerAccess]:
    """Grant access on every worker and register each one on the manager."""
    accesses = [grant_worker_access(w) for w in workers]
    for access in accesses:
        register_worker(manager_api, access)
    return accesses


def endpoint_from_kubeconfig(name: str, path: Path, server: str | None = None) -> WorkerEndpoint:
    """A worker described by an admin kubeconfig (e.g. from kind), optionally reached at another address."""
    from kubernetes import config as kube_config

    from multikueue.runtime.kubeconfig import KubeconfigError, validate_kubeconfig

    try:
        text = path.read_text()
    except OSError as exc:
        raise DevEnvironmentError(f"cannot read the kubeconfig of worker {name!r}: {exc}") from None
    try:
        valid = validate_kubeconfig(text)
    except KubeconfigError as exc:
        raise DevEnvironmentError(f"kubeconfig of worker {name!r} ({path}) cannot be used: {exc}") from None
    cluster = next(c["cluster"] for c in valid.document["clusters"] if c["name"] == valid.cluster)
    ca_data = cluster.get("certificate-authority-data")
    if not ca_data:
        raise DevEnvironmentError(f"kubeconfig of worker {name!r} ({path}) has no certificate-authority-data")
    return WorkerEndpoint(
        name=name,
        admin_api=kube_config.new_client_from_config_dict(valid.document),
        server=server or valid.server,
        ca_pem=base64.b64decode(ca_data),
    )
