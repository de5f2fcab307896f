"""hami's DRA kubelet plugin on the real node (kubelet + containerd 2.x with CDI, real kube-scheduler).

The plugin runs as a process of the node (as the DaemonSet would, with kubelet's directories and a fake NVML: one
6000 MiB card). It registers through kubelet's plugin registry; its ResourceSlice appears; a pod whose hand-written
ResourceClaim asks `memory: 3000Mi, cores: 30` is allocated by kube-scheduler, prepared by the plugin, and its
container sees HAMi-core's limits and mounts; deleting it unprepares. Two claims then fill the card and a third
waits; the plugin killed and restarted keeps both prepared claims, and unprepares one after the restart, which lets
the third run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import ApiError, KubeClient, ManagedProcess, wait_until
from tests.e2e.realnode import RealCluster
from tests.e2e.test_install import SHOW, container_output, pod_phase

DRIVER = "hami-core-gpu.project-hami.io"
CLASS = DRIVER
CDI_DIR = Path("/var/run/cdi")
CLAIMS_DIR = Path("/usr/local/vgpu/claims")
FIXTURE = "devices:\n  - {uuid: GPU-dra-e2e-0, name: Tesla T4, memory_mib: 6000, minor: 0}\n"
WAIT_S = 180.0
RESOURCE = "/apis/resource.k8s.io/v1"


@dataclass
class Plugin:
    cluster: RealCluster
    workdir: Path
    process: ManagedProcess | None = None

    @property
    def plugin_dir(self) -> Path:
        return self.cluster.base / "kubelet" / "plugins" / DRIVER

    def start(self) -> None:
        hami = Path(sys.executable).parent / "hami"
        (self.workdir / "fake-nvml.yaml").write_text(FIXTURE)
        self.process = ManagedProcess(
            "hami-dra-plugin",
            [
                str(hami),
                "dra-plugin",
                f"--node-name={self.cluster.node_name}",
                f"--plugin-dir={self.plugin_dir}",
                f"--registry-dir={self.cluster.base / 'kubelet' / 'plugins_registry'}",
                f"--cdi-dir={CDI_DIR}",
                "--hook-path=/usr/local",
                f"--fake-nvml={self.workdir / 'fake-nvml.yaml'}",
                f"--kubeconfig={self.cluster.plane.kubeconfig}",
                "--log-level=debug",
            ],
            self.cluster.plane.log_dir / "hami-dra-plugin.log",
        )
        self.process.start()

    def check_alive(self) -> None:
        assert self.process is not None
        if self.process.exited() is not None:
            raise AssertionError(f"hami dra-plugin exited:\n{self.process.log_tail()}")

    def log(self) -> str:
        assert self.process is not None
        return self.process.log_file.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL, no clean-up: what a crash or an OOM kill leaves."""
        assert self.process is not None
        assert self.process.popen is not None
        os.killpg(self.process.popen.pid, signal.SIGKILL)
        self.process.popen.wait()
        self.process.stop()


@pytest.fixture
def plugin(real_cluster: RealCluster, tmp_path: Path) -> Iterator[Plugin]:
    vgpulock = Path("/tmp/vgpulock")
    vgpulock.mkdir(exist_ok=True)  # the chart's hostPath DirectoryOrCreate; the restore removes it
    started = Plugin(real_cluster, tmp_path)
    started.start()
    with real_cluster.client() as kube:
        kube.post(f"{RESOURCE}/deviceclasses", device_class())
        try:
            yield started
        finally:
            if started.process is not None:
                started.process.stop()
            for path in (f"{RESOURCE}/deviceclasses/{CLASS}", f"{RESOURCE}/resourceslices/{slice_name(real_cluster)}"):
                with contextlib.suppress(ApiError):
                    kube.delete(path)


def slice_name(cluster: RealCluster) -> str:
    return f"{cluster.node_name}-{DRIVER}"


