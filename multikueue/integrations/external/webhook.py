"""The manager's mutating webhook for the external kinds whose entry has ``webhook``.

Without it a user must write ``spec.managedBy: kueue.x-k8s.io/multikueue``
(or whatever the entry's ``managedBy`` path names) on every PipelineRun they
submit to the manager, or the manager never dispatches it. tekton-kueue's
webhook does this for PipelineRuns; this one does it for any listed kind, at
the entry's paths:

- an object whose managed-by field holds another controller's name is not
  MultiKueue's: it is left exactly as it is (no queue name either);
- an object without a queue name gets ``webhook.defaultQueueName`` at the
  entry's queue-name path (default the ``kueue.x-k8s.io/queue-name`` label);
  without a default it is left alone: an object in no queue is not Kueue's,
  as for the Job webhook;
- a queued object whose managed-by field is unset or empty gets
  ``kueue.x-k8s.io/multikueue``.

Which objects reach it is the webhook configuration's business
(:func:`webhook_entry`): CREATE only, the namespaces of the Configuration's
``managedJobsNamespaceSelector`` (added by the operator, as for the Job
webhooks) and of the entry's ``webhook.namespaceSelector``, and, without a
default queue, only objects carrying the queue-name label (when that label is
where the entry reads the queue name).

This module is pure (no Kubernetes client, no kopf): the operator's webhook
server routes the requests here (:meth:`ExternalDefaults.review`) and writes
the configuration from :meth:`ExternalDefaults.webhooks`.
"""

from __future__ import annotations

import base64
import copy
import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import structlog

from multikueue.api.constants import Labels, MultiKueue
from multikueue.api.resources import ResourceRef
from multikueue.integrations.external.entries import DEFAULT_QUEUE_NAME, CompiledFramework
from multikueue.integrations.external.jsonpath import JsonPath, Step, compile_path

__all__ = [
    "FAILURE_POLICY",
    "WEBHOOK_PREFIX",
    "ExternalDefaults",
    "NotAMapError",
    "admission_response",
    "defaulting_patch",
    "webhook_entry",
    "webhook_id",
]

log = structlog.get_logger(__name__)

#: Start of the ids (URL paths) of these webhooks: ``external.<plural>.<version>.<group>``.
WEBHOOK_PREFIX: Final = "external."
#: Fail closed, as the Job webhook and tekton-kueue's: an object in scope created while no
#: manager serves the webhook would otherwise be stored without managedBy and never be
#: dispatched (or run on the manager, if the framework's controller runs there). The scope
#: (namespaces, queue-name label) keeps a stopped manager from blocking anything else.
FAILURE_POLICY: Final = "Fail"
_DEFAULT_QUEUE_PATH: Final = compile_path(DEFAULT_QUEUE_NAME)
#: The configuration's webhook name is ``<id>.multikueue.x-k8s.io``; a name is at most 253 characters.
_MAX_ID = 253 - len(".multikueue.x-k8s.io")

Active = Mapping[str, tuple[CompiledFramework, ResourceRef]]


class NotAMapError(ValueError):
    """A field the webhook must write under is there but is not a map (the object is left as it is)."""


def _pointer(steps: Iterable[Step]) -> str:
    """RFC 6901 JSON pointer of map keys."""
    return "".join("/" + str(step).replace("~", "~0").replace("/", "~1") for step in steps)


def _nest(steps: tuple[Step, ...], value: Any) -> Any:
    for step in reversed(steps):
        value = {step: value}
    return value


def _set(doc: dict[str, Any], path: JsonPath, value: Any) -> dict[str, Any]:
    """The JSON patch "add" operation setting ``path`` to ``value`` in ``doc``, and ``doc`` updated the same way.

    The first missing (or null) map on the way is added whole, with the rest
    nested in it, since "add" needs its parent to exist.
    """
    node: Any = doc
    for index, step in enumerate(path.steps[:-1]):
        child = node.get(step)
        if child is None:
            rest = path.steps[index + 1 :]
            node[step] = _nest(rest, value)
            return {"op": "add", "path": _pointer(path.steps[: index + 1]), "value": _nest(rest, value)}
        if not isinstance(child, dict):
            raise NotAMapError(f"{_pointer(path.steps[: index + 1])} is {type(child).__name__}, not a map")
        node = child
    node[path.steps[-1]] = value
    return {"op": "add", "path": _pointer(path.steps), "value": value}


