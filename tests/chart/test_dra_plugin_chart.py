"""The chart's DRA plugin: off by default; when on, a DaemonSet running `hami dra-plugin`, rights limited to its
own node's ResourceSlices (RBAC plus an admission policy), and the DeviceClass without HAMi's name clash."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.test_chart import KUBE_VERSION, NAMESPACE, kinds, one, render, rules, run_helm
from tests.helm import CHART

ON = "draPlugin.enabled=true"
DRIVER = "hami-core-gpu.project-hami.io"


def test_off_by_default() -> None:
    assert not [k for k in kinds(render()) if "dra-plugin" in k[1] or k[0] == "DeviceClass"]


def test_on_it_adds_the_plugin_its_identity_policy_and_device_class() -> None:
    added = sorted(set(kinds(render(ON))) - set(kinds(render())))
    assert added == [
        ("ClusterRole", "hami-dra-plugin"),
        ("ClusterRoleBinding", "hami-dra-plugin"),
        ("DaemonSet", "hami-dra-plugin"),
        ("DeviceClass", DRIVER),
        ("ServiceAccount", "hami-dra-plugin"),
        ("ValidatingAdmissionPolicy", "hami-dra-plugin-node-restriction"),
        ("ValidatingAdmissionPolicyBinding", "hami-dra-plugin-node-restriction"),
    ]


def test_the_plugin_may_write_only_resource_slices_and_read_claims() -> None:
    assert rules(one(render(ON), "ClusterRole", "hami-dra-plugin")) == [
        ("", "nodes", ("get",), ()),
        ("", "pods", ("list", "watch"), ()),  # its node's pods: the cards device-plugin pods hold are held back
        ("resource.k8s.io", "resourceslices", ("get", "list", "create", "patch", "delete"), ()),
        ("resource.k8s.io", "resourceclaims", ("get",), ()),
    ]


def test_the_admission_policy_holds_writes_to_its_own_nodes_slices_of_its_driver() -> None:
    policy = one(render(ON), "ValidatingAdmissionPolicy", "hami-dra-plugin-node-restriction")["spec"]
    assert policy["failurePolicy"] == "Fail"
    (condition,) = policy["matchConditions"]
    assert (
        condition["expression"] == f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:hami-dra-plugin"'
    )
    (rule,) = policy["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"], rule["operations"]) == (
        ["resource.k8s.io"],
        ["resourceslices"],
        ["CREATE", "UPDATE", "DELETE"],
    )
    expressions = "\n".join(v["expression"] for v in policy["validations"])
    assert "object.spec.nodeName == variables.nodeName" in expressions
    assert "oldObject.spec.nodeName == variables.nodeName" in expressions
    assert f'object.spec.driver == "{DRIVER}"' in expressions


def test_the_device_class_has_hamis_selector_and_no_extended_resource_unless_asked() -> None:
    docs = render(ON)
    spec = one(docs, "DeviceClass", DRIVER)["spec"]
    (selector,) = spec["selectors"]
    assert selector["cel"]["expression"] == (
        f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'hami-gpu'"
    )
    assert "extendedResourceName" not in spec
    named = one(render(ON, "draPlugin.deviceClass.extendedResourceName=nvidia.com/gpu"), "DeviceClass")
    assert named["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert not [d for d in render(ON, "draPlugin.deviceClass.create=false") if d["kind"] == "DeviceClass"]


def daemonset(*sets: str) -> dict[str, Any]:
    return one(render(ON, *sets), "DaemonSet", "hami-dra-plugin")["spec"]["template"]["spec"]


def test_the_daemonset_runs_hami_dra_plugin_with_kubelets_directories() -> None:
    spec = daemonset()
    assert spec["serviceAccountName"] == "hami-dra-plugin"
    (ctr,) = spec["containers"]
    assert ctr["command"] == ["hami", "dra-plugin"]
    assert f"--plugin-dir=/var/lib/kubelet/plugins/{DRIVER}" in ctr["args"]
    assert "--registry-dir=/var/lib/kubelet/plugins_registry" in ctr["args"]
    assert "--scheduler-name=hami-scheduler" in ctr["args"]  # whose device-plugin pods hold cards back
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["CDI_ROOT"] == "/var/run/cdi"
    assert env["HOOK_PATH"] == "/usr/local"
    mounts = {m["mountPath"] for m in ctr["volumeMounts"]}
    assert {f"/var/lib/kubelet/plugins/{DRIVER}", "/var/lib/kubelet/plugins_registry", "/var/run/cdi",
            "/usr/local/vgpu", "/tmp/vgpulock"} <= mounts  # fmt: skip
    assert ctr["securityContext"]["allowPrivilegeEscalation"] is False
    assert "privileged" not in ctr["securityContext"]


def test_fake_nvml_needs_the_acknowledgement() -> None:
    with pytest.raises(Exception, match="acknowledgeFakeGPUs"):
        render(ON, "draPlugin.testing.fakeNvml=devices: []")
    spec = daemonset("draPlugin.testing.fakeNvml=devices: []", "draPlugin.testing.acknowledgeFakeGPUs=true")
    assert "--fake-nvml=/fake-nvml/fixture.yaml" in spec["containers"][0]["args"]


def test_the_dra_plugin_lints_clean() -> None:
    result = run_helm("lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, "--set", ON)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout
