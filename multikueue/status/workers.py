"""Reading the copies of Workloads on their chosen workers, for the REMOTE column.

The command reaches a worker the way the controller does: through the
kubeconfig named by the worker's MultiKueueCluster (a Secret in the
controller namespace, key ``kubeconfig``, or a file), validated by the same
rules, so a kubeconfig the controller refuses is refused here too and never
runs a program or reads a file on the user's machine. Whatever goes wrong
(the Secret is not readable with the user's RBAC, the worker is down) becomes
a few words in the column; the command itself still succeeds. Each refresh
builds one short-lived client per worker, and workers are read in parallel
with short timeouts so one dead worker cannot stall the report.
"""

from __future__ import annotations

import base64
import binascii
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from multikueue.runtime.kubeconfig import (
    MAX_KUBECONFIG_BYTES,
    REASON_INSECURE,
    KubeconfigError,
    client_configuration,
    validate_kubeconfig,
)
from multikueue.api import MultiKueueCluster, Workload
from multikueue.api.constants import GROUP, VERSION, MultiKueue
from multikueue import USER_AGENT
from multikueue.api.multikueue import LocationType
from multikueue.status.calls import call
from multikueue.status.errors import api_status, describe
from multikueue.status.manager import MANAGER_TIMEOUT
from multikueue.status.report import RemoteLookup, WorkloadKey

__all__ = ["WORKER_TIMEOUT", "Unknown", "read_remote_states", "worker_kubeconfig"]

#: (connect, read) seconds for each request to a worker.
WORKER_TIMEOUT = (2, 3)
#: Workers read at the same time.
MAX_PARALLEL = 8


class Unknown(Exception):
    """The copies on a worker cannot be read; the message is the few words the REMOTE column shows."""


def _read_secret(manager: client.ApiClient, namespace: str, name: str) -> str:
    where = f"Secret {namespace}/{name}"
    try:
        secret = call(client.CoreV1Api(manager).read_namespaced_secret, name, namespace, _request_timeout=MANAGER_TIMEOUT)
    except ApiException as exc:
        if exc.status == 404:
            raise Unknown(f"{where} not found") from None
        raise Unknown(f"cannot read {where} ({exc.status or api_status(exc)})") from None
    except Exception as exc:  # noqa: BLE001 - network failures come in many types
        raise Unknown(f"cannot read {where}: {describe(exc)}") from None
    data = (secret.data or {}).get(MultiKueue.KUBECONFIG_SECRET_KEY)
    if not data:
        raise Unknown(f"{where} has no key {MultiKueue.KUBECONFIG_SECRET_KEY!r}")
    try:
        return base64.b64decode(data).decode()
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise Unknown(f"{where}: kubeconfig is not valid base64 text") from None


def _read_file(location: str) -> str:
    path = Path(location).expanduser()
    if not path.exists():
        raise Unknown(f"kubeconfig file {location} not found")
    try:
        if path.stat().st_size > MAX_KUBECONFIG_BYTES:
            raise Unknown(f"kubeconfig file {location} is larger than {MAX_KUBECONFIG_BYTES // 1024} KiB")
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise Unknown(f"cannot read kubeconfig file {location}: {describe(exc)}") from None


def worker_kubeconfig(manager: client.ApiClient, cluster: MultiKueueCluster | None, name: str, namespace: str) -> str:
    """The kubeconfig text of worker ``name`` from its MultiKueueCluster's source; :class:`Unknown` if unreadable."""
    if cluster is None:
        raise Unknown(f"MultiKueueCluster {name} not found")
    source = cluster.spec.cluster_source.kube_config if cluster.spec.cluster_source else None
    if source is None:
        raise Unknown("no kubeConfig source (ClusterProfile sources are not read by this command)")
    if source.location_type == LocationType.PATH:
        return _read_file(source.location)
    return _read_secret(manager, namespace, source.location)


