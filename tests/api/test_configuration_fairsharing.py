"""``fairSharing`` in the Configuration, as upstream Kueue reads it (v1beta2 and v1beta1)."""

from __future__ import annotations

import pytest

from multikueue.api.configuration import (
    DEFAULT_PREEMPTION_STRATEGIES,
    ConfigurationError,
    PreemptionStrategy,
    load_configuration,
)

pytestmark = pytest.mark.unit

V1BETA1 = "apiVersion: config.kueue.x-k8s.io/v1beta1\n"
V1BETA2 = "apiVersion: config.kueue.x-k8s.io/v1beta2\n"


def test_absent_means_off() -> None:
    config = load_configuration(V1BETA2).config
    assert not config.fair_sharing_enabled


def test_v1beta2_section_enables_with_its_strategies_and_is_not_reported_unused() -> None:
    loaded = load_configuration(V1BETA2 + "fairSharing:\n  preemptionStrategies: [LessThanInitialShare]\n")
    assert loaded.config.fair_sharing_enabled
    assert loaded.config.fair_sharing_strategies == (PreemptionStrategy.LESS_THAN_INITIAL_SHARE,)
    assert loaded.unused == []


def test_v1beta1_enable_defaults_both_strategies() -> None:
    """Upstream's ``Convert_v1beta1_FairSharing_To_v1beta2_FairSharing``: enable without strategies means both."""
    config = load_configuration(V1BETA1 + "fairSharing:\n  enable: true\n").config
    assert config.fair_sharing_enabled
    assert config.fair_sharing_strategies == DEFAULT_PREEMPTION_STRATEGIES


@pytest.mark.parametrize(
    "text",
    [V1BETA1 + "fairSharing:\n  preemptionStrategies: [LessThanInitialShare]\n", V1BETA1 + "fairSharing:\n  enable: false\n",
     V1BETA2 + "fairSharing:\n  enable: false\n"],
)
def test_v1beta1_without_enable_or_enable_false_is_off(text: str) -> None:
    assert not load_configuration(text).config.fair_sharing_enabled


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (V1BETA2 + "fairSharing: {}\n", "fairSharing.preemptionStrategies: Required value: must be specified"),
        (
            V1BETA2 + "fairSharing:\n  preemptionStrategies: [LessThanInitialShare, LessThanOrEqualToFinalShare]\n",
            "fairSharing.preemptionStrategies: Unsupported value",
        ),
        (V1BETA1 + "fairSharing:\n  enable: true\n  preemptionStrategies: [Bogus]\n", "Unsupported value"),
    ],
)
def test_invalid_strategies_are_refused_as_upstream_validates(text: str, words: str) -> None:
    """Upstream's ``validateFairSharing``: strategies required, one of its three valid lists."""
    with pytest.raises(ConfigurationError) as err:
        load_configuration(text)
    assert words in str(err.value)
