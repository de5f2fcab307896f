"""hami installed as a user installs it: ``helm install`` of the chart as shipped on a cluster with a real node
(kubelet + containerd, ``realnode.py``), images built here. Only the image names, their pull policy and the device
plugin's test-only fake NVML are set.

A user's plain GPU pod (no schedulerName) is mutated by the webhook reached through hami's Service, scheduled by the
installed kube-scheduler + hami, admitted by the real kubelet whose Allocate the installed device plugin answers,
and its container prints the environment and mounts it got.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hami.protocol import keys
from hami.protocol.allocation import decode_pod_devices
from tests.e2e.cluster import ApiError, KubeClient, wait_until
from tests.e2e.realnode import RealCluster
from tests.helm import CHART, helm

RELEASE = "hami"
NAMESPACE = "hami-system"
GPU_UUIDS = ("GPU-7e57a1f0-0000-4000-8000-000000000001", "GPU-7e57a1f0-0000-4000-8000-000000000002")
GPU_MEMORY_MIB = 8000
SPLIT = 10  # the chart's devicePlugin.deviceSplitCount
FAKE_NVML = "driver: 580.65.06\ndevices:\n" + "".join(
    f"  - {{uuid: {uuid}, name: Tesla T4, memory_mib: {GPU_MEMORY_MIB}}}\n" for uuid in GPU_UUIDS
)
#: what the container runs: print its environment and mounts as JSON, then wait to be deleted
SHOW = (
    "import json, os, sys, time\n"
    "mounts = [line.split()[4] for line in open('/proc/self/mountinfo')]\n"
    "print(json.dumps({'env': dict(os.environ), 'mounts': mounts}, sort_keys=True), flush=True)\n"
    "time.sleep(3600)\n"
)
WAIT_S = 180.0
#: what the chart's install-hami-core init container copies from HAMi's image layout onto the node
HAMI_CORE = Path("/usr/local/vgpu/libvgpu.so.v2.10.0")


def _split(reference: str) -> tuple[str, str]:
    repository, tag = reference.rsplit(":", 1)
    return repository, tag


def helm_values(cluster: RealCluster) -> list[str]:
    """The only values the install sets: image names and pull policy (HAMi-core's: a stand-in of HAMi's image,
    built here), and the fake NVML (test-only switch)."""
    hami_repo, hami_tag = _split(cluster.images["hami.oci.tar"])
    sched_repo, sched_tag = _split(cluster.images["kube-scheduler.oci.tar"])
    registry, repository = sched_repo.split("/", 1)
    return [
        f"image.repository={hami_repo}",
        f"image.tag={hami_tag}",
        "image.pullPolicy=Never",
        f"scheduler.kubeScheduler.image.registry={registry}",
        f"scheduler.kubeScheduler.image.repository={repository}",
        f"scheduler.kubeScheduler.image.tag={sched_tag}",
        "scheduler.kubeScheduler.image.pullPolicy=Never",
        "devicePlugin.testing.acknowledgeFakeGPUs=true",
        f"devicePlugin.hamiCore.image={cluster.images['hami-core.oci.tar']}",
        "devicePlugin.hamiCore.pullPolicy=Never",
    ]


def run_helm(cluster: RealCluster, *args: str, timeout: float = WAIT_S + 60) -> str:
    proc = subprocess.run(
        [helm(), *args, "--kubeconfig", str(cluster.plane.kubeconfig)],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"helm {' '.join(args[:2])} failed:\n{proc.stderr}\n{proc.stdout}\n{describe_release_pods(cluster)}"
        )
    return proc.stdout


def describe_release_pods(cluster: RealCluster) -> str:
    """The phase, container states and last log lines of every pod in the release namespace (for a failure)."""
    lines = []
    with cluster.client() as kube:
        for pod in kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]:
            name = pod["metadata"]["name"]
            states = [c.get("state") for c in pod["status"].get("containerStatuses", [])]
            lines.append(f"--- pod {name}: {pod['status'].get('phase')} {json.dumps(states)[:1500]}")
            for container in pod["spec"]["containers"]:
                try:
                    log = kube.request(
                        "GET",
                        f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/log",
                        params={"container": container["name"], "tailLines": 30},
                    )
                except ApiError as err:
                    log = str(err)
                lines.append(f"    [{container['name']}] {log}")
    return "\n".join(lines)


def helm_install(cluster: RealCluster, fixture_file: Path) -> None:
    args = ["install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace", "--wait"]
    args += ["--timeout", f"{WAIT_S:.0f}s", "--set-file", f"devicePlugin.testing.fakeNvml={fixture_file}"]
    for value in helm_values(cluster):
        args += ["--set", value]
    run_helm(cluster, *args)


@pytest.fixture(scope="module")
def installed(real_cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """hami installed by helm on the real cluster (uninstalled afterwards if a test left it)."""
    fixture_file = tmp_path_factory.mktemp("fake-nvml") / "fixture.yaml"
    fixture_file.write_text(FAKE_NVML)
    helm_install(real_cluster, fixture_file)
    yield real_cluster
    proc = subprocess.run(
        [helm(), "status", RELEASE, "-n", NAMESPACE, "--kubeconfig", str(real_cluster.plane.kubeconfig)],
        capture_output=True,
        check=False,
    )
    if proc.returncode == 0:
        run_helm(real_cluster, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")


@pytest.fixture
def kube_real(real_cluster: RealCluster) -> Iterator[KubeClient]:
    with real_cluster.client() as client:
        yield client


def gpu_pod(name: str, image: str, gpus: int, memory_mib: int) -> dict[str, Any]:
    """A user's plain GPU pod: no schedulerName, only the extended resources."""
    limits = {"nvidia.com/gpu": str(gpus), "nvidia.com/gpumem": str(memory_mib)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "show",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["/opt/hami/bin/python", "-c", SHOW],
                    "resources": {"limits": limits},
                }
            ],
        },
    }


