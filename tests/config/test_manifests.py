"""The install manifests under ``config/``: kustomize bases and components.

Unit tests build every base and component with ``kubectl kustomize`` (no
cluster) and check the result: namespaces, the Deployment, the Services, the
Configuration, and the controller's RBAC, evaluated here rule by rule against
the table :data:`MANAGER_NEEDS` / :data:`WORKER_NEEDS` of what the code calls
(each entry names the code). They also read the source YAML, since kustomize
drops comments: every rule of the controller's roles says what needs it.

Integration tests apply the bases to the integration clusters' apiservers:
a server-side dry run of everything, then a real apply of the controller's
RBAC and ``kubectl auth can-i`` for the same table (what is created is
deleted afterwards; what the clusters already had is left alone).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from multikueue.api.configuration import CONFIG_KEY, DEFAULT_CONFIG_MAP, DEFAULT_NAMESPACE, load_configuration
from multikueue.dev.pytest_plugin import Clusters

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"

NAMESPACE = "kueue-system"
ORIGINS = "multikueue-origins"
SERVICE_ACCOUNT = "multikueue-controller-manager"
SA_USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
DEPLOYMENT = "multikueue-controller-manager"
WEBHOOK_SERVICE = "multikueue-webhook-service"
METRICS_SERVICE = "multikueue-controller-manager-metrics-service"
CERT_SECRET = "multikueue-webhook-server-cert"
WEBHOOK_CONFIGURATION = "multikueue.x-k8s.io"

BASES = ("default", "worker")
COMPONENTS = ("prometheus", "cert-manager", "tekton")
CLUSTER_SCOPED = {
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}
RBAC_KINDS = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
#: Source files holding the controller's own rules (each rule must carry a comment).
CONTROLLER_RULE_FILES = (
    "rbac/role.yaml",
    "rbac/namespaced_role.yaml",
    "rbac/external_frameworks_role.yaml",
    "rbac/manager/role.yaml",
    "rbac/worker/role.yaml",
    "components/tekton/clusterrole.yaml",
)

FLAGS = [
    "--namespace=kueue-system",
    f"--config-map={DEFAULT_CONFIG_MAP}",
    "--leader-elect",
    "--health-port=8081",
    "--metrics-port=8080",
    "--webhook-port=9443",
    f"--webhook-service={NAMESPACE}/{WEBHOOK_SERVICE}",
    f"--webhook-cert-secret={CERT_SECRET}",
]


# --- building -------------------------------------------------------------------------


def kustomize(path: Path) -> list[dict[str, Any]]:
    result = subprocess.run([KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"kubectl kustomize {path} failed:\n{result.stderr}"
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@functools.lru_cache(maxsize=None)
def _built(base: str, components: tuple[str, ...]) -> str:
    """The YAML of ``config/<base>`` with ``components`` (built through a throw-away overlay)."""
    if not components:
        docs = kustomize(CONFIG / base)
    else:
        overlay = Path(os.environ.get("TMPDIR", "/tmp")) / f"multikueue-overlay-{uuid.uuid4().hex[:8]}"
        overlay.mkdir()
        try:
            (overlay / "kustomization.yaml").write_text(
                yaml.safe_dump(
                    {
                        "apiVersion": "kustomize.config.k8s.io/v1beta1",
                        "kind": "Kustomization",
                        "resources": [os.path.relpath(CONFIG / base, overlay)],
                        "components": [os.path.relpath(CONFIG / "components" / c, overlay) for c in components],
                    }
                )
            )
            docs = kustomize(overlay)
        finally:
            shutil.rmtree(overlay, ignore_errors=True)
    return yaml.safe_dump_all(docs)


def built(base: str, *components: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(_built(base, tuple(components))))


def find(docs: Iterable[Mapping[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return dict(matches[0])


def container(docs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    deployment = find(docs, "Deployment", DEPLOYMENT)
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


# --- a small RBAC evaluator (the authorizer's rules, for a ServiceAccount) ---------------


@dataclass(frozen=True)
class Access:
    """One request: ``verb`` on ``resource`` (``plural`` or ``plural/sub``) of ``group``, in ``namespace`` ('' = cluster-wide)."""

    verb: str
    group: str
    resource: str
    namespace: str = ""
    name: str = ""
    why: str = ""

    def kubectl_args(self) -> list[str]:
        plural, _, sub = self.resource.partition("/")
        target = f"{plural}.{self.group}" if self.group else plural
        if self.name:
            target += f"/{self.name}"
        args = [self.verb, target]
        if sub:
            args.append(f"--subresource={sub}")
        args += ["-n", self.namespace] if self.namespace else ["--all-namespaces"]
        return args

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else " cluster-wide"
        name = f" {self.name}" if self.name else ""
        return f"{self.verb} {self.resource}.{self.group or 'core'}{name}{where}"


def _rule_allows(rule: Mapping[str, Any], access: Access) -> bool:
    if access.group not in rule.get("apiGroups", []) or access.resource not in rule.get("resources", []):
        return False
    if access.verb not in rule.get("verbs", []):
        return False
    names = rule.get("resourceNames")
    return not names or (bool(access.name) and access.name in names)


def _cluster_role_rules(docs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """A ClusterRole's rules, aggregation included (as kube-controller-manager fills them in)."""
    role = find(docs, "ClusterRole", name)
    rules = list(role.get("rules") or [])
    for selector in (role.get("aggregationRule") or {}).get("clusterRoleSelectors", []):
        wanted = selector.get("matchLabels", {})
        for other in docs:
            labels = other["metadata"].get("labels") or {}
            if other["kind"] == "ClusterRole" and all(labels.get(k) == v for k, v in wanted.items()):
                rules += other.get("rules") or []
    return rules


