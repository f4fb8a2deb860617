"""Whether a MultiKueue AdmissionCheck can work (pure).

An AdmissionCheck with ``controllerName: kueue.x-k8s.io/multikueue`` is
active when its parameters name an existing MultiKueueConfig and at least one
of that config's clusters is connected; the message lists the clusters that
are not, and why, so an admin sees at a glance which worker needs attention.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from multikueue.api.admissioncheck import AdmissionCheck
from multikueue.api.constants import GROUP, AdmissionCheckReason, MultiKueue
from multikueue.api.multikueue import MultiKueueConfig
from multikueue.core.cache import Cache


@dataclass(frozen=True)
class ClusterHealth:
    active: bool
    reason: str
    message: str


@dataclass(frozen=True)
class CheckStatus:
    active: bool
    reason: str
    message: str
    config: str | None


#: An ``Active`` condition as compared here: (status is True, reason, message).
ActiveCondition = tuple[bool, str, str]


def active_write_needed(cached: ActiveCondition | None, written: ActiveCondition | None, wanted: ActiveCondition) -> bool:
    """Whether an object's ``Active`` condition must be written to say ``wanted``.

    ``written`` is what this process last wrote (None: nothing since it
    started leading), ``cached`` what its cached copy of the object says. The
    cache is trusted only until this process writes: after that its own write
    is newer than the cache, whose watch event may still be on its way.
    Trusting a lagging cache once left a check ``Active=False`` for good after
    a re-lead: the first write said "no active clusters" while connecting, and
    the connection's success then compared equal to the cache's stale True.
    """
    if written is not None:
        return written != wanted
    return cached != wanted


def config_name(check: AdmissionCheck) -> str | None:
    params = check.spec.parameters
    if params is None or params.kind != MultiKueue.CONFIG_KIND or params.api_group != GROUP or not params.name:
        return None
    return params.name


def check_status(
    check: AdmissionCheck,
    configs: Mapping[str, MultiKueueConfig],
    clusters: Mapping[str, ClusterHealth],
) -> CheckStatus:
    name = config_name(check)
    if name is None:
        return CheckStatus(
            False,
            AdmissionCheckReason.BAD_CONFIG,
            f"spec.parameters must name a {MultiKueue.CONFIG_KIND} (apiGroup {GROUP}, kind {MultiKueue.CONFIG_KIND})",
            None,
        )
    config = configs.get(name)
    if config is None:
        return CheckStatus(False, AdmissionCheckReason.BAD_CONFIG, f"MultiKueueConfig {name!r} not found", name)
    members = list(config.spec.clusters or [])
    if not members:
        return CheckStatus(False, AdmissionCheckReason.NO_USABLE_CLUSTERS, f"MultiKueueConfig {name!r} lists no clusters", name)
    inactive: list[str] = []
    for member in members:
        health = clusters.get(member)
        if health is None:
            inactive.append(f"{member} (MultiKueueCluster not found)")
        elif not health.active:
            inactive.append(f"{member} ({health.reason}: {health.message})")
    if len(inactive) == len(members):
        return CheckStatus(
            False, AdmissionCheckReason.NO_USABLE_CLUSTERS, "No active clusters: " + "; ".join(inactive), name
        )
    if inactive:
        return CheckStatus(True, AdmissionCheckReason.ACTIVE, "Inactive clusters: " + "; ".join(inactive), name)
    return CheckStatus(True, AdmissionCheckReason.ACTIVE, "The admission check is active", name)


def queue_has_multikueue_check(cache: Cache, namespace: str, queue: str) -> bool | None:
    """Whether the LocalQueue leads to a ClusterQueue with a MultiKueue check; None if unknown.

    The Job webhook asks this to default ``spec.managedBy`` on Jobs bound for workers.
    """
    local = cache.local_queue(namespace, queue)
    if local is None or not local.spec.cluster_queue:
        return None
    state = cache.cluster_queue_state(local.spec.cluster_queue)
    if state is None:
        return None
    flavors = (f.name for g in state.spec.resource_groups or [] for f in g.flavors)
    return any(
        cache.admission_check_controller(name) == MultiKueue.CONTROLLER_NAME for name in state.admission_checks_for(flavors)
    )
