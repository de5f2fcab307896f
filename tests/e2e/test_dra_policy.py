"""DRA mode's policy on the real control plane (issue 38): hami's node policy through the prioritize-only extender
entry, namespace quotas that count claims, and hami's self preemption staying out of kube-scheduler's way.

Fake nodes served by DRA alone (no hami registration) publish one shared GPU each in a ResourceSlice of hami's DRA
driver (``hami-core-gpu.project-hami.io``). Pods are written as the DRA-mode webhook leaves them — labelled
``hami.io/dra``, their HAMi request in ``hami.io/dra-requests``, a hand-written ResourceClaim by name — so this file
depends on no translation webhook. kube-scheduler allocates the claims itself (its DynamicResources plugin).

No kubelet and no kube-controller-manager run: nothing deallocates a claim, so the test clears ``status`` itself,
as kube-controller-manager's resource claim controller would once the claim's pods are gone. Waits poll with bounded
deadlines.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import yaml

from hami.protocol import keys
from tests.e2e import test_webhook
from tests.e2e.cluster import ApiError, ControlPlane, KubeClient, Scheduler, wait_until
from tests.e2e.hami_stack import SCHEDULER_NAME, HamiScheduler, extender_config
from tests.e2e.test_webhook import admitted
from tests.helm import template

pytestmark = pytest.mark.e2e

hami = test_webhook.hami
"""``hami scheduler`` over TLS with its webhook (test_webhook's fixture)."""
webhook = test_webhook.webhook
"""The chart's webhook entry calling it, for the test's namespace only (test_webhook's fixture)."""

DRA = "/apis/resource.k8s.io/v1"
DRIVER = "hami-core-gpu.project-hami.io"
CARD_MIB = 16384
CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


@dataclass
class DraObjects:
    """The DRA objects a test made (removed afterwards: slices and classes are cluster-scoped)."""

    kube: KubeClient
    namespace: str
    slices: list[str] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)
    priority_classes: list[str] = field(default_factory=list)

    @property
    def device_class(self) -> str:
        return f"{self.namespace}-gpu"

    def publish_class(self) -> None:
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": self.device_class}}
        spec = {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}
        self.kube.post(f"{DRA}/deviceclasses", {**body, "spec": spec})
        self.classes.append(self.device_class)

    def publish(self, node: str, *, shared: bool = True) -> None:
        """Node ``node``'s slice, as hami's DRA plugin writes it: one device ``hami-gpu-0`` of 16 GiB, shared by
        capacity (memory in bytes, cores in percent) or, with ``shared=False``, exclusive."""
        device: dict[str, Any] = {
            "name": "hami-gpu-0",
            "attributes": {"uuid": {"string": f"GPU-{node}-0"}, "productName": {"string": "NVIDIA-A100"}},
            "capacity": {
                "memory": {"value": f"{CARD_MIB}Mi", "requestPolicy": {"default": f"{CARD_MIB}Mi"}},
                "cores": {"value": "100", "requestPolicy": {"default": "100"}},
            },
        }
        if shared:
            device["allowMultipleAllocations"] = True
        else:  # a request policy is for shared devices only
            device["capacity"] = {"memory": {"value": f"{CARD_MIB}Mi"}, "cores": {"value": "100"}}
        name = f"{node}-{DRIVER}"
        spec = {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}}
        self.kube.post(f"{DRA}/resourceslices", {**body, "spec": {**spec, "devices": [device]}})
        self.slices.append(name)

    def claim(self, name: str, memory: str | None = None, cores: str | None = None) -> None:
        """A ResourceClaim for one card of the test's class: a share of ``memory`` and ``cores``, or (None) the
        whole device."""
        request: dict[str, Any] = {"deviceClassName": self.device_class, "allocationMode": "ExactCount", "count": 1}
        if memory is not None:
            request["capacity"] = {"requests": {"memory": memory, "cores": cores or "0"}}
        spec = {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}}
        self.kube.post(f"{DRA}/namespaces/{self.namespace}/resourceclaims", {**body, "spec": spec})
        self.claims.append(name)

    def get_claim(self, name: str) -> dict[str, Any]:
        claim: dict[str, Any] = self.kube.get(f"{DRA}/namespaces/{self.namespace}/resourceclaims/{name}")
        return claim

    def allocated(self, name: str) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            claim = self.get_claim(name)
            return claim if (claim.get("status") or {}).get("allocation") else None

        return wait_until(probe, description=f"ResourceClaim {name} allocated")

    def deallocate(self, name: str) -> None:
        """What kube-controller-manager's resource claim controller does once the claim's pods are gone."""
        claim = self.get_claim(name)
        claim["status"] = {}
        self.kube.put(f"{DRA}/namespaces/{self.namespace}/resourceclaims/{name}/status", claim)

    def priority_class(self, name: str, value: int) -> str:
        full = f"{self.namespace}-{name}"
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": full}}
        self.kube.post(CLASSES, {**body, "value": value})
        self.priority_classes.append(full)
        return full

    def remove(self) -> None:
        for name in self.claims:
            path = f"{DRA}/namespaces/{self.namespace}/resourceclaims/{name}"
            with contextlib.suppress(ApiError):
                if (self.get_claim(name).get("status") or {}).get("allocation"):
                    self.deallocate(name)
                self.kube.patch(path, {"metadata": {"finalizers": None}})
                self.kube.delete(path)
        for path, names in ((f"{DRA}/resourceslices", self.slices), (f"{DRA}/deviceclasses", self.classes)):
            for name in names:
                with contextlib.suppress(ApiError):
                    self.kube.delete(f"{path}/{name}")
        for name in self.priority_classes:
            with contextlib.suppress(ApiError):
                self.kube.delete(f"{CLASSES}/{name}")


