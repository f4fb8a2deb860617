"""Start the controller: configuration, clients, kopf operator."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import kopf
import structlog
from kubernetes.client.rest import ApiException

from multikueue.api.configuration import (
    CONFIG_KEY,
    DEFAULT_CONFIG_MAP,
    DEFAULT_NAMESPACE,
    ConfigurationError,
    LoadedConfiguration,
    load_configuration,
)
from multikueue.runtime import metrics
from multikueue.runtime.logging import configure
from multikueue.operator.scheduling import DAEMON_FINALIZER
from multikueue.operator.wiring import Settings, build
from multikueue.runtime.events import EventRecorder
from multikueue.runtime.kube import AsyncKube, load_api_client
from multikueue.operator import login
from multikueue.operator import webhook
from multikueue.api.resources import CONFIG_MAPS, NAMESPACES, PEERINGS

log = structlog.get_logger(__name__)

ROLES = ("manager", "worker")
PEERING_LIFETIME_SECONDS = 15


class StartupError(Exception):
    """The controller cannot start; the message says what to fix."""


@dataclass(frozen=True)
class ControllerOptions:
    role: str = "manager"
    namespace: str = DEFAULT_NAMESPACE
    config_map: str = DEFAULT_CONFIG_MAP
    kubeconfig: str | None = None
    health_port: int = 8081
    metrics_port: int = 8080
    #: Name of the ClusterKopfPeering object; None runs standalone (no leader election).
    peering: str | None = None
    priority: int = 0
    log_level: str = "INFO"
    #: Port of the Job admission webhooks; 0 disables them (Jobs must then be submitted suspended).
    webhook_port: int = 0
    #: Address the API server uses to reach the webhooks.
    webhook_host: str = "127.0.0.1"


async def read_configuration(kube: AsyncKube, namespace: str, name: str) -> LoadedConfiguration:
    body = await kube.get_or_none(CONFIG_MAPS, namespace, name)
    if body is None:
        log.info("configuration ConfigMap not found: using defaults", configmap=f"{namespace}/{name}")
        return load_configuration(None)
    text = (body.get("data") or {}).get(CONFIG_KEY)
    try:
        loaded = load_configuration(text)
    except ConfigurationError as exc:
        raise StartupError(f"ConfigMap {namespace}/{name}: {exc}") from None
    if loaded.unused:
        log.info("configuration sections not used by this controller", sections=loaded.unused)
    return loaded


async def ensure_peering(kube: AsyncKube, name: str) -> None:
    """Create the ClusterKopfPeering object the replicas share, if it is missing."""
    try:
        if await kube.get_or_none(PEERINGS, None, name) is None:
            body = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
            try:
                await kube.create(PEERINGS, None, body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
            log.info("peering object created", peering=name)
    except ApiException as exc:
        raise StartupError(
            f"cannot use peering {name!r} ({exc.status} {exc.reason}): is the ClusterKopfPeering CRD "
            "installed? Apply config/kopf, or run without --peering"
        ) from None


async def run_controller(options: ControllerOptions) -> None:
    configure(json_output=True, level=options.log_level)
    logging.getLogger("kopf").setLevel(logging.WARNING)
    if options.role not in ROLES:
        raise StartupError(f"--role must be one of {', '.join(ROLES)}")
    kube = AsyncKube(load_api_client(options.kubeconfig, pool_size=48), workers=48)
    try:
        try:
            if await kube.get_or_none(NAMESPACES, None, options.namespace) is None:
                raise StartupError(
                    f"namespace {options.namespace!r} does not exist; create it or pass --namespace"
                )
        except ApiException as exc:
            raise StartupError(f"cannot reach the API server: {exc.status} {exc.reason}") from None
        if options.peering:
            await ensure_peering(kube, options.peering)
        loaded = await read_configuration(kube, options.namespace, options.config_map)
        events = EventRecorder(kube, options.namespace)
        controller = build(
            kube,
            events,
            Settings(
                role=options.role,
                namespace=options.namespace,
                config_map=options.config_map,
                config=loaded.config,
                webhooks=bool(options.webhook_port),
            ),
        )
        # Adapters of external frameworks exist before any handler runs, so no Workload is
        # judged (and rejected) against a half-loaded set.
        await controller.frameworks.load(
            loaded.config.multi_kueue.external_frameworks,
            source=await kube.get_or_none(CONFIG_MAPS, options.namespace, options.config_map),
        )
        registry = kopf.OperatorRegistry()
        controller.register(registry)
        login.register(registry, kube.api)

        @kopf.on.startup(registry=registry)
        async def configure_kopf(settings: kopf.OperatorSettings, **_: Any) -> None:
            settings.posting.enabled = False
            settings.batching.batch_window = 0.01
            settings.persistence.finalizer = DAEMON_FINALIZER
            settings.watching.server_timeout = 300
            # A standby replica takes over this long after the active one stops renewing.
            settings.peering.lifetime = PEERING_LIFETIME_SECONDS
            if options.webhook_port:
                # The webhook configurations are written by webhook.server, not kopf (managed stays None).
                settings.admission.server = webhook.server(
                    webhook.WebhookOptions(
                        port=options.webhook_port, host=options.webhook_host, namespace=options.namespace
                    ),
                    kube,
                )
            controller.start()

        @kopf.on.cleanup(registry=registry)
        async def stop_background(**_: Any) -> None:
            await controller.stop()

        metrics.serve(options.metrics_port)
        log.info("controller starting", role=options.role, namespace=options.namespace, peering=options.peering)
        await kopf.operator(
            registry=registry,
            clusterwide=True,
            standalone=options.peering is None,
            peering_name=options.peering,
            priority=options.priority,
            liveness_endpoint=f"http://0.0.0.0:{options.health_port}/healthz" if options.health_port else None,
            memo=kopf.Memo(controller=controller),
        )
    finally:
        kube.close()


def main(options: ControllerOptions) -> int:
    try:
        asyncio.run(run_controller(options))
    except StartupError as exc:
        log.error("controller cannot start", error=str(exc))
        return 1
    return 0