def pod_phase(kube: KubeClient, namespace: str, name: str, phase: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    if pod["status"].get("phase") in ("Failed", "Succeeded") and phase == "Running":
        raise AssertionError(f"pod {namespace}/{name} ended: {json.dumps(pod['status'])[:2000]}")
    return pod if pod["status"].get("phase") == phase else None


def container_output(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    def printed() -> dict[str, Any] | None:
        log = kube.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}/log")
        if isinstance(log, dict):  # the client decodes a body that is JSON: the one line printed
            return log
        lines = [line for line in str(log).splitlines() if line.startswith("{")]
        return json.loads(lines[0]) if lines else None

    return wait_until(printed, timeout=WAIT_S, interval=0.5, description=f"{name}'s printed env and mounts")


def test_helm_install_runs_hami_and_a_gpu_pod_gets_its_allocation(
    installed: RealCluster, kube_real: KubeClient
) -> None:
    kube = kube_real
    check_scheduler_replicas(kube)
    check_plugin_registered(kube, installed.node_name)
    # the init container installed HAMi-core from the (stand-in) image before the plugin started; the node
    # advertises shares (check_plugin_registered), which the plugin refuses without the library
    assert HAMI_CORE.read_bytes()[:4] == b"\x7fELF"
    namespace = kube.create_namespace()
    image = installed.images["hami.oci.tar"]

    created = kube.post(f"/api/v1/namespaces/{namespace}/pods", gpu_pod("gpu-user", image, 1, 3000))

    assert created["spec"]["schedulerName"] == "hami-scheduler"  # mutated by the webhook, through its Service
    pod = wait_until(
        lambda: pod_phase(kube, namespace, "gpu-user", "Running"), timeout=WAIT_S, description="the GPU pod Running"
    )
    annotations = pod["metadata"]["annotations"]
    assert annotations[keys.BIND_PHASE] == "success"
    (devices,) = decode_pod_devices(annotations[keys.NVIDIA_KEYS.allocated])
    (device,) = devices
    assert device.uuid in GPU_UUIDS
    assert device.usedmem == 3000
    wait_until(
        lambda: (
            keys.NODE_LOCK not in kube.get(f"/api/v1/nodes/{installed.node_name}")["metadata"].get("annotations", {})
        ),
        timeout=WAIT_S,
        description="the node lock released by the device plugin",
    )
    printed = container_output(kube, namespace, "gpu-user")
    print(f"{keys.NVIDIA_KEYS.allocated}: {annotations[keys.NVIDIA_KEYS.allocated]}")
    print("container output:", json.dumps(printed, indent=1, sort_keys=True))
    env, mounts = printed["env"], printed["mounts"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == device.uuid
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{device.usedmem}m"
    assert env["CUDA_DEVICE_SM_LIMIT"] == str(device.usedcores)
    assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"].startswith("/usr/local/vgpu/")
    for path in ("/usr/local/vgpu", "/usr/local/vgpu/libvgpu.so", "/tmp/vgpulock", "/etc/ld.so.preload"):
        assert path in mounts, path
    check_deleting_frees_the_ledger(kube, namespace, image, "gpu-user")


def test_no_pod_is_bound_while_the_device_plugin_is_away_and_all_run_once_it_is_back(
    installed: RealCluster, kube_real: KubeClient
) -> None:
    """Issue 39 item 4, on the real node: while the device plugin is away (its DaemonSet pod gone), kubelet marks its
    devices unhealthy and reports allocatable 0, but the registration annotation stays. HAMi kept binding GPU pods
    there, and kubelet rejected each (``UnexpectedAdmissionError``: a ReplicaSet lost 11–18 replicas, a bare pod was
    lost for good). hami binds none of them (``NodeDevicesNotAllocatable``) until kubelet reports the devices
    again; then every one runs, and the ReplicaSet never had to replace a replica."""
    kube, node = kube_real, installed.node_name
    check_plugin_registered(kube, node)
    namespace = kube.create_namespace()
    image = installed.images["hami.oci.tar"]
    path = f"/api/v1/nodes/{node}"
    served = kube.get(path)["status"]["allocatable"]["nvidia.com/gpu"]
    replicas = 4

    kube.patch(path, {"metadata": {"labels": {"gpu": None}}})  # the plugin's DaemonSet selects gpu=on: it goes
    try:
        wait_until(
            lambda: kube.get(path)["status"]["allocatable"].get("nvidia.com/gpu") == "0",
            timeout=WAIT_S,
            description="kubelet reporting no allocatable nvidia.com/gpu once the device plugin is gone",
        )
        assert keys.NVIDIA_KEYS.register in kube.get(path)["metadata"]["annotations"]  # the registration stays
        kube.post(f"/apis/apps/v1/namespaces/{namespace}/replicasets", gpu_replicaset("rs", image, replicas))
        kube.post(f"/api/v1/namespaces/{namespace}/pods", gpu_pod("bare", image, 1, 1000))
        wait_until(
            lambda: _refused_everywhere(kube, namespace, replicas + 1),
            timeout=WAIT_S,
            description=f"every pod refused with NodeDevicesNotAllocatable on {node}",
        )
        assert kube.get(path)["status"]["allocatable"].get("nvidia.com/gpu") == "0"  # still inside the window
    finally:
        kube.patch(path, {"metadata": {"labels": {"gpu": "on"}}})  # the plugin comes back

    running = wait_until(
        lambda: _at_least(kube, namespace, "Running", replicas + 1), timeout=WAIT_S, description="every pod Running"
    )
    assert kube.get(path)["status"]["allocatable"]["nvidia.com/gpu"] == served
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    assert sorted(running) == sorted(p["metadata"]["name"] for p in pods)  # no replica replaced, none Failed
    rejected = [e for e in kube.get(f"/api/v1/namespaces/{namespace}/events")["items"] if "Admission" in e["reason"]]
    assert rejected == []
    assert_within_capacity(kube)
    kube.delete(f"/apis/apps/v1/namespaces/{namespace}/replicasets/rs", {"propagationPolicy": "Background"})
    for pod in pods:
        with contextlib.suppress(ApiError):
            kube.delete(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}", {"gracePeriodSeconds": 0})
    wait_until(
        lambda: not kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"],
        timeout=WAIT_S,
        description="the pods of the plugin-restart test gone",
    )


def gpu_replicaset(name: str, image: str, replicas: int) -> dict[str, Any]:
    """A ReplicaSet of ``replicas`` one-card 1000 MiB pods (``gpu_pod``'s, restarted always as a ReplicaSet needs)."""
    template = gpu_pod(name, image, 1, 1000)
    template["metadata"] = {"labels": {"app": name}}
    template["spec"]["restartPolicy"] = "Always"
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template},
    }