def _binds_controller(binding: Mapping[str, Any]) -> bool:
    return any(
        s.get("kind") == "ServiceAccount" and s.get("name") == SERVICE_ACCOUNT and s.get("namespace") == NAMESPACE
        for s in binding.get("subjects") or []
    )


def allowed(docs: list[dict[str, Any]], access: Access) -> bool:
    """Whether the controller's ServiceAccount may make ``access`` under the RBAC objects in ``docs``."""
    for binding in docs:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding") or not _binds_controller(binding):
            continue
        if binding["kind"] == "RoleBinding" and binding["metadata"].get("namespace") != access.namespace:
            continue  # a RoleBinding grants only in its namespace (so never a cluster-wide request)
        ref = binding["roleRef"]
        if ref["kind"] == "ClusterRole":
            rules = _cluster_role_rules(docs, ref["name"])
        else:
            role = find([d for d in docs if d["metadata"].get("namespace") == binding["metadata"]["namespace"]], "Role", ref["name"])
            rules = role.get("rules") or []
        if any(_rule_allows(rule, access) for rule in rules):
            return True
    return False


KUEUE = "kueue.x-k8s.io"
TEAM = "team-a"

#: What the controller calls in its own cluster, in both roles.
COMMON_NEEDS = [
    *(
        Access(verb, KUEUE, plural, why="cache feeds (operator/feeds.py)")
        for plural in ("resourceflavors", "cohorts", "workloadpriorityclasses", "clusterqueues", "localqueues", "admissionchecks", "workloads")
        for verb in ("list", "watch")
    ),
    Access("patch", KUEUE, "clusterqueues/status", why="runtime/queue_status.py"),
    Access("patch", KUEUE, "localqueues/status", TEAM, why="runtime/queue_status.py"),
    Access("get", KUEUE, "workloads", TEAM, why="batchjob reconciler live read; catch-up"),
    Access("create", KUEUE, "workloads", TEAM, why="Workloads of Jobs and external objects"),
    Access("patch", KUEUE, "workloads", TEAM, why="finalizer, spec.active (runtime/writer.py, fencing)"),
    Access("delete", KUEUE, "workloads", TEAM, why="batchjob reconciler"),
    Access("patch", KUEUE, "workloads/status", TEAM, why="runtime/writer.py"),
    Access("list", "batch", "jobs", why="Job integration (kopf)"),
    Access("watch", "batch", "jobs", why="Job integration (kopf)"),
    Access("patch", "batch", "jobs", TEAM, why="startstop.py"),
    Access("patch", "batch", "jobs/status", TEAM, why="startstop.py; status sync"),
    Access("update", "batch", "jobs/finalizers", TEAM, why="blockOwnerDeletion on the Workload"),
    Access("get", "", "namespaces", name=NAMESPACE, why="operator/app.py start-up check"),
    Access("list", "", "namespaces", why="namespace feed"),
    Access("watch", "", "namespaces", why="namespace feed"),
    Access("list", "", "configmaps", NAMESPACE, why="integrations/external/reload.py: the Configuration's informer"),
    Access("watch", "", "configmaps", NAMESPACE, why="integrations/external/reload.py: the Configuration's informer"),
    Access("get", "", "configmaps", NAMESPACE, DEFAULT_CONFIG_MAP, why="operator/app.py read_configuration"),
    Access("create", "", "events", TEAM, why="runtime/events.py"),
    Access("create", "", "events", NAMESPACE, why="runtime/events.py (cluster-scoped objects)"),
    Access("list", "apiextensions.k8s.io", "customresourcedefinitions", why="kopf resource observer"),
    Access("watch", "apiextensions.k8s.io", "customresourcedefinitions", why="kopf resource observer"),
    *(
        Access(verb, "apiextensions.k8s.io", "customresourcedefinitions", name=f"{plural}.kueue.x-k8s.io", why="operator/webhook.py apply_conversion")
        for plural in ("admissionchecks", "clusterqueues", "cohorts", "localqueues", "multikueueclusters", "multikueueconfigs", "workloads")
        for verb in ("get", "patch")
    ),
    *(
        Access(verb, "admissionregistration.k8s.io", plural, name=name, why="operator/webhook.py")
        for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
        for verb, name in (("create", ""), ("get", WEBHOOK_CONFIGURATION), ("patch", WEBHOOK_CONFIGURATION))
    ),
    Access("create", "", "secrets", NAMESPACE, why="webhook cert Secret"),
    Access("get", "", "secrets", NAMESPACE, CERT_SECRET, why="webhook cert Secret"),
    Access("patch", "", "secrets", NAMESPACE, CERT_SECRET, why="webhook cert rotation"),
    Access("create", "coordination.k8s.io", "leases", NAMESPACE, why="--leader-elect (runtime/leaderelection.py)"),
]


