"""A values file written for HAMi's chart (v2.10) installs hami with the same meaning (docs/coming-from-hami.md).

HAMi's own defaults (tests/data/hami-v2.10.0-values.yaml, kept as HAMi ships it) are rendered alone and under a
user's file, as ``helm install -f`` layers them: a registry mirror, changed resource names, a device config,
scheduler policies, vendors switched off, HAMi's typing. The rendered objects are checked key by key. Every key
hami refuses fails ``helm template`` with a message naming it and what to use instead. (helm: ``tests/helm.py``.)
"""

from __future__ import annotations

import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami.config import parse_device_config
from hami.deviceplugin.settings import NodeSettings, apply_node_config
from tests.helm import CHART, helm, run_template, template

KUBE_VERSION = "1.36.3"
NAMESPACE = "hami-system"
DATA = Path(__file__).resolve().parents[1] / "data"
HAMI_DEFAULTS = DATA / "hami-v2.10.0-values.yaml"
HAMI_STYLE = DATA / "hami-style-values.yaml"
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
IMAGE = f"hami:{APP_VERSION}"


@cache
def _render(user: str = "", *sets: str) -> tuple[dict[str, Any], ...]:
    values = [HAMI_DEFAULTS]
    if user:
        values.append(_user_file(user))
    return tuple(template(NAMESPACE, KUBE_VERSION, *sets, values=values))


_FILES = tempfile.TemporaryDirectory(prefix="hami-values-")


@cache
def _user_file(text: str) -> Path:
    """A user's values file with this text (one per text, removed when the tests end)."""
    path = Path(_FILES.name) / f"user-{abs(hash(text))}.yaml"
    path.write_text(text)
    return path


def render(user: dict[str, Any] | None = None, *sets: str) -> list[dict[str, Any]]:
    """HAMi's defaults, then ``user`` (a HAMi user's values file), then ``--set``s."""
    return list(_render(yaml.safe_dump(user) if user else "", *sets))