@pytest.fixture
def dra(kube: KubeClient, namespace: str) -> Iterator[DraObjects]:
    objects = DraObjects(kube, namespace)
    objects.publish_class()
    try:
        yield objects
    finally:
        objects.remove()


def dra_requests(claim: str, mem: int, cores: int) -> str:
    """``hami.io/dra-requests`` as the DRA-mode webhook writes it: the container's original HAMi request."""
    resources = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem), "nvidia.com/gpucores": str(cores)}
    return json.dumps({claim: {"container": "main", "section": "containers", "resources": resources}})


def dra_pod(
    kube: KubeClient,
    namespace: str,
    name: str,
    claim: str,
    *,
    requests: str,
    spec: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> None:
    """A pod as the DRA-mode webhook leaves it: no vendor resource, its claim by name, hami's scheduler name."""
    container = {"name": "main", "image": "registry.invalid/hami-e2e:none", "resources": {"claims": [{"name": "gpu"}]}}
    kube.create_pod(
        namespace,
        name,
        containers=[container],
        scheduler_name=SCHEDULER_NAME,
        labels={keys.DRA_LABEL: "true"},
        annotations={keys.DRA_REQUESTS: requests, **(annotations or {})},
        spec={"resourceClaims": [{"name": "gpu", "resourceClaimName": claim}], **(spec or {})},
    )


@functools.cache
def chart_config() -> dict[str, Any]:
    """The KubeSchedulerConfiguration the chart renders with ``draMode.enabled`` (its kube-scheduler's)."""
    docs = template("hami-system", "1.37.2", "draMode.enabled=true")
    config_map = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "hami-scheduler")
    config: dict[str, Any] = yaml.safe_load(config_map["data"]["config.yaml"])
    return config