def _refused_everywhere(kube: KubeClient, namespace: str, count: int) -> bool:
    """``count`` pods exist, none bound, and each was refused by kube-scheduler with hami's reason."""
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    assert not [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")], "a pod was bound into the window"
    events = kube.get(f"/api/v1/namespaces/{namespace}/events")["items"]
    refused = {
        e["involvedObject"]["name"]
        for e in events
        if e["reason"] == "FailedScheduling" and "NodeDevicesNotAllocatable" in e["message"]
    }
    return len(pods) == count and refused >= {p["metadata"]["name"] for p in pods}


def check_scheduler_replicas(kube: KubeClient) -> None:
    """hami's scheduler: two replicas Running, exactly one labelled leader (the Service selects it)."""
    selector = "app.kubernetes.io/component=hami-scheduler"
    pods = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=selector)["items"]
    assert [p["status"].get("phase") for p in pods] == ["Running", "Running"]

    def one_leader() -> bool:
        leaders = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"{keys.SCHEDULER_ROLE_LABEL}=leader")
        return len(leaders["items"]) == 1

    wait_until(one_leader, timeout=WAIT_S, description="exactly one hami scheduler labelled leader")


def check_plugin_registered(kube: KubeClient, node_name: str) -> None:
    """The device plugin registered the fake GPUs with the real kubelet: the Node's allocatable shows them."""

    def allocatable() -> bool:
        node = kube.get(f"/api/v1/nodes/{node_name}")
        return node["status"]["allocatable"].get("nvidia.com/gpu") == str(len(GPU_UUIDS) * SPLIT)

    wait_until(allocatable, timeout=WAIT_S, description="the node's allocatable nvidia.com/gpu")