def refused(user: dict[str, Any] | None = None, *sets: str) -> str:
    """The message ``helm template`` fails with."""
    values = [HAMI_DEFAULTS] + ([_user_file(yaml.safe_dump(user))] if user else [])
    result = run_template(NAMESPACE, KUBE_VERSION, *sets, values=values)
    assert result.returncode != 0, "expected helm template to refuse these values"
    return result.stderr


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def pod_spec(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = one(docs, kind, name)["spec"]["template"]["spec"]
    return spec


def container(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(c for c in pod_spec(docs, kind)["containers"] if c["name"] == name)


def env(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def scheduler_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(one(docs, "ConfigMap", "hami-scheduler")["data"]["config.yaml"])
    return loaded


def device_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(
        one(docs, "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"]
    )
    return loaded


def managed(docs: list[dict[str, Any]]) -> list[str]:
    return [r["name"] for r in scheduler_config(docs)["extenders"][0]["managedResources"]]


def webhook(docs: list[dict[str, Any]]) -> dict[str, Any]:
    hook: dict[str, Any] = one(docs, "MutatingWebhookConfiguration")["webhooks"][0]
    return hook


def hami_args(docs: list[dict[str, Any]]) -> list[str]:
    args: list[str] = container(docs, "Deployment", "hami")["args"]
    return args


HAMI_MANAGED = [
    # the device config's names (HAMi v2.10's defaults, Hygon's HCU names included) ...
    "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores", "nvidia.com/priority",
    "hygon.com/hcunum", "hygon.com/hcumem", "hygon.com/hcucores",
    "kunlunxin.com/xpu", "kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory",
    "enflame.com/gcu", "enflame.com/drs-gcu", "enflame.com/gcu-memory", "enflame.com/gcu-core",
    "aws.amazon.com/neuron", "aws.amazon.com/neuroncore",
    "amd.com/gpu", "amd.com/gpumem", "amd.com/gpucores",
    "vastaitech.com/va", "birentech.com/gpu",
    "cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore",
    "metax-tech.com/gpu", "metax-tech.com/sgpu", "metax-tech.com/vmemory", "metax-tech.com/vcore",
    "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core",
]  # fmt: skip


# --- HAMi's own defaults -----------------------------------------------------------------------------------


def test_hamis_defaults_render_the_same_objects_as_hamis_own_minus_the_pdb_of_one_replica() -> None:
    mine = {(d["kind"], d["metadata"]["name"]) for d in template(NAMESPACE, KUBE_VERSION)}
    theirs = {(d["kind"], d["metadata"]["name"]) for d in render()}
    assert mine - theirs == {("PodDisruptionBudget", "hami-scheduler")}  # HAMi: replicas 1, no PDB
    assert theirs - mine == set()


def test_hamis_defaults_run_hamis_image_not_hamis_upstream_one() -> None:
    docs = render()
    # global.imageTag v2.10.0 and projecthami/hami on docker.io name HAMi's own image: hami runs its own
    assert container(docs, "Deployment", "hami")["image"] == IMAGE
    assert container(docs, "DaemonSet", "device-plugin")["image"] == IMAGE
    assert container(docs, "DaemonSet", "vgpu-monitor")["image"] == IMAGE
    assert {c["image"] for d in docs if d["kind"] == "Job" for c in d["spec"]["template"]["spec"]["containers"]} == {
        IMAGE
    }
    # HAMi's kube-scheduler mirror is a real kube-scheduler: honoured, of the cluster's version
    kube_scheduler = container(docs, "Deployment", "kube-scheduler")
    assert kube_scheduler["image"] == "registry.cn-hangzhou.aliyuncs.com/google_containers/kube-scheduler:v1.36.3"
    assert kube_scheduler["args"] == ["--config=/config/config.yaml", "-v=4"]  # HAMi's --config is not doubled
    assert {c["imagePullPolicy"] for c in pod_spec(docs, "Deployment")["containers"]} == {"IfNotPresent"}
    assert "imagePullSecrets" not in pod_spec(docs, "Deployment")


def test_hamis_defaults_scheduler_args_and_config() -> None:
    docs = render()
    args = hami_args(docs)
    assert args[-2:] == ["--debug", "-v=4"]  # HAMi's extraArgs, read by hami's command line
    for expected in (
        "--scheduler-name=hami-scheduler",
        "--http_bind=0.0.0.0:9443",  # HAMi's httpTargetPort
        "--metrics-bind-address=:9395",
        "--node-scheduler-policy=binpack",
        "--gpu-scheduler-policy=spread",
        "--node-lock-timeout=5m",
        "--leader-elect",
    ):
        assert expected in args
    assert not [a for a in args if a.startswith(("--kube-qps", "--kube-burst", "--kube-timeout", "--node-lock-retry"))]
    assert "--no-force-overwrite-default-scheduler" not in args
    assert one(docs, "Deployment")["spec"]["replicas"] == 1
    extender = scheduler_config(docs)["extenders"][0]
    assert extender["httpTimeout"] == "30s"  # HAMi's extenderHTTPTimeout: 30 (seconds)
    assert managed(docs) == HAMI_MANAGED


def test_hamis_overwrite_env_string_false_keeps_the_webhook_match_conditions() -> None:
    docs = render()
    hook = webhook(docs)
    assert hook["failurePolicy"] == "Ignore"
    assert hook["reinvocationPolicy"] == "Never"
    assert [c["name"] for c in hook["matchConditions"]] == ["asks-for-managed-devices"]
    assert '"hygon.com/hcunum"' in hook["matchConditions"][0]["expression"]
    # whitelistNamespaces: (null in HAMi's file) -> only the namespaces hami always leaves alone
    names = next(e for e in hook["namespaceSelector"]["matchExpressions"] if e["key"] == "kubernetes.io/metadata.name")
    assert names["values"] == ["kube-system", NAMESPACE]
    assert device_config(docs)["nvidia"]["overwriteEnv"] is False


def test_hamis_defaults_device_config_is_hamis_and_hami_reads_it() -> None:
    docs = render()
    config = device_config(docs)
    nvidia = config["nvidia"]
    assert (nvidia["deviceSplitCount"], nvidia["deviceMemoryScaling"], nvidia["deviceCoreScaling"]) == (10, 1, 1)
    assert (nvidia["preConfiguredDeviceMemory"], nvidia["enableNumaTopology"], nvidia["disableCoreLimit"]) == (
        0,
        False,
        False,
    )
    assert config["hygon"]["resourceCountName"] == "hygon.com/hcunum"
    assert config["metax"]["sgpuTopologyAware"] is False
    assert config["mthreads"]["memoryPerCard"] == [96]
    text = one(docs, "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"]
    parsed = parse_device_config(text, "device-config.yaml").config
    assert parsed.nvidia.device_split_count == 10
    assert parsed.nvidia.overwrite_env is False


def test_hamis_defaults_service_and_ports() -> None:
    docs = render()
    service = one(docs, "Service", "hami-scheduler")
    assert service["spec"]["type"] == "ClusterIP"
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        "https": (443, "http"),
        "metrics": (31993, "metrics"),  # HAMi's monitorPort
    }
    ports = {p["name"]: p["containerPort"] for p in container(docs, "Deployment", "hami")["ports"]}
    assert ports == {"http": 9443, "metrics": 9395}
    monitor = one(docs, "Service", "hami-device-plugin-monitor")["spec"]
    assert (monitor["type"], monitor["ports"][0]["nodePort"]) == ("NodePort", 31992)


def test_hamis_defaults_device_plugin() -> None:
    docs = render()
    spec = pod_spec(docs, "DaemonSet")
    plugin = container(docs, "DaemonSet", "device-plugin")
    assert plugin["args"][-1] == "-v=4"
    assert not [a for a in plugin["args"] if a.startswith("--log-level")]  # -v=4 decides: debug, as in HAMi
    plugin_env = env(plugin)
    assert "NVIDIA_DRIVER_ROOT" not in plugin_env  # "auto" on a host driver: /
    assert plugin_env["PASS_DEVICE_SPECS"] == "true"
    assert plugin_env["DEVICE_LIST_STRATEGY"] == "envvar"
    assert plugin["securityContext"] == {  # HAMi's, run as root as HAMi's image does (hami's image user is 10001)
        "privileged": True,
        "allowPrivilegeEscalation": True,
        "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]},
        "runAsUser": 0,
        "runAsGroup": 0,
    }
    assert spec["hostPID"] is True
    assert "hostNetwork" not in spec
    assert spec["nodeSelector"] == {"gpu": "on"}
    monitor = container(docs, "DaemonSet", "vgpu-monitor")
    assert monitor["args"] == ["--port=9394", "--host-root=/host", "--libvgpu-version=v2.10.0", "-v=4"]
    containers = next(v for v in spec["volumes"] if v["name"] == "vgpu-containers")
    assert containers["hostPath"]["path"] == "/usr/local/vgpu/containers"  # HAMi's monitor.ctrPath
    node_config = one(docs, "ConfigMap", "hami-device-plugin")["data"]["config.json"]
    settings = apply_node_config(NodeSettings(), node_config, "your-node-name", "config.json")
    assert settings.split_count == 10


def test_hamis_defaults_keep_hamis_rbac() -> None:
    kinds = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

    def rbac(docs: list[dict[str, Any]]) -> dict[tuple[str, str], Any]:
        return {
            (d["kind"], d["metadata"]["name"]): d.get("rules", d.get("roleRef")) for d in docs if d["kind"] in kinds
        }

    assert rbac(render()) == rbac(template(NAMESPACE, KUBE_VERSION))


# --- a HAMi user's files -----------------------------------------------------------------------------------


def test_a_registry_mirror_serves_every_image() -> None:
    docs = render({"global": {"imageRegistry": "mirror.example.com:5000", "imagePullSecrets": ["mirror-cred"]}})
    mirrored = f"mirror.example.com:5000/{IMAGE}"
    assert container(docs, "Deployment", "hami")["image"] == mirrored
    assert container(docs, "DaemonSet", "device-plugin")["image"] == mirrored
    assert container(docs, "DaemonSet", "vgpu-monitor")["image"] == mirrored
    assert container(docs, "Deployment", "kube-scheduler")["image"] == (
        "mirror.example.com:5000/google_containers/kube-scheduler:v1.36.3"
    )
    for kind in ("Deployment", "DaemonSet"):
        assert pod_spec(docs, kind)["imagePullSecrets"] == [{"name": "mirror-cred"}]
    for job in ("hami-certs-pre", "hami-certs-post"):
        spec = pod_spec(docs, "Job", job)
        assert spec["containers"][0]["image"] == mirrored
        assert spec["imagePullSecrets"] == [{"name": "mirror-cred"}]


def test_per_component_registries_pull_policies_and_secrets() -> None:
    docs = render(
        {
            "scheduler": {
                "extender": {"image": {"registry": "a.example.com", "pullPolicy": "Always", "pullSecrets": ["a"]}}
            },
            "devicePlugin": {"image": {"registry": "b.example.com", "pullSecrets": [{"name": "b"}]}},
        }
    )
    hami = container(docs, "Deployment", "hami")
    assert (hami["image"], hami["imagePullPolicy"]) == (f"a.example.com/{IMAGE}", "Always")
    plugin = container(docs, "DaemonSet", "device-plugin")
    assert (plugin["image"], plugin["imagePullPolicy"]) == (f"b.example.com/{IMAGE}", "IfNotPresent")
    assert container(docs, "DaemonSet", "vgpu-monitor")["image"] == IMAGE  # its registry is HAMi's docker.io
    assert pod_spec(docs, "DaemonSet")["imagePullSecrets"] == [{"name": "a"}, {"name": "b"}]


def test_a_registry_replaces_the_one_hamis_image_repository_names() -> None:
    docs = render({"global": {"imageRegistry": "mirror.example.com"}}, "image.repository=ghcr.io/example/hami")
    assert container(docs, "Deployment", "hami")["image"] == f"mirror.example.com/example/{IMAGE}"


def test_changed_resource_names_reach_the_device_config_extender_and_webhook() -> None:
    docs = render(
        {
            "resourceName": "example.com/vgpu",
            "resourceMem": "example.com/vgpu-memory",
            "resourceCores": "example.com/vgpu-cores",
            "hcuResourceName": "hygon.com/dcu",
            "mluResourceName": "cambricon.com/mlu",
        }
    )
    config = device_config(docs)
    assert (config["nvidia"]["resourceCountName"], config["nvidia"]["resourceMemoryName"]) == (
        "example.com/vgpu",
        "example.com/vgpu-memory",
    )
    assert config["hygon"]["resourceCountName"] == "hygon.com/dcu"
    assert config["cambricon"]["resourceCountName"] == "cambricon.com/mlu"
    names = managed(docs)
    assert {"example.com/vgpu", "example.com/vgpu-memory", "example.com/vgpu-cores", "hygon.com/dcu"} <= set(names)
    assert "nvidia.com/gpumem" not in names
    assert '"example.com/vgpu"' in webhook(docs)["matchConditions"][0]["expression"]


def test_hamis_device_config_key_is_the_device_config() -> None:
    content = "nvidia:\n  resourceCountName: nvidia.com/gpu\n  deviceSplitCount: 4\n  defaultMemory: 1024\n"
    docs = render({"device-config": {"content": content}})
    config = device_config(docs)
    assert config["nvidia"] == {"resourceCountName": "nvidia.com/gpu", "deviceSplitCount": 4, "defaultMemory": 1024}
    assert config["dra"]["enabled"] is True  # hami's dra: section is added, as for scheduler.deviceConfig.content
    assert parse_device_config(yaml.safe_dump(config), "device-config.yaml").config.nvidia.device_split_count == 4


def test_scheduler_policies_timeouts_replicas_and_pdb() -> None:
    docs = render(
        {
            "scheduler": {
                "defaultSchedulerPolicy": {"nodeSchedulerPolicy": "spread", "gpuSchedulerPolicy": "topology-aware"},
                "kubeQPS": 50,
                "kubeBurst": "100",
                "kubeTimeout": 30,
                "nodeLockRetryTimeout": "10s",
                "extenderHTTPTimeout": "60",
                "replicas": 3,
                "podDisruptionBudget": {"maxUnavailable": 1},
                "nodeLabelSelector": {"gpu": "on", "pool": "a"},
                "nodeName": "control-1",
                "forceOverwriteDefaultScheduler": "false",
            }
        }
    )
    args = hami_args(docs)
    for expected in (
        "--node-scheduler-policy=spread",
        "--gpu-scheduler-policy=topology-aware",
        "--kube-qps=50",
        "--kube-burst=100",
        "--kube-timeout=30",
        "--node-lock-retry-timeout=10s",
        "--node-label-selector=gpu=on,pool=a",
        "--no-force-overwrite-default-scheduler",
    ):
        assert expected in args
    assert scheduler_config(docs)["extenders"][0]["httpTimeout"] == "60s"
    assert one(docs, "Deployment")["spec"]["replicas"] == 3
    assert pod_spec(docs, "Deployment")["nodeName"] == "control-1"
    assert one(docs, "PodDisruptionBudget")["spec"] == {
        "maxUnavailable": 1,
        "selector": one(docs, "PodDisruptionBudget")["spec"]["selector"],
    }
    assert env(container(docs, "DaemonSet", "device-plugin"))["ENABLE_TOPOLOGY_SCORE"] == "true"


def test_pdb_min_available() -> None:
    docs = render({"scheduler": {"replicas": 3, "podDisruptionBudget": {"minAvailable": 2}}})
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 2


def test_vendors_switched_off_as_hami_users_write_it() -> None:
    off = {"enabled": "false"}
    docs = render(
        {"devices": {"kunlun": off, "enflame": off, "mthreads": off, "vastai": off, "biren": {"enabled": False}}}
    )
    assert "--disable-devices=kunlun,enflame,vastai,biren,mthreads" in hami_args(docs)
    names = managed(docs)
    for prefix in ("kunlunxin.com/", "enflame.com/", "mthreads.com/", "vastaitech.com/", "birentech.com/"):
        assert not [n for n in names if n.startswith(prefix)], prefix  # nor their customresources
    assert "nvidia.com/gpu" in names


def test_customresources_add_managed_resources_of_families_switched_on() -> None:
    docs = render({"devices": {"ascend": {"enabled": "true"}, "nvidia": {"customresources": ["example.com/extra"]}}})
    names = managed(docs)
    assert "huawei.com/Ascend910C-core" in names
    assert "example.com/extra" in names
    assert "--enable-ascend" in hami_args(docs)


def test_overwrite_env_string_true_drops_the_match_conditions() -> None:
    docs = render({"scheduler": {"overwriteEnv": "true"}})
    assert "matchConditions" not in webhook(docs)
    assert device_config(docs)["nvidia"]["overwriteEnv"] is True


@pytest.mark.parametrize("value", [False, "false", "False", "no", "off", 0, "0"])
def test_every_false_spelling_reads_as_false(value: object) -> None:
    docs = render({"scheduler": {"admissionWebhook": {"enabled": value}, "metricsSecure": "false"}})
    assert not [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]


def test_a_boolean_hami_cannot_read_is_refused_naming_the_key() -> None:
    assert "scheduler.overwriteEnv: ture is not a boolean: write true or false" in refused(
        {"scheduler": {"overwriteEnv": "ture"}}
    )


def test_extra_envs_as_a_map_or_a_list() -> None:
    as_map = render({"devicePlugin": {"extraEnvs": {"IMEX_CHANNEL_IDS": "0", "B": 2}}})
    as_list = render(
        {"devicePlugin": {"extraEnvs": [{"name": "IMEX_CHANNEL_IDS", "value": "0"}, {"name": "B", "value": "2"}]}}
    )
    for docs in (as_map, as_list):
        plugin_env = env(container(docs, "DaemonSet", "device-plugin"))
        assert (plugin_env["IMEX_CHANNEL_IDS"], plugin_env["B"]) == ("0", "2")
    monitor = render({"devicePlugin": {"monitor": {"extraEnvs": {"X": "z"}}}})
    assert env(container(monitor, "DaemonSet", "vgpu-monitor"))["X"] == "z"


def test_name_overrides() -> None:
    docs = render({"fullnameOverride": "gpu"})
    assert one(docs, "Deployment")["metadata"]["name"] == "gpu-scheduler"
    assert one(docs, "DaemonSet")["metadata"]["name"] == "gpu-device-plugin"
    device = next(v for v in pod_spec(docs, "DaemonSet")["volumes"] if v["name"] == "device-config")
    assert device["configMap"]["name"] == "gpu-scheduler-device"  # the plugin reads the scheduler's device config
    named = render({"nameOverride": "vgpu"})
    assert one(named, "Deployment")["metadata"]["name"] == "hami-vgpu-scheduler"
    assert one(named, "Deployment")["metadata"]["labels"]["app.kubernetes.io/name"] == "vgpu"


def test_node_port_service_as_hami_sets_it() -> None:
    docs = render({"scheduler": {"service": {"type": "NodePort"}}})
    ports = {p["name"]: p.get("nodePort") for p in one(docs, "Service", "hami-scheduler")["spec"]["ports"]}
    assert ports == {"https": 31998, "metrics": 31993}


def test_device_plugin_pod_settings_and_runtime_class() -> None:
    docs = render(
        {
            "devicePlugin": {
                "podAnnotations": {"a": "b"},
                "hostNetwork": "true",
                "runtimeClassName": "nvidia",
                "createRuntimeClass": True,
                "monitor": {"ctrPath": "/opt/vgpu/containers"},
            }
        }
    )
    ds = one(docs, "DaemonSet")["spec"]["template"]
    assert ds["metadata"]["annotations"]["a"] == "b"
    assert (ds["spec"]["hostNetwork"], ds["spec"]["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    assert ds["spec"]["runtimeClassName"] == "nvidia"
    assert one(docs, "RuntimeClass", "nvidia")["handler"] == "nvidia"
    containers = next(v for v in ds["spec"]["volumes"] if v["name"] == "vgpu-containers")
    assert containers["hostPath"]["path"] == "/opt/vgpu/containers"


def test_manage_namespace_selector_false_leaves_it_to_the_platform() -> None:
    hook = webhook(render({"scheduler": {"admissionWebhook": {"manageNamespaceSelector": "false"}}}))
    assert "namespaceSelector" not in hook
    assert hook["objectSelector"]["matchExpressions"][0]["key"] == "hami.io/webhook"


def test_the_hami_style_values_file_left_for_the_real_node_install() -> None:
    docs = list(_render(HAMI_STYLE.read_text()))
    args = hami_args(docs)
    assert {"--kube-qps=50", "--kube-burst=100", "--kube-timeout=30", "--node-lock-retry-timeout=10s"} <= set(args)
    assert args[-2:] == ["--debug", "-v=4"]
    assert scheduler_config(docs)["extenders"][0]["httpTimeout"] == "30s"
    assert container(docs, "Deployment", "kube-scheduler")["args"] == ["--config=/config/config.yaml", "-v=2"]
    hook = webhook(docs)
    assert (hook["failurePolicy"], len(hook["matchConditions"])) == ("Fail", 1)
    names = next(e for e in hook["namespaceSelector"]["matchExpressions"] if e["key"] == "kubernetes.io/metadata.name")
    assert names["values"] == ["kube-system", NAMESPACE, "hami-ignored"]
    assert device_config(docs)["nvidia"]["deviceSplitCount"] == 4
    assert env(container(docs, "DaemonSet", "device-plugin"))["CDI_ANNOTATION_PREFIX"] == "cdi.k8s.io/"


# --- refused and conflicting keys ----------------------------------------------------------------------------


NOT_SUPPORTED = "is HAMi's setting, which hami does not support: "
REFUSED = [
    ({"namespaceOverride": "gpu"}, 'namespaceOverride: "gpu" ' + NOT_SUPPORTED + "install into that namespace"),
    ({"global": {"managedNodeSelectorEnable": "true"}}, 'global.managedNodeSelectorEnable: "true" ' + NOT_SUPPORTED),
    ({"global": {"labels": {"team": "ml"}}}, 'global.labels: {"team":"ml"} ' + NOT_SUPPORTED),
    ({"global": {"annotations": {"a": "b"}}}, 'global.annotations: {"a":"b"} ' + NOT_SUPPORTED),
    ({"platform": {"openshift": True}}, "platform.openshift: true " + NOT_SUPPORTED),
    ({"selinux": {"enabled": True}}, "selinux.enabled: true " + NOT_SUPPORTED),
    ({"podSecurityPolicy": {"enabled": True}}, "PodSecurityPolicy is gone since Kubernetes 1.25"),
    ({"scheduler": {"kubeScheduler": {"enabled": False}}}, "scheduler.kubeScheduler.enabled: false " + NOT_SUPPORTED),
    ({"scheduler": {"networkPolicy": {"enabled": True}}}, "scheduler.networkPolicy.enabled: true " + NOT_SUPPORTED),
    ({"devicePlugin": {"gpuOperatorToolkitReady": {"enabled": True}}}, "gpuOperatorToolkitReady.enabled: true "),
    ({"devicePlugin": {"numaRefit": {"enabled": True}}}, "hami has no /refit"),
    ({"devicePlugin": {"hostPIDBroker": {"enabled": True}}}, "devicePlugin.hostPIDBroker.enabled: true "),
    ({"devicePlugin": {"migStrategy": "mixed"}}, 'set MIG per node: "migstrategy" in devicePlugin.nodeConfiguration'),
    ({"mockDevicePlugin": {"enabled": True}}, "hami's device plugin has --fake-nvml"),
    ({"legacyMetrics": True}, "legacyMetrics: true " + NOT_SUPPORTED),
    ({"devices": {"ascend": {"image": "ascend-dp:v1"}}}, "hami's chart does not run Ascend's device plugin"),
    (
        {"scheduler": {"extender": {"image": {"repository": "mirror/hami"}}}},
        'scheduler.extender.image.repository: "mirror/hami" ' + NOT_SUPPORTED + "hami runs its own image: set "
        "image.repository (and image.tag)",
    ),
    ({"devicePlugin": {"image": {"repository": "mirror/hami"}}}, 'devicePlugin.image.repository: "mirror/hami" '),
    ({"devicePlugin": {"monitor": {"image": {"repository": "m/hami"}}}}, 'devicePlugin.monitor.image.repository: "m/'),
    (
        {"scheduler": {"kubeScheduler": {"extraNewArgs": ["--config=/etc/x.yaml"]}}},
        "scheduler.kubeScheduler.extraNewArgs: --config=/etc/x.yaml: hami's kube-scheduler reads the configuration",
    ),
    ({"devicePlugin": {"extraEnvs": "A=b"}}, "devicePlugin.extraEnvs: expected a list of {name, value} or a map"),
]


@pytest.mark.parametrize(("user", "message"), REFUSED)
def test_a_key_hami_cannot_honour_is_refused_with_what_to_use(user: dict[str, Any], message: str) -> None:
    assert message in refused(user)


@pytest.mark.parametrize(
    ("user", "sets", "message"),
    [
        (
            {"hcuResourceName": "hygon.com/a"},
            ["dcuResourceName=hygon.com/b"],
            'hcuResourceName (HAMi\'s key) is "hygon.com/a" but dcuResourceName (hami\'s) is "hygon.com/b"',
        ),
        (
            {"scheduler": {"extenderHTTPTimeout": 30}},
            ["scheduler.kubeScheduler.extenderHTTPTimeout=45s"],
            "scheduler.extenderHTTPTimeout (HAMi's key) is 30 but scheduler.kubeScheduler.extenderHTTPTimeout "
            '(hami\'s) is "45s"',
        ),
        (
            {"device-config": {"content": "nvidia: {}"}},
            ["scheduler.deviceConfig.content=hygon: {}"],
            "device-config.content (HAMi's key)",
        ),
        (
            {"scheduler": {"extender": {"image": {"pullPolicy": "Always"}}}},
            ["image.pullPolicy=Never"],
            'scheduler.extender.image.pullPolicy (HAMi\'s key) is "Always" but image.pullPolicy (hami\'s) is "Never"',
        ),
    ],
)
def test_hamis_and_hamis_key_disagreeing_is_refused(user: dict[str, Any], sets: list[str], message: str) -> None:
    assert message in refused(user, *sets)


def test_hamis_and_hamis_key_agreeing_is_fine() -> None:
    docs = render({"scheduler": {"extenderHTTPTimeout": 45}}, "scheduler.kubeScheduler.extenderHTTPTimeout=45s")
    assert scheduler_config(docs)["extenders"][0]["httpTimeout"] == "45s"


def test_the_install_notes_name_what_has_no_effect() -> None:
    result = subprocess.run(
        [helm(), "install", "hami", str(CHART), "--dry-run=client", "-f", str(HAMI_DEFAULTS), "-n", NAMESPACE],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "global.imageTag: names HAMi's release; hami's image tag is image.tag" in notes
    assert 'devicePlugin.nvidiaDriverRoot: "auto" reads as "/"' in notes
    assert "scheduler.livenessProbe: false has no effect" in notes


@pytest.mark.parametrize("files", [[HAMI_DEFAULTS], [HAMI_DEFAULTS, HAMI_STYLE]], ids=["HAMi's defaults", "a user's"])
def test_helm_lint_strict_with_hamis_values(files: list[Path]) -> None:
    args = [helm(), "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION]
    for path in files:
        args += ["-f", str(path)]
    result = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout
