"""Cluster state and its incremental ledger: one mutation path, idempotent, always equal to a recount."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import pytest

from hami.devices.base import NodeInventory
from hami.errors import LedgerError
from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice, MigAllocation
from hami.protocol.inventory import DeviceInfo, MigPlacement
from hami.protocol.objects import Node
from hami.protocol.reasons import Reason
from hami.scheduling.decide import decide
from hami.scheduling.state import ClusterState, NodeState, PodRecord, parse_cordon
from hami.scheduling.usage import Kind, effective_charges
from tests.unit.scheduling.builders import (
    NVIDIA,
    T4,
    gpu,
    gpus,
    mig_gpu,
    pod_request,
    req,
    state,
    table,
    usage,
)

P = MigPlacement


def record(
    uid: str = "uid-1",
    node: str = "node-1",
    *containers: Sequence[tuple[str, int, int]],
    kinds: Sequence[Kind] | None = None,
    mig: Sequence[MigAllocation] = (),
    namespace: str = "default",
) -> PodRecord:
    """A pod record from per-container (uuid, MiB, cores) devices (default: one container, GPU-0 1000/10)."""
    conts = containers or ([("GPU-0", 1000, 10)],)
    devices = {NVIDIA: tuple(tuple(ContainerDevice(u, NVIDIA, m, c) for u, m, c in cont) for cont in conts)}
    kinds = kinds or (Kind.APP,) * len(conts)
    return PodRecord(
        uid=uid,
        namespace=namespace,
        name=uid.replace("uid", "pod"),
        node=node,
        devices=devices,
        charges=effective_charges(devices, kinds),
        slices=tuple((NVIDIA, m.gpu_uuid, m.placement) for m in mig),
    )


def dev_usage(s: ClusterState, node: str = "node-1", vendor: str = NVIDIA) -> list[tuple[int, int, int]]:
    t = s.nodes[node].tables[vendor]
    return [(t.used[i], t.usedmem[i], t.usedcores[i]) for i in range(len(t))]


# --- nodes ---------------------------------------------------------------------------------------------------


def test_set_node_builds_tables_and_bumps_generation() -> None:
    s = state({"node-1": gpus(2)})
    node = s.nodes["node-1"]
    assert (list(node.tables), len(node.tables[NVIDIA]), node.generation) == ([NVIDIA], 2, 1)
    s.set_node("node-1", {NVIDIA: NodeInventory(gpus(3))})
    assert (len(s.nodes["node-1"].tables[NVIDIA]), s.nodes["node-1"].generation) == (3, 2)


def test_upsert_node_reads_inventory_labels_and_cordon() -> None:
    value = '[{"id":"GPU-a","count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4","health":true}]'
    node = msgspec.convert(
        {
            "metadata": {
                "name": "node-1",
                "labels": {"zone": "a"},
                "annotations": {keys.NVIDIA_REGISTER: value, keys.DEVICE_CORDON: " GPU-a, ,GPU-b "},
            },
            "spec": {"unschedulable": True},
        },
        Node,
    )
    s = ClusterState(state().vendors)
    got = s.upsert_node(node)
    assert got is s.nodes["node-1"]
    assert (got.labels, got.unschedulable, got.cordoned, got.problems) == (
        {"zone": "a"},
        True,
        frozenset({"GPU-a", "GPU-b"}),
        {},
    )
    assert got.tables[NVIDIA].infos == (gpu("GPU-a", devmem=15360, type=T4, mode=""),)


@pytest.mark.parametrize(
    ("value", "uuids"),
    [
        pytest.param(None, set(), id="absent"),
        pytest.param("", set(), id="empty"),
        pytest.param(" , ", set(), id="blank-items"),
        pytest.param("GPU-a, GPU-b,", {"GPU-a", "GPU-b"}, id="trimmed"),
    ],
)
def test_parse_cordon(value: str | None, uuids: set[str]) -> None:
    assert parse_cordon(value) == frozenset(uuids)


# --- node score (spec §5.2) ------------------------------------------------------------------------------


def _scored(*devices: tuple[DeviceInfo, tuple[int, int, int]]) -> NodeState:
    t = table(*(d for d, _ in devices), usage={i: u for i, (_, u) in enumerate(devices)})
    return NodeState("n", tables={NVIDIA: t})


@pytest.mark.parametrize(
    ("node", "score"),
    [
        pytest.param(_scored((gpu("a", count=10, devmem=8000), (5, 4000, 50))), 15.0, id="one-device-half-used-15"),
        pytest.param(
            _scored((gpu("a", count=10, devmem=8000), (0, 0, 0)), (gpu("b", count=10, devmem=8000), (5, 4000, 50))),
            7.5,
            id="two-devices-one-half-used-7.5",
        ),
        pytest.param(
            _scored(
                (gpu("a", count=100, devmem=100, devcore=100), (50, 100, 100)),
                (gpu("b", count=150, devmem=200, devcore=200), (75, 200, 200)),
            ),
            25.0,
            id="sums-over-devices-25",
        ),
        pytest.param(_scored((gpu("a"), (0, 0, 0))), 0.0, id="idle-node-0"),
        pytest.param(_scored((gpu("a", devmem=0), (1, 0, 0))), 0.0, id="zero-total-0"),
        pytest.param(NodeState("n"), 0.0, id="no-devices-0"),
    ],
)
def test_node_score(node: NodeState, score: float) -> None:
    assert node.score() == score


def test_node_score_sums_every_vendor() -> None:
    s = state({"node-1": [gpu("GPU-0", count=10, devmem=8000)]}, dcu={"node-1": [gpu("DCU-0", count=10, devmem=8000)]})
    s.nodes["node-1"].tables["DCU"].charge(0, 10, 8000, 100)
    assert s.nodes["node-1"].score() == 15.0


# --- apply: one mutation path, idempotent -----------------------------------------------------------------


def test_apply_is_idempotent() -> None:
    s = state({"node-1": gpus(1)})
    r = record()
    assert s.apply(r, add=True) is True
    assert s.apply(r, add=True) is False
    assert dev_usage(s) == [(1, 1000, 10)]
    assert s.apply(r, add=False) is True
    assert s.apply(r, add=False) is False
    assert dev_usage(s) == [(0, 0, 0)]
    assert (s.pods, s.pods_by_node, s.verify()) == ({}, {}, [])


def test_second_add_with_another_allocation_changes_nothing() -> None:
    s = state({"node-1": gpus(2)})
    s.apply(record(), add=True)
    assert s.apply(record("uid-1", "node-1", [("GPU-1", 500, 5)]), add=True) is False
    assert dev_usage(s) == [(1, 1000, 10), (0, 0, 0)]


def test_remove_pod_uses_the_stored_record() -> None:
    s = state({"node-1": gpus(1)})
    r = record()
    s.apply(r, add=True)
    assert s.remove_pod("uid-1") == r
    assert s.remove_pod("uid-1") is None
    assert dev_usage(s) == [(0, 0, 0)]


def test_apply_charges_collapsed_usage_and_quota() -> None:
    s = state({"node-1": gpus(2)})
    r = record(
        "uid-1",
        "node-1",
        [("GPU-0", 3000, 30)],
        [("GPU-0", 1000, 10), ("GPU-1", 1000, 10)],
        kinds=(Kind.INIT, Kind.APP),
        namespace="team-a",
    )
    s.apply(r, add=True)
    assert dev_usage(s) == [(1, 3000, 30), (1, 1000, 10)]
    assert s.quotas.used == {"team-a": {"nvidia.com/gpumem": 4000, "nvidia.com/gpucores": 40}}
    s.apply(r, add=False)
    assert s.quotas.used == {}


# --- orphans, dangling charges, node updates ----------------------------------------------------------


def test_orphan_counts_once_its_node_appears() -> None:
    s = state({"node-1": gpus(1)})
    r = record("uid-1", "node-2")
    assert s.apply(r, add=True) is True
    assert (s.orphans(), s.dangling) == ([r], {})
    s.set_node("node-2", {NVIDIA: NodeInventory(gpus(1))})
    assert (s.orphans(), dev_usage(s, "node-2"), s.verify()) == ([], [(1, 1000, 10)], [])


def test_removed_node_keeps_its_pods_and_recounts_them_when_back() -> None:
    s = state({"node-1": gpus(1)})
    r = record()
    s.apply(r, add=True)
    s.remove_node("node-1")
    assert s.orphans() == [r]
    s.set_node("node-1", {NVIDIA: NodeInventory(gpus(1))})
    assert (s.orphans(), dev_usage(s), s.verify()) == ([], [(1, 1000, 10)], [])


def test_unknown_device_is_kept_and_reported_as_dangling() -> None:
    s = state({"node-1": gpus(1)})
    r = record("uid-1", "node-1", [("GPU-0", 1000, 10), ("GPU-9", 2000, 20)])
    s.apply(r, add=True)
    assert s.dangling == {"uid-1": {(NVIDIA, "GPU-9")}}
    assert dev_usage(s) == [(1, 1000, 10)]
    # The device appears: the charge is counted and no longer dangling.
    s.set_node("node-1", {NVIDIA: NodeInventory((*gpus(1), gpu("GPU-9", index=1)))})
    assert (s.dangling, dev_usage(s), s.verify()) == ({}, [(1, 1000, 10), (1, 2000, 20)], [])
    # It disappears again: dangling again.
    s.set_node("node-1", {NVIDIA: NodeInventory(gpus(1))})
    assert (s.dangling, dev_usage(s), s.verify()) == ({"uid-1": {(NVIDIA, "GPU-9")}}, [(1, 1000, 10)], [])
    s.apply(r, add=False)
    assert (s.dangling, dev_usage(s)) == ({}, [(0, 0, 0)])


def test_node_update_recharges_its_pods() -> None:
    s = state({"node-1": gpus(2), "node-2": gpus(1)})
    s.apply(record("uid-1", "node-1", [("GPU-1", 1000, 10)]), add=True)
    s.apply(record("uid-2", "node-1", [("GPU-1", 500, 5)]), add=True)
    s.apply(record("uid-3", "node-2", [("GPU-0", 700, 7)]), add=True)
    before = usage(s)
    s.set_node("node-1", {NVIDIA: NodeInventory(gpus(2))})
    assert usage(s) == before
    assert dev_usage(s) == [(0, 0, 0), (2, 1500, 15)]
    assert s.verify() == []


def test_vendor_tables_are_separate() -> None:
    s = state({"node-1": gpus(1)}, dcu={"node-1": [gpu("DCU-0")]})
    devices = {"DCU": ((ContainerDevice("DCU-0", "DCU", 4000, 100),),)}
    s.apply(
        PodRecord("uid-1", "default", "pod-1", "node-1", devices, effective_charges(devices, (Kind.APP,))), add=True
    )
    assert (dev_usage(s), dev_usage(s, vendor="DCU")) == ([(0, 0, 0)], [(1, 4000, 100)])
    assert s.quotas.used == {"default": {"hygon.com/dcumem": 4000, "hygon.com/dcucores": 100}}


# --- verify ------------------------------------------------------------------------------------------------


def test_verify_catches_a_corrupted_table() -> None:
    s = state({"node-1": gpus(2)})
    s.apply(record(), add=True)
    s.nodes["node-1"].tables[NVIDIA].usedmem[0] += 1
    diff = "node-1/NVIDIA/GPU-0: ledger (1, 1001, 10, ()) != recount (1, 1000, 10, ())"
    assert s.verify() == [diff]
    with pytest.raises(LedgerError, match=r"node-1/NVIDIA/GPU-0: ledger \(1, 1001"):
        s.check()


def test_verify_catches_corrupted_mig_placements() -> None:
    s = state({"node-1": [mig_gpu("GPU-M")]})
    alloc = MigAllocation(0, 0, "GPU-M", "1g.5gb", P(6, 1))
    s.apply(record("uid-1", "node-1", [("GPU-M", 4864, 14)], mig=[alloc]), add=True)
    assert s.verify() == []
    s.nodes["node-1"].tables[NVIDIA].slices[0] = (P(5, 1),)
    assert len(s.verify()) == 1


def test_verify_catches_corrupted_quota_usage() -> None:
    s = state({"node-1": gpus(1)})
    s.apply(record(), add=True)
    s.quotas.used["default"]["nvidia.com/gpumem"] += 5
    assert s.verify() == [
        "quota usage: ledger {'default': {'nvidia.com/gpumem': 1005, 'nvidia.com/gpucores': 10}} "
        "!= recount {'default': {'nvidia.com/gpumem': 1000, 'nvidia.com/gpucores': 10}}"
    ]


def test_verify_catches_a_pod_missing_from_the_node_index() -> None:
    s = state({"node-1": gpus(1)})
    s.apply(record(), add=True)
    s.pods_by_node["node-1"].discard("uid-1")
    assert "pod default/pod-1 missing from its node index" in s.verify()


# --- MIG consistency (spec §6.8, fail-closed) ------------------------------------------------------------


def test_mig_task_on_a_hami_core_gpu_marks_it_broken_until_the_pod_leaves() -> None:
    s = state({"node-1": gpus(2)})
    alloc = MigAllocation(0, 0, "GPU-0", "1g.5gb", P(6, 1))
    culprit = record("uid-1", "node-1", [("GPU-0", 4864, 14)], mig=[alloc])
    bystander = record("uid-2", "node-1", [("GPU-0", 100, 1)])
    s.apply(culprit, add=True)
    s.apply(bystander, add=True)
    t = s.nodes["node-1"].tables[NVIDIA]
    assert t.broken == ["MIG task of default/pod-1 on a GPU in hami-core mode", None]
    # The broken GPU is refused as unhealthy.
    verdict = decide(s, pod_request(req(memreq=10), uid="uid-9", gpu_policy="binpack"), ["node-1"], 0)
    assert verdict.devices[NVIDIA] == ((ContainerDevice("GPU-1", NVIDIA, 10, 0),),)
    # Another pod leaving does not clear it; the culprit leaving does.
    s.apply(bystander, add=False)
    assert t.broken == ["MIG task of default/pod-1 on a GPU in hami-core mode", None]
    s.apply(culprit, add=False)
    assert (s.nodes["node-1"].tables[NVIDIA].broken, s.verify()) == ([None, None], [])


def test_pod_on_a_mig_gpu_without_its_placement_marks_it_broken() -> None:
    s = state({"node-1": [mig_gpu("GPU-M"), mig_gpu("GPU-N", index=1)]})
    # The pod's reservation names GPU-N, but it also holds GPU-M without any placement there.
    alloc = MigAllocation(0, 0, "GPU-N", "1g.5gb", P(6, 1))
    r = record("uid-1", "node-1", [("GPU-M", 4864, 14), ("GPU-N", 4864, 14)], mig=[alloc])
    s.apply(r, add=True)
    t = s.nodes["node-1"].tables[NVIDIA]
    assert t.broken == ["MIG task of default/pod-1 has no placement on this GPU", None]
    assert t.slices == [(), (P(6, 1),)]
    # A node update recomputes the flags from the records.
    s.set_node("node-1", {NVIDIA: NodeInventory((mig_gpu("GPU-M"), mig_gpu("GPU-N", index=1)))})
    assert s.nodes["node-1"].tables[NVIDIA].broken == ["MIG task of default/pod-1 has no placement on this GPU", None]
    s.apply(r, add=False)
    assert (s.nodes["node-1"].tables[NVIDIA].broken, s.verify()) == ([None, None], [])


def test_pod_on_a_mig_gpu_without_any_mig_annotation_marks_it_broken() -> None:
    # Spec §6.8 fail-closed: the pod holds GPU-M but says nothing about which instance; any instance may be the
    # one in use, so none may be handed out until the pod leaves.
    s = state({"node-1": [mig_gpu("GPU-M"), gpus(2)[1]]})
    r = record("uid-1", "node-1", [("GPU-M", 4864, 14)])
    s.apply(r, add=True)
    t = s.nodes["node-1"].tables[NVIDIA]
    assert t.broken == ["MIG task of default/pod-1 has no placement on this GPU", None]
    verdict = decide(s, pod_request(req(memreq=3000), uid="uid-9", gpu_policy="binpack"), ["node-1"], 0)
    assert verdict.devices[NVIDIA] == ((ContainerDevice("GPU-1", NVIDIA, 3000, 0),),)
    only_mig = pod_request(req(memreq=3000), uid="uid-9", annotations={keys.NVIDIA_USE_GPUUUID: "GPU-M"})
    refused = decide(s, only_mig, ["node-1"], 0).rejected["node-1"]
    assert refused.counts == {Reason.CARD_NOT_HEALTH: 1, Reason.CARD_UUID_MISMATCH: 1}
    s.apply(r, add=False)
    assert (s.nodes["node-1"].tables[NVIDIA].broken, s.verify()) == ([None, None], [])