def check_deleting_frees_the_ledger(kube: KubeClient, namespace: str, image: str, holder: str) -> None:
    """A pod that needs both cards whole does not fit while ``holder`` has 3000 MiB of one; it runs once ``holder``
    is deleted."""
    kube.post(f"/api/v1/namespaces/{namespace}/pods", gpu_pod("gpu-whole", image, 2, GPU_MEMORY_MIB))
    wait_until(
        lambda: _unschedulable(kube, namespace, "gpu-whole"), timeout=WAIT_S, description="gpu-whole unschedulable"
    )
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/{holder}", {"gracePeriodSeconds": 0})
    # kube-scheduler's retry on the deletion may reach hami before hami's ledger freed the card; hami's leader then
    # marks the node (hami.io/capacity-freed), a Node event, and the pod is retried within seconds, not at
    # kube-scheduler's 5-minute flush of unschedulable pods (docs/coming-from-hami.md, "Where hami differs from HAMi")
    whole = wait_until(
        lambda: pod_phase(kube, namespace, "gpu-whole", "Running"), timeout=WAIT_S, description="gpu-whole Running"
    )
    node = kube.get(f"/api/v1/nodes/{whole['spec']['nodeName']}")
    assert keys.CAPACITY_FREED in node["metadata"]["annotations"]  # hami's leader marked the node the card freed on
    (both,) = decode_pod_devices(whole["metadata"]["annotations"][keys.NVIDIA_KEYS.allocated])
    assert sorted(d.uuid for d in both) == sorted(GPU_UUIDS)
    assert all(d.usedmem == GPU_MEMORY_MIB for d in both)
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/gpu-whole", {"gracePeriodSeconds": 0})


def _unschedulable(kube: KubeClient, namespace: str, name: str) -> bool:
    try:
        pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    except ApiError:
        return False
    assert not pod["spec"].get("nodeName"), "gpu-whole was bound while the card was shared"
    conditions = {c["type"]: c for c in pod["status"].get("conditions", [])}
    scheduled = conditions.get("PodScheduled")
    return scheduled is not None and scheduled["status"] == "False" and scheduled.get("reason") == "Unschedulable"


