"""``bench/dispatch.py --manager upstream``: upstream Kueue's own binary as the MultiKueue manager, on the same clusters.

Upstream's manager (``cmd/kueue`` of v0.19.2, built from the same archive as
everything else upstream here, :mod:`multikueue.dev.upstream`) runs as a local
process against the bench's manager apiserver, which gets upstream's v1beta2
CRDs (from the same archive, ``config/components/crd/bases``) instead of ours. The workers
are the same as with our manager: our CRDs and our controller in the worker
role, wired by :func:`multikueue.dev.wiring.connect_workers` exactly as the
cluster set wires them for our manager (a kubeconfig Secret per worker in
``kueue-system`` and its MultiKueueCluster), so only the manager differs.

What upstream's Pod would get and a process here does not, and why it does
not change the measurement, is in
:func:`multikueue.dev.upstream.local_manager_configuration`.
"""

from __future__ import annotations

from pathlib import Path

from multikueue.dev import upstream, wiring
from multikueue.dev.clusterset import ClusterSet
from multikueue.dev.controllers import free_port, probe
from multikueue.dev.process import ManagedProcess, wait_until


def prepare_clusters(clusters: ClusterSet) -> None:
    """Upstream's CRDs on the manager, ours on the workers, then the workers wired to the manager.

    The set must have been started with ``install_crds=False, wire=False``:
    the wiring writes MultiKueueClusters, whose CRD must be upstream's.
    """
    # The archive's own CRDs (config/components/crd/bases), not ../shared/reference/kueue-v1beta2-crds:
    # upstream's manager watches Topologies (and ProvisioningRequestConfigs) too, which that folder lacks.
    # They carry no conversion webhook (kustomize adds it), so nothing calls back into the process.
    crds = wiring.load_documents(upstream.ensure_source().root / "config" / "components" / "crd" / "bases")
    wiring.install_crds(clusters.api(clusters.manager), crds)
    ours = [wiring.without_conversion_webhook(crd) for crd in wiring.project_crds()]  # as in bench/dispatch.py
    for worker in clusters.workers:
        wiring.install_crds(clusters.api(worker), ours)
    endpoints = [
        wiring.WorkerEndpoint(w.name, clusters.api(w), w.server, (w.pki_dir / "ca.crt").read_bytes()) for w in clusters.workers
    ]
    wiring.connect_workers(clusters.api(clusters.manager), endpoints)


def start_manager(clusters: ClusterSet, directory: Path, timeout: float = 180) -> ManagedProcess:
    """Upstream's manager on the set's manager cluster, ready (its ``/readyz`` answers) when this returns."""
    source = upstream.ensure_source()
    binary = upstream.ensure_binary(source)
    upstream.ensure_metrics_certificate()
    cert_dir = directory / "serving-certs"
    upstream.write_serving_certificate(cert_dir)
    health = free_port()
    configuration = upstream.local_manager_configuration(
        source, health_port=health, metrics_port=free_port(), webhook_port=free_port(), cert_dir=cert_dir
    )
    process = upstream.start_local_manager(
        clusters.manager.kubeconfig_path, directory, binary, configuration, directory / "upstream-kueue.log"
    )
    wait_until(lambda: probe(health, "/readyz"), timeout, 0.5, "upstream Kueue manager /readyz", process)
    return process
