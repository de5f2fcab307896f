"""The chart's HAMi-core install (an init container copying ``libvgpu.so`` from HAMi's image and checking it before
the plugin starts; the script itself run here against a stand-in image tree), what the install notes say, the
ServiceMonitors with the scraper's identity for secure metrics, and topology scores for policy chains."""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.helm import CHART, helm, template

KUBE_VERSION = "1.36.3"
NAMESPACE = "hami-system"
ELF = b"\x7fELF\x02\x01\x01" + bytes(57)


@cache
def _render(*sets: str) -> tuple[dict[str, Any], ...]:
    return tuple(template(NAMESPACE, KUBE_VERSION, *sets))


def render(*sets: str) -> list[dict[str, Any]]:
    return list(_render(*sets))


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (daemonset,) = [d for d in docs if d["kind"] == "DaemonSet"]
    spec: dict[str, Any] = daemonset["spec"]["template"]["spec"]
    return spec


def plugin_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    plugin = next(c for c in pod_spec(docs)["containers"] if c["name"] == "device-plugin")
    return {e["name"]: e.get("value", "") for e in plugin["env"]}


def notes(*sets: str) -> str:
    result = subprocess.run(
        [helm(), "install", "hami", str(CHART), "--dry-run=client", "--namespace", NAMESPACE,
         *[a for s in sets for a in ("--set", s)]],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout.split("NOTES:", 1)[1]


# --- HAMi-core -------------------------------------------------------------------------------------------------


def test_by_default_hami_core_is_installed_from_hamis_image_before_the_plugin_starts() -> None:
    spec = pod_spec(render())
    (init,) = spec["initContainers"]
    assert init["name"] == "install-hami-core"
    assert init["image"] == "docker.io/projecthami/hami:v2.10.0"  # HAMi's published image, HAMi-core of v2.10.0
    assert init["command"][:2] == ["/bin/sh", "-c"]
    env = {e["name"]: e["value"] for e in init["env"]}
    assert env == {
        "HAMI_CORE_SOURCE": "/k8s-vgpu/lib/nvidia",
        "HAMI_CORE_DEST": "/usr/local/vgpu",
        "LIBVGPU_VERSION": "v2.10.0",
    }
    assert init["volumeMounts"] == [{"name": "vgpu", "mountPath": "/usr/local/vgpu"}]
    security = init["securityContext"]
    assert (security["runAsUser"], security["capabilities"], security["allowPrivilegeEscalation"]) == (
        0,
        {"drop": ["ALL"]},
        False,
    )
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["vgpu"]["hostPath"]["path"] == "/usr/local/vgpu"
    assert plugin_env(render())["IF_HAMI_CORE_MISSING"] == "whole-gpus"


def test_the_image_follows_hamis_registry_mirror_and_can_be_left_out() -> None:
    (init,) = pod_spec(render("global.imageRegistry=mirror.example:5000"))["initContainers"]
    assert init["image"] == "mirror.example:5000/projecthami/hami:v2.10.0"
    without = render("devicePlugin.hamiCore.image=", "devicePlugin.hamiCore.ifMissing=share")
    assert "initContainers" not in pod_spec(without)
    assert plugin_env(without)["IF_HAMI_CORE_MISSING"] == "share"


def test_a_command_of_ones_own_replaces_the_script() -> None:
    (init,) = pod_spec(render("devicePlugin.hamiCore.command={/install.sh,--to,/usr/local/vgpu}"))["initContainers"]
    assert init["command"] == ["/install.sh", "--to", "/usr/local/vgpu"]


def test_the_monitor_sees_the_hosts_hami_core_read_only() -> None:
    monitor = next(c for c in pod_spec(render())["containers"] if c["name"] == "vgpu-monitor")
    assert "--host-root=/host" in monitor["args"]
    assert "--libvgpu-version=v2.10.0" in monitor["args"]
    assert {"name": "vgpu", "mountPath": "/host/usr/local/vgpu", "readOnly": True} in monitor["volumeMounts"]


def install_script() -> str:
    (init,) = pod_spec(render())["initContainers"]
    script: str = init["command"][2]
    return script


def run_script(image: Path, host: Path, version: str = "v2.10.0") -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HAMI_CORE_SOURCE": str(image), "HAMI_CORE_DEST": str(host),
           "LIBVGPU_VERSION": version}  # fmt: skip
    return subprocess.run(["sh", "-c", install_script()], env=env, capture_output=True, text=True, check=False)


