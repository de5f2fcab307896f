"""The Helm chart: ``helm lint`` and ``helm template`` with default values, with cert-manager, and with the
values that change its shape; the rendered objects are checked field by field. (helm: see ``tests/helm.py``;
the server-side dry-run of every object is in ``tests/e2e/test_chart.py``.)
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami.config import default_device_config, load_settings, parse_device_config
from hami.protocol import keys
from hami.simulate.scaleup import load_device_profiles
from tests.helm import CHART, helm, template

KUBE_VERSION = "1.36.3"
NAMESPACE = "hami-system"
KUNLUN = ("kunlunxin.com/xpu", "kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory")
AMD_VASTAI_BIREN = ["amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores", "vastaitech.com/va", "birentech.com/gpu"]


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm(), *args], capture_output=True, text=True, check=False, timeout=120)


@cache
def _render(*sets: str) -> tuple[dict[str, Any], ...]:
    return tuple(template(NAMESPACE, KUBE_VERSION, *sets))


def render(*sets: str) -> list[dict[str, Any]]:
    return list(_render(*sets))


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def kinds(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted((d["kind"], d["metadata"]["name"]) for d in docs)


def container(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == name)


def scheduler_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(one(docs, "ConfigMap", "hami-scheduler")["data"]["config.yaml"])
    return loaded


# --- lint --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sets",
    [
        pytest.param([], id="default values lint clean"),
        pytest.param(["scheduler.certManager.enabled=true"], id="cert-manager lints clean"),
        pytest.param(
            ["scheduler.admissionWebhook.enabled=false", "scheduler.metricsSecure=false"],
            id="without the webhook lints clean",
        ),
        pytest.param(
            ["devices.ascend.enabled=true", "devices.iluvatar.enabled=true", "devices.nvidia.enabled=false"],
            id="other families lint clean",
        ),
    ],
)
def test_helm_lint(sets: list[str]) -> None:
    args = ["lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION]
    for s in sets:
        args += ["--set", s]
    result = run_helm(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


# --- default values ----------------------------------------------------------------------------------------


def test_default_objects() -> None:
    assert kinds(render()) == [
        ("ClusterRole", "hami-certs"),
        ("ClusterRole", "hami-device-plugin"),
        ("ClusterRole", "hami-metrics-reader"),
        ("ClusterRole", "hami-scheduler"),
        ("ClusterRoleBinding", "hami-certs"),
        ("ClusterRoleBinding", "hami-device-plugin"),
        ("ClusterRoleBinding", "hami-scheduler"),
        ("ClusterRoleBinding", "hami-scheduler-kube-scheduler"),
        ("ClusterRoleBinding", "hami-scheduler-volume-scheduler"),
        ("ConfigMap", "hami-device-plugin"),
        ("ConfigMap", "hami-scheduler"),
        ("ConfigMap", "hami-scheduler-device"),
        ("DaemonSet", "hami-device-plugin"),
        ("Deployment", "hami-scheduler"),
        ("Job", "hami-certs-post"),
        ("Job", "hami-certs-pre"),
        ("MutatingWebhookConfiguration", "hami-webhook"),
        ("PodDisruptionBudget", "hami-scheduler"),
        ("Role", "hami-certs"),
        ("Role", "hami-kube-scheduler-leases"),
        ("Role", "hami-scheduler-leases"),
        ("RoleBinding", "hami-certs"),
        ("RoleBinding", "hami-kube-scheduler-authentication-reader"),
        ("RoleBinding", "hami-kube-scheduler-leases"),
        ("RoleBinding", "hami-scheduler-leases"),
        ("Secret", "hami-kube-scheduler-token"),
        ("Service", "hami-device-plugin-monitor"),
        ("Service", "hami-scheduler"),
        ("ServiceAccount", "hami-certs"),
        ("ServiceAccount", "hami-device-plugin"),
        ("ServiceAccount", "hami-kube-scheduler"),
        ("ServiceAccount", "hami-scheduler"),
        ("ValidatingAdmissionPolicy", "hami-device-plugin-node-restriction"),
        ("ValidatingAdmissionPolicy", "hami-scheduler-allocations"),
        ("ValidatingAdmissionPolicyBinding", "hami-device-plugin-node-restriction"),
        ("ValidatingAdmissionPolicyBinding", "hami-scheduler-allocations"),
    ]


def test_the_lease_timings_are_the_values_given() -> None:
    config = scheduler_config(
        render(
            "scheduler.leaderElection.leaseDuration=15s",
            "scheduler.leaderElection.renewDeadline=10s",
            "scheduler.leaderElection.retryPeriod=3s",
        )
    )
    timings = {k: config["leaderElection"][k] for k in ("leaseDuration", "renewDeadline", "retryPeriod")}
    assert timings == {"leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "3s"}


def test_the_kube_scheduler_configuration_calls_hami_as_its_extender() -> None:
    config = scheduler_config(render())
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["leaderElection"] == {
        "leaderElect": True,
        "resourceLock": "leases",
        "resourceName": "hami-scheduler",
        "resourceNamespace": NAMESPACE,
        "leaseDuration": "10s",
        "renewDeadline": "7s",
        "retryPeriod": "2s",
    }
    assert config["profiles"] == [{"schedulerName": "hami-scheduler"}]
    (extender,) = config["extenders"]
    managed = extender.pop("managedResources")
    assert extender == {
        "urlPrefix": "https://127.0.0.1:8888",
        "filterVerb": "filter",
        "bindVerb": "bind",
        "nodeCacheCapable": True,
        "weight": 1,
        "httpTimeout": "30s",
        "enableHTTPS": True,
        "tlsConfig": {"insecure": True},
    }
    assert managed == [
        {"name": name, "ignoredByScheduler": True}
        for name in (
            "nvidia.com/gpu",
            "nvidia.com/gpumem",
            "nvidia.com/gpumem-percentage",
            "nvidia.com/gpucores",
            "nvidia.com/priority",
            "hygon.com/dcunum",
            "hygon.com/dcumem",
            "hygon.com/dcucores",
            *KUNLUN,
            "enflame.com/gcu",
            "enflame.com/drs-gcu",
            "enflame.com/gcu-memory",
            "enflame.com/gcu-core",
            "aws.amazon.com/neuron",
            "aws.amazon.com/neuroncore",
            *AMD_VASTAI_BIREN,
            *CAMBRICON,
            *METAX,
            *MTHREADS,
        )
    ]


def device_config_text(docs: list[dict[str, Any]]) -> str:
    text: str = one(docs, "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"]
    return text


def test_the_device_config_uses_hamis_keys() -> None:
    config = yaml.safe_load(device_config_text(render()))
    assert list(config) == [
        "nvidia",
        "hygon",
        "kunlun",
        "enflame",
        "awsneuron",
        "amd",
        "vastai",
        "biren",
        "cambricon",
        "metax",
        "mthreads",
        "iluvatars",
        "vnpus",
        "dra",
    ]
    assert {k: config[k] for k in ("nvidia", "hygon", "kunlun", "enflame", "awsneuron", "amd", "vastai", "biren")} == {
        "nvidia": {
            "resourceCountName": "nvidia.com/gpu",
            "resourceMemoryName": "nvidia.com/gpumem",
            "resourceMemoryPercentageName": "nvidia.com/gpumem-percentage",
            "resourceCoreName": "nvidia.com/gpucores",
            "resourcePriorityName": "nvidia.com/priority",
            "overwriteEnv": False,
            "defaultMemory": 0,
            "defaultCores": 0,
            "defaultGPUNum": 1,
            "memoryFactor": 1,
            "gpuCorePolicy": "default",
            "libCudaLogLevel": 1,
            "runtimeClassName": "",
            # devicePlugin.* (HAMi renders them here; the plugin reads them from this section)
            "deviceSplitCount": 10,
            "deviceMemoryScaling": 1,
            "deviceCoreScaling": 1,
            "preConfiguredDeviceMemory": 0,
            "enableNumaTopology": False,
            "disableCoreLimit": False,
        },
        "hygon": {
            "resourceCountName": "hygon.com/dcunum",
            "resourceMemoryName": "hygon.com/dcumem",
            "resourceCoreName": "hygon.com/dcucores",
            "memoryFactor": 1,
        },
        "kunlun": {
            "resourceCountName": "kunlunxin.com/xpu",
            "resourceVCountName": "kunlunxin.com/vxpu",
            "resourceVMemoryName": "kunlunxin.com/vxpu-memory",
        },
        "enflame": {
            "resourceNameGCU": "enflame.com/gcu",
            "resourceNameDRSGCU": "enflame.com/drs-gcu",
            "resourceNameGCUMemory": "enflame.com/gcu-memory",
            "resourceNameGCUCore": "enflame.com/gcu-core",
        },
        "awsneuron": {"resourceCountName": "aws.amazon.com/neuron", "resourceCoreName": "aws.amazon.com/neuroncore"},
        "amd": {
            "resourceCountName": "amd.com/gpu",
            "resourceCoreName": "amd.com/gpucores",
            "resourceMemoryName": "amd.com/gpumem",
        },
        "vastai": {"resourceCountName": "vastaitech.com/va"},
        "biren": {"resourceCountName": "birentech.com/gpu"},
    }
    assert config["cambricon"] == {
        "resourceCountName": "cambricon.com/vmlu",
        "resourceMemoryName": "cambricon.com/mlu.smlu.vmemory",
        "resourceCoreName": "cambricon.com/mlu.smlu.vcore",
    }
    assert config["metax"]["resourceCountName"] == "metax-tech.com/gpu"
    assert config["metax"]["sgpuTopologyAware"] is False
    assert config["iluvatars"][2] == {
        "chipName": "BI-V150",
        "commonWord": "BI-V150",
        "resourceCountName": "iluvatar.ai/BI-V150-vgpu",
        "resourceMemoryName": "iluvatar.ai/BI-V150.vMem",
        "resourceCoreName": "iluvatar.ai/BI-V150.vCore",
    }
    assert config["vnpus"]["hamiVnpuCore"] is False
    c910 = config["vnpus"]["configs"][-1]
    assert (c910["chipName"], c910["resourceName"], c910["superPod"]) == ("Ascend910", "huawei.com/Ascend910C", True)
    assert c910["resourceMemoryName"] == "huawei.com/Ascend910C-memory"
    assert c910["resourceCoreName"] == "huawei.com/Ascend910C-core"


@pytest.mark.parametrize(
    "sets",
    [
        pytest.param((), id="default values"),
        pytest.param(("devices.ascend.enabled=true", "devices.iluvatar.enabled=true"), id="every family enabled"),
    ],
)
def test_the_device_config_from_values_is_hamis_default_configuration(sets: tuple[str, ...]) -> None:
    """The values render exactly hami's built-in defaults (HAMi's chart's), without an unknown key: the chart and
    ``hami simulate`` without ``--config`` agree, and HAMi's device plugins read what they expect."""
    loaded = parse_device_config(device_config_text(render(*sets)), "device-config.yaml")
    assert loaded.warnings == ()
    assert loaded.config == default_device_config()