def chart_like(hami: HamiScheduler, prioritize: bool) -> dict[str, Any]:
    """kube-scheduler calling ``hami`` as the chart configures it in DRA mode: the extender entry of the e2e stack
    (plain HTTP to the test's hami) and the chart's own prioritize entry and client limits, pointed at it."""
    config = extender_config(hami)
    chart = chart_config()
    config["clientConnection"] = {**chart["clientConnection"], **config["clientConnection"]}
    if prioritize:
        (entry,) = [e for e in chart["extenders"] if e.get("prioritizeVerb")]
        entry = {k: v for k, v in entry.items() if k != "tlsConfig"} | {"urlPrefix": hami.url, "enableHTTPS": False}
        config["extenders"] = [*config["extenders"], entry]
    return config


# --- the node policy ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["binpack", "spread"])
def test_the_prioritize_entry_puts_a_dra_pod_where_hamis_node_policy_says(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    dra: DraObjects,
    make_node: Callable[..., dict[str, Any]],
    policy: str,
) -> None:
    """Node ``fuller`` has half its card held by a claim, ``emptier`` none. kube-scheduler's own scores prefer the
    node hami's policy does not (CPU requests placed against it: NodeResourcesFit, BalancedAllocation), so its
    choice is seen to be the extender's: with the prioritize entry the pod lands where the policy says; with the
    same kube-scheduler lacking only that entry, a second, identical pod lands on the other node."""
    label = {"hami-e2e/policy": namespace}
    fuller, emptier = f"{namespace}-fuller", f"{namespace}-emptier"
    for node in (fuller, emptier):
        make_node(node, cpu="4", labels=label)
        dra.publish(node)
    wanted, other = (fuller, emptier) if policy == "binpack" else (emptier, fuller)
    # kube-scheduler's own preference: away from the node hami's policy wants
    kube.create_pod(namespace, "cpu-load", requests={"cpu": "3"}, node_name=wanted)
    hami = HamiScheduler(control_plane, [f"--node-scheduler-policy={policy}"])
    scheduler: Scheduler | None = None
    try:
        hami.start()
        scheduler = control_plane.start_scheduler(chart_like(hami, prioritize=True))
        # half of fuller's card, held by a claim kube-scheduler allocates there (a pod hami's policy ignores)
        dra.claim("filler", memory="8192Mi", cores="50")
        filler = {"name": "main", "image": "registry.invalid/hami-e2e:none", "resources": {"claims": [{"name": "gpu"}]}}
        kube.create_pod(
            namespace,
            "filler",
            containers=[filler],
            scheduler_name=SCHEDULER_NAME,
            spec={
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "filler"}],
                "nodeSelector": {"kubernetes.io/hostname": fuller},
            },
        )
        dra.allocated("filler")

        requests = dra_requests("first", 2048, 10)
        probe = {"Pod": {"metadata": {"name": "probe", "namespace": namespace, "labels": {keys.DRA_LABEL: "true"},
                                      "annotations": {keys.DRA_REQUESTS: requests}}},
                 "NodeNames": [wanted, other]}  # fmt: skip

        def ordered() -> bool:
            answer = httpx.post(f"{hami.url}/prioritize", json=probe, timeout=5.0).json()
            return {h["Host"]: h["Score"] for h in answer} == {wanted: 10, other: 1}

        wait_until(ordered, description="hami ordering the nodes by the claim it counts")

        dra.claim("first", memory="2048Mi", cores="10")
        dra_pod(kube, namespace, "first", "first", requests=requests, spec={"nodeSelector": label})
        assert kube.wait_for_pod_scheduled(namespace, "first")["spec"]["nodeName"] == wanted

        # the control: the same kube-scheduler without the prioritize entry follows its own scores
        scheduler.stop()
        scheduler = control_plane.start_scheduler(chart_like(hami, prioritize=False))
        dra.claim("second", memory="2048Mi", cores="10")
        dra_pod(
            kube, namespace, "second", "second", requests=dra_requests("second", 2048, 10), spec={"nodeSelector": label}
        )
        assert kube.wait_for_pod_scheduled(namespace, "second")["spec"]["nodeName"] == other
        latency = hami.metrics().get("hami_request_duration_seconds_count", [])
        assert any(labels.get("endpoint") == "prioritize" and value > 0 for labels, value in latency)
    finally:
        if scheduler is not None:
            scheduler.stop()
        hami.stop()
    assert hami.problems() == [], "hami logged errors"


