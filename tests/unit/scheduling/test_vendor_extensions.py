"""The vendor interface extensions the new families use, exercised by the made-up ``TOY`` vendor
(``tests/toyvendor.py``) through the unchanged core: inventory from ``status.capacity`` (re-decoded when it
changes, quarantined when malformed), admission edits (requests set, pod annotations, ``PodContext``), vendor
options and earlier containers' placements in Fit, node facts (``node_info``), extra annotations from the whole
decision (``AnnotationContext``), no handshake or to-allocate annotation, and a node lock of its own with its own
expiry (taken, released and contended through the real ``NodeLocker`` on the in-memory cluster).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import msgspec
import pytest

from hami.config import default_device_config
from hami.devices import vendors_from_config
from hami.devices.base import Selector, Vendor
from hami.protocol import keys
from hami.protocol.nodelock import NodeLock, decode_node_lock, encode_node_lock
from hami.protocol.objects import Container, Node, ObjectMeta, Pod, PodSpec, QuantityValue, ResourceRequirements
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.decide import decide
from hami.scheduling.outcomes import Bound
from hami.scheduling.records import record_from_pod
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from tests.toyvendor import (
    ALLOCATED,
    ASSIGNED,
    BONUS,
    COUNT,
    LOCK,
    MEMORY,
    MODE,
    TOY,
    TOY_KEYS,
    USERS,
    ToyVendor,
    toy_node_raw,
)
from tests.unit.jsonpatch import apply_patch
from tests.unit.server.support import NOW_DT, NS, World, gpu_node, make_world

NVIDIA_ONLY = vendors_from_config(default_device_config())


def all_vendors() -> dict[str, Vendor]:
    return {**NVIDIA_ONLY, TOY: ToyVendor()}


def toy_node(name: str, tpus: int | str, annotations: Mapping[str, str] | None = None) -> Node:
    return msgspec.convert(toy_node_raw(name, tpus, annotations), Node)


def toy_pod(*names: str, mem: int = 1000, annotations: Mapping[str, str] | None = None, uid: str = "u-1") -> Pod:
    containers = [
        Container(name=n, resources=ResourceRequirements(limits={COUNT: "1", MEMORY: str(mem)})) for n in names
    ]
    meta = ObjectMeta(name="p", namespace=NS, uid=uid, annotations=dict(annotations or {}))
    return Pod(metadata=meta, spec=PodSpec(containers=containers))


# --- inventory (item 5) ----------------------------------------------------------------------------------------


def test_devices_come_from_the_capacity_and_are_decoded_again_when_it_changes() -> None:
    state = ClusterState(all_vendors())
    state.upsert_node(toy_node("t1", 2))
    assert [i.id for i in state.nodes["t1"].tables[TOY].infos] == ["t1-toy-0", "t1-toy-1"]
    state.upsert_node(toy_node("t1", 3))
    assert [i.id for i in state.nodes["t1"].tables[TOY].infos] == ["t1-toy-0", "t1-toy-1", "t1-toy-2"]
    state.upsert_node(Node(metadata=ObjectMeta(name="t1")))  # the device plugin went away
    assert TOY not in state.nodes["t1"].tables


def test_a_malformed_capacity_quarantines_the_vendor_on_that_node_only() -> None:
    state = ClusterState(all_vendors())
    broken = toy_node("t1", "lots")
    broken.metadata.annotations.update(gpu_node("t1").metadata.annotations)
    state.upsert_node(broken)
    node = state.nodes["t1"]
    assert TOY not in node.tables
    assert "status.capacity[toy.example/tpu]" in node.problems[TOY]
    assert "lots" in node.problems[TOY]
    assert "NVIDIA" in node.tables  # the other vendor of the node keeps working


def test_node_info_is_decoded_with_the_inventory_and_a_bad_value_refused() -> None:
    state = ClusterState(all_vendors())
    state.upsert_node(toy_node("t1", 1, {BONUS: "7"}))
    state.upsert_node(toy_node("t2", 1, {BONUS: "-3"}))
    assert state.nodes["t1"].node_info == {TOY: {"bonus": "7"}}
    assert "must not be negative" in state.nodes["t2"].problems[TOY]


# --- fit: node_info, options, chosen (item 3) --------------------------------------------------------------------


def test_node_info_reaches_fit_and_its_score_picks_the_node() -> None:
    state = ClusterState(all_vendors())
    state.upsert_node(toy_node("a", 2))
    state.upsert_node(toy_node("b", 2, {BONUS: "7"}))
    request = prefilter(toy_pod("main"), state.vendors, SchedulingDefaults())
    decision = decide(state, request, ["a", "b"], 100)
    assert decision.node == "b"  # by name, "a" would win the tie
    assert decision.scores["b"] == decision.scores["a"] + 7


@pytest.mark.parametrize(("mode", "same"), [("same-card", True), (None, False)])
def test_a_vendor_option_and_the_earlier_containers_placements_keep_a_pod_on_one_card(
    mode: str | None, same: bool
) -> None:
    state = ClusterState(all_vendors())
    state.upsert_node(toy_node("a", 2))
    annotations = {MODE: mode} if mode else {}
    request = prefilter(toy_pod("first", "second", annotations=annotations), state.vendors, SchedulingDefaults())
    assert request.selectors[TOY].option("mode", "none") == (mode or "none")
    decision = decide(state, request, ["a"], 100)
    first, second = decision.devices[TOY]
    # The default GPU policy (spread) would put the second container on the other, emptier card.
    assert (first[0].uuid == second[0].uuid) is same


def test_selector_option_lookup() -> None:
    selector = Selector(options=(("mode", "same-card"), ("qos", "")))
    assert (selector.option("mode"), selector.option("qos", "x"), selector.option("absent", "d")) == (
        "same-card",
        "",
        "d",
    )
    assert Selector().option("mode") == ""


# --- extra annotations from the whole decision; no to-allocate (items 1, 5) ------------------------------------


def test_extra_annotations_see_the_whole_decision_and_only_allocated_is_written() -> None:
    state = ClusterState(all_vendors())
    state.upsert_node(toy_node("a", 2))
    pod = toy_pod("first", "second")
    request = prefilter(pod, state.vendors, SchedulingDefaults())
    decision = decide(state, request, ["a"], 5, now_ns=5_123_456_789)
    assert decision.annotations == {
        keys.VGPU_NODE: "a",
        keys.VGPU_TIME: "5",
        ALLOCATED: "a-toy-0,TOY,1000,0:;a-toy-1,TOY,1000,0:;",
        ASSIGNED: "a@5123456789:first=a-toy-0;second=a-toy-1",
    }
    # Without nanoseconds, the decision time in whole seconds is used.
    again = decide(state, request, ["a"], 6)
    assert again.annotations[ASSIGNED].startswith("a@6000000000:")
    placed = toy_pod("first", "second", annotations=decision.annotations)
    placed.spec.scheduler_name = "hami-scheduler"  # the webhook's; records believe hami's scheduler's pods
    record = record_from_pod(placed, state.vendors)
    assert record is not None
    assert record.problem is None
    assert record.devices[TOY] == decision.devices[TOY]


# --- admission edits (item 2) ------------------------------------------------------------------------------------


def admission() -> Admission:
    vendors = all_vendors()
    return Admission(vendors, admitters_for(vendors), SchedulingDefaults(), AdmissionSettings())


def raw_pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": NS}
    if annotations is not None:
        meta["annotations"] = annotations
    return {
        "metadata": meta,
        "spec": {
            "initContainers": [{"name": "warm", "resources": {"limits": {COUNT: "1"}}}],
            "containers": [
                {"name": "main", "resources": {"limits": {COUNT: "2"}, "requests": {COUNT: "1"}}},
                {"name": "log", "resources": {}},
            ],
        },
    }


def test_admission_sets_requests_and_pod_annotations_seen_by_later_containers() -> None:
    raw = raw_pod()
    verdict = admission().review(raw, NS)
    assert verdict.allowed, verdict.message
    assert verdict.patch == (
        {"op": "add", "path": "/spec/initContainers/0/resources/requests", "value": {COUNT: "1"}},
        {"op": "replace", "path": "/spec/containers/0/resources/requests/toy.example~1tpu", "value": "2"},
        {"op": "add", "path": "/metadata/annotations", "value": {USERS: "warm,main"}},
        {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"},
    )
    patched = apply_patch(raw, list(verdict.patch))
    assert patched["spec"]["containers"][0]["resources"]["requests"] == {COUNT: "2"}
    assert patched["metadata"]["annotations"] == {USERS: "warm,main"}


@pytest.mark.parametrize(
    ("annotations", "op"),
    [
        ({"team": "a"}, {"op": "add", "path": "/metadata/annotations/toy.example~1users", "value": "warm,main"}),
        ({USERS: "x"}, {"op": "replace", "path": "/metadata/annotations/toy.example~1users", "value": "x,warm,main"}),
    ],
)
def test_pod_annotations_are_added_or_replaced(annotations: dict[str, str], op: dict[str, str]) -> None:
    verdict = admission().review(raw_pod(annotations), NS)
    assert verdict.allowed, verdict.message
    assert op in verdict.patch
    assert sum(o["path"].startswith("/metadata") for o in verdict.patch) == 1


def test_a_vendor_refusal_denies_the_pod_with_its_message() -> None:
    verdict = admission().review(raw_pod({MODE: "forbidden"}), NS)
    assert not verdict.allowed
    assert verdict.message == "metadata.annotations[toy.example/mode]: TOY devices refuse this mode (got 'forbidden')"


# --- the vendor's own node lock (item 4) --------------------------------------------------------------------------


def mixed_node(name: str, annotations: Mapping[str, str] | None = None) -> Node:
    node = gpu_node(name, annotations=annotations)
    node.status.capacity[COUNT] = "2"
    return node


def mixed_pod(name: str, *, gpu: bool) -> Pod:
    limits: dict[str, QuantityValue] = {COUNT: "1", MEMORY: "1000"}
    if gpu:
        limits.update({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"})
    meta = ObjectMeta(name=name, namespace=NS, uid=f"uid-{name}")
    return Pod(
        metadata=meta, spec=PodSpec(containers=[Container(name="main", resources=ResourceRequirements(limits=limits))])
    )


async def placed(world: World, name: str, *, gpu: bool, node: str = "n1") -> None:
    await world.filter(world.add_pod(mixed_pod(name, gpu=gpu)), [node])
    world.deliver(NS, name)
    assert world.pod(name).metadata.annotations[keys.VGPU_NODE] == node


@pytest.fixture
def toy_world() -> World:
    return make_world(vendors=all_vendors())


def locks(world: World, node: str = "n1") -> dict[str, str]:
    annotations = world.cluster.nodes[node].metadata.annotations
    return {key: decode_node_lock(annotations[key], key).name for key in (keys.NODE_LOCK, LOCK) if key in annotations}


async def test_a_bind_takes_the_vendors_own_lock_and_not_hamis(toy_world: World) -> None:
    toy_world.add_node(mixed_node("n1"))
    await placed(toy_world, "p1", gpu=False)
    outcome = await toy_world.extender.cycle.bind(NS, "p1", "uid-p1", "n1")
    assert outcome.result is Bound.BOUND, outcome.message
    assert locks(toy_world) == {LOCK: "p1"}


async def test_a_pod_of_two_vendors_takes_both_locks_in_sorted_order(toy_world: World) -> None:
    toy_world.add_node(mixed_node("n1"))
    await placed(toy_world, "p1", gpu=True)
    taken: list[tuple[str, timedelta | None]] = []
    acquire = toy_world.locker.acquire

    async def recorded(*args: Any, **kwargs: Any) -> NodeLock:
        taken.append((kwargs["key"], kwargs["timeout"]))
        return await acquire(*args, **kwargs)

    toy_world.locker.acquire = recorded  # type: ignore[method-assign]
    outcome = await toy_world.extender.cycle.bind(NS, "p1", "uid-p1", "n1")
    assert outcome.result is Bound.BOUND, outcome.message
    assert locks(toy_world) == {keys.NODE_LOCK: "p1", LOCK: "p1"}
    assert taken == [(keys.NODE_LOCK, None), (LOCK, timedelta(seconds=120))]


async def test_a_contended_second_lock_fails_the_bind_and_releases_the_first(toy_world: World) -> None:
    toy_world.add_node(mixed_node("n1"))
    await placed(toy_world, "holder", gpu=False)  # a live pod that holds the TOY lock
    assert (await toy_world.extender.cycle.bind(NS, "holder", "uid-holder", "n1")).result is Bound.BOUND
    await placed(toy_world, "p2", gpu=True)
    outcome = await toy_world.extender.cycle.bind(NS, "p2", "uid-p2", "n1")
    assert outcome.result is Bound.FAILED
    assert f"is locked ({LOCK}) by {NS}/holder" in outcome.message
    assert "expires after 120s" in outcome.message
    assert locks(toy_world) == {LOCK: "holder"}  # hami.io/mutex.lock, taken first, was given back
    assert keys.VGPU_NODE not in toy_world.pod("p2").metadata.annotations


@pytest.mark.parametrize(("age_s", "taken_over"), [(121, True), (119, False)])
async def test_the_vendors_lock_expires_after_its_own_expiry(toy_world: World, age_s: int, taken_over: bool) -> None:
    old = encode_node_lock(NodeLock(NOW_DT - timedelta(seconds=age_s), NS, "holder"))
    toy_world.add_pod(mixed_pod("holder", gpu=False))  # alive: only the expiry can free its lock
    toy_world.add_node(mixed_node("n1", {LOCK: old, keys.NODE_LOCK: old}))
    await placed(toy_world, "p1", gpu=False)
    outcome = await toy_world.extender.cycle.bind(NS, "p1", "uid-p1", "n1")
    assert (outcome.result is Bound.BOUND) is taken_over, outcome.message
    assert locks(toy_world)[LOCK] == ("p1" if taken_over else "holder")
    assert locks(toy_world)[keys.NODE_LOCK] == "holder"  # not this pod's vendors' lock: untouched


async def test_no_lock_is_taken_when_no_vendor_of_the_pod_has_one() -> None:
    class Lockless(ToyVendor):
        keys = keys.VendorKeys(TOY, "", None, None, ALLOCATED, extra=TOY_KEYS.extra, lock=None)

    world = make_world(vendors={**NVIDIA_ONLY, TOY: Lockless()})
    world.add_node(mixed_node("n1"))
    await placed(world, "p1", gpu=False)
    outcome = await world.extender.cycle.bind(NS, "p1", "uid-p1", "n1")
    assert outcome.result is Bound.BOUND, outcome.message
    assert locks(world) == {}
    assert world.pod("p1").spec.node_name == "n1"