def device_class() -> dict[str, Any]:
    selector = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'hami-gpu'"
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": selector}}]}}  # fmt: skip


def claim(name: str, memory: str, cores: str) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": CLASS,
                                         "capacity": {"requests": {"memory": memory, "cores": cores}}}}  # fmt: skip
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [request]}}}  # fmt: skip


def claim_pod(name: str, claim_name: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
            "containers": [
                {
                    "name": "show",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["/opt/hami/bin/python", "-c", SHOW],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }


def running(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return wait_until(
        lambda: pod_phase(kube, namespace, name, "Running"), timeout=WAIT_S, description=f"pod {name} Running"
    )


def claim_uid(kube: KubeClient, namespace: str, name: str) -> str:
    uid: str = kube.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}")["metadata"]["uid"]
    return uid


def spec_file(uid: str) -> Path:
    return CDI_DIR / f"k8s.{DRIVER}-claim_{uid}.yaml"


def prepared(plugin: Plugin) -> dict[str, str]:
    data = json.loads((plugin.plugin_dir / "checkpoint.json").read_text())
    return {uid: record["state"] for uid, record in data["claims"].items()}


def test_dra_plugin_publishes_prepares_shares_and_survives_a_restart(plugin: Plugin) -> None:
    cluster = plugin.cluster
    with cluster.client() as kube:
        published = check_registered_and_published(plugin, kube)
        assert published["spec"]["pool"]["name"] == cluster.node_name
        namespace = kube.create_namespace()
        image = cluster.images["hami.oci.tar"]
        check_one_share(plugin, kube, namespace, image)
        check_shares_fill_the_card_and_survive_a_restart(plugin, kube, namespace, image)


def check_registered_and_published(plugin: Plugin, kube: KubeClient) -> dict[str, Any]:
    wait_until(lambda: "registered with kubelet" in plugin.log(), timeout=WAIT_S, description="kubelet registration",
               check=plugin.check_alive)  # fmt: skip
    published: dict[str, Any] = wait_until(
        lambda: _get_or_none(kube, f"{RESOURCE}/resourceslices/{slice_name(plugin.cluster)}"),
        timeout=WAIT_S,
        description="the plugin's ResourceSlice",
    )
    (device,) = published["spec"]["devices"]
    assert published["spec"]["driver"] == DRIVER
    assert device["name"] == "hami-gpu-0"
    assert device["allowMultipleAllocations"] is True
    assert device["attributes"]["uuid"] == {"string": "GPU-dra-e2e-0"}
    assert device["capacity"]["memory"]["value"] == "6000Mi"
    assert device["capacity"]["cores"]["requestPolicy"]["validRange"]["max"] == "100"
    return published


def check_one_share(plugin: Plugin, kube: KubeClient, namespace: str, image: str) -> None:
    kube.post(f"{RESOURCE}/namespaces/{namespace}/resourceclaims", claim("share", "3000Mi", "30"))
    kube.post(f"/api/v1/namespaces/{namespace}/pods", claim_pod("dra-user", "share", image))
    running(kube, namespace, "dra-user")
    uid = claim_uid(kube, namespace, "share")
    printed = container_output(kube, namespace, "dra-user")
    print("container output:", json.dumps(printed, indent=1, sort_keys=True))
    env, mounts = printed["env"], printed["mounts"]
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert env["CUDA_DEVICE_SM_LIMIT_0"] == "30"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-dra-e2e-0"
    assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"].startswith(f"/usr/local/vgpu/claims/{uid}/")
    for path in (f"/usr/local/vgpu/claims/{uid}", "/usr/local/vgpu/libvgpu.so", "/tmp/vgpulock", "/etc/ld.so.preload"):
        assert path in mounts, path
    assert spec_file(uid).exists()
    assert prepared(plugin) == {uid: "PrepareCompleted"}

    # a second pod of the same claim shares its preparation and its HAMi-core cache (the claim's limits bind both)
    kube.post(f"/api/v1/namespaces/{namespace}/pods", claim_pod("dra-user-2", "share", image))
    running(kube, namespace, "dra-user-2")
    second = container_output(kube, namespace, "dra-user-2")["env"]
    assert second["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == env["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
    assert second["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/dra-user-2", {"gracePeriodSeconds": 0})
    wait_until(lambda: _gone(kube, namespace, "dra-user-2"), timeout=WAIT_S, description="dra-user-2 deleted")
    assert spec_file(uid).exists()  # still in use by dra-user
    assert prepared(plugin) == {uid: "PrepareCompleted"}

    kube.delete(f"/api/v1/namespaces/{namespace}/pods/dra-user", {"gracePeriodSeconds": 0})
    wait_until(lambda: not spec_file(uid).exists() and not (CLAIMS_DIR / uid).exists(), timeout=WAIT_S,
               description="the claim unprepared")  # fmt: skip
    assert prepared(plugin) == {}
    kube.delete(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/share")


def check_shares_fill_the_card_and_survive_a_restart(
    plugin: Plugin, kube: KubeClient, namespace: str, image: str
) -> None:
    for name in ("a", "b", "c"):
        kube.post(f"{RESOURCE}/namespaces/{namespace}/resourceclaims", claim(name, "3000Mi", "10"))
    for name in ("a", "b"):
        kube.post(f"/api/v1/namespaces/{namespace}/pods", claim_pod(f"pod-{name}", name, image))
        running(kube, namespace, f"pod-{name}")
    kube.post(f"/api/v1/namespaces/{namespace}/pods", claim_pod("pod-c", "c", image))
    wait_until(lambda: _unschedulable(kube, namespace, "pod-c"), timeout=WAIT_S, description="pod-c waits")
    assert "allocation" not in kube.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/c").get("status", {})
    uids = {name: claim_uid(kube, namespace, name) for name in ("a", "b")}
    specs = {uid: spec_file(uid).read_text() for uid in uids.values()}
    assert prepared(plugin) == dict.fromkeys(uids.values(), "PrepareCompleted")

    plugin.kill()
    plugin.start()
    wait_until(lambda: plugin.log().count("registered with kubelet") >= 2, timeout=WAIT_S,
               description="the restarted plugin registered")  # fmt: skip
    assert prepared(plugin) == dict.fromkeys(uids.values(), "PrepareCompleted")
    assert {uid: spec_file(uid).read_text() for uid in uids.values()} == specs
    for name in ("a", "b"):
        assert pod_phase(kube, namespace, f"pod-{name}", "Running") is not None

    kube.delete(f"/api/v1/namespaces/{namespace}/pods/pod-a", {"gracePeriodSeconds": 0})
    wait_until(lambda: not spec_file(uids["a"]).exists(), timeout=WAIT_S, description="claim a unprepared")
    running(kube, namespace, "pod-c")  # the freed share goes to the claim that waited
    assert set(prepared(plugin)) == {uids["b"], claim_uid(kube, namespace, "c")}
    for name in ("b", "c"):
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/pod-{name}", {"gracePeriodSeconds": 0})
    wait_until(lambda: prepared(plugin) == {}, timeout=WAIT_S, description="every claim unprepared")


def _get_or_none(kube: KubeClient, path: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = kube.get(path)
    except ApiError:
        return None
    return found


def _gone(kube: KubeClient, namespace: str, name: str) -> bool:
    return _get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/{name}") is None


def _unschedulable(kube: KubeClient, namespace: str, name: str) -> bool:
    pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    assert not pod["spec"].get("nodeName"), f"{name} was bound although the card is full"
    conditions = {c["type"]: c for c in pod["status"].get("conditions", [])}
    scheduled = conditions.get("PodScheduled")
    return scheduled is not None and scheduled["status"] == "False" and scheduled.get("reason") == "Unschedulable"