# --- quota ----------------------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("webhook")
def test_a_claim_counts_toward_its_namespaces_quota_at_admission(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    dra: DraObjects,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
) -> None:
    """A ResourceQuota of 10000 MiB; a claim allocated by kube-scheduler holds 8000 MiB in the namespace: a HAMi
    pod asking 3000 MiB is refused at admission with HAMi's quota message, one asking 2000 MiB is not; once the
    claim is deallocated, 3000 MiB is admitted again."""
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu"}}
    kube.post(
        f"/api/v1/namespaces/{namespace}/resourcequotas",
        {**quota, "spec": {"hard": {"limits.nvidia.com/gpumem": "10000"}}},
    )
    node = f"{namespace}-dra"
    make_node(node)
    dra.publish(node)
    start_scheduler(None)  # the default profile allocates the plain pod's claim
    wait_until(
        admitted(kube, namespace, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}),
        description="webhook live; 3000 MiB admitted",
    )

    dra.claim("held", memory="8000Mi", cores="20")
    container = {"name": "main", "image": "registry.invalid/hami-e2e:none", "resources": {"claims": [{"name": "gpu"}]}}
    claims = [{"name": "gpu", "resourceClaimName": "held"}]
    on_node = {"kubernetes.io/hostname": node}
    kube.create_pod(
        namespace, "holder", containers=[container], spec={"resourceClaims": claims, "nodeSelector": on_node}
    )
    dra.allocated("held")

    def refused(mem: int) -> str | None:
        name = f"ask-{mem}"
        try:
            kube.create_pod(namespace, name, limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem)},
                            spec={"nodeSelector": {"hami-e2e/none": "x"}})  # fmt: skip
        except ApiError as err:
            return str(err)
        kube.delete_pod(namespace, name)
        return None

    message = wait_until(lambda: refused(3000), description="a 3000 MiB pod refused while the claim holds 8000 MiB")
    assert "exceeding resource quota" in message
    assert f"namespace {namespace} has 8000 of nvidia.com/gpumem in use" in message
    assert refused(2000) is None  # exactly the limit: 8000 + 2000

    dra.deallocate("held")
    wait_until(lambda: refused(3000) is None, description="the claim's quota given back once deallocated")


# --- preemption -----------------------------------------------------------------------------------------------------


def hami_preempted_nothing(hami: HamiScheduler) -> None:
    metrics = hami.metrics()
    names = ("hami_preemption_attempts_total", "hami_preemption_victims_evicted_total", "hami_preemption_holds")
    counted = {name: sum(v for _, v in metrics.get(name, [])) for name in names}
    assert counted == dict.fromkeys(names, 0.0)