def _election(role: str) -> list[Access]:
    """The Lease of ``role``'s election (operator/app.py default_lease_name): read, renewed and released by patch."""
    lease = f"multikueue-{role}-leader"
    return [Access(verb, "coordination.k8s.io", "leases", NAMESPACE, lease, why="--leader-elect") for verb in ("get", "patch")]


MANAGER_NEEDS = [
    *COMMON_NEEDS,
    *_election("manager"),
    Access("list", KUEUE, "multikueueclusters", why="controllers/multikueue/clusters.py"),
    Access("watch", KUEUE, "multikueueclusters", why="controllers/multikueue/clusters.py"),
    Access("list", KUEUE, "multikueueconfigs", why="controllers/multikueue/clusters.py"),
    Access("watch", KUEUE, "multikueueconfigs", why="controllers/multikueue/clusters.py"),
    Access("patch", KUEUE, "multikueueclusters/status", why="Active condition"),
    Access("patch", KUEUE, "admissionchecks/status", why="Active condition"),
    Access("get", "", "secrets", NAMESPACE, "worker1-secret", why="kubeconfig Secrets (connection.py)"),
]
WORKER_NEEDS = [
    *COMMON_NEEDS,
    *_election("worker"),
    Access("list", "coordination.k8s.io", "leases", ORIGINS, why="fencing (controllers/fencing.py)"),
]

