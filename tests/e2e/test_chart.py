"""Every object the chart renders is accepted by the real kube-apiserver (server-side dry-run, strict field
validation), for the default values and the variants that change the chart's shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import KubeClient
from tests.helm import template

DATA = Path(__file__).resolve().parents[1] / "data"
HAMI_VALUES = DATA / "hami-v2.10.0-values.yaml"  # HAMi v2.10's own chart defaults (docs/coming-from-hami.md)

# kind -> (API prefix, plural, namespaced)
PATHS = {
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Secret": ("/api/v1", "secrets", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Service": ("/api/v1", "services", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "DaemonSet": ("/apis/apps/v1", "daemonsets", True),
    "Job": ("/apis/batch/v1", "jobs", True),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "mutatingwebhookconfigurations",
        False,
    ),
    "RuntimeClass": ("/apis/node.k8s.io/v1", "runtimeclasses", False),
    "DeviceClass": ("/apis/resource.k8s.io/v1", "deviceclasses", False),
    "ValidatingAdmissionPolicy": ("/apis/admissionregistration.k8s.io/v1", "validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicybindings",
        False,
    ),
}
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}  # CRDs: not installed in the test control plane


def dry_run(kube: KubeClient, namespace: str, obj: dict[str, Any]) -> None:
    """Server-side dry-run of one object, in the namespace it names (the chart's RoleBinding in kube-system) or else
    the test's. A cluster-scoped object, or one in a namespace other than the test's, gets the test's namespace
    appended to its name: other tests in the session apply the chart's identities for real, and a dry-run create of
    an existing name is refused (409) whatever the object says."""
    prefix, plural, namespaced = PATHS[obj["kind"]]
    target = obj["metadata"].get("namespace") or namespace
    if not namespaced or target != namespace:
        obj = {**obj, "metadata": {**obj["metadata"], "name": f"{obj['metadata']['name']}-{namespace}"}}
    path = f"{prefix}/namespaces/{target}/{plural}" if namespaced else f"{prefix}/{plural}"
    kube.request("POST", path, obj, params={"dryRun": "All", "fieldValidation": "Strict"})


@pytest.mark.parametrize(
    ("sets", "values"),
    [
        pytest.param([], [], id="default values"),
        pytest.param(["scheduler.certManager.enabled=true", "grafanaDashboard.enabled=true"], [], id="cert-manager"),
        pytest.param(
            ["scheduler.admissionWebhook.enabled=false", "scheduler.metricsSecure=false"], [], id="without the webhook"
        ),
        pytest.param(["scheduler.overwriteEnv=true"], [], id="webhook without matchConditions"),
        pytest.param(
            [
                "draPlugin.enabled=true",
                "draPlugin.deviceClass.extendedResourceName=example.com/gpu",
                "draPlugin.testing.fakeNvml=devices: []",
                "draPlugin.testing.acknowledgeFakeGPUs=true",
            ],
            [],
            id="the DRA plugin",
        ),
        pytest.param(
            [
                "scheduler.replicas=2",
                "scheduler.service.type=NodePort",
                "scheduler.admissionWebhook.customURL.enabled=true",
                "scheduler.kubeScheduler.extenderTLSInsecure=false",
            ],
            [],
            id="two replicas, NodePort, custom URL, verified extender TLS",
        ),
        pytest.param([], [HAMI_VALUES], id="HAMi v2.10's own values file"),
        pytest.param(
            [
                "scheduler.replicas=3",
                "scheduler.podDisruptionBudget.maxUnavailable=1",
                "scheduler.service.type=NodePort",
                "devicePlugin.runtimeClassName=nvidia",
                "devicePlugin.createRuntimeClass=true",
                "devicePlugin.hostNetwork=true",
            ],
            [HAMI_VALUES, DATA / "hami-style-values.yaml"],
            id="a HAMi user's values file",
        ),
    ],
)
def test_every_rendered_object_passes_server_side_dry_run(
    kube: KubeClient, namespace: str, sets: list[str], values: list[Path]
) -> None:
    version = kube.get("/version")["gitVersion"].lstrip("v").split("-")[0]
    docs = template(namespace, version, *sets, values=values)
    accepted = 0
    for obj in docs:
        if obj["kind"] in CERT_MANAGER_KINDS:
            continue
        assert obj["kind"] in PATHS, f"no dry-run path for {obj['kind']}"
        dry_run(kube, namespace, obj)
        accepted += 1
    assert accepted >= 11
