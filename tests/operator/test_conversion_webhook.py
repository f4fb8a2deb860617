"""kueue.x-k8s.io/v1beta1 through the controller's conversion webhook, on a real apiserver.

The Kueue quick start as users bring it from upstream's v1beta1 days
(ResourceFlavor ``default-flavor``, ClusterQueue ``cluster-queue`` in a
cohort, LocalQueue ``default/user-queue``, all ``kueue.x-k8s.io/v1beta1``) is
applied with ``kubectl apply`` unchanged; the objects are stored as v1beta2
(``cohortName`` set) and a Job submitted to the LocalQueue is admitted by the
controller. The controller (``multikueue run`` with its webhook server, the
session's) points the CRDs' conversion at itself when it starts.
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from multikueue.dev import objects as o
from multikueue.dev.controllers import ControllerProcess
from multikueue.dev.pytest_plugin import Clusters

pytestmark = pytest.mark.integration

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"

#: The quick start's single-ClusterQueue setup in v1beta1, with the ``cohort:`` v1beta1 users wrote.
QUICK_START = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata:
  name: "default-flavor"
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: "cluster-queue"
spec:
  namespaceSelector: {} # match all.
  cohort: "team-a"
  resourceGroups:
  - coveredResources: ["cpu", "memory"]
    flavors:
    - name: "default-flavor"
      resources:
      - name: "cpu"
        nominalQuota: 9
      - name: "memory"
        nominalQuota: 36Gi
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata:
  namespace: "default"
  name: "user-queue"
spec:
  clusterQueue: "cluster-queue"
"""


#: Upstream's sample Job (site/static/examples/jobs/sample-job.yaml), with a fixed name instead of generateName.
SAMPLE_JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: sample-job
  namespace: default
  labels:
    kueue.x-k8s.io/queue-name: user-queue
spec:
  parallelism: 3
  completions: 3
  template:
    spec:
      containers:
      - name: dummy-job
        image: registry.k8s.io/e2e-test-images/agnhost:2.53
        command: [ "/bin/sh" ]
        args: [ "-c", "sleep 60" ]
        resources:
          requests:
            cpu: "1"
            memory: "200Mi"
      restartPolicy: Never
