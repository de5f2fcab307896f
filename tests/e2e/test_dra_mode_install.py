"""DRA mode installed as users install it, on the real node (kubelet + containerd 2.x with CDI, ``realnode.py``).

1. ``helm install`` with ``draMode.enabled=true`` (namespaces labelled ``hami.io/scheduling-mode=dra``) and
   ``draPlugin.enabled=true``: a plain pod written for HAMi (``nvidia.com/gpu: 1``, ``gpumem: 3000``,
   ``gpucores: 30``) in a labelled namespace gets a ResourceClaim owned by the pod, kube-scheduler allocates it from
   the plugin's ResourceSlice with no request to hami's /filter or /bind (their counters on every hami scheduler pod
   stay where they were; the pod carries no allocation annotation), hami's plugin prepares it (CDI spec, checkpoint),
   the container prints HAMi-core's limits, hami's ledger (metrics, ``hami top``) counts it; deleting the pod
   deletes the claim (garbage collector: the pod owns it) and the plugin unprepares it.
2. ``helm upgrade`` from extender mode to DRA mode with a pod running: an extender pod holds 6000 MiB of card 0
   (``nvidia.com/use-gpuuuid``); the upgrade turns DRA mode and the DRA plugin on; the pod keeps running with the
   same container and annotations and hami keeps counting it; a new HAMi pod (3000 MiB) in a DRA namespace is
   allocated by kube-scheduler on card 1 (card 0, first in the slice, has only 2000 MiB left: the guard keeps the
   extender pod's share away from claims), and no card holds more than it has, counted from the pods' annotations
   and the claims' consumed capacity alike, and in hami's ledger.

Failures dump the pods, claims, slices and events of the test namespaces and the release's pods with their logs.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hami.protocol import keys
from hami.protocol.allocation import decode_pod_devices
from hami.protocol.quantity import parse_quantity
from tests.e2e.cluster import ApiError, KubeClient, wait_until
from tests.e2e.realnode import RealCluster
from tests.e2e.test_dra_driver import CDI_DIR, CLAIMS_DIR, spec_file
from tests.e2e.test_install import (
    FAKE_NVML,
    GPU_MEMORY_MIB,
    GPU_UUIDS,
    NAMESPACE,
    RELEASE,
    SHOW,
    WAIT_S,
    check_plugin_registered,
    container_output,
    create_through_webhook_outage,
    describe_release_pods,
    helm_values,
    live_pods,
    pod_phase,
    run_helm,
)
from tests.helm import CHART, helm

DRIVER = "hami-core-gpu.project-hami.io"
RESOURCE = "/apis/resource.k8s.io/v1"
MODE_LABEL = "hami.io/scheduling-mode"
DRA_LABEL = "hami.io/dra"
SCHEDULER_PODS = "app.kubernetes.io/component=hami-scheduler"
EXTENDER_VERBS = ("filter", "bind")
HAMI = Path(sys.executable).parent / "hami"
MIB = 1 << 20
T = TypeVar("T")


# ----------------------------------------------------------------------------------------------------
# the release


@dataclass
class Release:
    """hami installed by helm on the real node, in extender or DRA mode; uninstalled after the test, once the
    test's pods are gone (so the plugin unprepares their claims while it still runs)."""

    cluster: RealCluster
    kube: KubeClient
    fixture_file: Path
    namespaces: list[str] = field(default_factory=list)

    @property
    def image(self) -> str:
        return self.cluster.images["hami.oci.tar"]

    def values(self, *, dra: bool) -> list[str]:
        """The install's values (``test_install.helm_values``: images, pull policy, the fake NVML) and, for DRA
        mode, DRA mode for labelled namespaces and the DRA plugin on the same fake cards, under the real node's
        kubelet root directory."""
        args = ["--set-file", f"devicePlugin.testing.fakeNvml={self.fixture_file}"]
        sets = helm_values(self.cluster)
        if dra:
            args += ["--set-file", f"draPlugin.testing.fakeNvml={self.fixture_file}"]
            sets += [
                "draMode.enabled=true",
                "draMode.namespaces=labelled",
                "draPlugin.enabled=true",
                "draPlugin.testing.acknowledgeFakeGPUs=true",
                f"draPlugin.kubeletDir={self.cluster.base / 'kubelet'}",
            ]
        for value in sets:
            args += ["--set", value]
        return args

    def helm(self, verb: str, *, dra: bool) -> None:
        args = [verb, RELEASE, str(CHART), "--namespace", NAMESPACE, "--wait", "--timeout", f"{WAIT_S:.0f}s"]
        if verb == "install":
            args.append("--create-namespace")
        run_helm(self.cluster, *args, *self.values(dra=dra))

    def namespace(self, *, dra: bool) -> str:
        """A new test namespace, labelled for DRA mode when ``dra``."""
        name = self.kube.create_namespace(labels={MODE_LABEL: "dra"} if dra else None)
        self.namespaces.append(name)
        return name

    def uninstall(self) -> None:
        for namespace in self.namespaces:
            for pod in self.kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
                with contextlib.suppress(ApiError):
                    self.kube.delete_pod(namespace, pod["metadata"]["name"])
        with contextlib.suppress(TimeoutError):
            wait_until(lambda: not self._test_pods_or_claims(), timeout=WAIT_S, description="the test's pods gone")
        status = subprocess.run(
            [helm(), "status", RELEASE, "-n", NAMESPACE, "--kubeconfig", str(self.cluster.plane.kubeconfig)],
            capture_output=True,
            check=False,
        )
        if status.returncode == 0:
            run_helm(self.cluster, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")
        for published in self.kube.get(f"{RESOURCE}/resourceslices", fieldSelector=f"spec.driver={DRIVER}")["items"]:
            with contextlib.suppress(ApiError):  # the plugin's slices, when kubelet did not wipe them yet
                self.kube.delete(f"{RESOURCE}/resourceslices/{published['metadata']['name']}")

    def _test_pods_or_claims(self) -> bool:
        for namespace in self.namespaces:
            if self.kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
                return True
            if self.kube.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims")["items"]:
                return True
        return any(path.name.startswith(f"k8s.{DRIVER}-claim_") for path in CDI_DIR.glob("*.yaml"))

    def dump(self) -> str:
        """The test namespaces' pods, claims and events, the plugin's slices, the release's pods and logs."""
        parts = []
        for namespace in self.namespaces:
            for kind, path in (
                ("pods", f"/api/v1/namespaces/{namespace}/pods"),
                ("resourceclaims", f"{RESOURCE}/namespaces/{namespace}/resourceclaims"),
                ("events", f"/api/v1/namespaces/{namespace}/events"),
            ):
                with contextlib.suppress(ApiError, httpx.HTTPError):
                    items = self.kube.get(path)["items"]
                    parts.append(f"=== {kind} in {namespace}:\n{json.dumps(items, indent=1)[:12000]}")
        with contextlib.suppress(ApiError, httpx.HTTPError):
            slices = self.kube.get(f"{RESOURCE}/resourceslices")["items"]
            parts.append(f"=== resourceslices:\n{json.dumps(slices, indent=1)[:6000]}")
        with contextlib.suppress(ApiError, httpx.HTTPError):
            parts.append(f"=== release pods:\n{describe_release_pods(self.cluster)}")
        return "\n".join(parts)

    def wait(self, condition: Callable[[], T | None], description: str) -> T:
        """``wait_until`` whose time-out fails with :meth:`dump` (the wait is a safety net, never a measure)."""
        try:
            return wait_until(condition, timeout=WAIT_S, interval=0.5, description=description)
        except TimeoutError as err:
            raise AssertionError(f"{err}\n{self.dump()}") from err


@pytest.fixture
def release(real_cluster: RealCluster, tmp_path: Path) -> Iterator[Release]:
    fixture_file = tmp_path / "fake-nvml.yaml"
    fixture_file.write_text(FAKE_NVML)  # the device plugin and the DRA plugin see the same two cards
    with real_cluster.client() as kube:
        made = Release(real_cluster, kube, fixture_file)
        try:
            yield made
        finally:
            made.uninstall()


@contextlib.contextmanager
def dumped_on_failure(release: Release) -> Iterator[None]:
    """An assertion that fails inside adds the objects and logs of :meth:`Release.dump`."""
    try:
        yield
    except AssertionError as err:
        if "=== release pods" in str(err):
            raise
        raise AssertionError(f"{err}\n{release.dump()}") from err


# ----------------------------------------------------------------------------------------------------
# pods, claims and what hami counts


def hami_pod(
    name: str, image: str, memory_mib: int, cores: int, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod written for HAMi: one card, ``memory_mib`` of it, ``cores`` percent of its cores; no schedulerName."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(memory_mib), "nvidia.com/gpucores": str(cores)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
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


def claim_of(kube: KubeClient, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The ResourceClaim the pod's one claim reference names, once the claim controller created it."""
    (reference,) = pod["spec"]["resourceClaims"]
    path = f"{RESOURCE}/namespaces/{pod['metadata']['namespace']}/resourceclaims/{reference['resourceClaimName']}"
    try:
        found: dict[str, Any] = kube.get(path)
    except ApiError as err:
        if err.status == 404:
            return None
        raise
    return found


def allocated_claim(kube: KubeClient, pod: dict[str, Any]) -> dict[str, Any] | None:
    claim = claim_of(kube, pod)
    return claim if claim is not None and claim.get("status", {}).get("allocation") else None


def slice_uuids(kube: KubeClient, node: str) -> dict[str, str] | None:
    """Device name → GPU UUID in the plugin's ResourceSlice of ``node`` (None until it is published)."""
    selector = f"spec.driver={DRIVER},spec.nodeName={node}"
    slices = kube.get(f"{RESOURCE}/resourceslices", fieldSelector=selector)["items"]
    devices = [d for s in slices for d in s["spec"].get("devices", [])]
    return {d["name"]: d["attributes"]["uuid"]["string"] for d in devices} or None


def slice_taints(kube: KubeClient, node: str) -> dict[str, list[str]]:
    """Device name → its taints (``key=value:effect``) in the plugin's ResourceSlice of ``node``."""
    selector = f"spec.driver={DRIVER},spec.nodeName={node}"
    slices = kube.get(f"{RESOURCE}/resourceslices", fieldSelector=selector)["items"]
    return {
        d["name"]: [f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in d.get("taints", [])]
        for s in slices
        for d in s["spec"].get("devices", [])
    }


def claim_shares(kube: KubeClient, claim: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(GPU UUID, MiB, cores) of each device result of an allocated claim, from its consumed capacity."""
    results = claim["status"]["allocation"]["devices"]["results"]
    uuids: dict[str, str] = {}
    for result in results:
        assert result["driver"] == DRIVER, result
        uuids.update(slice_uuids(kube, result["pool"]) or {})
    shares = []
    for result in results:
        consumed = result.get("consumedCapacity", {})
        memory = parse_quantity(consumed.get("memory", "0"), "consumedCapacity.memory")
        cores = parse_quantity(consumed.get("cores", "0"), "consumedCapacity.cores")
        shares.append((uuids[result["device"]], int(memory / MIB), int(cores)))
    return shares


def held_per_card(kube: KubeClient) -> dict[str, int]:
    """MiB held per card, counted from the API: every live bound pod's allocation annotation and every allocated
    claim of hami's driver (the two ways a share is held in a mixed cluster)."""
    held: dict[str, int] = {}
    for pod in kube.get("/api/v1/pods")["items"]:
        allocated = (pod["metadata"].get("annotations") or {}).get(keys.NVIDIA_KEYS.allocated)
        if not allocated or not pod["spec"].get("nodeName") or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        for container in decode_pod_devices(allocated):
            for device in container:
                held[device.uuid] = held.get(device.uuid, 0) + device.usedmem
    for claim in kube.get(f"{RESOURCE}/resourceclaims")["items"]:
        if not claim.get("status", {}).get("allocation"):
            continue
        for uuid, mib, _cores in claim_shares(kube, claim):
            held[uuid] = held.get(uuid, 0) + mib
    return held


def assert_within_capacity(kube: KubeClient) -> dict[str, int]:
    held = held_per_card(kube)
    assert all(mib <= GPU_MEMORY_MIB for mib in held.values()), f"a card holds more than {GPU_MEMORY_MIB} MiB: {held}"
    return held


@dataclass(frozen=True)
class Scrape:
    """What every hami scheduler pod's /metrics said: extender requests by pod and verb, and the ledger's MiB
    per card (the leader's)."""

    requests: dict[tuple[str, str], float]
    allocated_mib: dict[str, float]


def scrape(cluster: RealCluster, kube: KubeClient) -> Scrape:
    """Read /metrics of each hami scheduler pod directly at its pod address (``scheduler.metricsSecure``: the
    admin's bearer token passes its TokenReview and SubjectAccessReview; the certificate names the Service, not the
    pod address, hence no verification)."""
    requests: dict[tuple[str, str], float] = {}
    allocated: dict[str, float] = {}
    for pod in live_pods(kube, SCHEDULER_PODS):
        restarts = sum(s.get("restartCount", 0) for s in pod["status"].get("containerStatuses", []))
        who = f"{pod['metadata']['name']} (restarts {restarts})"
        (port,) = [
            p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", []) if p["name"] == "metrics"
        ]
        url = f"https://{pod['status']['podIP']}:{port}/metrics"
        headers = {"Authorization": f"Bearer {cluster.plane.token}"}
        with httpx.Client(verify=False, timeout=10.0) as client:
            response = client.get(url, headers=headers)
        assert response.status_code == 200, f"{url}: {response.status_code} {response.text[:500]}"
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                endpoint = sample.labels.get("endpoint")
                if sample.name == "hami_request_duration_seconds_count" and endpoint in EXTENDER_VERBS:
                    requests[(who, endpoint)] = sample.value
                if sample.name == "hami_gpu_memory_allocated_bytes" and sample.value:
                    uuid = sample.labels["device_uuid"]
                    allocated[uuid] = max(allocated.get(uuid, 0.0), sample.value / MIB)
    return Scrape(requests, allocated)


def top(cluster: RealCluster) -> dict[str, dict[str, Any]]:
    """``hami top -o json`` with the admin's kubeconfig: card UUID → its row."""
    command = [str(HAMI), "top", "--kubeconfig", str(cluster.plane.kubeconfig), "--node", cluster.node_name]
    result = subprocess.run([*command, "-o", "json"], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    return {card["uuid"]: card for node in shown["nodes"] for card in node["cards"]}


# ----------------------------------------------------------------------------------------------------
# 1. helm install in DRA mode


def test_helm_install_in_dra_mode_runs_a_hami_pod_through_a_claim_without_filter_or_bind(release: Release) -> None:
    cluster, kube = release.cluster, release.kube
    release.helm("install", dra=True)
    with dumped_on_failure(release):
        check_plugin_registered(kube, cluster.node_name)
        uuids = release.wait(lambda: slice_uuids(kube, cluster.node_name), "the DRA plugin's ResourceSlice")
        assert sorted(uuids.values()) == sorted(GPU_UUIDS)
        namespace = release.namespace(dra=True)
        before = release.wait(lambda: scrape(cluster, kube), "hami's /metrics")

        pod, claim = run_dra_pod(release, namespace, "dra-user", 3000, 30)

        ((uuid, mib, cores),) = claim_shares(kube, claim)
        assert (uuid in GPU_UUIDS, mib, cores) == (True, 3000, 30)
        check_no_extender_requests(release, before, pod)
        check_prepared_and_limits(release, pod, claim, uuid, 3000, 30)
        release.wait(lambda: scrape(cluster, kube).allocated_mib.get(uuid) == 3000, "hami's ledger counting the claim")
        assert top(cluster)[uuid]["memoryMiB"]["used"] == 3000
        assert assert_within_capacity(kube) == {uuid: 3000}

        check_deleted_with_its_claim(release, pod, claim)
        release.wait(lambda: not scrape(cluster, kube).allocated_mib.get(uuid), "hami's ledger freeing the card")


def run_dra_pod(
    release: Release, namespace: str, name: str, memory_mib: int, cores: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Create a HAMi pod in a DRA namespace; check what the webhook made of it, the claim the claim controller
    created for it (owned by the pod), and wait for both to be allocated and Running. Returns (pod, claim)."""
    kube = release.kube
    created = create_through_webhook_outage(kube, namespace, hami_pod(name, release.image, memory_mib, cores))
    assert created["spec"]["schedulerName"] == "hami-scheduler"
    assert created["metadata"]["labels"][DRA_LABEL] == "true"
    (container,) = created["spec"]["containers"]
    limits = container["resources"].get("limits", {})
    assert not [r for r in limits if r.startswith("nvidia.com/")], limits  # the webhook moved them into the claim
    assert container["resources"]["claims"] == [{"name": created["spec"]["resourceClaims"][0]["name"]}]
    claim = release.wait(lambda: claim_of(kube, created), f"{name}'s ResourceClaim")
    owner = {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": created["metadata"]["uid"]}
    assert claim["metadata"]["ownerReferences"] == [{**owner, "controller": True, "blockOwnerDeletion": True}]
    assert claim["metadata"]["labels"][DRA_LABEL] == "true"
    pod = release.wait(lambda: pod_phase(kube, namespace, name, "Running"), f"{name} Running")
    claim = release.wait(lambda: allocated_claim(kube, created), f"{name}'s claim allocated")
    assert [r["uid"] for r in claim["status"].get("reservedFor", [])] == [created["metadata"]["uid"]]
    return pod, claim


def check_no_extender_requests(release: Release, before: Scrape, pod: dict[str, Any]) -> None:
    """hami's /filter and /bind were not called for the pod: no hami scheduler pod counted a request since
    ``before`` (nothing else was scheduled meanwhile), and the pod carries none of the annotations they write."""
    after = scrape(release.cluster, release.kube)
    assert after.requests == before.requests, (
        f"/filter or /bind requests: before {before.requests}, after {after.requests}"
    )
    annotations = pod["metadata"].get("annotations") or {}
    written = {keys.NVIDIA_KEYS.allocated, keys.NVIDIA_KEYS.to_allocate, keys.BIND_PHASE, keys.VGPU_NODE}
    assert not written & set(annotations), annotations
    assert pod["spec"]["nodeName"] == release.cluster.node_name


def check_prepared_and_limits(
    release: Release, pod: dict[str, Any], claim: dict[str, Any], uuid: str, memory_mib: int, cores: int
) -> None:
    """hami's plugin prepared the claim (its CDI spec, its checkpoint) and the container sees HAMi-core's limits."""
    uid = claim["metadata"]["uid"]
    assert spec_file(uid).exists(), f"no CDI spec {spec_file(uid)}"
    assert plugin_checkpoint(release).get(uid) == "PrepareCompleted"
    printed = container_output(release.kube, pod["metadata"]["namespace"], pod["metadata"]["name"])
    print("container output:", json.dumps(printed, indent=1, sort_keys=True))
    env, mounts = printed["env"], printed["mounts"]
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{memory_mib}m"
    assert env["CUDA_DEVICE_SM_LIMIT_0"] == str(cores)
    assert env["NVIDIA_VISIBLE_DEVICES"] == uuid
    assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"].startswith(f"{CLAIMS_DIR}/{uid}/")
    for path in (f"{CLAIMS_DIR}/{uid}", "/usr/local/vgpu/libvgpu.so", "/tmp/vgpulock", "/etc/ld.so.preload"):
        assert path in mounts, path


def plugin_checkpoint(release: Release) -> dict[str, str]:
    """Claim UID → state in the chart's plugin's checkpoint (under the node's kubelet root directory)."""
    path = release.cluster.base / "kubelet" / "plugins" / DRIVER / "checkpoint.json"
    return {uid: record["state"] for uid, record in json.loads(path.read_text())["claims"].items()}


def check_deleted_with_its_claim(release: Release, pod: dict[str, Any], claim: dict[str, Any]) -> None:
    kube, namespace, uid = release.kube, pod["metadata"]["namespace"], claim["metadata"]["uid"]
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}", {"gracePeriodSeconds": 0})
    release.wait(lambda: claim_of(kube, pod) is None, "the claim deleted with its pod (garbage collector)")
    release.wait(
        lambda: (
            not spec_file(uid).exists() and not (CLAIMS_DIR / uid).exists() and uid not in plugin_checkpoint(release)
        ),
        "the claim unprepared by hami's plugin",
    )


# ----------------------------------------------------------------------------------------------------
# 2. helm upgrade from extender mode to DRA mode


def test_helm_upgrade_from_extender_to_dra_mode_keeps_running_shares_and_schedules_new_pods_through_dra(
    release: Release,
) -> None:
    cluster, kube = release.cluster, release.kube
    release.helm("install", dra=False)
    with dumped_on_failure(release):
        check_plugin_registered(kube, cluster.node_name)
        old_ns = release.namespace(dra=False)
        first = release.wait(lambda: scrape(cluster, kube), "hami's /metrics")
        pinned = {keys.NVIDIA_USE_GPUUUID: GPU_UUIDS[0]}  # card 0: the first device of the slice to come
        create_through_webhook_outage(kube, old_ns, hami_pod("held", release.image, 6000, 30, pinned))
        held = release.wait(lambda: pod_phase(kube, old_ns, "held", "Running"), "the extender pod Running")
        assert held["metadata"]["annotations"][keys.BIND_PHASE] == "success"
        after_extender = scrape(cluster, kube)
        assert sum(after_extender.requests.values()) > sum(first.requests.values())  # /filter and /bind counted it
        release.wait(lambda: scrape(cluster, kube).allocated_mib == {GPU_UUIDS[0]: 6000}, "hami counting the pod")

        release.helm("upgrade", dra=True)

        check_share_kept(release, held)
        uuids = release.wait(lambda: slice_uuids(kube, cluster.node_name), "the DRA plugin's ResourceSlice")
        assert uuids["hami-gpu-0"] == GPU_UUIDS[0]  # card 0 is first: first-fit alone would put a claim there
        held_back = f"{keys.DEVICE_PLUGIN_PODS_TAINT}=true:NoSchedule"  # the guard (docs/dra-mode-switching.md)
        assert slice_taints(kube, cluster.node_name) == {"hami-gpu-0": [held_back], "hami-gpu-1": []}
        new_ns = release.namespace(dra=True)
        before = scrape(cluster, kube)
        pod, claim = run_dra_pod(release, new_ns, "dra-new", 3000, 30)
        check_no_extender_requests(release, before, pod)
        ((uuid, mib, _cores),) = claim_shares(kube, claim)
        assert (uuid, mib) == (GPU_UUIDS[1], 3000), "the claim landed on the card the extender pod holds"
        check_prepared_and_limits(release, pod, claim, uuid, 3000, 30)
        check_one_ledger(release)


def check_share_kept(release: Release, held: dict[str, Any]) -> None:
    """The extender pod still runs in the same container with the same annotations, and hami counts its share."""
    kube, namespace = release.kube, held["metadata"]["namespace"]
    now = kube.get(f"/api/v1/namespaces/{namespace}/pods/held")
    assert now["metadata"]["uid"] == held["metadata"]["uid"]
    assert now["status"]["phase"] == "Running"
    assert container_ids(now) == container_ids(held)
    assert now["metadata"]["annotations"] == held["metadata"]["annotations"]
    ((device,),) = decode_pod_devices(now["metadata"]["annotations"][keys.NVIDIA_KEYS.allocated])
    assert (device.uuid, device.usedmem) == (GPU_UUIDS[0], 6000)
    release.wait(
        lambda: scrape(release.cluster, kube).allocated_mib.get(GPU_UUIDS[0]) == 6000,
        "the upgraded hami counting the extender pod's share",
    )


def container_ids(pod: dict[str, Any]) -> list[tuple[str, int]]:
    return [(s.get("containerID", ""), s.get("restartCount", 0)) for s in pod["status"].get("containerStatuses", [])]


def check_one_ledger(release: Release) -> None:
    """Both shares are counted once and no card holds more than it has: from the API (annotations and claims), in
    hami's metrics and in ``hami top``."""
    kube = release.kube
    expected = {GPU_UUIDS[0]: 6000, GPU_UUIDS[1]: 3000}
    assert assert_within_capacity(kube) == expected
    release.wait(lambda: scrape(release.cluster, kube).allocated_mib == expected, "hami's ledger counting both")
    cards = top(release.cluster)
    assert {uuid: cards[uuid]["memoryMiB"]["used"] for uuid in GPU_UUIDS} == expected
    dra = cards[GPU_UUIDS[1]]["dra"]
    assert dra is not None
    assert dra["memoryMiB"] == 3000
