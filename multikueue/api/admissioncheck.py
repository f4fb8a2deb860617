"""AdmissionCheck: an extra gate a Workload must pass after quota is reserved.

A ClusterQueue lists checks in ``admissionChecksStrategy``; each check's
controller (``controllerName``) sets the check's state on the Workload.
MultiKueue is such a controller: its checks point at a MultiKueueConfig
through ``parameters``.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from multikueue.api.meta import Conditions, KueueModel, KueueObject
from multikueue.api.schema import DNS1123_LABEL_PATTERN, DNS1123_SUBDOMAIN_PATTERN, Rule, Schema

__all__ = ["AdmissionCheck", "AdmissionCheckParametersReference", "AdmissionCheckSpec", "AdmissionCheckStatus"]


class AdmissionCheckParametersReference(KueueModel):
    """The cluster-scoped object configuring a check (for MultiKueue: a MultiKueueConfig)."""

    api_group: Annotated[str, Schema(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN_PATTERN)]
    kind: Annotated[str, Schema(min_length=1, max_length=63, pattern=r"^(?i)[a-z]([-a-z0-9]*[a-z0-9])?$")]
    name: Annotated[str, Schema(min_length=1, max_length=63, pattern=DNS1123_LABEL_PATTERN)]


class AdmissionCheckSpec(KueueModel):
    """Which controller runs the check, and with which parameters."""

    controller_name: Annotated[
        str,
        Schema(
            min_length=1,
            max_length=253,
            rules=(Rule("self == oldSelf", "controllerName cannot be changed"),),
        ),
    ]
    parameters: AdmissionCheckParametersReference | None = None


class AdmissionCheckStatus(KueueModel):
    """Whether the check's controller considers it usable (condition ``Active``)."""

    conditions: Conditions | None = None


class AdmissionCheck(KueueObject):
    """A named admission check, handled by the controller named in its spec."""

    kind: ClassVar[str] = "AdmissionCheck"
    plural: ClassVar[str] = "admissionchecks"
    namespaced: ClassVar[bool] = False
    short_names: ClassVar[tuple[str, ...]] = ("ac",)

    spec: Annotated[AdmissionCheckSpec, Schema(required=False)]
    status: AdmissionCheckStatus = Field(default_factory=AdmissionCheckStatus)