def test_ascend_values_reach_every_chip() -> None:
    docs = render(
        "devices.ascend.runtimeClassName=ascend", "devices.ascend.hamiVnpuCore=true", "scheduler.overwriteEnv=true"
    )
    config = parse_device_config(device_config_text(docs), "device-config.yaml").config
    assert config.vnpus.hami_vnpu_core is True
    assert [(c.runtime_class_name, c.overwrite_env) for c in config.vnpus.configs] == [("ascend", True)] * 7


MANAGED = [
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/priority",
    "hygon.com/dcunum",
    "hygon.com/dcumem",
    "hygon.com/dcucores",
    *KUNLUN,
    "enflame.com/gcu",
    "enflame.com/drs-gcu",
    "enflame.com/gcu-memory",
    "enflame.com/gcu-core",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
    *AMD_VASTAI_BIREN,
]

ASCEND = [f"huawei.com/{w}{s}" for w in ("Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4-1", "Ascend910B4",
                                            "Ascend310P", "Ascend910C") for s in ("", "-memory", "-core")]  # fmt: skip
ILUVATAR = [
    f"iluvatar.ai/{c}{s}" for c in ("MR-V100", "MR-V50", "BI-V150", "BI-V100") for s in ("-vgpu", ".vMem", ".vCore")
]
CAMBRICON = ["cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore"]
METAX = ["metax-tech.com/gpu", "metax-tech.com/sgpu", "metax-tech.com/vmemory", "metax-tech.com/vcore"]
MTHREADS = ["mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"]


def managed(docs: list[dict[str, Any]]) -> list[str]:
    (extender,) = scheduler_config(docs)["extenders"]
    names = [r["name"] for r in extender["managedResources"]]
    assert all(r["ignoredByScheduler"] is True for r in extender["managedResources"])
    (webhook,) = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert match_condition_resources(webhook) == names  # the webhook sees the pods the extender manages
    return names


@pytest.mark.parametrize(
    ("sets", "expected", "args"),
    [
        pytest.param((), MANAGED + CAMBRICON + METAX + MTHREADS, [], id="defaults"),
        pytest.param(
            ("devices.ascend.enabled=true",),
            MANAGED + CAMBRICON + METAX + MTHREADS + ASCEND,
            ["--enable-ascend"],
            id="ascend",
        ),
        pytest.param(
            ("devices.iluvatar.enabled=true", "devices.nvidia.enabled=false"),
            MANAGED[5:] + CAMBRICON + METAX + MTHREADS + ILUVATAR,
            ["--enable-iluvatar", "--disable-devices=nvidia"],
            id="iluvatar-without-nvidia",
        ),
        pytest.param(
            ("devices.cambricon.enabled=false", "devices.metax.enabled=false", "devices.mthreads.enabled=false"),
            MANAGED,
            ["--disable-devices=cambricon,metax,mthreads"],
            id="without-cambricon-metax-mthreads",
        ),
    ],
)
def test_each_enabled_family_is_managed_and_switched_on(
    sets: tuple[str, ...], expected: list[str], args: list[str]
) -> None:
    docs = render(*sets)
    assert managed(docs) == expected
    hami_args = container(docs, "hami")["args"]
    family_args = [a for a in hami_args if a.startswith(("--enable-", "--disable-devices"))]
    assert family_args == args
    # hami scheduler reads those flags into the same families the chart manages
    overrides: dict[str, object] = {}
    for arg in family_args:
        flag, _, value = arg.removeprefix("--").partition("=")
        overrides[flag.replace("-", "_")] = value or True
    families = load_settings(overrides).enabled_families
    off = {s.split(".")[1] for s in sets if s.endswith("enabled=false")}
    on = {s.split(".")[1] for s in sets if s.endswith("enabled=true")}
    assert on <= families
    assert not off & families