def test_hami_self_preemption_stays_out_of_dra_mode(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    dra: DraObjects,
    make_node: Callable[..., dict[str, Any]],
) -> None:
    """hami in ``--preemption=self`` under the chart's kube-scheduler configuration, DRA-mode pods of two priorities.

    1. *Short of CPU*: node ``cpu`` has room on its card but a low-priority DRA-mode pod takes most of its CPU.
       kube-scheduler preempts it for a high-priority DRA-mode pod (its DefaultPreemption); hami evicts nothing,
       holds nothing and marks nothing, and the high pod binds there once the victim is gone.
    2. *Short of a device*: node ``card`` has one exclusive card, which a low-priority DRA-mode pod's claim holds.
       kube-scheduler 1.37 does not preempt to free a device (its DynamicResources filter is no part of the
       preemption dry run; KEP-5690 proposes it), and hami does not either: the high pod waits, nothing is evicted.
       Once the claim is deallocated, the high pod gets the card.
    """
    card, cpu = f"{namespace}-card", f"{namespace}-cpu"
    make_node(card)
    dra.publish(card, shared=False)
    make_node(cpu, cpu="4")
    dra.publish(cpu)
    low, high = dra.priority_class("low", 10), dra.priority_class("high", 1000)
    hami = HamiScheduler(control_plane, ["--preemption=self"])
    scheduler: Scheduler | None = None

    def pod(name: str, node: str, priority: str, cpu_request: str | None = None, memory: str | None = None) -> None:
        dra.claim(name, memory=memory, cores="10" if memory else None)
        container: dict[str, Any] = {"name": "main", "image": "registry.invalid/hami-e2e:none"}
        container["resources"] = {
            "claims": [{"name": "gpu"}],
            **({"requests": {"cpu": cpu_request}} if cpu_request else {}),
        }
        kube.create_pod(
            namespace,
            name,
            containers=[container],
            scheduler_name=SCHEDULER_NAME,
            labels={keys.DRA_LABEL: "true"},
            annotations={keys.DRA_REQUESTS: dra_requests(name, 4096, 10)},
            spec={
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                "nodeSelector": {"kubernetes.io/hostname": node},
                "priorityClassName": priority,
                "terminationGracePeriodSeconds": 30,  # an evicted pod stays terminating: no kubelet ends it
            },
        )

    try:
        hami.start()
        scheduler = control_plane.start_scheduler(chart_like(hami, prioritize=True))

        # 1. short of CPU: kube-scheduler preempts
        pod("cpu-low", cpu, low, cpu_request="3", memory="4096Mi")
        kube.wait_for_pod_scheduled(namespace, "cpu-low")
        pod("cpu-high", cpu, high, cpu_request="2", memory="4096Mi")
        wait_until(
            lambda: kube.get_pod(namespace, "cpu-low")["metadata"].get("deletionTimestamp"),
            description="kube-scheduler preempting cpu-low",
        )
        wait_until(
            lambda: kube.get_pod(namespace, "cpu-high")["status"].get("nominatedNodeName") == cpu,
            description="cpu-high nominated to its node",
        )
        victim = kube.get_pod(namespace, "cpu-low")
        assert keys.PREEMPTED_FOR not in (victim["metadata"].get("annotations") or {})
        conditions = victim["status"].get("conditions") or []
        assert [c.get("reason") for c in conditions if c["type"] == "DisruptionTarget"] == ["PreemptionByScheduler"]
        kube.delete_pod(namespace, "cpu-low")  # the kubelet's part once its containers stopped
        assert kube.wait_for_pod_scheduled(namespace, "cpu-high")["spec"]["nodeName"] == cpu
        hami_preempted_nothing(hami)

        # 2. short of a device: nobody preempts
        pod("card-low", card, low)
        kube.wait_for_pod_scheduled(namespace, "card-low")
        dra.allocated("card-low")
        pod("card-high", card, high)
        waiting = kube.wait_for_pod_unschedulable(namespace, "card-high")
        (condition,) = [c for c in waiting["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert "cannot allocate all claims" in condition["message"]
        assert "Preemption is not helpful" in condition["message"]
        assert not kube.get_pod(namespace, "card-low")["metadata"].get("deletionTimestamp")
        assert not waiting["status"].get("nominatedNodeName")
        hami_preempted_nothing(hami)
        # the low pod's owner deletes it and kube-controller-manager deallocates its claim: the high pod gets the card
        kube.delete_pod(namespace, "card-low")
        dra.deallocate("card-low")
        assert kube.wait_for_pod_scheduled(namespace, "card-high")["spec"]["nodeName"] == card
        hami_preempted_nothing(hami)
    finally:
        if scheduler is not None:
            scheduler.stop()
        hami.stop()
    assert hami.problems() == [], "hami logged errors"
    assert "preemption: self" in hami.log()