#: What the controller must not be able to do (least privilege), in both roles.
COMMON_DENIED = [
    Access("update", KUEUE, "workloads", TEAM),  # no PUT anywhere
    Access("update", KUEUE, "workloads/status", TEAM),
    Access("create", KUEUE, "clusterqueues"),
    Access("patch", KUEUE, "clusterqueues"),
    Access("create", "batch", "jobs", TEAM),
    Access("delete", "batch", "jobs", TEAM),
    Access("get", "batch", "jobs", TEAM),
    Access("create", "", "pods", TEAM),
    Access("list", "", "pods"),
    Access("list", "", "configmaps"),
    Access("watch", "", "configmaps", TEAM),
    Access("list", "", "secrets"),
    Access("list", "", "secrets", NAMESPACE),
    Access("watch", "", "secrets", NAMESPACE),
    Access("get", "", "secrets", TEAM, "worker1-secret"),
    Access("patch", "", "secrets", NAMESPACE, "worker1-secret"),
    Access("delete", "", "secrets", NAMESPACE, CERT_SECRET),
    Access("patch", "", "namespaces", name=TEAM),
    Access("delete", "", "namespaces", name=NAMESPACE),
    Access("patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", name="someone-else"),
    Access("delete", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", name=WEBHOOK_CONFIGURATION),
    Access("delete", "coordination.k8s.io", "leases", NAMESPACE, "multikueue-manager-leader"),
    Access("update", "coordination.k8s.io", "leases", NAMESPACE, "multikueue-manager-leader"),
    Access("patch", "coordination.k8s.io", "leases", NAMESPACE, "someone-elses-election"),
    Access("get", "coordination.k8s.io", "leases", NAMESPACE, "someone-elses-election"),
    Access("update", "", "secrets", NAMESPACE, CERT_SECRET),
    Access("patch", "coordination.k8s.io", "leases", "kube-node-lease"),
    Access("patch", "", "events", TEAM),
    Access("create", "apiextensions.k8s.io", "customresourcedefinitions"),
    Access("patch", "apiextensions.k8s.io", "customresourcedefinitions", name="resourceflavors.kueue.x-k8s.io"),
    Access("patch", "apiextensions.k8s.io", "customresourcedefinitions", name="pipelineruns.tekton.dev"),
    Access("create", "authentication.k8s.io", "tokenreviews"),
]
MANAGER_DENIED = [
    *COMMON_DENIED,
    Access("create", KUEUE, "multikueueclusters"),
    Access("list", "coordination.k8s.io", "leases", ORIGINS),
]
WORKER_DENIED = [
    *COMMON_DENIED,
    Access("list", KUEUE, "multikueueclusters"),
    Access("patch", KUEUE, "admissionchecks/status"),
    Access("get", "", "secrets", NAMESPACE, "worker1-secret"),
    Access("watch", "coordination.k8s.io", "leases", ORIGINS),
    Access("patch", "coordination.k8s.io", "leases", ORIGINS),
]
NEEDS = {"default": MANAGER_NEEDS, "worker": WORKER_NEEDS}
DENIED = {"default": MANAGER_DENIED, "worker": WORKER_DENIED}

TEKTON_NEEDS = [
    Access("list", "tekton.dev", "pipelineruns"),
    Access("watch", "tekton.dev", "pipelineruns"),
    Access("patch", "tekton.dev", "pipelineruns", TEAM),
    Access("patch", "tekton.dev", "pipelineruns/status", TEAM),
    Access("update", "tekton.dev", "pipelineruns/finalizers", TEAM),
]


# --- unit: builds and shapes ----------------------------------------------------------


@pytest.mark.unit
class TestBuild:
    @pytest.mark.parametrize("base", BASES)
    def test_base_builds(self, base: str) -> None:
        kinds = {d["kind"] for d in built(base)}
        assert {"Deployment", "Service", "ConfigMap", "ServiceAccount", "ClusterRole", "CustomResourceDefinition"} <= kinds

    @pytest.mark.parametrize("base", BASES)
    @pytest.mark.parametrize("component", COMPONENTS)
    def test_component_builds_on_base(self, base: str, component: str) -> None:
        assert built(base, component)

    def test_all_components_together(self) -> None:
        docs = built("default", *COMPONENTS)
        assert find(docs, "ServiceMonitor", "multikueue-controller-manager-metrics-monitor")
        assert find(docs, "Certificate", "multikueue-serving-cert")
        assert allowed(docs, TEKTON_NEEDS[0])

    @pytest.mark.parametrize("path", ["crd", "rbac", "rbac/manager", "rbac/worker", "rbac/users", "manager", "worker-access"])
    def test_parts_build(self, path: str) -> None:
        assert kustomize(CONFIG / path)

    def test_kopf_peering_is_not_used(self) -> None:
        """config/kopf is going away: nothing refers to it or to kopf's peering kinds."""
        for base in BASES:
            assert "kopf.dev" not in _built(base, COMPONENTS), base
        for path in CONFIG.rglob("kustomization.yaml"):
            if "kopf" not in path.parts:
                refs = yaml.safe_load(path.read_text()).get("resources", [])
                assert not any("kopf" in r for r in refs), path

    @pytest.mark.parametrize("base", BASES)
    def test_no_duplicate_objects(self, base: str) -> None:
        keys = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in built(base)]
        assert len(keys) == len(set(keys))


