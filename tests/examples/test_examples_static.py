"""What can be checked of ``examples/`` without clusters: each file parses, the
ConfigMap passes ``multikueue config validate``, and every file has its test
(tests/examples/test_examples.py applies them to the local clusters)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from multikueue.api.configuration import load_configuration
from multikueue.cli.main import main
from multikueue.dev.paths import source_checkout

pytestmark = pytest.mark.unit

EXAMPLES = source_checkout() / "examples"
#: Every example and where it is applied (tests/examples/test_examples.py, or e2e on kind).
COVERED = {
    "manager/queues.yaml",
    "manager/multikueue.yaml",
    "manager/worker-secret.yaml",
    "manager/external-frameworks.yaml",
    "worker/queues.yaml",
    "jobs/job.yaml",
    "jobs/pipelinerun.yaml",
    "kind/sample-job.yaml",  # for kind-configs/up.sh's clusters; applied like jobs/job.yaml
}


def _documents(relative: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / relative).read_text()) if d]


def test_every_example_is_covered_by_a_test() -> None:
    present = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.yaml")}
    assert present == COVERED, "a new example needs a test in tests/examples/test_examples.py"


@pytest.mark.parametrize("relative", sorted(COVERED - {"manager/worker-secret.yaml"}))
def test_example_parses_into_kubernetes_objects(relative: str) -> None:
    for doc in _documents(relative):
        assert {"apiVersion", "kind", "metadata"} <= set(doc), relative


def test_external_frameworks_example_is_a_configuration_the_controller_acts_on_fully() -> None:
    [config_map] = _documents("manager/external-frameworks.yaml")
    loaded = load_configuration(config_map["data"]["controller_manager_config.yaml"])
    assert loaded.unused == [], "every setting in the example is one the controller reads"
    assert [f.name for f in loaded.config.multi_kueue.external_frameworks] == ["PipelineRun.v1.tekton.dev"]
    assert main(["config", "validate", str(EXAMPLES / "manager" / "external-frameworks.yaml")]) == 0


def test_manager_references_resolve_between_files() -> None:
    """The ClusterQueue names the check, the check the config, the config the clusters, the clusters the Secrets."""
    docs = _documents("manager/queues.yaml") + _documents("manager/multikueue.yaml")
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc
    [cq] = by_kind["ClusterQueue"].values()
    for check in cq["spec"]["admissionChecksStrategy"]["admissionChecks"]:
        params = by_kind["AdmissionCheck"][check["name"]]["spec"]["parameters"]
        config = by_kind["MultiKueueConfig"][params["name"]]
        for cluster in config["spec"]["clusters"]:
            location = by_kind["MultiKueueCluster"][cluster]["spec"]["clusterSource"]["kubeConfig"]["location"]
            assert location == f"{cluster}-secret", "the Secret template names it ${WORKER_NAME}-secret"
    for flavor in cq["spec"]["resourceGroups"][0]["flavors"]:
        assert flavor["name"] in by_kind["ResourceFlavor"]
    [lq] = by_kind["LocalQueue"].values()
    assert lq["spec"]["clusterQueue"] == cq["metadata"]["name"]