def test_a_custom_ascend_section_replaces_the_chips_it_manages() -> None:
    # block style: --set splits on commas
    content = "vnpus:\n- chipName: X1\n  resourceName: example.com/x1\n  resourceMemoryName: example.com/x1-mem\n"
    docs = render(f"scheduler.deviceConfig.content={content}", "devices.ascend.enabled=true")
    names = managed(docs)
    assert names[-2:] == ["example.com/x1", "example.com/x1-mem"]
    assert not set(ASCEND) & set(names)


def test_the_webhook_configuration() -> None:
    webhook_config = one(render(), "MutatingWebhookConfiguration")
    assert "annotations" not in webhook_config["metadata"]  # the caBundle comes from the post-install Job
    (webhook,) = webhook_config["webhooks"]
    assert webhook["name"] == "vgpu.hami.io"
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["sideEffects"] == "None"
    assert webhook["admissionReviewVersions"] == ["v1", "v1beta1"]
    assert webhook["reinvocationPolicy"] == "Never"
    assert webhook["timeoutSeconds"] == 10
    assert webhook["rules"] == [
        {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}
    ]
    assert webhook["clientConfig"] == {
        "service": {"name": "hami-scheduler", "namespace": NAMESPACE, "port": 443, "path": "/webhook"}
    }
    assert webhook["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]},
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NAMESPACE]},
        ]
    }
    assert webhook["objectSelector"] == {
        "matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]
    }
    (condition,) = webhook["matchConditions"]
    assert condition["name"] == "asks-for-managed-devices"
    assert 'object.spec.schedulerName == "hami-scheduler"' in condition["expression"]
    assert "object.spec.initContainers" in condition["expression"]
    assert "c.resources.requests.exists(r, r in" in condition["expression"]
    assert match_condition_resources(webhook) == MANAGED + CAMBRICON + METAX + MTHREADS


def match_condition_resources(webhook: dict[str, Any]) -> list[str]:
    """The resource names the webhook's matchCondition looks for (the list after ``limits.exists(r, r in``)."""
    expression = webhook["matchConditions"][0]["expression"]
    start = expression.index("c.resources.limits.exists(r, r in ") + len("c.resources.limits.exists(r, r in ")
    names: list[str] = yaml.safe_load(expression[start : expression.index("]", start) + 1])
    return names


def test_the_webhook_and_the_extender_manage_the_resources_of_the_device_config() -> None:
    content = "nvidia:\n  resourceCountName: example.com/vgpu\n  resourcePriorityName: ''\n"
    docs = render(
        f"scheduler.deviceConfig.content={content}",
        "devices.hygon.enabled=false",
        "devices.kunlun.enabled=false",
        "devices.enflame.enabled=false",
        "devices.awsneuron.enabled=false",
    )
    expected = ["example.com/vgpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"]
    expected += AMD_VASTAI_BIREN + CAMBRICON + METAX + MTHREADS  # the sections the content leaves out: the values'
    (extender,) = scheduler_config(docs)["extenders"]
    assert [r["name"] for r in extender["managedResources"]] == expected
    (webhook,) = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert match_condition_resources(webhook) == expected


def test_overwrite_env_sends_every_pod_to_the_webhook() -> None:
    (webhook,) = one(render("scheduler.overwriteEnv=true"), "MutatingWebhookConfiguration")["webhooks"]
    assert "matchConditions" not in webhook


def rules(role: dict[str, Any]) -> list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]:
    return [
        (group, resource, tuple(rule["verbs"]), tuple(rule.get("resourceNames", ())))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    ]


def test_rbac_grants_exactly_the_verbs_hami_uses() -> None:
    docs = render()
    assert rules(one(docs, "ClusterRole", "hami-scheduler")) == [
        ("", "pods", ("get", "list", "watch", "patch"), ()),
        ("", "pods/binding", ("create",), ()),
        ("", "nodes", ("get", "list", "watch", "patch"), ()),
        ("", "events", ("create", "patch"), ()),
        ("", "resourcequotas", ("list", "watch"), ()),
        ("scheduling.k8s.io", "podgroups", ("list", "watch"), ()),
        ("scheduling.x-k8s.io", "podgroups", ("list", "watch"), ()),
        ("", "pods/eviction", ("create",), ()),
        ("", "pods/status", ("patch",), ()),
        ("policy", "poddisruptionbudgets", ("list",), ()),
        ("resource.k8s.io", "resourceslices", ("list", "watch"), ()),
        ("resource.k8s.io", "resourceclaims", ("list", "watch"), ()),
        ("resource.k8s.io", "deviceclasses", ("list", "watch"), ()),
        ("authentication.k8s.io", "tokenreviews", ("create",), ()),
        ("authorization.k8s.io", "subjectaccessreviews", ("create",), ()),
    ]
    assert rules(one(docs, "Role", "hami-scheduler-leases")) == [
        ("coordination.k8s.io", "leases", ("get", "list", "watch"), ("hami-scheduler",)),
    ]
    assert rules(one(docs, "Role", "hami-kube-scheduler-leases")) == [
        ("coordination.k8s.io", "leases", ("get", "update"), ("hami-scheduler",)),
    ]
    hami = [{"kind": "ServiceAccount", "name": "hami-scheduler", "namespace": NAMESPACE}]
    kube_scheduler = [{"kind": "ServiceAccount", "name": "hami-kube-scheduler", "namespace": NAMESPACE}]
    for binding, role, subjects in [
        ("hami-scheduler", "hami-scheduler", hami),
        ("hami-scheduler-kube-scheduler", "system:kube-scheduler", kube_scheduler),
        ("hami-scheduler-volume-scheduler", "system:volume-scheduler", kube_scheduler),
    ]:
        crb = one(docs, "ClusterRoleBinding", binding)
        assert crb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}
        assert crb["subjects"] == subjects
    assert one(docs, "RoleBinding", "hami-scheduler-leases")["subjects"] == hami
    assert one(docs, "RoleBinding", "hami-kube-scheduler-leases")["subjects"] == kube_scheduler
    reader = one(docs, "RoleBinding", "hami-kube-scheduler-authentication-reader")
    assert (reader["metadata"]["namespace"], reader["roleRef"]["name"], reader["subjects"]) == (
        "kube-system",
        "extension-apiserver-authentication-reader",
        kube_scheduler,
    )


def test_each_scheduler_container_gets_only_its_own_identitys_token() -> None:
    docs = render()
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "hami-scheduler"
    assert pod["automountServiceAccountToken"] is False  # no token for every container
    for name in ("hami-scheduler", "hami-kube-scheduler"):
        assert one(docs, "ServiceAccount", name)["automountServiceAccountToken"] is False
    volumes = {v["name"]: v for v in pod["volumes"]}
    ca_and_namespace = [
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
    ]
    assert volumes["hami-token"]["projected"]["sources"] == [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        *ca_and_namespace,
    ]
    assert volumes["kube-scheduler-token"]["projected"]["sources"] == [
        {"secret": {"name": "hami-kube-scheduler-token", "items": [{"key": "token", "path": "token"}]}},
        *ca_and_namespace,
    ]
    secret = one(docs, "Secret", "hami-kube-scheduler-token")
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"] == {"kubernetes.io/service-account.name": "hami-kube-scheduler"}
    in_cluster = "/var/run/secrets/kubernetes.io/serviceaccount"
    for ctr, volume in [("hami", "hami-token"), ("kube-scheduler", "kube-scheduler-token")]:
        mounts = [m for m in container(docs, ctr)["volumeMounts"] if m["mountPath"] == in_cluster]
        assert mounts == [{"name": volume, "mountPath": in_cluster, "readOnly": True}]


