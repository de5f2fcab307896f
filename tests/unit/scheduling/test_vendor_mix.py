"""Random mixes of every registered vendor family: no device ever goes over capacity (hypothesis, bounded).

The vendors are the registry's (``vendors_from_config`` with every family), so a vendor added to
``hami.devices.FAMILIES`` joins these examples without a change here: nodes get devices of random subsets of
the vendors (set directly, typed with the vendor key; a vendor that derives its devices from the node's capacity
decodes them itself from a capacity of random cards), and pods ask for random subsets of them
through each vendor's own resource names, in container limits — so each vendor's request parsing (units,
defaults, refusals) applies — and, for half the pods, after the admission webhook's own decision and patch
(``hami.simulate.admit``). Every pod is placed with ``decide`` and charged with ``reserve``; after each, every
device's slots, memory and cores are within its capacity and the ledger equals a full recount.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hami.config import default_device_config
from hami.devices import vendors_from_config
from hami.devices.base import NodeInventory
from hami.errors import InvalidInput
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Node, Pod
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.decide import decide, reserve
from hami.scheduling.memo import Verdicts
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from hami.simulate.admit import Admitted, admit_pod
from tests.unit.scheduling.test_properties import over_capacity

REGISTRY = vendors_from_config(default_device_config())
"""Every vendor of every family: new vendors join the examples automatically."""
NAMES = sorted(REGISTRY)
NOW = 1_700_000_000
MIX = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DEFAULTS = SchedulingDefaults()


def _plain(draw: st.DrawFn, node: int, v: int, vendor: str) -> NodeInventory:
    """Devices typed with the vendor key, as a registration annotation would list them."""
    return NodeInventory(
        tuple(
            DeviceInfo(
                id=f"node-{node}-v{v}-{i}",
                index=i,
                count=draw(st.integers(1, 6)),
                devmem=draw(st.sampled_from([4096, 16384, 32768, 65536])),
                devcore=draw(st.sampled_from([100, 100, 200])),
                type=vendor,
                numa=draw(st.integers(0, 1)),
                health=True,
            )
            for i in range(draw(st.integers(1, 4)))
        )
    )


def capacity_inventory(vendor: str, node: str, cards: int, slots: int, memory_units: int) -> NodeInventory | None:
    """A capacity-registered vendor's devices (``keys.register == ""``) decoded by the vendor itself from a node whose
    ``status.capacity`` holds its resources (``cards × slots`` of the count, ``cards × memory_units`` of memory, 100
    core units per card), with the ids the vendor synthesizes; None when the vendor makes nothing of it."""
    names = REGISTRY[vendor].resources
    capacity = {names.count: str(cards * slots)}
    if names.memory:
        capacity[names.memory] = str(cards * memory_units)
    if names.core:
        capacity[names.core] = str(cards * 100)
    raw = {"metadata": {"name": node}, "status": {"capacity": capacity, "allocatable": capacity}}
    try:
        inventory = REGISTRY[vendor].decode_inventory(msgspec.convert(raw, type=Node))
    except InvalidInput:
        return None
    return inventory if inventory is not None and inventory.devices else None


def _from_capacity(draw: st.DrawFn, node: int, vendor: str) -> NodeInventory | None:
    cards, slots = draw(st.integers(1, 4)), draw(st.sampled_from([1, 2, 10]))
    return capacity_inventory(vendor, f"node-{node}", cards, slots, draw(st.sampled_from([16, 64, 96, 256])))


@st.composite
def inventories(draw: st.DrawFn, node: int) -> dict[str, NodeInventory]:
    present = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=min(len(NAMES), 4), unique=True))
    out: dict[str, NodeInventory] = {}
    for v, vendor in enumerate(present):
        inventory = _from_capacity(draw, node, vendor) if REGISTRY[vendor].keys.register == "" else None
        out[vendor] = inventory if inventory is not None else _plain(draw, node, v, vendor)
    return out


@st.composite
def containers(draw: st.DrawFn) -> dict[str, Any]:
    limits: dict[str, str] = {}
    for vendor in draw(st.lists(st.sampled_from(NAMES), max_size=2, unique=True)):
        names = REGISTRY[vendor].resources
        limits[names.count] = str(draw(st.integers(1, 2)))
        if names.memory and draw(st.booleans()):
            limits[names.memory] = str(draw(st.sampled_from([1, 4, 16, 1000, 4000, 12000])))
        if names.core and draw(st.booleans()):
            limits[names.core] = str(draw(st.sampled_from([10, 30, 50, 100])))
    return {"name": "c", "resources": {"limits": limits}}


@st.composite
def pods(draw: st.DrawFn, k: int) -> tuple[dict[str, Any], bool]:
    """A raw pod asking for a random vendor mix, and whether it goes through admission first."""
    apps = [dict(draw(containers()), name=f"c{i}") for i in range(draw(st.integers(1, 3)))]
    init = [dict(draw(containers()), name="init")] if draw(st.integers(0, 3)) == 0 else []
    raw = {
        "metadata": {"name": f"p{k}", "namespace": "default", "uid": f"uid-{k}"},
        "spec": {"containers": apps, "initContainers": init},
    }
    return raw, draw(st.booleans())


ADMISSION = Admission(REGISTRY, admitters_for(REGISTRY), DEFAULTS, AdmissionSettings())


def admitted(raw: dict[str, Any], through_webhook: bool) -> Pod | None:
    """The pod as hami schedules it; None when the webhook denies it."""
    if not through_webhook:
        return msgspec.convert(raw, type=Pod)
    answer = admit_pod(ADMISSION, raw, "default")
    return answer.pod if isinstance(answer, Admitted) else None


@MIX
@given(
    st.integers(1, 4).flatmap(lambda n: st.tuples(*(inventories(k) for k in range(n)))),
    st.lists(st.integers(0, 10**6), min_size=1, max_size=10).flatmap(
        lambda ks: st.tuples(*(pods(k) for k in range(len(ks))))
    ),
)
def test_no_device_goes_over_capacity_whatever_the_vendor_mix(
    nodes: tuple[dict[str, NodeInventory], ...], pod_list: tuple[tuple[dict[str, Any], bool], ...]
) -> None:
    state = ClusterState(REGISTRY)
    for k, inventory in enumerate(nodes):
        state.set_node(f"node-{k}", inventory)
    memo = Verdicts()
    for raw, through_webhook in pod_list:
        pod = admitted(raw, through_webhook)
        if pod is None:
            continue
        try:
            req = prefilter(pod, REGISTRY, DEFAULTS)
        except InvalidInput:  # a vendor refuses this random value: the webhook would have denied the pod
            continue
        decision = decide(state, req, sorted(state.nodes), NOW, memo)
        if decision.node is not None:
            chosen = set(decision.devices)
            assert chosen <= set(req.vendors)  # devices only of the vendors the pod asks for
            assert chosen <= set(state.nodes[decision.node].tables)
        reserve(state, req, decision)
        event("placed" if decision.node is not None else "not placed")
        assert over_capacity(state) == []
        assert state.verify() == []


def test_the_mix_places_pods_of_the_vendors_with_plain_devices() -> None:
    """Not vacuous: one whole-device pod per vendor goes to a node holding devices of every vendor (capacity-derived
    ones decoded by the vendor); vendors needing node facts this generic node lacks (DRS profiles, Neuron core
    counts, vXPU or Moore Threads card sizes) may place nothing there, and only capacity is checked for them."""
    state = ClusterState(REGISTRY)
    plain = {
        name: NodeInventory((DeviceInfo(id=f"d-{i}", count=4, devmem=65536, devcore=100, type=name, health=True),))
        for i, name in enumerate(NAMES)
    }
    derived = {name: capacity_inventory(name, "all", 2, 4, 64) for name in NAMES if REGISTRY[name].keys.register == ""}
    state.set_node("all", {name: derived.get(name) or plain[name] for name in NAMES})
    placed = []
    for k, name in enumerate(NAMES):
        raw = {
            "metadata": {"name": f"p{k}", "namespace": "default", "uid": f"uid-{k}"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {REGISTRY[name].resources.count: "1"}}}]},
        }
        pod = admitted(raw, through_webhook=True)
        assert pod is not None
        req = prefilter(pod, REGISTRY, DEFAULTS)
        decision = decide(state, req, ["all"], NOW)
        reserve(state, req, decision)
        if decision.node == "all":
            placed += list(decision.devices)
    assert {"NVIDIA", "DCU", "MLU", "GCU", "kunlun"} <= set(placed)  # registered and capacity-derived devices
    assert over_capacity(state) == []