def _client(text: str) -> client.ApiClient:
    try:
        valid = validate_kubeconfig(text)
    except KubeconfigError as exc:
        kind = "insecure kubeconfig" if exc.reason == REASON_INSECURE else "bad kubeconfig"
        raise Unknown(f"{kind}: {exc.problems[0].message}") from None
    # Built from the validated values only, as the controller does: never from the document.
    configuration = client_configuration(valid)
    configuration.retries = False
    api = client.ApiClient(configuration)
    api.user_agent = USER_AGENT  # audit logs and metrics name the CLI, as they name the controller
    return api


def _list_copies(api: client.ApiClient, worker: str, namespace: str) -> dict[str, Workload | None]:
    """The Workloads of ``namespace`` on the worker by name (None for one that does not parse)."""
    try:
        result = call(
            client.CustomObjectsApi(api).list_namespaced_custom_object,
            GROUP, VERSION, namespace, Workload.plural, _request_timeout=WORKER_TIMEOUT,
        )
    except ApiException as exc:
        if exc.status == 404:
            raise Unknown(f"Workload CRD ({VERSION}) not installed on {worker}") from None
        if exc.status in (401, 403):
            raise Unknown(f"{worker} refused to list Workloads ({exc.status})") from None
        if not exc.status:
            raise Unknown(f"cannot reach {api.configuration.host}: {api_status(exc)}") from None
        raise Unknown(f"{worker} answered {api_status(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - network failures come in many types
        raise Unknown(f"cannot reach {api.configuration.host}: {describe(exc)}") from None
    copies: dict[str, Workload | None] = {}
    for item in result.get("items") or []:
        name = (item.get("metadata") or {}).get("name", "")
        try:
            copies[name] = Workload.from_k8s(item)
        except (ValidationError, ValueError):
            copies[name] = None
    return copies


def _read_worker(
    manager: client.ApiClient,
    name: str,
    cluster: MultiKueueCluster | None,
    workloads: Sequence[Workload],
    controller_namespace: str,
) -> dict[WorkloadKey, RemoteLookup]:
    keys = [(wl.namespace or "", wl.name) for wl in workloads]
    try:
        api = _client(worker_kubeconfig(manager, cluster, name, controller_namespace))
        try:
            found: dict[WorkloadKey, RemoteLookup] = {}
            for namespace in sorted({ns for ns, _ in keys}):
                copies = _list_copies(api, name, namespace)
                for ns, wl_name in keys:
                    if ns != namespace:
                        continue
                    if wl_name in copies and copies[wl_name] is None:
                        found[(ns, wl_name)] = RemoteLookup(error=f"the copy on {name} does not parse")
                    else:
                        found[(ns, wl_name)] = RemoteLookup(workload=copies.get(wl_name))
            return found
        finally:
            api.close()
    except Unknown as exc:
        return {key: RemoteLookup(error=str(exc)) for key in keys}


def read_remote_states(
    manager: client.ApiClient,
    workloads: Iterable[Workload],
    clusters: Iterable[MultiKueueCluster],
    controller_namespace: str,
) -> dict[WorkloadKey, RemoteLookup]:
    """What each Workload with a chosen worker (``status.clusterName``) looks like there."""
    by_worker: dict[str, list[Workload]] = defaultdict(list)
    for wl in workloads:
        if wl.status and wl.status.cluster_name:
            by_worker[wl.status.cluster_name].append(wl)
    if not by_worker:
        return {}
    known = {c.name: c for c in clusters}
    pool = ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(by_worker)), thread_name_prefix="status-worker")
    try:
        futures = [
            pool.submit(_read_worker, manager, name, known.get(name), wls, controller_namespace)
            for name, wls in sorted(by_worker.items())
        ]
        states: dict[WorkloadKey, RemoteLookup] = {}
        for future in futures:
            states.update(future.result())
        return states
    finally:
        # On Ctrl-C do not wait for workers still timing out.
        pool.shutdown(wait=False, cancel_futures=True)