def test_helm_upgrade_rolls_while_a_burst_of_gpu_pods_never_exceeds_capacity(
    installed: RealCluster, kube_real: KubeClient
) -> None:
    kube = kube_real
    namespace = kube.create_namespace()
    image = installed.images["hami.oci.tar"]
    fits = len(GPU_UUIDS) * (GPU_MEMORY_MIB // 3000)  # two 3000 MiB pods per 8000 MiB card
    burst = [f"burst-{i}" for i in range(fits + 2)]
    upgrade = threading.Thread(target=helm_upgrade, args=(installed, "2"), daemon=True)
    upgrade.start()
    for name in burst:  # spread over the rollout
        created = create_through_webhook_outage(kube, namespace, gpu_pod(name, image, 1, 3000))
        assert created["spec"]["schedulerName"] == "hami-scheduler"
        assert_within_capacity(kube)
        upgrade.join(1.0)
    while upgrade.is_alive():
        assert_within_capacity(kube)
        upgrade.join(0.5)
    assert UPGRADE_ERRORS == [], UPGRADE_ERRORS
    assert_rolled(kube, "2")

    running = wait_until(
        lambda: _at_least(kube, namespace, "Running", fits), timeout=WAIT_S, description=f"{fits} burst pods Running"
    )
    assert_within_capacity(kube)
    assert len(running) == fits  # the rest wait: the cards are full
    for name in running:
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/{name}", {"gracePeriodSeconds": 0})
    rest = wait_until(
        lambda: _at_least(kube, namespace, "Running", len(burst) - fits),
        timeout=WAIT_S,
        description="the waiting burst pods Running once the first ones are gone",
    )
    assert set(rest) == set(burst) - set(running)
    assert_within_capacity(kube)
    for name in rest:
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/{name}", {"gracePeriodSeconds": 0})


HAMI_VALUES = Path(__file__).resolve().parents[1] / "data" / "hami-v2.10.0-values.yaml"
HAMI_STYLE_VALUES = Path(__file__).resolve().parents[1] / "data" / "hami-style-values.yaml"
HAMI_STYLE_SPLIT = 4  # tests/data/hami-style-values.yaml: devicePlugin.deviceSplitCount
HAMI_STYLE_REPLICAS = 1  # its scheduler.replicas


def test_helm_upgrade_to_a_values_file_written_for_hami(
    installed: RealCluster, kube_real: KubeClient, tmp_path: Path
) -> None:
    """The release re-rendered from HAMi v2.10's own defaults plus a user's file in HAMi's spelling (string
    booleans, seconds as numbers, klog flags, HAMi's device-plugin securityContext and node selector ``gpu: "on"``,
    split count 4): every object comes from HAMi's values, and a plain GPU pod runs on the real node with its
    allocation. An upgrade of the installed release, not a new install cycle: the uninstall below then removes a
    release made from HAMi's values."""
    kube = kube_real
    node = kube.get(f"/api/v1/nodes/{installed.node_name}")
    assert node["metadata"]["labels"].get("gpu") == "on"  # HAMi's devicePlugin.nvidiaNodeSelector matches the node
    fixture_file = tmp_path / "fixture.yaml"
    fixture_file.write_text(FAKE_NVML)
    args = ["upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--wait", "--timeout", f"{WAIT_S:.0f}s"]
    args += ["-f", str(HAMI_VALUES), "-f", str(HAMI_STYLE_VALUES)]
    args += ["--set-file", f"devicePlugin.testing.fakeNvml={fixture_file}"]
    for value in helm_values(installed):
        args += ["--set", value]
    run_helm(installed, *args)

    selector = "app.kubernetes.io/component=hami-scheduler"
    wait_until(
        lambda: len(live_pods(kube, selector)) == HAMI_STYLE_REPLICAS,
        timeout=WAIT_S,
        description="HAMi's scheduler.replicas",
    )
    with release_pods_on_timeout(installed):
        wait_until(
            lambda: (
                kube.get(f"/api/v1/nodes/{installed.node_name}")["status"]["allocatable"].get("nvidia.com/gpu")
                == str(len(GPU_UUIDS) * HAMI_STYLE_SPLIT)
            ),
            timeout=WAIT_S,
            description="the node's allocatable nvidia.com/gpu under HAMi's deviceSplitCount",
        )
    namespace = kube.create_namespace()
    image = installed.images["hami.oci.tar"]
    created = kube.post(f"/api/v1/namespaces/{namespace}/pods", gpu_pod("hami-values", image, 1, 3000))
    assert created["spec"]["schedulerName"] == "hami-scheduler"
    pod = wait_until(
        lambda: pod_phase(kube, namespace, "hami-values", "Running"), timeout=WAIT_S, description="the pod Running"
    )
    annotations = pod["metadata"]["annotations"]
    assert annotations[keys.BIND_PHASE] == "success"
    ((device,),) = decode_pod_devices(annotations[keys.NVIDIA_KEYS.allocated])
    assert device.uuid in GPU_UUIDS
    assert device.usedmem == 3000
    env = container_output(kube, namespace, "hami-values")["env"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == device.uuid
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/hami-values", {"gracePeriodSeconds": 0})


@contextlib.contextmanager
def release_pods_on_timeout(cluster: RealCluster) -> Iterator[None]:
    """A wait that times out fails with the release's pods, their states and last log lines."""
    try:
        yield
    except TimeoutError as err:
        raise AssertionError(f"{err}\n{describe_release_pods(cluster)}") from err


def live_pods(kube: KubeClient, selector: str) -> list[dict[str, Any]]:
    pods = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=selector)["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def test_helm_uninstall_leaves_nothing_and_plain_pods_still_run(installed: RealCluster, kube_real: KubeClient) -> None:
    kube = kube_real
    run_helm(installed, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", f"{WAIT_S:.0f}s")

    instance = f"app.kubernetes.io/instance={RELEASE}"
    for path in (
        "/api/v1/pods",
        "/api/v1/services",
        "/api/v1/configmaps",
        "/apis/apps/v1/deployments",
        "/apis/apps/v1/daemonsets",
        "/apis/batch/v1/jobs",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    ):
        wait_until(
            lambda path=path: not kube.get(path, labelSelector=instance)["items"],
            timeout=WAIT_S,
            description=f"no {path} of the release left",
        )
    namespace = kube.create_namespace()
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain"},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": installed.images["pause.oci.tar"], "imagePullPolicy": "Never"}],
        },
    }
    created = kube.post(f"/api/v1/namespaces/{namespace}/pods", plain)
    assert created["spec"]["schedulerName"] == "default-scheduler"
    wait_until(
        lambda: pod_phase(kube, namespace, "plain", "Running"), timeout=WAIT_S, description="a plain pod Running"
    )
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/plain", {"gracePeriodSeconds": 0})