@pytest.mark.unit
class TestNamespaces:
    @pytest.mark.parametrize("components", [(), COMPONENTS])
    def test_default_everything_in_kueue_system(self, components: tuple[str, ...]) -> None:
        for doc in built("default", *components):
            ns = doc["metadata"].get("namespace")
            if doc["kind"] in CLUSTER_SCOPED:
                assert ns is None, f"{doc['kind']}/{doc['metadata']['name']} is cluster-scoped"
            else:
                assert ns == NAMESPACE, f"{doc['kind']}/{doc['metadata']['name']} in {ns}"

    def test_worker_namespaces(self) -> None:
        in_origins = set()
        for doc in built("worker", *COMPONENTS):
            ns, name = doc["metadata"].get("namespace"), doc["metadata"]["name"]
            if doc["kind"] in CLUSTER_SCOPED:
                assert ns is None, f"{doc['kind']}/{name}"
            elif ns == ORIGINS:
                in_origins.add((doc["kind"], name))
            else:
                assert ns == NAMESPACE, f"{doc['kind']}/{name} in {ns}"
        assert in_origins == {
            ("Role", "multikueue-manager-origin-lease"),
            ("RoleBinding", "multikueue-manager-origin-lease"),
            ("Role", "multikueue-controller-manager-origin-leases"),
            ("RoleBinding", "multikueue-controller-manager-origin-leases"),
        }
        names = {d["metadata"]["name"] for d in built("worker") if d["kind"] == "Namespace"}
        assert names == {NAMESPACE, ORIGINS}

    @pytest.mark.parametrize("base", BASES)
    def test_bindings_name_the_controller_namespace(self, base: str) -> None:
        for doc in built(base):
            for subject in doc.get("subjects") or []:
                if subject.get("kind") == "ServiceAccount":
                    assert subject["namespace"] == NAMESPACE