@pytest.fixture
def stand_in(tmp_path: Path) -> tuple[Path, Path]:
    """HAMi's image tree as its Dockerfile lays it out, and the host's empty <hook>/vgpu."""
    image = tmp_path / "image" / "k8s-vgpu" / "lib" / "nvidia"
    image.mkdir(parents=True)
    (image / "libvgpu.so.v2.10.0").write_bytes(ELF + b"hami-core v2.10.0")
    (image / "ld.so.preload").write_text("/usr/local/vgpu/libvgpu.so\n")
    host = tmp_path / "host" / "usr" / "local" / "vgpu"
    host.mkdir(parents=True)
    return image, host


def test_the_script_installs_the_library_and_checks_it(stand_in: tuple[Path, Path]) -> None:
    image, host = stand_in
    first = run_script(image, host)
    assert first.returncode == 0, first.stderr
    assert (host / "libvgpu.so.v2.10.0").read_bytes() == (image / "libvgpu.so.v2.10.0").read_bytes()
    assert not (host / "ld.so.preload").exists()  # the plugin writes it for <gpuHookPath>, not HAMi's /usr/local
    assert f"HAMi-core: {host}/libvgpu.so.v2.10.0 checked" in first.stdout
    again = run_script(image, host)
    assert again.returncode == 0
    assert f"HAMi-core: {host}/libvgpu.so.v2.10.0 is up to date" in again.stdout
    assert sorted(p.name for p in host.iterdir()) == ["libvgpu.so.v2.10.0"]  # no temporary file left


def test_a_new_library_replaces_the_old_by_rename_so_running_containers_keep_theirs(
    stand_in: tuple[Path, Path],
) -> None:
    image, host = stand_in
    assert run_script(image, host).returncode == 0
    before = (host / "libvgpu.so.v2.10.0").stat().st_ino
    (image / "libvgpu.so.v2.10.0").write_bytes(ELF + b"rebuilt")
    assert run_script(image, host).returncode == 0
    assert (host / "libvgpu.so.v2.10.0").read_bytes() == ELF + b"rebuilt"
    assert (host / "libvgpu.so.v2.10.0").stat().st_ino != before


@pytest.mark.parametrize(
    ("change", "version", "message"),
    [
        pytest.param("none", "v2.10.0", "this image has no libvgpu.so* in", id="no-library-in-the-image"),
        pytest.param(
            "keep",
            "v2.11.0",
            "nor {host}/libvgpu.so is there; set devicePlugin.libvgpuVersion to the version of the image's library",
            id="another-version",
        ),
        pytest.param("html", "v2.10.0", "{host}/libvgpu.so.v2.10.0 is not a shared library", id="not-elf"),
    ],
)
def test_a_missing_or_broken_library_fails_the_init_container_naming_it(
    stand_in: tuple[Path, Path], change: str, version: str, message: str
) -> None:
    image, host = stand_in
    if change == "none":
        shutil.rmtree(image)
        image.mkdir()
    elif change == "html":
        (image / "libvgpu.so.v2.10.0").write_text("<html>not found</html>")
    result = run_script(image, host, version)
    assert result.returncode == 1
    assert message.format(host=host) in result.stderr


def test_the_notes_say_what_was_installed_and_what_nodes_need() -> None:
    text = notes()
    assert "Installed on GPU nodes: the device plugin DaemonSet hami-device-plugin with the vGPU monitor" in text
    assert "kubectl label node <gpu node> gpu=on\n" in text
    assert "docker.io/projecthami/hami:v2.10.0 (/k8s-vgpu/lib/nvidia) into /usr/local/vgpu\n" in text
    assert "kubectl -n hami-system logs daemonset/hami-device-plugin -c install-hami-core" in text
    assert "the plugin advertises whole GPUs only (one pod per GPU)" in text
    assert "kubectl get events -A --field-selector reason=HAMiCoreMissing" in text
    assert "--clusterrole=hami-metrics-reader" in text  # secure metrics without a ServiceMonitor: bind by hand
    without = notes(
        "devicePlugin.hamiCore.image=", "devicePlugin.hamiCore.ifMissing=share", "serviceMonitor.enabled=true"
    )
    assert "HAMi-core (libvgpu.so) is NOT installed by this release" in without
    assert "libvgpu.so.v2.10.0 or libvgpu.so into /usr/local/vgpu on every GPU node yourself" in without
    assert "shares GPUs WITHOUT isolation (hamiCore.ifMissing=share)" in without
    assert (
        "ServiceMonitors hami-scheduler and hami-device-plugin-monitor let prometheus-operator scrape hami" in without
    )
    assert "--clusterrole=hami-metrics-reader" not in without


