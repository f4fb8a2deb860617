"""``integrations.frameworks``: a framework the Configuration leaves out is not reconciled, as upstream.

Without ``batch/job`` the controller registers no Job handler (no watch, no
Workload for a Job), no Job webhook (the configurations are written empty,
so a stale fail-closed one does not block Jobs), and MultiKueue has no Job
adapter to dispatch with.
"""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from kubernetes import client

from multikueue.api.configuration import load_configuration
from multikueue.operator.webhook import ClientConfig, build_configurations
from multikueue.operator.wiring import Settings, build
from multikueue.runtime.events import EventRecorder
from multikueue.runtime.kube import AsyncKube

pytestmark = pytest.mark.unit


def controller(document: str | None, role: str = "manager") -> Any:
    kube = AsyncKube(client.ApiClient(client.Configuration()), workers=1)
    config = load_configuration(document).config
    return build(kube, EventRecorder(kube), Settings(role, "kueue-system", "cm", config, webhooks=True))


def watched(registry: kopf.OperatorRegistry) -> set[str]:
    handlers = registry._watching.get_all_handlers() + registry._indexing.get_all_handlers()
    return {str(h.selector.plural or h.selector.any_name) for h in handlers if h.selector}


def webhook_ids(registry: kopf.OperatorRegistry) -> list[str]:
    return [str(h.id) for h in registry._webhooks.get_all_handlers()]


WITHOUT_JOBS = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nintegrations:\n  frameworks: [pod]\n"


def test_jobs_are_reconciled_by_default() -> None:
    registry = kopf.OperatorRegistry()
    ctl = controller(None)
    ctl.register(registry)
    assert "jobs" in watched(registry)
    assert webhook_ids(registry)
    assert ctl.integrations.for_kind("batch/v1", "Job") is not None


@pytest.mark.parametrize("role", ["manager", "worker"])
def test_without_batch_job_no_job_is_watched_defaulted_or_dispatched(role: str) -> None:
    registry = kopf.OperatorRegistry()
    ctl = controller(WITHOUT_JOBS, role)
    ctl.register(registry)
    assert "jobs" not in watched(registry)
    assert webhook_ids(registry) == []
    assert ctl.integrations.for_kind("batch/v1", "Job") is None
    assert "localqueues" in watched(registry), "queues and Workloads are still admitted"
    assert ctl.workloads.informer.ref.plural == "workloads", "Workloads come through the controller's own feed"


def test_the_webhook_configurations_are_written_empty_without_batch_job() -> None:
    client_config = ClientConfig(url="https://127.0.0.1:9443", ca_pem=b"")
    configurations = build_configurations({}, client_config, "kueue-system")
    assert {reason: c["webhooks"] for reason, c in configurations.items()} == {"mutating": [], "validating": []}


def test_unsupported_frameworks_are_reported_as_not_acted_on() -> None:
    loaded = load_configuration(WITHOUT_JOBS)
    assert not loaded.config.integrations.batch_jobs
    assert ".integrations.frameworks[pod]" in loaded.unused