def test_the_device_plugin_may_read_and_annotate_nodes_and_pods_and_record_events() -> None:
    docs = render()
    assert rules(one(docs, "ClusterRole", "hami-device-plugin")) == [
        ("", "nodes", ("get", "patch"), ()),
        ("", "pods", ("get", "list", "patch"), ()),
        ("", "events", ("create",), ()),
    ]
    assert one(docs, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"] == "hami-device-plugin"


def test_the_device_plugin_is_held_to_its_own_node_by_an_admission_policy() -> None:
    docs = render()
    policy = one(docs, "ValidatingAdmissionPolicy", "hami-device-plugin-node-restriction")["spec"]
    assert policy["failurePolicy"] == "Fail"
    (condition,) = policy["matchConditions"]
    assert (
        condition["expression"]
        == f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:hami-device-plugin"'
    )
    (rule,) = policy["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["nodes", "nodes/*", "pods", "pods/*", "events"]
    variables = {v["name"]: v["expression"] for v in policy["variables"]}
    assert 'request.userInfo.extra["authentication.kubernetes.io/node-name"][0]' in variables["nodeName"]
    expressions = "\n".join(v["expression"] for v in policy["validations"])
    assert 'variables.nodeName != ""' in expressions
    assert "request.name == variables.nodeName" in expressions
    assert "oldObject.spec.nodeName == variables.nodeName" in expressions
    assert 'k.startsWith("hami.io/")' in expressions
    binding = one(docs, "ValidatingAdmissionPolicyBinding", "hami-device-plugin-node-restriction")["spec"]
    assert binding == {"policyName": "hami-device-plugin-node-restriction", "validationActions": ["Deny"]}


def test_every_annotation_the_device_plugin_writes_is_one_the_policy_lets_it_write() -> None:
    written = [
        keys.NVIDIA_REGISTER,
        keys.NVIDIA_SCORE,
        keys.NODE_LOCK,
        keys.BIND_PHASE,
        keys.NVIDIA_KEYS.to_allocate,
        keys.NVIDIA_MIG_ALLOCATIONS,
    ]
    assert [key for key in written if not (key or "").startswith("hami.io/")] == []


def plugin_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(docs, "DaemonSet", "hami-device-plugin")["spec"]["template"]["spec"]
    return spec


def plugin_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(c for c in plugin_pod(docs)["containers"] if c["name"] == "device-plugin")


def test_the_device_plugins_node_side_defaults_are_hamis() -> None:
    docs = render()
    daemonset = one(docs, "DaemonSet", "hami-device-plugin")
    assert daemonset["spec"]["updateStrategy"] == {"type": "RollingUpdate"}
    pod = plugin_pod(docs)
    assert pod["hostPID"] is False
    assert "runtimeClassName" not in pod
    ctr = plugin_container(docs)
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["DEVICE_LIST_STRATEGY"] == "envvar"
    assert env["PASS_DEVICE_SPECS"] == "true"
    assert not {"NVIDIA_DRIVER_ROOT", "NVIDIA_CDI_HOOK_PATH", "GDS_ENABLED", "MOFED_ENABLED", "CDI_SPECS_DIR"} & set(
        env
    )
    assert "cdi-root" not in {v["name"] for v in pod["volumes"]}  # no host CDI directory without a CDI strategy
    vgpu = next(v for v in pod["volumes"] if v["name"] == "vgpu")
    assert vgpu["hostPath"]["path"] == "/usr/local/vgpu"


def test_the_device_plugins_node_side_values() -> None:
    docs = render(
        "devicePlugin.deviceListStrategy=cdi-annotations\\,envvar",
        "devicePlugin.passDeviceSpecsEnabled=false",
        "devicePlugin.nvidiaDriverRoot=/run/nvidia/driver",
        "devicePlugin.nvidiaHookPath=/usr/local/nvidia/toolkit/nvidia-cdi-hook",
        "devicePlugin.gdsEnabled=true",
        "devicePlugin.mofedEnabled=false",
        "devicePlugin.libPath=/opt/hami/vgpu",
        "devicePlugin.runtimeClassName=nvidia",
        "devicePlugin.hostPID=true",
        "devicePlugin.updateStrategy.type=OnDelete",
        "devicePlugin.extraArgs[0]=--mig-reconcile-seconds=30",
        "devicePlugin.extraEnvs[0].name=IMEX_CHANNEL_IDS",
        "devicePlugin.extraEnvs[0].value=0\\,1",
    )
    daemonset = one(docs, "DaemonSet", "hami-device-plugin")
    assert daemonset["spec"]["updateStrategy"] == {"type": "OnDelete"}
    pod = plugin_pod(docs)
    assert (pod["hostPID"], pod["runtimeClassName"]) == (True, "nvidia")
    ctr = plugin_container(docs)
    assert ctr["args"][-1] == "--mig-reconcile-seconds=30"
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    skipped = {"NODE_NAME", "HOOK_PATH", "ENABLE_TOPOLOGY_SCORE", "IF_HAMI_CORE_MISSING"}
    assert {k: env[k] for k in env if k not in skipped} == {
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "utility",
        "DEVICE_LIST_STRATEGY": "cdi-annotations,envvar",
        "PASS_DEVICE_SPECS": "false",
        "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver",
        "NVIDIA_CDI_HOOK_PATH": "/usr/local/nvidia/toolkit/nvidia-cdi-hook",
        "GDS_ENABLED": "true",
        "MOFED_ENABLED": "false",
        "CDI_SPECS_DIR": "/var/run/cdi",
        "IMEX_CHANNEL_IDS": "0,1",
    }
    assert {"name": "cdi-root", "mountPath": "/var/run/cdi"} in ctr["volumeMounts"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["cdi-root"]["hostPath"] == {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}
    assert volumes["vgpu"]["hostPath"]["path"] == "/opt/hami/vgpu"
    assert {"name": "vgpu", "mountPath": "/usr/local/vgpu"} in ctr["volumeMounts"]


def test_the_node_restriction_needs_kubernetes_1_30_or_an_explicit_opt_out() -> None:
    sets = ["--set", "scheduler.allocationPolicy.enabled=false"]  # the other policy needing 1.30 (its own test)
    result = run_helm("template", "hami", str(CHART), "--kube-version", "1.29.4", *sets)
    assert result.returncode != 0
    assert "devicePlugin.nodeRestriction needs Kubernetes 1.30 or newer" in result.stderr
    assert "Set devicePlugin.nodeRestriction=false" in result.stderr
    docs = render("devicePlugin.nodeRestriction=false")
    assert not [
        d
        for d in docs
        if d["kind"].startswith("ValidatingAdmissionPolicy") and "node-restriction" in d["metadata"]["name"]
    ]


def test_the_certificate_jobs_may_touch_only_their_secret_and_webhook() -> None:
    docs = render()
    assert rules(one(docs, "Role", "hami-certs")) == [
        ("", "secrets", ("create",), ()),
        ("", "secrets", ("get", "patch"), ("hami-scheduler-tls",)),
    ]
    assert rules(one(docs, "ClusterRole", "hami-certs")) == [
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", ("get", "patch"), ("hami-webhook",)),
    ]


@pytest.mark.parametrize(
    ("phase", "hooks", "extra"),
    [
        pytest.param("pre", "pre-install,pre-upgrade", [], id="pre-install makes the Secret"),
        pytest.param(
            "post", "post-install,post-upgrade", ["--patch-webhook=hami-webhook"], id="post-install sets caBundle"
        ),
    ],
)
def test_the_certificate_jobs(phase: str, hooks: str, extra: list[str]) -> None:
    job = one(render(), "Job", f"hami-certs-{phase}")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == hooks
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"]["hami.io/webhook"] == "ignore"
    (ctr,) = pod["spec"]["containers"]
    assert ctr["command"] == ["hami", "certs"]
    assert ctr["args"] == [
        f"--secret={NAMESPACE}/hami-scheduler-tls",
        "--days=3650",
        "--dns=hami-scheduler",
        f"--dns=hami-scheduler.{NAMESPACE}",
        f"--dns=hami-scheduler.{NAMESPACE}.svc",
        f"--dns=hami-scheduler.{NAMESPACE}.svc.cluster.local",
        "--ip=127.0.0.1",
        *extra,
    ]
    assert pod["spec"]["serviceAccountName"] == "hami-certs"
    for kind, name in [("ServiceAccount", "hami-certs"), ("Role", "hami-certs"), ("ClusterRole", "hami-certs")]:
        annotations = one(render(), kind, name)["metadata"]["annotations"]
        assert annotations["helm.sh/hook-weight"] == "-10"  # exists before the Jobs run


def test_the_deployment_runs_kube_scheduler_and_hami() -> None:
    docs = render()
    pod = one(docs, "Deployment")["spec"]["template"]
    assert pod["metadata"]["labels"]["hami.io/webhook"] == "ignore"
    assert [c["name"] for c in pod["spec"]["containers"]] == ["kube-scheduler", "hami"]
    ks = container(docs, "kube-scheduler")
    assert ks["image"] == f"registry.k8s.io/kube-scheduler:v{KUBE_VERSION}"
    assert ks["args"][0] == "--config=/config/config.yaml"
    hami = container(docs, "hami")
    assert hami["command"] == ["hami", "scheduler"]
    assert hami["args"] == [
        "--scheduler-name=hami-scheduler",
        "--http_bind=0.0.0.0:8443",
        "--extender-bind=127.0.0.1:8888",
        "--cert_file=/tls/tls.crt",
        "--key_file=/tls/tls.key",
        "--metrics-bind-address=:9395",
        "--metrics-secure",
        "--node-scheduler-policy=binpack",
        "--gpu-scheduler-policy=spread",
        "--node-lock-timeout=5m",
        "--bind-lock-wait=20s",
        "--preemption=self",  # auto with kube-scheduler 1.36: hami evicts
        "--device-config-file=/device-config/device-config.yaml",
        "--leader-elect",
        "--leader-elect-resource-name=hami-scheduler",
        f"--leader-elect-resource-namespace={NAMESPACE}",
    ]
    assert hami["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", "scheme": "HTTPS"}
    assert hami["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", "scheme": "HTTPS"}
    # the extender listener is on the pod's loopback: no containerPort (nothing outside the pod can reach it)
    assert [(p["name"], p["containerPort"]) for p in hami["ports"]] == [("http", 8443), ("metrics", 9395)]
    assert hami["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert ks["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    for c in (ks, hami):
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["tls"]["secret"] == {"secretName": "hami-scheduler-tls"}


def test_the_service_reaches_the_https_port() -> None:
    service = one(render(), "Service", "hami-scheduler")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"][0] == {"name": "https", "port": 443, "targetPort": "http", "protocol": "TCP"}
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "hami-scheduler"
    assert service["spec"]["selector"]["hami.io/scheduler-role"] == "leader"  # hami labels its own pod


def test_two_replicas_by_default_with_a_disruption_budget_and_a_surge_first_rolling_update() -> None:
    docs = render()
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},  # a new pod is ready before an old one stops
    }
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"] == {
        "minAvailable": 1,
        "selector": {"matchLabels": deployment["spec"]["selector"]["matchLabels"]},
    }
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][1]["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # whose role label
    assert "PodDisruptionBudget" not in {d["kind"] for d in render("scheduler.replicas=1")}
    assert (
        "hami.io/scheduler-role"
        not in one(render("scheduler.leaderElect=false", "scheduler.replicas=1"), "Service", "hami-scheduler")["spec"][
            "selector"
        ]
    )


# --- values that change the shape ------------------------------------------------------------------------


def test_cert_manager_replaces_the_jobs() -> None:
    docs = render("scheduler.certManager.enabled=true")
    names = kinds(docs)
    assert not [n for n in names if n[1].startswith("hami-certs")]
    assert ("Issuer", "hami-scheduler-selfsigned") in names
    assert ("Issuer", "hami-scheduler-ca") in names
    ca = one(docs, "Certificate", "hami-scheduler-ca")
    assert ca["spec"]["isCA"] is True
    serving = one(docs, "Certificate", "hami-scheduler-tls")
    assert serving["spec"]["secretName"] == "hami-scheduler-tls"
    assert serving["spec"]["issuerRef"] == {"kind": "Issuer", "name": "hami-scheduler-ca"}
    assert serving["spec"]["ipAddresses"] == ["127.0.0.1"]
    assert f"hami-scheduler.{NAMESPACE}.svc" in serving["spec"]["dnsNames"]
    annotations = one(docs, "MutatingWebhookConfiguration")["metadata"]["annotations"]
    assert annotations == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/hami-scheduler-tls"}


def test_failure_policy_and_excluded_namespaces_are_values() -> None:
    docs = render(
        "scheduler.admissionWebhook.failurePolicy=Ignore", "scheduler.admissionWebhook.whitelistNamespaces={monitoring}"
    )
    (webhook,) = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["namespaceSelector"]["matchExpressions"][1]["values"] == ["kube-system", NAMESPACE, "monitoring"]


def test_a_custom_url_webhook_gets_its_host_into_the_certificate() -> None:
    docs = render(
        "scheduler.admissionWebhook.customURL.enabled=true", "scheduler.admissionWebhook.customURL.host=10.0.0.5"
    )
    (webhook,) = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert webhook["clientConfig"] == {"url": "https://10.0.0.5:31998/webhook"}
    args = one(docs, "Job", "hami-certs-pre")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-2:] == ["--ip=127.0.0.1", "--ip=10.0.0.5"]


def test_without_the_webhook_hami_serves_plain_http_to_kube_scheduler() -> None:
    docs = render("scheduler.admissionWebhook.enabled=false", "scheduler.metricsSecure=false")
    names = kinds(docs)
    assert ("MutatingWebhookConfiguration", "hami-webhook") not in names
    assert not [n for n in names if n[1].startswith("hami-certs")]
    (extender,) = scheduler_config(docs)["extenders"]
    assert extender["urlPrefix"] == "http://127.0.0.1:8888"
    assert extender["enableHTTPS"] is False
    assert "tlsConfig" not in extender
    hami = container(docs, "hami")
    assert not [a for a in hami["args"] if a.startswith(("--cert_file", "--key_file"))]
    assert hami["readinessProbe"]["httpGet"]["scheme"] == "HTTP"


def test_metrics_are_served_to_rbac_subjects_only() -> None:
    docs = render()
    reader = one(docs, "ClusterRole", "hami-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert "--metrics-secure" in container(docs, "hami")["args"]


def test_open_metrics_drop_the_review_rights() -> None:
    docs = render("scheduler.metricsSecure=false")
    assert "--metrics-secure" not in container(docs, "hami")["args"]
    assert ("ClusterRole", "hami-metrics-reader") not in kinds(docs)
    groups = {group for group, *_ in rules(one(docs, "ClusterRole", "hami-scheduler"))}
    # policy: the budgets of hami's own preemption; scheduling.*: the gangs' PodGroups (docs/gangs.md)
    assert groups == {"", "resource.k8s.io", "policy", "scheduling.k8s.io", "scheduling.x-k8s.io"}


def test_secure_metrics_without_the_webhooks_certificate_are_refused() -> None:
    result = run_helm(
        "template", "hami", str(CHART), "--kube-version", KUBE_VERSION,
        "--set", "scheduler.admissionWebhook.enabled=false",
    )  # fmt: skip
    assert result.returncode != 0
    assert "scheduler.metricsSecure serves /metrics over TLS" in result.stderr


def test_verifying_the_extender_mounts_the_ca_into_kube_scheduler() -> None:
    docs = render("scheduler.kubeScheduler.extenderTLSInsecure=false")
    (extender,) = scheduler_config(docs)["extenders"]
    assert extender["tlsConfig"] == {"insecure": False, "caFile": "/tls/ca.crt"}
    assert {"name": "tls", "mountPath": "/tls", "readOnly": True} in container(docs, "kube-scheduler")["volumeMounts"]


def test_disabling_hygon_drops_its_managed_resources() -> None:
    (extender,) = scheduler_config(render("devices.hygon.enabled=false"))["extenders"]
    assert [r["name"] for r in extender["managedResources"]] == [
        n for n in MANAGED + CAMBRICON + METAX + MTHREADS if not n.startswith("hygon.com/")
    ]
    assert "--disable-devices=hygon" in container(render("devices.hygon.enabled=false"), "hami")["args"]


def test_disabling_kunlun_drops_its_managed_resources_and_its_section_renames_them() -> None:
    (extender,) = scheduler_config(render("devices.kunlun.enabled=false"))["extenders"]
    assert not set(KUNLUN) & {r["name"] for r in extender["managedResources"]}
    content = "kunlun:\n  resourceVCountName: example.com/vxpu\n"
    (extender,) = scheduler_config(render(f"scheduler.deviceConfig.content={content}"))["extenders"]
    names = [r["name"] for r in extender["managedResources"]]
    assert names[names.index("kunlunxin.com/xpu") :][:3] == [
        "kunlunxin.com/xpu",
        "example.com/vxpu",
        "kunlunxin.com/vxpu-memory",
    ]
    assert "--disable-devices=kunlun" in container(render("devices.kunlun.enabled=false"), "hami")["args"]


def test_disabling_enflame_or_neuron_drops_their_managed_resources() -> None:
    (extender,) = scheduler_config(render("devices.enflame.enabled=false"))["extenders"]
    rest = CAMBRICON + METAX + MTHREADS
    expected = [n for n in MANAGED + rest if not n.startswith("enflame.com/")]
    assert [r["name"] for r in extender["managedResources"]] == expected
    (extender,) = scheduler_config(render("devices.awsneuron.enabled=false"))["extenders"]
    expected = [n for n in MANAGED + rest if not n.startswith("aws.amazon")]
    assert [r["name"] for r in extender["managedResources"]] == expected


def test_several_replicas_spread_over_nodes_and_need_leader_election() -> None:
    pod = one(render("scheduler.replicas=2"), "Deployment")["spec"]["template"]["spec"]
    assert pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 100
    result = run_helm(
        "template", "hami", str(CHART), "--kube-version", KUBE_VERSION,
        "--set", "scheduler.replicas=2", "--set", "scheduler.leaderElect=false",
    )  # fmt: skip
    assert result.returncode != 0
    assert "scheduler.replicas > 1 needs scheduler.leaderElect: true" in result.stderr


def test_not_taking_over_default_scheduler_is_passed_to_hami() -> None:
    hami = container(render("scheduler.forceOverwriteDefaultScheduler=false"), "hami")
    assert "--no-force-overwrite-default-scheduler" in hami["args"]


@pytest.mark.parametrize(("value", "seconds"), [(None, 20.0), ("0", 0.0), ("7s", 7.0)])
def test_the_bind_lock_wait_reaches_hami_in_a_form_it_reads(value: str | None, seconds: float) -> None:
    hami = container(render(*([f"scheduler.bindLockWait={value}"] if value else [])), "hami")
    [arg] = [a for a in hami["args"] if a.startswith("--bind-lock-wait=")]
    assert load_settings({"bind_lock_wait": arg.partition("=")[2]}).bind_lock_wait == seconds


def test_success_events_are_written_unless_the_chart_turns_them_off() -> None:
    assert not any("success-events" in a for a in container(render(), "hami")["args"])
    hami = container(render("scheduler.successEvents=false"), "hami")
    assert "--no-success-events" in hami["args"]
    assert load_settings({"success_events": False}).success_events is False


def test_old_clusters_are_refused() -> None:
    result = run_helm("template", "hami", str(CHART), "--kube-version", "1.25.0")
    assert result.returncode != 0
    assert "kubeVersion: >=1.26.0-0" in result.stderr


@pytest.mark.parametrize(
    ("version", "tag"),
    [("1.36.3", "v1.36.3"), ("1.37.2", "v1.37.2"), ("1.36.0", "v1.36.0"), ("1.37.2-eks-4", "v1.37.2")],
)
def test_the_kube_scheduler_sidecar_follows_the_clusters_version_and_a_tested_one_is_never_refused(
    version: str, tag: str
) -> None:
    docs = template(NAMESPACE, version, "kubeVersionCheck=refuse")
    assert container(docs, "kube-scheduler")["image"] == f"registry.k8s.io/kube-scheduler:{tag}"


@pytest.mark.parametrize("version", ["1.35.4", "1.38.0", "1.38.0-beta.0", "1.39.0", "1.30.0"])
def test_an_untested_cluster_version_is_refused_only_when_asked(version: str) -> None:
    refused = run_helm("template", "hami", str(CHART), "--kube-version", version, "--set", "kubeVersionCheck=refuse")
    assert refused.returncode != 0
    assert f"hami was tested on Kubernetes v1.36.3 and v1.37.2 (no other release); this cluster is v{version}" in (
        refused.stderr
    )
    assert "set kubeVersionCheck=warn to install anyway" in refused.stderr
    for check in ("warn", "off"):  # warn: the install notes say it (NOTES.txt); the manifests are the same
        docs = template(NAMESPACE, version, f"kubeVersionCheck={check}")
        assert container(docs, "kube-scheduler")["image"] == f"registry.k8s.io/kube-scheduler:v{version}"


def test_a_kube_version_check_that_is_no_choice_is_refused_naming_the_key() -> None:
    result = run_helm("template", "hami", str(CHART), "--kube-version", KUBE_VERSION, "--set", "kubeVersionCheck=maybe")
    assert result.returncode != 0
    assert "kubeVersionCheck" in result.stderr  # by the schema (values.schema.json), which lists the choices
    assert all(choice in result.stderr for choice in ("warn", "refuse", "off"))
    skipped = run_helm(
        "template", "hami", str(CHART), "--kube-version", KUBE_VERSION, "--set", "kubeVersionCheck=maybe",
        "--skip-schema-validation",
    )  # fmt: skip
    assert "kubeVersionCheck: maybe is not one of warn, refuse, off" in skipped.stderr  # and by the template


# --- the vGPU monitor --------------------------------------------------------------------------------------


def daemonset_container(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    spec = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == name)


def test_the_monitor_runs_beside_the_plugin_with_only_the_containers_and_claims_directories() -> None:
    docs = render()
    daemonset = one(docs, "DaemonSet")
    monitor = daemonset_container(docs, "vgpu-monitor")
    plugin = daemonset_container(docs, "device-plugin")
    assert monitor["image"] == plugin["image"]
    assert monitor["command"] == ["hami", "monitor"]
    # info, the command's default log level, is left out: a klog -v in extraArgs may change it
    assert monitor["args"] == ["--port=9394", "--host-root=/host", "--libvgpu-version=v2.10.0"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in monitor["env"]}
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["HOOK_PATH"] == "/usr/local"
    assert monitor["ports"] == [{"name": "monitorport", "containerPort": 9394, "protocol": "TCP"}]
    assert monitor["volumeMounts"] == [
        {"name": "vgpu-containers", "mountPath": "/usr/local/vgpu/containers"},
        {"name": "vgpu", "mountPath": "/host/usr/local/vgpu", "readOnly": True},  # hami_core_library_present
        {"name": "vgpu-claims", "mountPath": "/usr/local/vgpu/claims"},
    ]
    volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
    assert volumes["vgpu-containers"]["hostPath"] == {"path": "/usr/local/vgpu/containers", "type": "DirectoryOrCreate"}
    assert volumes["vgpu-claims"]["hostPath"] == {"path": "/usr/local/vgpu/claims", "type": "DirectoryOrCreate"}
    assert "dra-plugin-dir" not in volumes
    security = monitor["securityContext"]
    assert "privileged" not in security
    assert security["runAsUser"] == 0  # DAC_OVERRIDE takes effect for root only, not for the image's user
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["DAC_OVERRIDE"]}


def test_with_the_dra_plugin_the_monitor_reads_its_checkpoint_read_only() -> None:
    docs = render("draPlugin.enabled=true", "draPlugin.kubeletDir=/data/kubelet")
    daemonset = one(docs, "DaemonSet", "hami-device-plugin")
    monitor = next(c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == "vgpu-monitor")
    plugin_dir = "/data/kubelet/plugins/hami-core-gpu.project-hami.io"
    assert f"--dra-checkpoint={plugin_dir}/checkpoint.json" in monitor["args"]
    mount = next(m for m in monitor["volumeMounts"] if m["name"] == "dra-plugin-dir")
    assert mount == {"name": "dra-plugin-dir", "mountPath": plugin_dir, "readOnly": True}
    volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
    assert volumes["dra-plugin-dir"]["hostPath"]["path"] == plugin_dir


def test_the_monitor_follows_the_hook_path_and_its_own_values() -> None:
    docs = render(
        "global.gpuHookPath=/opt/hami",
        "devicePlugin.vgpuMonitor.logLevel=debug",
        "devicePlugin.vgpuMonitor.resources.limits.memory=128Mi",
    )
    monitor = daemonset_container(docs, "vgpu-monitor")
    assert "--log-level=debug" in monitor["args"]
    assert monitor["resources"] == {"limits": {"memory": "128Mi"}}
    assert monitor["volumeMounts"][0]["mountPath"] == "/opt/hami/vgpu/containers"
    assert {e["name"]: e.get("value") for e in monitor["env"]}["HOOK_PATH"] == "/opt/hami"


def test_the_monitor_service_uses_hamis_values() -> None:
    docs = render()
    service = one(docs, "Service", "hami-device-plugin-monitor")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [
        {"name": "monitorport", "port": 31992, "targetPort": "monitorport", "protocol": "TCP"}
    ]
    pod_labels = one(docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()

    docs = render(
        "devicePlugin.service.type=NodePort",
        "devicePlugin.service.httpPort=31999",
        "devicePlugin.service.labels.team=gpu",
        "devicePlugin.service.annotations.prometheus\\.io/scrape=true",
    )
    service = one(docs, "Service", "hami-device-plugin-monitor")
    assert service["spec"]["type"] == "NodePort"
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["nodePort"], port["targetPort"]) == (31999, 31999, "monitorport")
    assert service["metadata"]["labels"]["team"] == "gpu"
    assert service["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}


def test_the_monitor_can_be_left_out() -> None:
    docs = render("devicePlugin.vgpuMonitor.enabled=false")
    names = [c["name"] for c in one(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"]]
    assert names == ["device-plugin"]
    assert ("Service", "hami-device-plugin-monitor") not in kinds(docs)
    volumes = [v["name"] for v in one(docs, "DaemonSet")["spec"]["template"]["spec"]["volumes"]]
    assert "vgpu-containers" not in volumes


# --- DRA (docs/dra.md) ------------------------------------------------------------------------------------

DRA_RULES = [
    ("resource.k8s.io", "resourceslices", ("list", "watch"), ()),
    ("resource.k8s.io", "resourceclaims", ("list", "watch"), ()),
    ("resource.k8s.io", "deviceclasses", ("list", "watch"), ()),
]


def test_dra_off_drops_the_dra_rules_and_says_so_in_the_device_config() -> None:
    docs = render("dra.enabled=false")
    granted = rules(one(docs, "ClusterRole", "hami-scheduler"))
    assert [r for r in granted if r[0] == "resource.k8s.io"] == []
    loaded = parse_device_config(device_config_text(docs), "device-config.yaml")
    assert loaded.config.dra.enabled is False
    assert loaded.config.dra.active() == {}


def test_dra_is_read_only_for_hami_and_absent_for_every_other_identity() -> None:
    docs = render()
    assert [r for r in rules(one(docs, "ClusterRole", "hami-scheduler")) if r[0] == "resource.k8s.io"] == DRA_RULES
    for role in [d for d in docs if d["kind"] in ("ClusterRole", "Role") and d["metadata"]["name"] != "hami-scheduler"]:
        groups = {group for rule in role["rules"] for group in rule.get("apiGroups", [])}
        assert "resource.k8s.io" not in groups, role["metadata"]["name"]


def test_dra_drivers_from_values_reach_the_device_config() -> None:
    docs = render(
        "dra.drivers[0].driver=gpu.example.com",
        "dra.drivers[0].vendor=DCU",
        "dra.drivers[0].uuidAttribute=serial",
        "dra.drivers[0].memoryCapacity=vram",
        "dra.drivers[0].memoryUnit=MiB",
        "dra.drivers[0].coresCapacity=",
        "dra.drivers[0].coresUnit=share",
    )
    (driver,) = parse_device_config(device_config_text(docs), "device-config.yaml").config.dra.drivers
    assert (driver.driver, driver.vendor, driver.uuid_attribute) == ("gpu.example.com", "DCU", "serial")
    assert (driver.memory_capacity, driver.memory_unit, driver.cores_capacity, driver.cores_unit) == (
        "vram",
        "MiB",
        "",
        "share",
    )


def test_a_device_config_content_keeps_its_own_dra_section_or_gets_the_values() -> None:
    without = render(
        "scheduler.deviceConfig.content=nvidia:\n  resourceCountName: nvidia.com/gpu\n", "dra.enabled=false"
    )
    assert parse_device_config(device_config_text(without), "c").config.dra.enabled is False
    own = "nvidia:\n  resourceCountName: nvidia.com/gpu\ndra:\n  enabled: true\n  drivers: []\n"
    config = parse_device_config(device_config_text(render(f"scheduler.deviceConfig.content={own}")), "c").config
    assert (config.dra.enabled, config.dra.drivers) == (True, ())


# --- the Grafana dashboard ---------------------------------------------------------------------------------


def test_the_grafana_dashboard_is_a_sidecar_configmap_behind_a_value() -> None:
    import json

    assert [d for d in render() if d["metadata"]["name"].endswith("-dashboard")] == []  # off by default
    docs = render(
        "grafanaDashboard.enabled=true",
        "grafanaDashboard.namespace=monitoring",
        "grafanaDashboard.annotations.grafana_folder=GPU",
    )
    cm = one(docs, "ConfigMap", "hami-dashboard")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"  # the grafana chart's sidecar default
    assert cm["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    dashboard = json.loads(cm["data"]["hami-scheduler.json"])
    shipped = json.loads((CHART / "dashboards" / "hami-scheduler.json").read_text())
    assert dashboard == shipped
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 15
    for name in ("hami_gpu_memory_allocated_bytes", "hami_request_duration_seconds", "hami_ledger_api_drift"):
        assert any(name in e for e in exprs), name


def test_amd_vastai_and_biren_are_managed_unless_disabled_and_follow_the_device_config() -> None:
    content = "vastai:\n  resourceCountName: example.com/va\nbiren:\n  resourceCountName: ''\n"
    docs = render(f"scheduler.deviceConfig.content={content}", "devices.amd.enabled=false")
    (extender,) = scheduler_config(docs)["extenders"]
    names = [r["name"] for r in extender["managedResources"]]
    assert "example.com/va" in names
    assert not [n for n in names if n.startswith(("amd.com/", "birentech.com/", "vastaitech.com/"))]
    renamed = render("vastaiResourceName=example.com/va2", "birenResourceName=example.com/br")
    config = yaml.safe_load(one(renamed, "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"])
    assert (config["vastai"], config["biren"]) == (
        {"resourceCountName": "example.com/va2"},
        {"resourceCountName": "example.com/br"},
    )


# --- the test-only fake NVML -------------------------------------------------------------------------------

FAKE_FIXTURE = "devices:\n  - uuid: GPU-fake-0\n    memory_mib: 8000\n"  # no commas: helm --set splits on them


def test_the_fake_nvml_is_off_by_default_and_leaves_no_trace() -> None:
    docs = render()
    for name in ("device-plugin", "vgpu-monitor"):
        assert not any("fake" in arg for arg in daemonset_container(docs, name)["args"])
    assert not [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-fake-nvml")]


def test_the_fake_nvml_alone_fails_the_render_naming_the_acknowledgement() -> None:
    result = run_helm(
        "template", "hami", str(CHART), "--kube-version", KUBE_VERSION, "--set", "devicePlugin.testing.fakeNvml=x: 1"
    )
    assert result.returncode != 0
    assert "devicePlugin.testing.fakeNvml is set" in result.stderr
    assert "devicePlugin.testing.acknowledgeFakeGPUs=true" in result.stderr


def test_the_acknowledged_fake_nvml_reaches_the_plugin_and_the_monitor() -> None:
    docs = render("devicePlugin.testing.acknowledgeFakeGPUs=true", f"devicePlugin.testing.fakeNvml={FAKE_FIXTURE}")
    configmap = one(docs, "ConfigMap", "hami-device-plugin-fake-nvml")
    assert yaml.safe_load(configmap["data"]["fixture.yaml"]) == yaml.safe_load(FAKE_FIXTURE)
    daemonset = one(docs, "DaemonSet")["spec"]["template"]
    volumes = {v["name"]: v for v in daemonset["spec"]["volumes"]}
    assert volumes["fake-nvml"] == {"name": "fake-nvml", "configMap": {"name": "hami-device-plugin-fake-nvml"}}
    for name in ("device-plugin", "vgpu-monitor"):
        container = daemonset_container(docs, name)
        assert "--fake-nvml=/fake-nvml/fixture.yaml" in container["args"]
        assert {"name": "fake-nvml", "mountPath": "/fake-nvml", "readOnly": True} in container["volumeMounts"]
    assert "checksum/fake-nvml" in daemonset["metadata"]["annotations"]


def test_the_plugin_runs_as_root_whatever_the_images_user() -> None:
    security = daemonset_container(render(), "device-plugin")["securityContext"]
    assert security == {"privileged": True, "runAsUser": 0, "runAsGroup": 0}


def test_a_plugin_security_context_naming_no_user_runs_as_root() -> None:
    """A context written for HAMi, whose image runs as root, names no user: root is added, or the plugin would run
    as the image's user and never register (kubelet's socket directory is root's)."""
    given = daemonset_container(render("devicePlugin.securityContext.privileged=true"), "device-plugin")
    assert given["securityContext"] == {"privileged": True, "runAsUser": 0, "runAsGroup": 0}
    own_group = render("devicePlugin.securityContext.privileged=true", "devicePlugin.securityContext.runAsGroup=5")
    assert daemonset_container(own_group, "device-plugin")["securityContext"]["runAsGroup"] == 5
    for chosen in ("runAsUser=1000", "runAsNonRoot=true"):
        docs = render(f"devicePlugin.securityContext.{chosen}")
        security = daemonset_container(docs, "device-plugin")["securityContext"]
        assert "runAsGroup" not in security, chosen  # a user named: the context is taken as given
        key, value = chosen.split("=")
        assert str(security[key]).lower() == value


def test_autoscaler_profiles_reach_the_scheduler_as_a_mounted_configmap(tmp_path: Path) -> None:
    """Cluster Autoscaler's cold-zero groups (docs/autoscaler.md): each profile is one file of a ConfigMap the
    scheduler reads with --device-profiles, and hami's own reader takes what the chart renders."""
    register = '[{"id":"GPU-0","count":10,"devmem":81920,"devcore":100,"type":"NVIDIA-A100","health":true}]'
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"autoscaler": {"profiles": {"p4d.24xlarge": {keys.NVIDIA_REGISTER: register}}}}))
    docs = template(NAMESPACE, KUBE_VERSION, values=[values])

    data = one(docs, "ConfigMap", "hami-scheduler-device-profiles")["data"]
    args = container(docs, "hami")["args"]
    volumes = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]

    assert "--device-profiles=/device-profiles" in args
    assert "--device-profile-label=node.kubernetes.io/instance-type" in args
    assert {"name": "device-profiles", "configMap": {"name": "hami-scheduler-device-profiles"}} in volumes
    (tmp_path / "mounted").mkdir()
    for name, text in data.items():
        (tmp_path / "mounted" / name).write_text(text)
    loaded = load_device_profiles(str(tmp_path / "mounted"))
    assert loaded is not None
    assert loaded.profiles == {"p4d.24xlarge": {keys.NVIDIA_REGISTER: register}}
    assert "--device-profiles=/device-profiles" not in container(render(), "hami")["args"]
