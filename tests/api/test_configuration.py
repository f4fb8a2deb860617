"""The controller reads upstream Kueue's Configuration document."""

from __future__ import annotations

from datetime import timedelta

import pytest

from multikueue.api.configuration import ConfigurationError, load_configuration, parse_duration

pytestmark = pytest.mark.unit

UPSTREAM = """
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: :8081
manageJobsWithoutQueueName: false
managedJobsNamespaceSelector:
  matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: [kube-system, kueue-system]
integrations:
  frameworks:
  - batch/job
  - kubeflow.org/mpijob
  podOptions: {}
multiKueue:
  origin: multikueue
  gcInterval: 1m
  workerLostTimeout: 15m
  externalFrameworks:
  - name: PipelineRun.v1.tekton.dev
"""


def test_upstream_document_is_accepted_and_unused_sections_reported() -> None:
    loaded = load_configuration(UPSTREAM)
    config = loaded.config
    assert config.multi_kueue.origin == "multikueue"
    assert config.multi_kueue.gc_interval == timedelta(minutes=1)
    assert config.multi_kueue.worker_lost_timeout == timedelta(minutes=15)
    assert [f.name for f in config.multi_kueue.external_frameworks] == ["PipelineRun.v1.tekton.dev"]
    assert config.integrations.frameworks == ["batch/job", "kubeflow.org/mpijob"]
    assert config.managed_jobs_namespace_selector is not None
    assert loaded.unused == [
        ".health",
        ".integrations.podOptions",
        ".integrations.frameworks[kubeflow.org/mpijob]",
    ]


@pytest.mark.parametrize("text", [None, "", "   \n"])
def test_missing_document_means_defaults(text: str | None) -> None:
    config = load_configuration(text).config
    assert config.multi_kueue.gc_interval == timedelta(minutes=1)
    assert config.multi_kueue.worker_lost_timeout == timedelta(minutes=15)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{not yaml", "not valid YAML"),
        ("- a\n- list\n", "must be a mapping"),
        ("apiVersion: v1\nkind: Configuration\n", "apiVersion 'v1' is not one of"),
        ("kind: Pod\n", "kind must be Configuration"),
        ("multiKueue:\n  gcInterval: soon\n", "multiKueue.gcInterval"),
    ],
)
def test_bad_documents_are_explained(text: str, words: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        load_configuration(text)
    assert words in str(err.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1m", 60), ("90s", 90), ("1h30m", 5400), ("250ms", 0.25), (3, 3)],
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "m", "2", "1d", "1m x"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)
