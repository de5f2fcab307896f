"""Device-plugin pods and DRA claims on the same GPUs, on the real control plane (docs/dra.md).

One fake node registers two GPUs in HAMi's format *and* publishes them in a ResourceSlice of NVIDIA's DRA driver
(``gpu.nvidia.com``, same UUIDs), plus a third device whose UUID hami does not know. Two kube-schedulers run, as
in a cluster in migration: the default one (no extender) allocates ResourceClaims for plain pods, and the one
calling hami places device-plugin pods. hami reads the slices and claims and charges what the claims hold.

No kubelet and no kube-controller-manager run: nothing deallocates a claim, so the test clears ``status`` itself,
as the garbage collector would once the claim's pods are gone. Waits poll with bounded deadlines.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hami.protocol import keys
from hami.protocol.allocation import decode_pod_devices
from hami.protocol.quantity import parse_quantity
from tests.e2e.cluster import ApiError, ControlPlane, KubeClient, Scheduler, start_control_plane, wait_until
from tests.e2e.hami_stack import (
    GPU,
    HAMI,
    SCHEDULER_NAME,
    FakeDevicePlugin,
    HamiScheduler,
    Usage,
    extender_config,
    gpu_limits,
    register_annotation,
    usage_from_annotations,
)
from tests.e2e.invariants import over_capacity

pytestmark = pytest.mark.e2e

DRA = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
MIB = 1 << 20
CARD_MIB = 24000
SLOTS = 10


@dataclass
class DraStack:
    """The test's node, hami, both kube-schedulers and the DRA objects it made (removed afterwards)."""

    kube: KubeClient
    namespace: str
    hami: HamiScheduler
    node: str = ""
    slices: list[str] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)

    @property
    def device_class(self) -> str:
        return f"{self.namespace}-gpu"

    def uuid(self, i: int) -> str:
        return f"GPU-{self.node}-{i}"

    def publish(self, unknown_uuid: str) -> None:
        """The DeviceClass and the node's ResourceSlice: gpu-0 and gpu-1 (the registered cards, shared by capacity:
        memory in bytes, cores in percent, both with a request policy) and gpu-9 with a UUID hami does not know."""
        self.kube.post(
            f"{DRA}/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": self.device_class},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            },
        )
        self.classes.append(self.device_class)
        devices = [self._device(f"gpu-{i}", self.uuid(i)) for i in range(2)] + [self._device("gpu-9", unknown_uuid)]
        name = f"{self.node}-{DRIVER}"
        self.kube.post(
            f"{DRA}/resourceslices",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": self.node,
                    "pool": {"name": self.node, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            },
        )
        self.slices.append(name)

    def publish_whole(self, name: str, node: str, pool: str, generation: int, uuids: list[str]) -> None:
        """A slice of ``node`` in ``pool`` whose devices ``gpu-<i>`` (UUIDs ``uuids``) are exclusive: a claim takes
        the whole card. What NodeRestriction lets node ``node`` write: its own ``nodeName``, any pool."""
        devices = [
            {"name": f"gpu-{i}", "attributes": {"uuid": {"string": uuid}}, "capacity": {"memory": {"value": "24000Mi"}}}
            for i, uuid in enumerate(uuids)
        ]
        pool_spec = {"name": pool, "generation": generation, "resourceSliceCount": 1}
        spec = {"driver": DRIVER, "nodeName": node, "pool": pool_spec}
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}}
        self.kube.post(f"{DRA}/resourceslices", {**body, "spec": {**spec, "devices": devices}})
        self.slices.append(name)

    def claim_whole(self, name: str, uuid: str) -> None:
        """A ResourceClaim for the whole (exclusive) device with ``uuid``."""
        selector = f'device.attributes["{DRIVER}"].uuid == "{uuid}"'
        request = {"deviceClassName": self.device_class, "selectors": [{"cel": {"expression": selector}}]}
        self.kube.post(
            f"{DRA}/namespaces/{self.namespace}/resourceclaims",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
            },
        )
        self.claims.append(name)

    def device_class_only(self) -> None:
        self.kube.post(
            f"{DRA}/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": self.device_class},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            },
        )
        self.classes.append(self.device_class)

    @staticmethod
    def _device(name: str, uuid: str) -> dict[str, Any]:
        return {
            "name": name,
            "allowMultipleAllocations": True,
            "attributes": {"uuid": {"string": uuid}, "productName": {"string": "NVIDIA-A100"}},
            "capacity": {
                "memory": {"value": f"{CARD_MIB}Mi", "requestPolicy": {"default": "1Gi", "validRange": {"min": "1Mi"}}},
                "cores": {
                    "value": "100",
                    "requestPolicy": {"default": "100", "validRange": {"min": "1", "max": "100"}},
                },
            },
        }

    def claim(self, name: str, uuid: str, memory: str, cores: str) -> None:
        """A ResourceClaim for one share of the device with ``uuid``: ``memory`` and ``cores``."""
        selector = f'device.attributes["{DRIVER}"].uuid == "{uuid}"'
        self.kube.post(
            f"{DRA}/namespaces/{self.namespace}/resourceclaims",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": self.device_class,
                                    "allocationMode": "ExactCount",
                                    "count": 1,
                                    "selectors": [{"cel": {"expression": selector}}],
                                    "capacity": {"requests": {"memory": memory, "cores": cores}},
                                },
                            }
                        ]
                    }
                },
            },
        )
        self.claims.append(name)

    def claim_pod(self, name: str, claim: str) -> None:
        """A plain pod (the default scheduler, no extender) using ``claim``, on the test's node."""
        self.kube.create_pod(
            self.namespace,
            name,
            containers=[
                {"name": "main", "image": "registry.invalid/hami-e2e:none", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            spec={
                "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
                "nodeSelector": {"kubernetes.io/hostname": self.node},
            },
        )

    def gpu_pod(self, name: str, mem: int, cores: int) -> None:
        """A device-plugin pod for hami-scheduler on the test's node."""
        self.kube.create_pod(
            self.namespace,
            name,
            limits=gpu_limits(mem=mem, cores=cores),
            scheduler_name=SCHEDULER_NAME,
            spec={"nodeSelector": {"kubernetes.io/hostname": self.node}},
        )

    def get_claim(self, name: str) -> dict[str, Any]:
        claim: dict[str, Any] = self.kube.get(f"{DRA}/namespaces/{self.namespace}/resourceclaims/{name}")
        return claim

    def allocated(self, name: str) -> dict[str, Any]:
        """Wait until kube-scheduler has allocated the claim; return it."""

        def probe() -> dict[str, Any] | None:
            claim = self.get_claim(name)
            return claim if (claim.get("status") or {}).get("allocation") else None

        return wait_until(probe, description=f"ResourceClaim {name} allocated")

    def deallocate(self, name: str) -> None:
        """What kube-controller-manager's resource claim controller would do: clear the claim's status."""
        claim = self.get_claim(name)
        claim["status"] = {}
        self.kube.put(f"{DRA}/namespaces/{self.namespace}/resourceclaims/{name}/status", claim)

    def card_of(self, pod: str) -> str:
        """The UUID hami gave the pod's one GPU."""
        annotations = self.kube.get_pod(self.namespace, pod)["metadata"].get("annotations") or {}
        ((device,),) = decode_pod_devices(annotations[keys.NVIDIA_KEYS.allocated])
        return device.uuid

    def held(self) -> Usage:
        """What hami says DRA claims hold, per card: (slots, MiB, cores) from its ``hami_dra_*`` gauges."""
        samples = self.hami.metrics()

        def by_uuid(metric: str) -> dict[str, int]:
            return {labels["device_uuid"]: int(value) for labels, value in samples.get(metric, [])}

        slots, mem = by_uuid("hami_dra_shared_count"), by_uuid("hami_dra_memory_held_bytes")
        cores = by_uuid("hami_dra_core_held_ratio")
        return {uuid: (slots[uuid], mem[uuid] // MIB, cores[uuid]) for uuid in slots}

    def problems(self) -> dict[str, int]:
        return {labels["kind"]: int(value) for labels, value in self.hami.metrics().get("hami_dra_problems", [])}

    def dra_usage(self) -> Usage:
        """What the allocated claims consume, per UUID, read from the API (consumedCapacity, bytes → MiB)."""
        by_device = {f"gpu-{i}": self.uuid(i) for i in range(2)}
        out: Usage = {}
        for name in self.claims:
            allocation = (self.get_claim(name).get("status") or {}).get("allocation") or {}
            for result in (allocation.get("devices") or {}).get("results") or []:
                uuid = by_device.get(result["device"])
                if uuid is None:
                    continue
                consumed = result.get("consumedCapacity") or {}
                slots, mem, cores = out.get(uuid, (0, 0, 0))
                mib = -(-int(parse_quantity(consumed["memory"], "memory")) // MIB)
                out[uuid] = (slots + 1, mem + mib, cores + int(parse_quantity(consumed["cores"], "cores")))
        return out

    def both_kinds(self) -> Usage:
        """Device-plugin pods (their allocation annotations) plus DRA claims (their consumedCapacity), per card."""
        total = dict(usage_from_annotations(self.kube.list_pods(self.namespace)))
        for uuid, (slots, mem, cores) in self.dra_usage().items():
            s, m, c = total.get(uuid, (0, 0, 0))
            total[uuid] = (s + slots, m + mem, c + cores)
        return total

    def top(self) -> dict[str, dict[str, Any]]:
        """``hami top -o json`` of the test's node, live (the admin kubeconfig): its cards by UUID."""
        command = [str(HAMI), "top", "--kubeconfig", str(self.hami.plane.kubeconfig), "--node", self.node, "-o", "json"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        (node,) = json.loads(result.stdout)["nodes"]
        return {card["uuid"]: card for card in node["cards"]}

    def claim_events(self, claim: str) -> list[tuple[str, str, str, str]]:
        items = self.kube.get(
            f"/api/v1/namespaces/{self.namespace}/events",
            fieldSelector=f"involvedObject.kind=ResourceClaim,involvedObject.name={claim}",
        )["items"]
        return [(e["type"], e["reason"], e["source"].get("component", ""), e["message"]) for e in items]

    def remove(self) -> None:
        """Deallocate and delete the claims (dropping the finalizer kube-scheduler put on them), then the slices and
        classes: cluster-scoped, they would otherwise outlive the test."""
        for name in self.claims:
            path = f"{DRA}/namespaces/{self.namespace}/resourceclaims/{name}"
            try:
                if (self.get_claim(name).get("status") or {}).get("allocation"):
                    self.deallocate(name)
                self.kube.patch(path, {"metadata": {"finalizers": None}})
                self.kube.delete(path)
            except ApiError as err:
                if err.status != 404:
                    raise
        for name in self.slices:
            self.kube.delete(f"{DRA}/resourceslices/{name}")
        for name in self.classes:
            self.kube.delete(f"{DRA}/deviceclasses/{name}")


@pytest.fixture
def dra_stack(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
) -> Iterator[DraStack]:
    """hami (as the chart's ServiceAccount, default device config: DRA on for gpu.nvidia.com), kube-scheduler
    calling it, the default kube-scheduler allocating claims, a fake device plugin, one node with two cards."""
    hami = HamiScheduler(control_plane, ["--node-lock-timeout=60s"])
    s = DraStack(kube, namespace, hami)
    s.node = f"{namespace}-dra"
    label = {"hami-e2e/run": namespace}
    annotations = {keys.NVIDIA_REGISTER: register_annotation(s.node, 2, CARD_MIB, SLOTS)}
    make_node(s.node, extended={GPU: 2 * SLOTS}, labels=label, annotations=annotations)
    plugin = FakeDevicePlugin(control_plane, f"hami-e2e/run={namespace}")
    try:
        hami.start()
        start_scheduler(extender_config(hami))
        start_scheduler(None)  # the default profile: DRA claims of plain pods
        plugin.start()
        yield s
    finally:
        plugin.stop()
        s.remove()
        hami.stop()
    assert plugin.error is None, f"the fake device plugin failed: {plugin.error!r}"
    assert hami.problems() == [], "hami logged errors"
    assert set(hami.exit_codes) == {0}, "hami did not shut down cleanly on SIGTERM"


def test_dra_claims_and_device_plugin_pods_share_cards_without_overcommit(dra_stack: DraStack) -> None:
    s = dra_stack
    capacity = {s.uuid(i): (SLOTS, CARD_MIB, 100) for i in range(2)}
    unknown = f"GPU-{s.node}-not-registered"
    s.publish(unknown)

    # 1. A DRA claim takes 20000 MiB and 40 cores of card 0, allocated by the default kube-scheduler.
    s.claim("dra-claim", s.uuid(0), memory="20000Mi", cores="40")
    s.claim_pod("dra-user", "dra-claim")
    s.kube.wait_for_pod_scheduled(s.namespace, "dra-user")
    (result,) = s.allocated("dra-claim")["status"]["allocation"]["devices"]["results"]
    assert (result["device"], result["consumedCapacity"]) == ("gpu-0", {"memory": "20000Mi", "cores": "40"})
    wait_until(lambda: s.held() == {s.uuid(0): (1, 20000, 40)}, description="hami counting the claim on card 0")

    # 2. Device-plugin pods through hami get only what the claim leaves on card 0, or card 1.
    s.gpu_pod("a", mem=10000, cores=50)  # card 0 has 4000 MiB left: card 1
    s.kube.wait_for_pod_scheduled(s.namespace, "a")
    assert s.card_of("a") == s.uuid(1)
    s.gpu_pod("b", mem=4000, cores=60)  # card 1 has 50 cores left: card 0, exactly what the claim left
    s.kube.wait_for_pod_scheduled(s.namespace, "b")
    assert s.card_of("b") == s.uuid(0)
    s.gpu_pod("c", mem=1000, cores=10)  # card 0 is full (memory and cores): card 1
    s.kube.wait_for_pod_scheduled(s.namespace, "c")
    assert s.card_of("c") == s.uuid(1)
    s.gpu_pod("d", mem=14000, cores=30)  # card 1 has 13000 MiB left, card 0 none: waits
    s.kube.wait_for_pod_unschedulable(s.namespace, "d")
    assert over_capacity(s.both_kinds(), capacity) == []
    assert s.both_kinds() == {s.uuid(0): (2, 24000, 100), s.uuid(1): (2, 11000, 60)}
    # `hami top` against the live cluster shows the same: card 0 full, the claim's part beside the pod's
    top = s.top()
    assert (top[s.uuid(0)]["memoryMiB"], top[s.uuid(0)]["cores"]["used"]) == ({"used": 24000, "total": 24000}, 100)
    assert top[s.uuid(0)]["dra"] == {"claims": 1, "slots": 1, "memoryMiB": 20000, "cores": 40}
    assert top[s.uuid(1)]["dra"] is None

    # 3. A claim on a device whose UUID no registration has: reported (metric, event on the claim), not counted.
    s.claim("unknown-claim", unknown, memory="1Gi", cores="10")
    s.claim_pod("unknown-user", "unknown-claim")
    s.allocated("unknown-claim")
    wait_until(lambda: s.problems().get("unknown-uuid") == 1, description="hami_dra_problems{kind=unknown-uuid} 1")
    wait_until(
        lambda: [e for e in s.claim_events("unknown-claim") if e[1] == "DRAUnknownUuid"],
        description="a DRAUnknownUuid event on the claim",
    )
    ((kind, reason, source, message),) = s.claim_events("unknown-claim")
    assert (kind, reason, source) == ("Warning", "DRAUnknownUuid", SCHEDULER_NAME)
    assert unknown in message
    assert s.held() == {s.uuid(0): (1, 20000, 40)}

    # 4. The claim's pod is deleted: the allocation is stale (reported) but still counted until it is removed.
    s.kube.delete_pod(s.namespace, "dra-user")
    wait_until(lambda: s.problems().get("stale-allocation") == 1, description="the stale allocation reported")
    assert s.held() == {s.uuid(0): (1, 20000, 40)}
    assert s.kube.get_pod(s.namespace, "d")["spec"].get("nodeName") is None

    # 5. Clearing the claim's allocation frees card 0: the waiting pod gets it.
    s.deallocate("dra-claim")
    wait_until(lambda: s.uuid(0) not in s.held(), description="hami releasing the claim's capacity")
    # kube-scheduler does not requeue a pod its extender rejected when a ResourceClaim changes: it retries it at
    # its periodic flush of unschedulable pods (about 2 minutes here) or at the next event about the pod or a
    # node. An update of the pod is such an event; the test makes one rather than wait.
    s.kube.patch(f"/api/v1/namespaces/{s.namespace}/pods/d", {"metadata": {"labels": {"retry": "1"}}})
    s.kube.wait_for_pod_scheduled(s.namespace, "d")
    assert s.card_of("d") == s.uuid(0)
    assert s.problems().get("stale-allocation") == 0
    assert over_capacity(s.both_kinds(), capacity) == []
    assert s.both_kinds() == {s.uuid(0): (2, 18000, 90), s.uuid(1): (2, 11000, 60)}
    log = s.hami.log()
    assert "DRA: watching resource.k8s.io/v1" in log
    assert "DRA unknown-uuid" in log
    assert "DRA stale-allocation" in log


def test_a_slice_another_node_publishes_in_a_nodes_pool_changes_nothing(
    dra_stack: DraStack, make_node: Callable[..., dict[str, Any]]
) -> None:
    """Issue 39: a compromised node B publishes a slice in node A's pool, with a higher generation and A's device
    names (its own card's UUID): NodeRestriction pins only the slice's nodeName. hami keeps charging A's claim to
    A's card (no device-plugin pod is placed on the card the claim holds whole), and reports B's slice."""
    s = dra_stack
    other = f"{s.namespace}-drb"
    labels = {"hami-e2e/run": s.namespace}
    annotations = {keys.NVIDIA_REGISTER: register_annotation(other, 2, CARD_MIB, SLOTS)}
    make_node(other, extended={GPU: 2 * SLOTS}, labels=labels, annotations=annotations)
    s.device_class_only()
    s.publish_whole(f"{s.node}-whole", s.node, s.node, 1, [s.uuid(0), s.uuid(1)])
    s.claim_whole("whole", s.uuid(0))
    s.claim_pod("whole-user", "whole")
    s.kube.wait_for_pod_scheduled(s.namespace, "whole-user")
    (result,) = s.allocated("whole")["status"]["allocation"]["devices"]["results"]
    assert (result["pool"], result["device"]) == (s.node, "gpu-0")
    held = {s.uuid(0): (SLOTS, CARD_MIB, 100)}
    wait_until(lambda: s.held() == held, description="hami counting the claim as card 0 whole")

    forged = f"{other}-in-{s.node}"
    s.publish_whole(forged, other, s.node, 7, [f"GPU-{other}-0", f"GPU-{other}-1"])
    wait_until(lambda: s.problems().get("inconsistent-pool") == 1, description="the foreign slice reported")
    assert s.held() == held  # still card 0 of node A, not node B's card of the forged slice
    s.gpu_pod("x", mem=CARD_MIB, cores=100)  # a whole card: only card 1 is free
    s.kube.wait_for_pod_scheduled(s.namespace, "x")
    assert s.card_of("x") == s.uuid(1)
    s.gpu_pod("y", mem=1000, cores=10)  # card 0 is the claim's, card 1 is x's: nothing left on node A
    s.kube.wait_for_pod_unschedulable(s.namespace, "y")
    assert s.held() == held
    command = [str(HAMI), "top", "--kubeconfig", str(s.hami.plane.kubeconfig), "-o", "json"]
    shown = json.loads(subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout)
    reported = [(p["kind"], p["object"], p["node"]) for p in shown["dra"]["problems"]]
    assert ("inconsistent-pool", f"ResourceSlice {forged}", other) in reported
    assert f"DRA inconsistent-pool: ResourceSlice {forged} on node {other}: " in s.hami.log()


def test_without_resource_k8s_io_hami_says_so_once_and_serves(tmp_path: Path) -> None:
    """A cluster that does not serve ``resource.k8s.io/v1`` (before 1.34, or switched off as here): hami logs it
    once, reports ``hami_dra_watching 0`` and becomes ready without the DRA watches."""
    plane = start_control_plane(tmp_path / "no-dra", apiserver_args=["--runtime-config=resource.k8s.io/v1=false"])
    hami = HamiScheduler(plane)
    try:
        with plane.client() as kube, pytest.raises(ApiError) as absent:
            kube.get(DRA)
        assert absent.value.status == 404
        hami.start()  # returns once /readyz says 200
        assert hami.metrics()["hami_dra_watching"] == [({}, 0.0)]
        said = [line for line in hami.log().splitlines() if "DRA: not served" in line]
        assert len(said) == 1
        assert "ResourceClaims are NOT counted" in said[0]
    finally:
        hami.stop()
        plane.stop()
    assert hami.problems() == []
    assert set(hami.exit_codes) == {0}