@pytest.mark.unit
class TestDeployment:
    @pytest.mark.parametrize("base,role", [("default", "manager"), ("worker", "worker")])
    def test_flags(self, base: str, role: str) -> None:
        args = container(built(base))["args"]
        assert args == [f"--role={role}", *FLAGS]

    def test_cert_manager_replaces_the_secret_flag(self) -> None:
        docs = built("default", "cert-manager")
        c = container(docs)
        assert "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs" in c["args"]
        assert not any(a.startswith("--webhook-cert-secret") for a in c["args"])
        mount = next(m for m in c["volumeMounts"] if m["name"] == "webhook-cert")
        assert mount == {"name": "webhook-cert", "mountPath": "/tmp/k8s-webhook-server/serving-certs", "readOnly": True}
        volumes = find(docs, "Deployment", DEPLOYMENT)["spec"]["template"]["spec"]["volumes"]
        secret = next(v for v in volumes if v["name"] == "webhook-cert")["secret"]
        assert secret["secretName"] == CERT_SECRET
        assert find(docs, "Certificate", "multikueue-serving-cert")["spec"]["secretName"] == CERT_SECRET
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            config = find(docs, kind, WEBHOOK_CONFIGURATION)
            assert "webhooks" not in config  # the controller writes them
            assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/multikueue-serving-cert"

    @pytest.mark.parametrize("base", BASES)
    def test_image_and_identity(self, base: str) -> None:
        docs = built(base)
        spec = find(docs, "Deployment", DEPLOYMENT)["spec"]
        assert spec["replicas"] == 2
        assert spec["template"]["spec"]["serviceAccountName"] == SERVICE_ACCOUNT
        assert find(docs, "ServiceAccount", SERVICE_ACCOUNT)["metadata"]["namespace"] == NAMESPACE
        assert container(docs)["image"] == "multikueue:dev"
        assert not container(docs).get("command")  # the image's entrypoint is `multikueue run`

    @pytest.mark.parametrize("base", BASES)
    def test_security_context(self, base: str) -> None:
        docs = built(base)
        pod = find(docs, "Deployment", DEPLOYMENT)["spec"]["template"]["spec"]
        c = container(docs)
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        tmp = next(m for m in c["volumeMounts"] if m["mountPath"] == "/tmp")
        assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == tmp["name"])
        assert pod["terminationGracePeriodSeconds"] >= 45  # 30 s leadership stop + clean-up

    @pytest.mark.parametrize("base", BASES)
    def test_probes_ports_and_resources(self, base: str) -> None:
        c = container(built(base))
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert ports == {"webhook-server": 9443, "metrics": 8080, "health": 8081}
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
        assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
        assert c["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
        assert c["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}

    @pytest.mark.parametrize("base", BASES)
    def test_spread_and_disruption_budget(self, base: str) -> None:
        docs = built(base)
        template = find(docs, "Deployment", DEPLOYMENT)["spec"]["template"]
        labels = template["metadata"]["labels"]
        preferred = template["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert preferred[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        assert preferred[0]["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
        pdb = find(docs, "PodDisruptionBudget", DEPLOYMENT)["spec"]
        assert pdb["minAvailable"] == 1
        assert pdb["selector"]["matchLabels"].items() <= labels.items()

    @pytest.mark.parametrize("base", BASES)
    def test_services(self, base: str) -> None:
        docs = built(base)
        labels = find(docs, "Deployment", DEPLOYMENT)["spec"]["template"]["metadata"]["labels"]
        port_names = {p["name"] for p in container(docs)["ports"]}
        webhook = find(docs, "Service", WEBHOOK_SERVICE)["spec"]
        metrics = find(docs, "Service", METRICS_SERVICE)["spec"]
        assert [(p["port"], p["targetPort"]) for p in webhook["ports"]] == [(443, "webhook-server")]
        assert [(p["port"], p["targetPort"]) for p in metrics["ports"]] == [(8080, "metrics")]
        for spec in (webhook, metrics):
            assert spec["selector"].items() <= labels.items()
            assert {p["targetPort"] for p in spec["ports"]} <= port_names

    def test_service_monitor_selects_the_metrics_service(self) -> None:
        docs = built("default", "prometheus")
        monitor = find(docs, "ServiceMonitor", "multikueue-controller-manager-metrics-monitor")["spec"]
        service = find(docs, "Service", METRICS_SERVICE)
        assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert monitor["endpoints"] == [{"port": "metrics", "path": "/metrics", "scheme": "http", "interval": "30s"}]
        assert [s for s in built("default") if s["kind"] == "Service" and s["metadata"]["labels"].items() >= monitor["selector"]["matchLabels"].items()] == [service]

    @pytest.mark.parametrize("base", BASES)
    def test_no_static_webhook_configurations(self, base: str) -> None:
        kinds = {d["kind"] for d in built(base)}
        assert not kinds & {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}


@pytest.mark.unit
class TestConfiguration:
    def test_config_map_is_an_upstream_configuration(self) -> None:
        docs = built("default")
        data = find(docs, "ConfigMap", DEFAULT_CONFIG_MAP)["data"]
        assert set(data) == {CONFIG_KEY}
        document = yaml.safe_load(data[CONFIG_KEY])
        assert document["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
        assert document["kind"] == "Configuration"
        assert document["manageJobsWithoutQueueName"] is False
        assert document["integrations"]["frameworks"] == ["batch/job"]
        assert document["namespace"] == DEFAULT_NAMESPACE == NAMESPACE
        loaded = load_configuration(data[CONFIG_KEY])
        assert loaded.unused == []
        assert loaded.config.multi_kueue.origin == document["multiKueue"]["origin"]

    def test_commented_namespace_selector_example_is_valid(self) -> None:
        text = find(built("default"), "ConfigMap", DEFAULT_CONFIG_MAP)["data"][CONFIG_KEY]
        lines = text.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("#managedJobsNamespaceSelector:"))
        example = [lines[start][1:]]
        for line in lines[start + 1 :]:
            if not line.startswith("#  "):
                break
            example.append(line[1:])
        selector = yaml.safe_load("\n".join(example))["managedJobsNamespaceSelector"]
        assert selector == {"matchLabels": {"kueue.x-k8s.io/managed": "true"}}
        uncommented = text.replace("\n".join("#" + e for e in example), "\n".join(example))
        assert load_configuration(uncommented).config.managed_jobs_namespace_selector is not None

    def test_worker_reads_the_same_document(self) -> None:
        assert find(built("worker"), "ConfigMap", DEFAULT_CONFIG_MAP) == find(built("default"), "ConfigMap", DEFAULT_CONFIG_MAP)


# --- unit: RBAC ------------------------------------------------------------------------


def _rules(docs: Iterable[Mapping[str, Any]]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for doc in docs:
        if doc["kind"] in ("Role", "ClusterRole"):
            for rule in doc.get("rules") or []:
                yield f"{doc['kind']}/{doc['metadata']['name']}", rule


def _rule_blocks(text: str) -> Iterator[tuple[int, list[str], list[str]]]:
    """Each rule of a YAML source: (line number, the lines above it up to the previous item, its own lines)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(r"^- apiGroups:", line)]
    for start in starts:
        end = start + 1
        while end < len(lines) and lines[end].startswith("  "):
            end += 1
        above = []
        i = start - 1
        while i >= 0 and lines[i].startswith("#"):
            above.append(lines[i])
            i -= 1
        yield start + 1, above, lines[start:end]


@pytest.mark.unit
class TestRbac:
    @pytest.mark.parametrize("base", BASES)
    def test_no_wildcards(self, base: str) -> None:
        for where, rule in _rules(built(base, *COMPONENTS)):
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in (rule.get(key) or []), f"{where}: {key} has a wildcard"
                assert not any("*" in str(v) for v in rule.get(key) or []), f"{where}: {key}"
            assert "nonResourceURLs" not in rule, where

    @pytest.mark.parametrize("path", CONTROLLER_RULE_FILES)
    def test_every_controller_rule_says_what_needs_it(self, path: str) -> None:
        text = (CONFIG / path).read_text()
        blocks = list(_rule_blocks(text))
        assert blocks or "rules: []" in text, path
        for line, above, body in blocks:
            commented = any(entry.strip().startswith("#") for entry in above + body)
            assert commented, f"config/{path}:{line}: rule without a comment saying what needs it"

    def test_rule_blocks_are_found(self) -> None:
        for path in CONTROLLER_RULE_FILES:
            text = (CONFIG / path).read_text()
            assert len(list(_rule_blocks(text))) == sum(len(d.get("rules") or []) for d in yaml.safe_load_all(text) if d), path

    @pytest.mark.parametrize("base", BASES)
    def test_the_controller_may_do_what_the_code_calls(self, base: str) -> None:
        docs = built(base)
        missing = [f"{a} ({a.why})" for a in NEEDS[base] if not allowed(docs, a)]
        assert not missing, "\n".join(missing)

    @pytest.mark.parametrize("base", BASES)
    def test_and_nothing_more(self, base: str) -> None:
        docs = built(base, *COMPONENTS)
        extra = [str(a) for a in DENIED[base] if allowed(docs, a)]
        assert not extra, "\n".join(extra)

    @pytest.mark.parametrize("base", BASES)
    def test_no_update_except_finalizers(self, base: str) -> None:
        """AsyncKube never PUTs: `update` only on `*/finalizers`, for ownerReferences with blockOwnerDeletion."""
        docs = built(base, *COMPONENTS)
        people = {f"ClusterRole/{d['metadata']['name']}" for d in docs if "rbac.kueue.x-k8s.io/role" in (d["metadata"].get("labels") or {})}
        for where, rule in _rules(docs):
            if "update" not in rule["verbs"] or where in people:
                continue  # the people's roles (config/rbac/users) edit as kubectl does
            if where == "ClusterRole/multikueue-manager-access" and rule["resources"] == ["workloads"]:
                continue  # a manager's identity on a worker: upstream Kueue's manager PUTs to drop a finalizer
            fine = all(r.endswith("/finalizers") for r in rule["resources"])
            assert fine, f"{where}: update on {rule['resources']}"

    @pytest.mark.parametrize("base", BASES)
    def test_external_frameworks_aggregate(self, base: str) -> None:
        docs = built(base)
        role = find(docs, "ClusterRole", "multikueue-external-frameworks")
        assert role["aggregationRule"]["clusterRoleSelectors"] == [{"matchLabels": {"multikueue.x-k8s.io/aggregate-to-manager": "true"}}]
        assert not any(allowed(docs, a) for a in TEKTON_NEEDS)
        with_tekton = built(base, "tekton")
        missing = [str(a) for a in TEKTON_NEEDS if not allowed(with_tekton, a)]
        assert not missing, missing

    def test_people_roles(self) -> None:
        docs = built("default")
        admin = find(docs, "ClusterRole", "multikueue-batch-admin-role")
        user = find(docs, "ClusterRole", "multikueue-batch-user-role")
        assert admin["aggregationRule"]["clusterRoleSelectors"] == [{"matchLabels": {"rbac.kueue.x-k8s.io/batch-admin": "true"}}]
        assert user["aggregationRule"]["clusterRoleSelectors"] == [{"matchLabels": {"rbac.kueue.x-k8s.io/batch-user": "true"}}]

        def aggregated(selector: str) -> dict[str, set[str]]:
            grants: dict[str, set[str]] = {}
            for doc in docs:
                if doc["kind"] == "ClusterRole" and (doc["metadata"].get("labels") or {}).get(selector) == "true":
                    for rule in doc["rules"]:
                        for resource in rule["resources"]:
                            grants.setdefault(resource, set()).update(rule["verbs"])
            return grants

        edit = {"create", "delete", "get", "list", "patch", "update", "watch"}
        admin_grants = aggregated("rbac.kueue.x-k8s.io/batch-admin")
        for plural in ("clusterqueues", "resourceflavors", "admissionchecks", "multikueueclusters", "multikueueconfigs", "cohorts", "workloadpriorityclasses", "localqueues", "workloads", "jobs"):
            assert admin_grants[plural] == edit, plural
        user_grants = aggregated("rbac.kueue.x-k8s.io/batch-user")
        assert user_grants["jobs"] == edit
        assert user_grants["localqueues"] == user_grants["workloads"] == {"get", "list", "watch"}
        assert "clusterqueues" not in user_grants
        # Namespace roles see queues and Workloads; `admin` never gets to edit cluster-scoped kinds.
        for builtin in ("view", "edit", "admin"):
            grants = aggregated(f"rbac.authorization.k8s.io/aggregate-to-{builtin}")
            assert grants["localqueues"] == grants["workloads"] == {"get", "list", "watch"}, builtin
            assert all(verbs <= {"get", "list", "watch"} for verbs in grants.values()), builtin


# --- integration: a real apiserver ------------------------------------------------------


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True, text=True, timeout=120
    )
    if check:
        assert result.returncode == 0, f"kubectl {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result


#: (base, cluster index): the manager's base on the manager, the worker's on worker 1.
TARGETS = [("default", 0), ("worker", 1)]


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.parametrize("base,cluster", TARGETS)
def test_server_accepts_every_object(
    integration_clusters: Clusters, base: str, cluster: int, request: pytest.FixtureRequest
) -> None:
    """Server-side dry run of the whole base: every object valid for a real apiserver (CRDs included).

    The manager's base goes to a fresh apiserver: on the integration manager
    the controller (a process, webhooks by URL) registered the CRDs'
    conversion webhook by ``url``, and the base's ``service`` would join it
    (server-side apply merges the two), which the apiserver refuses. In a
    cluster the controller registers the same Service the base names.
    """
    kubeconfig = integration_clusters.kubeconfigs[cluster]
    if base == "default":
        kubeconfig = request.getfixturevalue("bare_cluster").kubeconfigs[0]
        # A dry run creates nothing, so the namespaced objects need their namespace there already.
        if kubectl(kubeconfig, "get", "namespace", "kueue-system", check=False).returncode != 0:
            kubectl(kubeconfig, "create", "namespace", "kueue-system")
    result = kubectl(
        kubeconfig, "apply", "--server-side", "--force-conflicts", "--dry-run=server",
        "--field-manager=multikueue-manifests-test", "-k", str(CONFIG / base),
    )
    applied = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(applied) == len(built(base)), result.stdout


def _object_ref(doc: Mapping[str, Any]) -> list[str]:
    kind = {"ClusterRole": "clusterrole.rbac.authorization.k8s.io", "ClusterRoleBinding": "clusterrolebinding.rbac.authorization.k8s.io",
            "Role": "role.rbac.authorization.k8s.io", "RoleBinding": "rolebinding.rbac.authorization.k8s.io",
            "ServiceAccount": "serviceaccount"}[doc["kind"]]
    namespace = doc["metadata"].get("namespace")
    return [f"{kind}/{doc['metadata']['name']}", *(["-n", namespace] if namespace else [])]


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.parametrize("base,cluster", TARGETS)
def test_controller_rbac_on_a_real_apiserver(integration_clusters: Clusters, base: str, cluster: int) -> None:
    """Apply the controller's RBAC for real, then ask the apiserver what its ServiceAccount may do.

    Only RBAC objects are applied; those the cluster already had (e.g. the
    worker-access objects the dev clusters wire up) are left in place, the rest
    deleted afterwards. Aggregated roles stay empty here (no
    kube-controller-manager), so external frameworks are checked by the unit tests.
    """
    kubeconfig = integration_clusters.kubeconfigs[cluster]
    docs = [d for d in built(base) if d["kind"] in RBAC_KINDS]
    created = [d for d in docs if kubectl(kubeconfig, "get", *_object_ref(d), check=False).returncode != 0]
    try:
        kubectl(kubeconfig, "apply", "--server-side", "--field-manager=multikueue-manifests-test", "-f", "-",
                stdin=yaml.safe_dump_all(created))
        wrong = []
        for access, expected in [*((a, True) for a in NEEDS[base]), *((a, False) for a in DENIED[base])]:
            result = kubectl(kubeconfig, "auth", "can-i", *access.kubectl_args(), f"--as={SA_USER}", check=False)
            answer = result.stdout.strip()
            assert answer in ("yes", "no"), f"{access}: {result.stdout} {result.stderr}"
            if (answer == "yes") != expected:
                wrong.append(f"{access}: {answer}, expected {'yes' if expected else 'no'}")
        assert not wrong, "\n".join(wrong)
    finally:
        for doc in reversed(created):
            kubectl(kubeconfig, "delete", "--ignore-not-found", "--wait=false", *_object_ref(doc), check=False)
