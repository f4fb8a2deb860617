"""The controller's configuration: upstream Kueue's ``Configuration`` document.

The manager reads it from a ConfigMap (default ``multikueue-manager-config``,
key ``controller_manager_config.yaml``), so an upstream Kueue configuration
works unchanged. Sections this project does not use are accepted and reported
(the caller logs them), never refused: a platform team can point both Kueue
and multikueue at the same document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from multikueue.api.meta import LabelSelector

CONFIG_KEY = "controller_manager_config.yaml"
DEFAULT_CONFIG_MAP = "multikueue-manager-config"
DEFAULT_NAMESPACE = "kueue-system"
#: ``integrations.frameworks`` entries this controller integrates.
SUPPORTED_FRAMEWORKS = ("batch/job",)
CONFIG_API_VERSIONS = ("config.kueue.x-k8s.io/v1beta2", "config.kueue.x-k8s.io/v1beta1")

_DURATION = re.compile(r"(?P<value>\d+(?:\.\d+)?)(?P<unit>ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | int | float) -> timedelta:
    """A Go ``time.Duration`` string such as ``1m``, ``90s`` or ``1h30m``."""
    if isinstance(text, (int, float)):
        return timedelta(seconds=float(text))
    text = text.strip()
    pos, seconds = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        seconds += float(match["value"]) * _UNITS[match["unit"]]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"{text!r} is not a duration such as 90s, 1m or 1h30m")
    return timedelta(seconds=seconds)


class _Section(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    def unknown_fields(self, prefix: str) -> list[str]:
        return [f"{prefix}.{k}" for k in (self.model_extra or {})]


class ExternalFramework(_Section):
    """One ``multiKueue.externalFrameworks`` entry, kept as written.

    Any shape is accepted here (extra fields are kept, ``name`` may be
    missing, the entry may not even be a map) so that one bad entry never
    stops the whole Configuration from loading: the generic adapter's loader
    (:func:`multikueue.integrations.external.entries.load_frameworks`) checks each
    entry on its own and reports the bad ones with their name and field.
    """

    name: Any = None
    _raw: Any = PrivateAttr(default=None)
    _has_raw: bool = PrivateAttr(default=False)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_any_shape(cls, data: Any, handler: ModelWrapValidatorHandler[ExternalFramework]) -> ExternalFramework:
        model = handler(data if isinstance(data, dict) else {})
        model._raw, model._has_raw = data, True
        return model

    def entry(self) -> Any:
        """The entry exactly as written in the document."""
        return self._raw if self._has_raw else self.model_dump(by_alias=True, exclude_unset=True)


class MultiKueueSettings(_Section):
    origin: str = "multikueue"
    gc_interval: timedelta = Field(default=timedelta(minutes=1))
    worker_lost_timeout: timedelta = Field(default=timedelta(minutes=15))
    dispatcher_name: str = "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
    external_frameworks: list[ExternalFramework] = Field(default_factory=list)
    #: Directory under which ``locationType: Path`` kubeconfigs may lie (symlinks
    #: resolved); unset refuses Path kubeconfigs. Our extension: upstream gates
    #: the same check behind its MultiKueueKubeConfigPathValidation feature.
    kube_config_path_prefix: str | None = None
    #: Health probe of connected workers (GET /readyz); our extension.
    worker_probe_interval: timedelta = Field(default=timedelta(seconds=2))
    worker_probe_timeout: timedelta = Field(default=timedelta(seconds=2))
    worker_probe_failures: int = Field(default=2, ge=1)
    #: Keep an origin Lease on every worker, so a worker running this controller stops this
    #: manager's jobs before they are dispatched again elsewhere (multikueue.core.fencing);
    #: our extension. False removes the Lease: workers then never fence this origin.
    fence_workers: bool = True

    @field_validator("worker_probe_interval", "worker_probe_timeout")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value.total_seconds() <= 0:
            raise ValueError("must be a positive duration such as 2s")
        return value

    @field_validator("gc_interval", "worker_lost_timeout", "worker_probe_interval", "worker_probe_timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value) if isinstance(value, (str, int, float)) else value


class PreemptionStrategy(StrEnum):
    """How fair-sharing preemption judges a victim (upstream's ``fairSharing.preemptionStrategies`` values)."""

    #: Rule S2-a: the preemptor's share with its workload is at most the target's share without the victim.
    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
    #: Rule S2-b: the preemptor's share with its workload is below the target's share before any preemption.
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"


#: What v1beta1's ``enable: true`` without strategies means (upstream's conversion and ``parseStrategies``).
DEFAULT_PREEMPTION_STRATEGIES = (
    PreemptionStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
    PreemptionStrategy.LESS_THAN_INITIAL_SHARE,
)
#: Upstream's ``validStrategySets``: the only lists its validation accepts.
VALID_PREEMPTION_STRATEGY_SETS = (
    (PreemptionStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,),
    (PreemptionStrategy.LESS_THAN_INITIAL_SHARE,),
    DEFAULT_PREEMPTION_STRATEGIES,
)


class FairSharingSettings(_Section):
    """``fairSharing``: fair sharing across every cohort (upstream's ``FairSharing``).

    In ``config.kueue.x-k8s.io/v1beta2`` the section being present enables
    it and ``preemptionStrategies`` is required; ``v1beta1`` has ``enable``
    (default false) and defaults the strategies to both. ``enable: false``
    disables it in either version.
    """

    enable: bool | None = None
    preemption_strategies: list[str] = Field(default_factory=list)


class Integrations(_Section):
    frameworks: list[str] = Field(default_factory=lambda: ["batch/job"])

    @property
    def batch_jobs(self) -> bool:
        """Whether the ``batch/job`` integration is on: upstream reconciles only the frameworks listed."""
        return "batch/job" in self.frameworks


class Configuration(_Section):
    """The parts of upstream's ``Configuration`` this controller uses."""

    api_version: str = CONFIG_API_VERSIONS[0]
    kind: str = "Configuration"
    namespace: str | None = None
    manage_jobs_without_queue_name: bool = False
    #: When set, only Jobs in matching namespaces reach the webhooks and get a Workload: an opt-in,
    #: stronger than upstream's for batch Jobs (docs/decisions.md).
    managed_jobs_namespace_selector: LabelSelector | None = None
    integrations: Integrations = Field(default_factory=Integrations)
    multi_kueue: MultiKueueSettings = Field(default_factory=MultiKueueSettings)
    fair_sharing: FairSharingSettings | None = None

    def fair_sharing_problem(self) -> str | None:
        """Upstream's ``validateFairSharing`` (after its v1beta1 conversion): one of the valid strategy lists."""
        section = self.fair_sharing
        if section is None or not self.fair_sharing_enabled:
            return None
        strategies = section.preemption_strategies
        if not strategies:
            if self.api_version == CONFIG_API_VERSIONS[1]:
                return None  # v1beta1: both, by default
            return "fairSharing.preemptionStrategies: Required value: must be specified"
        if tuple(strategies) not in VALID_PREEMPTION_STRATEGY_SETS:
            supported = ", ".join('"' + ",".join(s) + '"' for s in VALID_PREEMPTION_STRATEGY_SETS)
            return f"fairSharing.preemptionStrategies: Unsupported value: {strategies!r}: supported values: {supported}"
        return None

    @property
    def fair_sharing_enabled(self) -> bool:
        """Whether fair sharing is on (see :class:`FairSharingSettings` for the two versions)."""
        section = self.fair_sharing
        if section is None:
            return False
        if self.api_version == CONFIG_API_VERSIONS[1]:
            return section.enable is True
        return section.enable is not False

    @property
    def fair_sharing_strategies(self) -> tuple[PreemptionStrategy, ...]:
        """The preemption strategies when fair sharing is on (upstream's default when none are given)."""
        section = self.fair_sharing
        if section is None or not section.preemption_strategies:
            return DEFAULT_PREEMPTION_STRATEGIES
        return tuple(PreemptionStrategy(s) for s in section.preemption_strategies)

    def unused_sections(self) -> list[str]:
        """Settings present in the document that this controller does not act on (yet)."""
        unused = (
            self.unknown_fields("")
            + self.integrations.unknown_fields(".integrations")
            + self.multi_kueue.unknown_fields(".multiKueue")
            + (self.fair_sharing.unknown_fields(".fairSharing") if self.fair_sharing else [])
        )
        unused += [f".integrations.frameworks[{f}]" for f in self.integrations.frameworks if f not in SUPPORTED_FRAMEWORKS]
        return unused


class ConfigurationError(ValueError):
    """The document cannot be used; the message says where and why."""


@dataclass(frozen=True)
class LoadedConfiguration:
    config: Configuration
    unused: list[str] = field(default_factory=list)


def load_configuration(text: str | None) -> LoadedConfiguration:
    """Parse the ConfigMap's document; ``None`` or empty means all defaults."""
    if not text or not text.strip():
        return LoadedConfiguration(Configuration())
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"{CONFIG_KEY} is not valid YAML: {exc}") from None
    if document is None:
        return LoadedConfiguration(Configuration())
    if not isinstance(document, dict):
        raise ConfigurationError(f"{CONFIG_KEY} must be a mapping (a Configuration document)")
    api_version = document.get("apiVersion")
    if api_version is not None and api_version not in CONFIG_API_VERSIONS:
        raise ConfigurationError(
            f"{CONFIG_KEY}: apiVersion {api_version!r} is not one of {', '.join(CONFIG_API_VERSIONS)}"
        )
    if document.get("kind", "Configuration") != "Configuration":
        raise ConfigurationError(f"{CONFIG_KEY}: kind must be Configuration, got {document.get('kind')!r}")
    try:
        config = Configuration.model_validate(document)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigurationError(f"{CONFIG_KEY}: {problems}") from None
    problem = config.fair_sharing_problem()
    if problem is not None:
        raise ConfigurationError(f"{CONFIG_KEY}: {problem}")
    return LoadedConfiguration(config, config.unused_sections())
