"""kopf's admission webhook server, and the webhook configurations that point at it.

kopf serves the webhooks the integrations register (``kopf.on.mutate`` /
``kopf.on.validate``). The ``MutatingWebhookConfiguration`` and
``ValidatingWebhookConfiguration`` named :data:`CONFIGURATION_NAME` are
written here, not by kopf's managed mode, for two reasons:

- kopf's generator has no ``namespaceSelector`` nor ``matchConditions`` and
  makes every webhook match every Job of the cluster; ours leave out
  ``kube-system`` and the controller's own namespace (as upstream Kueue),
  select only the namespaces that opted in when the Configuration sets
  ``managedJobsNamespaceSelector``, and take each webhook's scope from the
  integration that owns it (:data:`multikueue.integrations.batchjob.webhook.WEBHOOKS`);
- kopf removes its webhooks when the controller stops, so queued Jobs created
  while it is down would be accepted unsuspended and run on the manager. Ours
  stay (``failurePolicy: Fail``): those Jobs are refused until the controller
  is back, as with upstream Kueue, while Jobs outside the webhooks' scope are
  never held up.

The same server answers the API server's ConversionReviews at ``/convert``
(:data:`CONVERSION_ID`) for the ``kueue.x-k8s.io`` kinds served in both
v1beta1 and v1beta2 (:mod:`multikueue.api.conversion`). With
``WebhookOptions.conversion`` on (the controller), every replica also points
those CRDs' ``spec.conversion`` at this server with its CA, as it does the
webhook configurations, and checks them again every ``poll_seconds``: a CRD
re-applied from ``config/crd`` (which names the Service of ``config/default``
and no CA) is pointed back within that time. Only a reset CRD is rewritten
then, never one another replica registered: a CRD update makes the API
server close every watch on its kind.

Besides the webhooks given at start (the Job's), the server takes
:class:`AdmissionSource` s whose webhooks change while it runs: the manager's
defaulting webhooks of the external kinds whose ConfigMap entry has
``webhook`` (:mod:`multikueue.integrations.external.webhook`). kopf routes
requests by handler and only knows kinds registered before it starts, so
their requests are answered here, by id, like the conversion reviews, and
the configuration is rewritten whenever a source's set changes (a ConfigMap
reload). The process attaches the sources (:meth:`ConfiguringServer.attach`)
before kopf starts the server.

How the API server reaches the server (:class:`WebhookOptions`): by URL
(``https://<host>:<port>/<id>``, the local clusters and the tests) or, in a
cluster, through a Service (``clientConfig.service``). Which certificate it
presents: one generated at start, the one in a Secret every replica shares,
or one mounted from a directory (cert-manager); see
:mod:`multikueue.operator.webhook_tls`. Every replica writes the same
configurations, and only when they differ from what is stored, so replicas
never flap; the certificate is polled and reloaded without a restart.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import kopf
import structlog
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from multikueue.api import conversion, kind_for
from multikueue.api.configuration import DEFAULT_NAMESPACE
from multikueue.api.constants import GROUP
from multikueue.api.meta import LabelSelector
from multikueue.api.resources import ResourceRef
from multikueue.integrations.batchjob.webhook import WEBHOOKS as JOB_WEBHOOKS
from multikueue.operator.webhook_tls import (
    CertificateError,
    CertificateSource,
    DirectoryCertificate,
    LocalCertificate,
    ReloadableContext,
    SecretCertificate,
)
from multikueue.runtime.certificates import TlsMaterial
from multikueue.runtime.kube import AsyncKube
from multikueue.runtime.tasks import cancel_and_wait

log = structlog.get_logger(__name__)

CONFIGURATION_NAME = "multikueue.x-k8s.io"
#: Upstream's request timeout for its webhooks (the API server's default is also 10 s).
TIMEOUT_SECONDS = 10
#: Namespaces whose Jobs never reach the webhooks, besides the controller's own.
EXCLUDED_NAMESPACES = ("kube-system",)
#: How often a Secret or a mounted directory is read again for a new certificate.
CERTIFICATE_POLL_SECONDS = 30.0

CONFIGURATIONS = {
    "mutating": ResourceRef("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", False),
    "validating": ResourceRef("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", False),
}
KINDS = {"mutating": "MutatingWebhookConfiguration", "validating": "ValidatingWebhookConfiguration"}
#: The webhook id (and URL path, ``/convert``) of the conversion webhook; kopf routes every path to us.
CONVERSION_ID = "convert"
CRDS = ResourceRef("apiextensions.k8s.io", "v1", "customresourcedefinitions", False)
#: ConversionReviews with more objects than this are converted off the event loop (a big Workload list).
_INLINE_OBJECTS = 20


class WebhookOptionsError(ValueError):
    """Webhook options that do not go together; the message names the flags."""


@dataclass(frozen=True)
class WebhookOptions:
    port: int
    #: The address the API server uses to reach this process (URL mode; a DNS name or an IP).
    host: str = "127.0.0.1"
    #: Where to listen.
    addr: str = "0.0.0.0"
    #: The controller's namespace: its Jobs (if any) never go through the webhooks; the Secret lives there.
    namespace: str = DEFAULT_NAMESPACE
    #: ``NAMESPACE/NAME`` of the Service in front of the replicas: the configurations use
    #: ``clientConfig.service`` instead of a URL.
    service: str | None = None
    service_port: int = 443
    #: Name of the ``kubernetes.io/tls`` Secret (in ``namespace``) all replicas serve.
    cert_secret: str | None = None
    #: A directory with ``tls.crt``, ``tls.key`` and optionally ``ca.crt`` (cert-manager).
    cert_dir: str | None = None
    #: Upstream's ``managedJobsNamespaceSelector``: only these namespaces reach the webhooks.
    managed_namespaces: LabelSelector | None = None
    #: Name of both configuration objects (tests use their own).
    configuration_name: str = CONFIGURATION_NAME
    poll_seconds: float = CERTIFICATE_POLL_SECONDS
    #: Point the converted kinds' CRDs at this server (the controller does; tests of the
    #: certificate alone do not, so they leave the cluster's CRDs to the controller).
    conversion: bool = False

    def check(self) -> None:
        """Refuse options that contradict each other (:class:`WebhookOptionsError`)."""
        if self.cert_secret and self.cert_dir:
            raise WebhookOptionsError(
                "--webhook-cert-secret and --webhook-cert-dir exclude each other: the certificate comes "
                "either from a Secret the replicas keep, or from a directory something else keeps (cert-manager)"
            )
        if self.service is not None:
            namespace, _, name = self.service.partition("/")
            if not namespace or not name or "/" in name:
                raise WebhookOptionsError(f"--webhook-service must be NAMESPACE/NAME, got {self.service!r}")
        if not 0 < self.service_port < 65536:
            raise WebhookOptionsError(f"--webhook-service-port must be a port number, got {self.service_port}")

    @property
    def service_ref(self) -> tuple[str, str] | None:
        if self.service is None:
            return None
        namespace, _, name = self.service.partition("/")
        return namespace, name

    def names(self) -> list[str]:
        """The names the serving certificate must cover: the Service's DNS names, or the host."""
        ref = self.service_ref
        if ref is None:
            return [self.host]
        namespace, name = ref
        return [f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"]


def namespace_selector(
    namespace: str,
    managed: LabelSelector | Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The webhooks' ``namespaceSelector``: ``managed`` (if any) and ``extra`` (if any), minus kube-system
    and the controller's namespace.

    A LabelSelector ANDs its ``matchLabels`` and ``matchExpressions``, so the
    exclusion (upstream's, by namespace name) is one more expression, and so
    is each of ``extra``'s labels (``In`` its value: ``managed`` may name the
    same label, and one map cannot hold both).
    """
    excluded = list(dict.fromkeys([*EXCLUDED_NAMESPACES, namespace]))
    exclusion = {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": excluded}
    if isinstance(managed, LabelSelector):
        managed = managed.model_dump(by_alias=True, exclude_none=True)
    selector: dict[str, Any] = {}
    if managed and managed.get("matchLabels"):
        selector["matchLabels"] = dict(managed["matchLabels"])
    expressions = copy.deepcopy(list((managed or {}).get("matchExpressions") or []))
    if extra:
        expressions += [
            {"key": key, "operator": "In", "values": [value]} for key, value in (extra.get("matchLabels") or {}).items()
        ]
        expressions += copy.deepcopy(list(extra.get("matchExpressions") or []))
    selector["matchExpressions"] = [*expressions, exclusion]
    return selector


@dataclass(frozen=True)
class ClientConfig:
    """How the API server reaches the webhooks: a base URL or a Service, and the CA it trusts."""

    url: str | None = None
    #: (namespace, name, port) of the Service.
    service: tuple[str, str, int] | None = None
    #: PEM of the CA bundle; None leaves ``caBundle`` as it is (cert-manager's CA injector fills it).
    ca_pem: bytes | None = None

    def for_webhook(self, webhook_id: str) -> dict[str, Any]:
        path = "/" + urllib.parse.quote(webhook_id)
        config: dict[str, Any]
        if self.service is not None:
            namespace, name, port = self.service
            config = {"service": {"namespace": namespace, "name": name, "port": port, "path": path}}
        else:
            assert self.url is not None
            config = {"url": str(self.url).rstrip("/") + path}
        if self.ca_pem is not None:
            config["caBundle"] = base64.b64encode(self.ca_pem).decode("ascii")
        return config


def build_configurations(
    webhooks: Mapping[str, Iterable[Mapping[str, Any]]],
    client: ClientConfig,
    namespace: str,
    *,
    managed_namespaces: LabelSelector | Mapping[str, Any] | None = None,
    name: str = CONFIGURATION_NAME,
) -> dict[str, dict[str, Any]]:
    """The two configuration objects, by ``"mutating"``/``"validating"``.

    ``webhooks`` are the integrations' entries (an ``id``, which is both the
    handler id kopf routes by and the URL path, plus the webhook fields). An
    entry's own ``namespaceSelector`` narrows the common one (both apply).
    """
    configurations = {}
    for reason, ref in CONFIGURATIONS.items():
        entries = []
        for entry in webhooks.get(reason, ()):
            fields = {key: copy.deepcopy(value) for key, value in entry.items() if key not in ("id", "namespaceSelector")}
            entries.append(
                {
                    "name": f"{entry['id']}.{CONFIGURATION_NAME}",
                    "admissionReviewVersions": ["v1"],
                    "matchPolicy": "Equivalent",
                    "timeoutSeconds": TIMEOUT_SECONDS,
                    "namespaceSelector": namespace_selector(namespace, managed_namespaces, entry.get("namespaceSelector")),
                    **fields,
                    "clientConfig": client.for_webhook(entry["id"]),
                }
            )
        configurations[reason] = {
            "apiVersion": f"{ref.group}/{ref.version}",
            "kind": KINDS[reason],
            "metadata": {"name": name},
            "webhooks": entries,
        }
    return configurations


#: What the API server fills in when a webhook leaves it out (admissionregistration.k8s.io/v1).
_WEBHOOK_DEFAULTS: dict[str, Any] = {
    "failurePolicy": "Fail",
    "matchPolicy": "Equivalent",
    "namespaceSelector": {},
    "objectSelector": {},
    "timeoutSeconds": 10,
    "reinvocationPolicy": "Never",
}


def _normalized(hook: Mapping[str, Any]) -> dict[str, Any]:
    result = {**_WEBHOOK_DEFAULTS, **copy.deepcopy(dict(hook))}
    result["rules"] = [{"scope": "*", **rule} for rule in result.get("rules") or []]
    service = (result.get("clientConfig") or {}).get("service")
    if isinstance(service, dict):
        service.setdefault("port", 443)
    return result


def same_webhooks(stored: Iterable[Mapping[str, Any]], desired: Iterable[Mapping[str, Any]]) -> bool:
    """Whether the stored webhooks say exactly what ``desired`` say, once the API server's defaults are filled in."""
    return [_normalized(hook) for hook in stored] == [_normalized(hook) for hook in desired]


def keep_ca_bundles(webhooks: list[dict[str, Any]], stored: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``webhooks`` with the stored ``caBundle`` of each webhook that has none (someone else injects it)."""
    bundles = {hook.get("name"): (hook.get("clientConfig") or {}).get("caBundle") for hook in stored}
    result = copy.deepcopy(webhooks)
    for hook in result:
        config = hook["clientConfig"]
        if "caBundle" not in config and bundles.get(hook["name"]):
            config["caBundle"] = bundles[hook["name"]]
    return result


async def apply_configurations(kube: AsyncKube, configurations: Mapping[str, dict[str, Any]]) -> list[str]:
    """Make each configuration say what ``configurations`` say; the ones written (none when all match).

    Idempotent, so any number of replicas may call it: a configuration that
    already covers the desired content is not written. A webhook without
    ``caBundle`` keeps the stored one.
    """
    written = []
    for reason, body in configurations.items():
        ref, name = CONFIGURATIONS[reason], body["metadata"]["name"]
        stored = await kube.get_or_none(ref, None, name)
        if stored is None:
            try:
                await kube.create(ref, None, body)
                written.append(reason)
                continue
            except ApiException as exc:
                if exc.status != 409:
                    raise
                stored = await kube.get(ref, None, name)
        stored_hooks = stored.get("webhooks") or []
        webhooks = keep_ca_bundles(body["webhooks"], stored_hooks)
        if same_webhooks(stored_hooks, webhooks):
            continue
        # A merge patch replaces the whole list.
        await kube.patch(ref, None, name, {"webhooks": webhooks})
        written.append(reason)
    return written


def conversion_crd_names(kinds: Iterable[str] = conversion.CONVERTERS) -> list[str]:
    """The CRDs whose ``spec.conversion`` names this server (``<plural>.kueue.x-k8s.io``)."""
    return sorted(f"{kind_for(kind).plural}.{GROUP}" for kind in kinds)


def conversion_spec(client: ClientConfig) -> dict[str, Any]:
    """``spec.conversion`` of a converted CRD pointing at this server."""
    return {
        "strategy": "Webhook",
        "webhook": {"clientConfig": client.for_webhook(CONVERSION_ID), "conversionReviewVersions": ["v1"]},
    }


def conversion_patch(stored: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch making a CRD's stored ``spec.conversion`` say ``desired`` (None when it does).

    A desired config without ``caBundle`` keeps the stored one (cert-manager's
    CA injector fills it); switching between URL and Service removes the other.
    """
    stored_conversion = copy.deepcopy(dict(stored or {}))
    wanted = copy.deepcopy(dict(desired))
    stored_config = (stored_conversion.get("webhook") or {}).get("clientConfig") or {}
    config = wanted["webhook"]["clientConfig"]
    if "caBundle" not in config and stored_config.get("caBundle"):
        config["caBundle"] = stored_config["caBundle"]
    for side in (stored_config, config):
        if isinstance(side.get("service"), dict):
            side["service"].setdefault("port", 443)
    if stored_conversion.get("strategy") == "Webhook" and stored_conversion.get("webhook", {}).get(
        "clientConfig"
    ) == config and stored_conversion.get("webhook", {}).get("conversionReviewVersions") == ["v1"]:
        return None
    patch_config: dict[str, Any] = dict(config)
    for key in ("url", "service"):
        if key not in config and key in stored_config:
            patch_config[key] = None
    return {"spec": {"conversion": {**wanted, "webhook": {**wanted["webhook"], "clientConfig": patch_config}}}}


def registered(stored: Mapping[str, Any] | None) -> bool:
    """Whether a CRD's conversion was pointed at a webhook server of ours (a CA is there), by any replica."""
    stored = stored or {}
    config = (stored.get("webhook") or {}).get("clientConfig") or {}
    return stored.get("strategy") == "Webhook" and bool(config.get("caBundle"))


async def apply_conversion(
    kube: AsyncKube, client: ClientConfig, names: Iterable[str], *, repair_only: bool = False
) -> tuple[list[str], list[str]]:
    """Point each CRD of ``names`` at this server; (the ones patched, the ones not installed).

    ``repair_only`` leaves alone a CRD another replica registered (URL mode:
    each replica has its own address and CA; rewriting a CRD makes the API
    server rebuild its handler and close every watch on the kind, so replicas
    must not take turns). It still fixes a CRD re-applied from ``config/crd``.
    """
    desired = conversion_spec(client)
    patched, missing = [], []
    for name in names:
        crd = await kube.get_or_none(CRDS, None, name)
        if crd is None:
            missing.append(name)
            continue
        stored = (crd.get("spec") or {}).get("conversion")
        if repair_only and registered(stored):
            continue
        patch = conversion_patch(stored, desired)
        if patch is None:
            continue
        await kube.patch(CRDS, None, name, patch)
        patched.append(name)
    return patched, missing


async def serve_conversion(body: Any) -> dict[str, Any]:
    """The ConversionReview answering ``body``; never raises for a bad request (a Failed result says why)."""
    request = body.get("request") if isinstance(body, dict) else None
    objects = (request or {}).get("objects") if isinstance(request, dict) else None
    if isinstance(objects, list) and len(objects) > _INLINE_OBJECTS:
        answer = await asyncio.to_thread(conversion.review, body)
    else:
        answer = conversion.review(body)
    result = answer["response"]["result"]
    if result["status"] != "Success":
        log.warning(
            "conversion refused",
            uid=answer["response"]["uid"],
            desired=(request or {}).get("desiredAPIVersion") if isinstance(request, dict) else None,
            message=result["message"],
        )
    return answer


class AdmissionSource(Protocol):
    """Webhooks whose set changes while the server runs, answered by the source itself."""

    def webhooks(self) -> Mapping[str, Iterable[Mapping[str, Any]]]:
        """Its webhook entries by reason (``mutating``/``validating``), as :func:`build_configurations` takes them."""
        ...

    def handles(self, webhook: str | None) -> bool:
        """Whether requests for the webhook id ``webhook`` are its to answer."""
        ...

    def review(self, webhook: str, body: Any) -> dict[str, Any]:
        """The AdmissionReview answering ``body``."""
        ...

    def on_change(self, listener: Callable[[], Any]) -> None:
        """Call ``listener`` after :meth:`webhooks` changed."""
        ...


def _denied(body: Any, message: str) -> dict[str, Any]:
    request = body.get("request") if isinstance(body, dict) else None
    uid = str((request or {}).get("uid") or "") if isinstance(request, dict) else ""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": False, "status": {"code": 500, "message": message}},
    }


class ConfiguringServer:
    """kopf's HTTPS webhook server that, once listening, writes the configurations pointing at it.

    Given to kopf as ``settings.admission.server`` (a ``WebhookFn`` consumer
    yielding client configurations). kopf's managed mode stays off
    (``settings.admission.managed`` is None), so nothing else writes the
    configurations and nothing removes them at exit. While it serves, the
    certificate source is polled: a new certificate goes into the
    configurations' ``caBundle`` first (when its CA changed), then into the
    TLS context, so the next handshakes present it.
    """

    def __init__(
        self,
        options: WebhookOptions,
        kube: AsyncKube,
        source: CertificateSource,
        webhooks: Mapping[str, Iterable[Mapping[str, Any]]] = JOB_WEBHOOKS,
    ) -> None:
        self.options = options
        self._kube = kube
        self.source = source
        self._webhooks = webhooks
        self.tls = ReloadableContext()
        self._url: str | None = None
        self._missing_crds: list[str] = []
        self._sources: list[AdmissionSource] = []
        self._listening = False
        #: One configuration write at a time (a reload and a certificate change may coincide).
        self._configuring = asyncio.Lock()

    async def attach(self, source: AdmissionSource) -> None:
        """Serve ``source``'s webhooks too, and rewrite the configuration whenever they change.

        Before the server listens this only records the source: the first
        configuration written already holds its webhooks.
        """
        self._sources.append(source)
        source.on_change(self._sources_changed)
        if self._listening:
            await self._sources_changed()

    async def _sources_changed(self) -> None:
        if not self._listening or self.tls.material is None:
            return
        try:
            await self.configure(self.tls.material)
        except (ApiException, HTTPError, OSError) as exc:
            # configure logged a refused write; the next change or certificate refresh writes again.
            log.warning("webhook configurations not rewritten after a change of the webhooks",
                        error=str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)  # fmt: skip

    def all_webhooks(self) -> dict[str, list[Mapping[str, Any]]]:
        """The start-time webhooks followed by each attached source's, by reason."""
        combined: dict[str, list[Mapping[str, Any]]] = {reason: list(self._webhooks.get(reason, ())) for reason in KINDS}
        for source in self._sources:
            for reason, entries in source.webhooks().items():
                combined.setdefault(reason, []).extend(entries)
        return combined

    async def prepare(self) -> None:
        """Load the first certificate (issuing it if this replica must); :class:`CertificateError` if none."""
        self.tls.load(await self.source.load())

    def client_config(self, material: TlsMaterial) -> ClientConfig:
        ref = self.options.service_ref
        service = (ref[0], ref[1], self.options.service_port) if ref is not None else None
        return ClientConfig(url=self._url, service=service, ca_pem=material.ca_pem)

    async def configure(self, material: TlsMaterial) -> list[str]:
        async with self._configuring:
            return await self._configure(material)

    async def _configure(self, material: TlsMaterial) -> list[str]:
        configurations = build_configurations(
            self.all_webhooks(),
            self.client_config(material),
            self.options.namespace,
            managed_namespaces=self.options.managed_namespaces,
            name=self.options.configuration_name,
        )
        try:
            written = await apply_configurations(self._kube, configurations)
        except ApiException as exc:
            log.error(
                "cannot write the webhook configurations; Jobs are not defaulted or validated by this process",
                configuration=self.options.configuration_name,
                status=exc.status,
                reason=exc.reason,
                fix="grant the controller get, create and patch on mutating- and validatingwebhookconfigurations",
            )
            raise
        if written:
            log.info("webhook configurations written", configuration=self.options.configuration_name, written=written)
        if self.options.conversion:
            try:
                await self.configure_conversion(material)
            except ApiException as exc:
                # Only v1beta1 depends on it: keep serving the Job webhooks, retry every poll_seconds.
                log.error(
                    "cannot point the CRDs' conversion at this webhook server; kueue.x-k8s.io/v1beta1 requests fail",
                    status=exc.status,
                    reason=exc.reason,
                    fix="grant the controller get and patch on the kueue.x-k8s.io customresourcedefinitions",
                )
        return written

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        if self.tls.material is None:
            await self.prepare()
        assert self.tls.material is not None
        certfile, keyfile = self.tls.initial_files()
        https = kopf.WebhookServer(
            addr=self.options.addr,
            port=self.options.port,
            host=self.options.host,
            context=self.tls.context,
            certfile=str(certfile),
            pkeyfile=str(keyfile),
            cadata=self.tls.material.ca_pem or self.tls.material.cert_pem,
        )
        async def routed(data: Any, *, webhook: str | None = None, **kwargs: Any) -> Any:
            if webhook == CONVERSION_ID:
                return await serve_conversion(data)
            for source in self._sources:
                if source.handles(webhook):
                    assert webhook is not None
                    try:
                        return source.review(webhook, data)
                    except Exception as exc:  # noqa: BLE001 - answered (refused, as the failure policy would), not dropped
                        log.exception("admission review failed", webhook=webhook)
                        return _denied(data, f"multikueue webhook {webhook} failed: {type(exc).__name__}: {str(exc)[:300]}")
            return await fn(data, webhook=webhook, **kwargs)

        watcher: asyncio.Task[None] | None = None
        keeper: asyncio.Task[None] | None = None
        try:
            async for client_config in https(routed):  # type: ignore[arg-type]
                self._url = client_config.get("url")
                # Listening before the first write: a source changing meanwhile writes again after it
                # (one write at a time, each built from the webhooks of its moment), never skipped.
                self._listening = True
                await self.configure(self.tls.material)
                log.info(
                    "webhook server listening",
                    port=self.options.port,
                    reached_at=self.options.service or self._url,
                    certificate=self.source.describe(),
                )
                if watcher is None and self.source.changes:
                    watcher = asyncio.create_task(self._watch_certificate(), name="webhook certificate")
                if keeper is None and self.options.conversion:
                    keeper = asyncio.create_task(self._keep_conversion(), name="conversion CRDs")
                yield client_config
        finally:
            await cancel_and_wait(watcher)
            await cancel_and_wait(keeper)

    async def configure_conversion(self, material: TlsMaterial, *, repair_only: bool = False) -> list[str]:
        """Point the converted CRDs at this server; the ones patched. Logs the CRDs not installed."""
        patched, missing = await apply_conversion(
            self._kube, self.client_config(material), conversion_crd_names(), repair_only=repair_only
        )
        if patched:
            log.info("conversion webhook registered in CRDs", crds=patched, path=f"/{CONVERSION_ID}")
        if missing and missing != self._missing_crds:
            log.warning(
                "CRDs not installed: kueue.x-k8s.io/v1beta1 is not served for their kinds until they are",
                crds=missing,
                fix="kubectl apply --server-side -k config/crd",
            )
        self._missing_crds = missing
        return patched

    async def _keep_conversion(self) -> None:
        while True:
            await asyncio.sleep(self.options.poll_seconds)
            if self.tls.material is None:
                continue
            try:
                await self.configure_conversion(self.tls.material, repair_only=True)
            except (ApiException, HTTPError, OSError) as exc:
                log.warning(
                    "conversion webhook not re-registered in the CRDs; retrying",
                    error=str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__,
                    retry_in=self.options.poll_seconds,
                )

    async def _watch_certificate(self) -> None:
        while True:
            await asyncio.sleep(self.options.poll_seconds)
            try:
                await self.refresh()
            except (CertificateError, ApiException, HTTPError, OSError, ssl.SSLError) as exc:
                log.warning(
                    "webhook certificate not refreshed; serving the current one, retrying",
                    certificate=self.source.describe(),
                    error=str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__,
                    retry_in=self.options.poll_seconds,
                )

    async def refresh(self) -> bool:
        """Read the source again; serve its certificate if it changed. Whether it changed."""
        current = self.tls.material
        material = await self.source.load()
        if current is not None and material == current:
            return False
        if current is None or material.ca_pem != current.ca_pem:
            # The API server trusts the new CA before any replica presents a certificate it issued.
            await self.configure(material)
        self.tls.load(material)
        log.info("webhook certificate reloaded", certificate=self.source.describe())
        return True


def certificate_source(options: WebhookOptions, kube: AsyncKube) -> CertificateSource:
    if options.cert_secret:
        return SecretCertificate(kube, options.namespace, options.cert_secret, options.names())
    if options.cert_dir:
        return DirectoryCertificate(options.cert_dir)
    return LocalCertificate(options.names())


def server(
    options: WebhookOptions,
    kube: AsyncKube,
    webhooks: Mapping[str, Iterable[Mapping[str, Any]]] = JOB_WEBHOOKS,
) -> ConfiguringServer:
    """The server for ``settings.admission.server`` (call :meth:`ConfiguringServer.prepare` first to fail early).

    ``kube`` is the manager's client, used to write the webhook configurations
    (and the certificate Secret).
    """
    options.check()
    return ConfiguringServer(options, kube, certificate_source(options, kube), webhooks)