UPGRADE_ERRORS: list[str] = []


def create_through_webhook_outage(kube: KubeClient, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    """Create ``pod``, retrying while the webhook is unreachable (failurePolicy Fail refuses GPU pods for the moment
    the rollout moves the leader, as docs/reliability.md says), as a controller would."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            created: dict[str, Any] = kube.post(f"/api/v1/namespaces/{namespace}/pods", pod)
            return created
        except ApiError as err:
            if "webhook" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def helm_upgrade(cluster: RealCluster, revision: str) -> None:
    """``helm upgrade`` with the same values plus a pod annotation, which rolls the scheduler's pods."""
    args = ["upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values", "--wait"]
    args += ["--timeout", f"{WAIT_S:.0f}s", "--set-string", f"scheduler.podAnnotations.hami-e2e/revision={revision}"]
    try:
        run_helm(cluster, *args)
    except AssertionError as err:
        UPGRADE_ERRORS.append(str(err))


def assert_rolled(kube: KubeClient, revision: str) -> None:
    selector = "app.kubernetes.io/component=hami-scheduler"
    pods = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=selector)["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert [p["metadata"]["annotations"].get("hami-e2e/revision") for p in live] == [revision, revision]
    assert all(p["status"].get("phase") == "Running" for p in live)


def assert_within_capacity(kube: KubeClient) -> None:
    """No card holds more memory than it has, counting every bound pod that has not ended."""
    used: dict[str, int] = {}
    for pod in kube.get("/api/v1/pods")["items"]:
        allocated = (pod["metadata"].get("annotations") or {}).get(keys.NVIDIA_KEYS.allocated)
        if not allocated or not pod["spec"].get("nodeName") or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        for container in decode_pod_devices(allocated):
            for device in container:
                used[device.uuid] = used.get(device.uuid, 0) + device.usedmem
    assert all(mib <= GPU_MEMORY_MIB for mib in used.values()), used


def _at_least(kube: KubeClient, namespace: str, phase: str, count: int) -> list[str] | None:
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    names = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == phase]
    return names if len(names) >= count else None
