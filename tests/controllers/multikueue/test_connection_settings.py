"""The worker-connection settings read from the controller Configuration (Path prefix, health probe)."""

from __future__ import annotations

import pytest

from multikueue.api.configuration import ConfigurationError, load_configuration
from multikueue.controllers.multikueue.connection import ConnectionSettings

pytestmark = pytest.mark.unit


def test_defaults_refuse_path_kubeconfigs_and_detect_a_frozen_worker_within_10s() -> None:
    settings = ConnectionSettings.from_settings(load_configuration(None).config.multi_kueue)
    assert settings == ConnectionSettings(origin_lease=450.0)  # fencing on: half the 15 min workerLostTimeout
    assert settings.path_prefix is None
    # Worst case: a probe answered just before the freeze, the next starts one
    # interval later and each miss takes the full timeout.
    assert settings.probe_interval + settings.probe_failures * settings.probe_timeout < 10


def test_settings_come_from_the_multikueue_section() -> None:
    loaded = load_configuration(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\n"
        "kind: Configuration\n"
        "multiKueue:\n"
        "  kubeConfigPathPrefix: /etc/multikueue/kubeconfigs\n"
        "  workerProbeInterval: 3s\n"
        "  workerProbeTimeout: 1500ms\n"
        "  workerProbeFailures: 3\n"
        "  fenceWorkers: false\n"
    )
    assert loaded.unused == []
    settings = ConnectionSettings.from_settings(loaded.config.multi_kueue)
    assert settings == ConnectionSettings("/etc/multikueue/kubeconfigs", 3.0, 1.5, 3, origin_lease=None)


def test_the_origin_lease_follows_the_worker_lost_timeout() -> None:
    loaded = load_configuration("multiKueue:\n  workerLostTimeout: 40s\n")
    assert ConnectionSettings.from_settings(loaded.config.multi_kueue).origin_lease == 20.0


@pytest.mark.parametrize(
    "line", ["workerProbeInterval: 0s", "workerProbeTimeout: soon", "workerProbeFailures: 0"]
)
def test_nonsense_probe_settings_are_refused(line: str) -> None:
    with pytest.raises(ConfigurationError):
        load_configuration(f"multiKueue:\n  {line}\n")