"""


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True, text=True, timeout=60
    )
    if check:
        assert result.returncode == 0, f"kubectl {' '.join(args)} failed: {result.stderr}"
    return result


def conversion_url(api: client.ApiClient, plural: str) -> str | None:
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(f"{plural}.kueue.x-k8s.io")
    webhook = crd.spec.conversion.webhook if crd.spec.conversion else None
    return webhook.client_config.url if webhook and webhook.client_config else None


@pytest.fixture
def converted(integration_clusters: Clusters, integration_controller: ControllerProcess) -> Path:
    """The manager's kubeconfig, once the controller has pointed the CRDs' conversion at itself."""
    api = integration_clusters.manager
    expected = f"https://127.0.0.1:{integration_controller.webhook_port}/convert"
    for plural in ("clusterqueues", "localqueues", "workloads", "cohorts"):
        o.wait_for(lambda: conversion_url(api, plural) == expected, 30, what=f"{plural} converted by the controller")
    return integration_clusters.kubeconfigs[0]


def test_quick_start_v1beta1_applies_unchanged_and_admits_a_job(converted: Path, kueue: o.Kueue) -> None:
    kubeconfig = converted
    try:
        applied = kubectl(kubeconfig, "apply", "-f", "-", stdin=QUICK_START)
        assert "clusterqueue.kueue.x-k8s.io/cluster-queue created" in applied.stdout
        assert "deprecated" in applied.stderr  # upstream's deprecation warning for v1beta1

        stored = kueue.get("ClusterQueue", "cluster-queue")  # read as v1beta2
        assert stored["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        assert stored["spec"]["cohortName"] == "team-a" and "cohort" not in stored["spec"]
        # Nothing of the quick start is lost going up, so nothing is kept aside in the annotation.
        assert "multikueue.x-k8s.io/conversion-data" not in (stored["metadata"].get("annotations") or {})
        assert kueue.get("LocalQueue", "user-queue", "default")["spec"]["clusterQueue"] == "cluster-queue"

        as_v1 = json.loads(kubectl(kubeconfig, "get", "clusterqueues.v1beta1.kueue.x-k8s.io", "cluster-queue", "-o", "json").stdout)
        assert as_v1["apiVersion"] == "kueue.x-k8s.io/v1beta1" and as_v1["spec"]["cohort"] == "team-a"
        # The Cohort column follows the rename in both versions.
        assert "team-a" in kubectl(kubeconfig, "get", "clusterqueues.v1beta1.kueue.x-k8s.io", "cluster-queue").stdout

        # Applying the same file again changes nothing (kubectl compares in v1beta1).
        again = kubectl(kubeconfig, "apply", "-f", "-", stdin=QUICK_START)
        assert "clusterqueue.kueue.x-k8s.io/cluster-queue unchanged" in again.stdout

        kubectl(kubeconfig, "create", "-f", "-", stdin=SAMPLE_JOB)

        def admitted_workload() -> dict[str, Any] | None:
            for wl in kueue.list("Workload", "default"):
                owners = wl["metadata"].get("ownerReferences") or []
                if any(ref.get("name") == "sample-job" for ref in owners) and o.is_true(wl, "Admitted"):
                    return wl
            return None

        wl = o.wait_for(admitted_workload, 60, what="the Job's Workload admitted in cluster-queue")
        assert wl["status"]["admission"]["clusterQueue"] == "cluster-queue"
        o.wait_for(
            lambda: json.loads(kubectl(kubeconfig, "get", "job", "sample-job", "-n", "default", "-o", "json").stdout)["spec"][
                "suspend"
            ]
            is False,
            30,
            what="the Job unsuspended",
        )
        # The admitted Workload reads as v1beta1 too (the webhook converts what the controller wrote).
        name = wl["metadata"]["name"]
        wl_v1 = json.loads(kubectl(kubeconfig, "get", "workloads.v1beta1.kueue.x-k8s.io", name, "-n", "default", "-o", "json").stdout)
        assert wl_v1["apiVersion"] == "kueue.x-k8s.io/v1beta1"
        assert wl_v1["status"]["admission"]["clusterQueue"] == "cluster-queue"
    finally:
        kubectl(kubeconfig, "delete", "job", "sample-job", "-n", "default", "--ignore-not-found", "--wait=false", check=False)
        kubectl(kubeconfig, "delete", "-f", "-", "--ignore-not-found", "--wait=false", stdin=QUICK_START, check=False)


def test_a_v1beta1_edit_keeps_what_v1beta1_cannot_show(converted: Path, kueue: o.Kueue, namespace: str) -> None:
    """A v1beta2 ClusterQueue patched through v1beta1 keeps its v1beta2-only field (the conversion's annotation)."""
    name = f"cq-{namespace}"
    kueue.create(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {"cohortName": "a", "concurrentAdmissionPolicy": {"migration": {"mode": "RetainFirstAdmission"}}},
        }
    )
    try:
        kubectl(converted, "patch", "clusterqueues.v1beta1.kueue.x-k8s.io", name, "--type", "merge", "-p", '{"spec":{"cohort":"b"}}')
        stored = kueue.get("ClusterQueue", name)
        assert stored["spec"]["cohortName"] == "b"
        assert stored["spec"]["concurrentAdmissionPolicy"] == {"migration": {"mode": "RetainFirstAdmission"}}
        assert "multikueue.x-k8s.io/conversion-data" not in (stored["metadata"].get("annotations") or {})
    finally:
        kubectl(converted, "delete", "clusterqueue", name, "--ignore-not-found", "--wait=false", check=False)


def test_a_review_for_an_unknown_version_fails_with_a_message(converted: Path, integration_controller: ControllerProcess) -> None:
    """Not a 500: a ConversionReview the webhook cannot do gets a Failed result saying why."""
    # The CA the apiserver trusts for the webhook, from the CRD the controller wrote.
    crd = json.loads(kubectl(converted, "get", "crd", "clusterqueues.kueue.x-k8s.io", "-o", "json").stdout)
    ca = base64.b64decode(crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]).decode()
    body = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {
            "uid": "test-uid",
            "desiredAPIVersion": "kueue.x-k8s.io/v1alpha1",
            "objects": [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "x"}, "spec": {}}],
        },
    }
    request = urllib.request.Request(
        f"https://127.0.0.1:{integration_controller.webhook_port}/convert",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, context=ssl.create_default_context(cadata=ca), timeout=10) as response:
        assert response.status == 200
        answer = json.loads(response.read())
    assert answer["response"]["uid"] == "test-uid"
    assert answer["response"]["result"]["status"] == "Failure"
    assert "cannot convert to 'kueue.x-k8s.io/v1alpha1'" in answer["response"]["result"]["message"]