# --- topology scores for policy chains ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "score"),
    [
        ("spread", "false"),
        ("topology-aware", "true"),
        ("topology-aware\\,binpack", "true"),
        ("binpack\\, topology-aware", "true"),
        ("numa\\,binpack", "false"),
    ],
)
def test_topology_scores_are_published_when_the_policy_chain_contains_topology_aware(policy: str, score: str) -> None:
    docs = render(f"scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy={policy}")
    assert plugin_env(docs)["ENABLE_TOPOLOGY_SCORE"] == score


# --- ServiceMonitors ---------------------------------------------------------------------------------------------


def monitors(*sets: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in render("serviceMonitor.enabled=true", *sets)}


def test_no_service_monitor_by_default() -> None:
    assert not [d for d in render() if d["kind"] == "ServiceMonitor" or "metrics-scraper" in d["metadata"]["name"]]


def test_secure_metrics_get_a_scraper_identity_its_token_and_the_ca() -> None:
    docs = monitors("serviceMonitor.labels.release=kube-prometheus-stack")
    scheduler = docs[("ServiceMonitor", "hami-scheduler")]
    assert scheduler["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert scheduler["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "hami",
        "app.kubernetes.io/instance": "hami",
        "app.kubernetes.io/component": "hami-scheduler",
    }
    (endpoint,) = scheduler["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["scheme"], endpoint["honorLabels"], endpoint["interval"]) == (
        "metrics",
        "https",
        True,
        "30s",
    )
    assert endpoint["tlsConfig"] == {
        "serverName": "hami-scheduler.hami-system.svc",
        "ca": {"secret": {"name": "hami-scheduler-tls", "key": "ca.crt"}},
    }
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "hami-metrics-scraper-token", "key": "token"},
    }
    token = docs[("Secret", "hami-metrics-scraper-token")]
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"] == {"kubernetes.io/service-account.name": "hami-metrics-scraper"}
    account = docs[("ServiceAccount", "hami-metrics-scraper")]
    assert account["automountServiceAccountToken"] is False
    binding = docs[("ClusterRoleBinding", "hami-metrics-scraper")]
    assert binding["roleRef"]["name"] == "hami-metrics-reader"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hami-metrics-scraper", "namespace": NAMESPACE}]
    reader = docs[("ClusterRole", "hami-metrics-reader")]
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]  # nothing else


def test_the_scheduler_service_carries_the_labels_the_monitor_selects() -> None:
    docs = monitors()
    (service,) = [d for d in docs.values() if d["kind"] == "Service" and d["metadata"]["name"] == "hami-scheduler"]
    selector = docs[("ServiceMonitor", "hami-scheduler")]["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert "metrics" in [p["name"] for p in service["spec"]["ports"]]


def test_the_vgpu_monitors_are_scraped_with_their_node() -> None:
    docs = monitors("serviceMonitor.interval=15s")
    node = docs[("ServiceMonitor", "hami-device-plugin-monitor")]
    (endpoint,) = node["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["honorLabels"], endpoint["interval"]) == ("monitorport", True, "15s")
    assert endpoint["relabelings"] == [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]
    (service,) = [d for d in docs.values() if d["metadata"]["name"] == "hami-device-plugin-monitor"
                  and d["kind"] == "Service"]  # fmt: skip
    assert node["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()


def test_plain_metrics_need_no_identity() -> None:
    docs = monitors("scheduler.metricsSecure=false")
    (endpoint,) = docs[("ServiceMonitor", "hami-scheduler")]["spec"]["endpoints"]
    assert endpoint["scheme"] == "http"
    assert "authorization" not in endpoint
    assert not [k for k in docs if "metrics-scraper" in k[1]]


def test_hamis_prometheus_switch_turns_them_on() -> None:
    docs = render("prometheus.enabled=true")
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"] == "ServiceMonitor") == [
        "hami-device-plugin-monitor",
        "hami-scheduler",
    ]