def defaulting_patch(framework: CompiledFramework, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 operations defaulting ``obj`` (being created) for ``framework``; ``[]`` when nothing changes.

    See the module's docstring for the rules. Idempotent: an object already
    defaulted yields ``[]``. :class:`NotAMapError` when a parent of a field to
    write is not a map (the API server would refuse such an object anyway).
    """
    webhook = framework.webhook
    if webhook is None:
        return []
    current = framework.managed_by.get(obj)
    if current not in (None, "", MultiKueue.MANAGED_BY):
        return []  # another controller's object
    doc = copy.deepcopy(dict(obj))
    operations = []
    queue = webhook.queue_name.get(obj)
    if queue in (None, ""):
        if webhook.default_queue_name is None:
            return []
        operations.append(_set(doc, webhook.queue_name, webhook.default_queue_name))
    if current in (None, ""):
        operations.append(_set(doc, framework.managed_by, MultiKueue.MANAGED_BY))
    return operations


def webhook_id(framework: CompiledFramework, ref: ResourceRef) -> str:
    """The webhook's id (URL path, and its name before ``.multikueue.x-k8s.io``)."""
    return f"{WEBHOOK_PREFIX}{ref.plural}.{framework.version}.{framework.group}"


def webhook_entry(framework: CompiledFramework, ref: ResourceRef) -> dict[str, Any]:
    """The mutating webhook of ``framework`` as :func:`multikueue.operator.webhook.build_configurations` takes it.

    ``namespaceSelector`` here is the entry's own (or absent); the operator
    ANDs it with the Configuration's and with its exclusions.
    """
    webhook = framework.webhook
    assert webhook is not None
    entry: dict[str, Any] = {
        "id": webhook_id(framework, ref),
        "rules": [
            {
                "apiGroups": [framework.group],
                "apiVersions": [framework.version],
                "resources": [ref.plural],
                "operations": ["CREATE"],
                "scope": "Namespaced" if ref.namespaced else "Cluster",
            }
        ],
        "failurePolicy": FAILURE_POLICY,
        "sideEffects": "None",
    }
    if webhook.default_queue_name is None and webhook.queue_name.steps == _DEFAULT_QUEUE_PATH.steps:
        # Only queued objects change: the others never wait for the manager (or fail with it down).
        entry["objectSelector"] = {"matchExpressions": [{"key": Labels.QUEUE_NAME, "operator": "Exists"}]}
    if webhook.namespace_selector is not None:
        entry["namespaceSelector"] = copy.deepcopy(dict(webhook.namespace_selector))
    return entry


def admission_response(uid: str, operations: list[dict[str, Any]], warnings: list[str] | None = None) -> dict[str, Any]:
    """An ``admission.k8s.io/v1`` AdmissionReview allowing the request, with ``operations`` as its JSON patch."""
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if operations:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(operations).encode()).decode("ascii")
    if warnings:
        response["warnings"] = warnings
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class ExternalDefaults:
    """The webhooks of the active entries with ``webhook``, following each ConfigMap reload.

    Fed by :meth:`update` with what the loader activated (entry name ->
    compiled entry and resolved kind); tells its listeners when the set of
    webhooks changed, so the server rewrites its configuration.
    """

    def __init__(self, active: Active | None = None) -> None:
        self._by_id: dict[str, CompiledFramework] = {}
        self._entries: tuple[dict[str, Any], ...] = ()
        self._listeners: list[Callable[[], Any]] = []
        if active:
            self.update(active)

    def on_change(self, listener: Callable[[], Any]) -> None:
        """Call ``listener`` (a function or a coroutine function) after each change of :meth:`webhooks`."""
        self._listeners.append(listener)

    def update(self, active: Active) -> bool:
        """Serve the webhooks of ``active``'s entries with ``webhook``; whether the webhooks changed."""
        by_id: dict[str, CompiledFramework] = {}
        entries = []
        for name in sorted(active):
            framework, ref = active[name]
            if framework.webhook is None:
                continue
            hook_id = webhook_id(framework, ref)
            if len(hook_id) > _MAX_ID:
                log.warning(
                    "external framework webhook not registered: its name would be too long",
                    framework=name, webhook=hook_id, fix="a shorter group or plural cannot be chosen; default managedBy by hand",
                )
                continue
            by_id[hook_id] = framework
            entries.append(webhook_entry(framework, ref))
        changed = tuple(entries) != self._entries
        self._by_id, self._entries = by_id, tuple(entries)
        return changed

    async def apply(self, active: Active) -> bool:
        """:meth:`update`, then, when the webhooks changed, call (and await) each listener."""
        changed = self.update(active)
        if changed:
            for listener in self._listeners:
                result = listener()
                if inspect.isawaitable(result):
                    await result
        return changed

    def handles(self, webhook: str | None) -> bool:
        """Whether ``webhook`` (a request's id) is one of these (active or not: a stale one is still answered)."""
        return webhook is not None and webhook.startswith(WEBHOOK_PREFIX)

    def webhooks(self) -> dict[str, tuple[dict[str, Any], ...]]:
        """The webhook entries by reason (only ``mutating``)."""
        return {"mutating": copy.deepcopy(self._entries)}

    def review(self, webhook: str, body: Any) -> dict[str, Any]:
        """The AdmissionReview answering ``body`` sent to ``webhook``. Never refuses.

        A request for a webhook no longer active (its entry was removed or
        changed, the configuration not rewritten yet) is allowed unchanged,
        as is an object the patch cannot be computed for (a warning says
        why): refusing would block the user for our reason, and the API
        server's own validation refuses a malformed object anyway.
        """
        request = body.get("request") if isinstance(body, Mapping) else None
        request = request if isinstance(request, Mapping) else {}
        uid = str(request.get("uid") or "")
        obj = request.get("object")
        framework = self._by_id.get(webhook)
        if framework is None or not isinstance(obj, Mapping) or request.get("operation") != "CREATE":
            return admission_response(uid, [])
        meta = obj.get("metadata") or {}
        try:
            operations = defaulting_patch(framework, obj)
        except NotAMapError as exc:
            message = f"{framework.name}: managedBy not defaulted: {exc}"
            log.warning("external object not defaulted", framework=framework.name,
                        object=f"{request.get('namespace', '')}/{meta.get('name') or meta.get('generateName', '')}",
                        error=str(exc))  # fmt: skip
            return admission_response(uid, [], [message])
        if operations:
            log.debug("external object defaulted", framework=framework.name, namespace=request.get("namespace"),
                      name=meta.get("name") or meta.get("generateName"), operations=operations)  # fmt: skip
        return admission_response(uid, operations)
