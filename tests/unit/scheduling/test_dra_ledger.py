"""The DRA ledger: captured slices and claims charged to hami's cards, problems, warnings, order independence."""

from __future__ import annotations

import pytest

from hami.config.dra import DraConfig, DraDriverConfig
from hami.devices.base import NodeInventory
from hami.scheduling.dra import DraLedger, DraRecord, ProblemKind, WarningKind, held_by_card
from hami.scheduling.state import ClusterState, PodRecord
from hami.scheduling.usage import Charge
from tests.unit.scheduling.builders import NVIDIA, gpu, resource_quota, vendors
from tests.unit.scheduling.drafix import (
    A100_MIB,
    DRIVER,
    SMALL_MIB,
    UUID,
    cards,
    claim,
    device_class,
    exclusive_device,
    ledger,
    raw,
    registered,
    result,
    shared_device,
    slice_,
    synthetic_claim,
    synthetic_slice,
)

GPU0, GPU1, GPU2 = UUID[("dra-node-1", "gpu-0")], UUID[("dra-node-1", "gpu-1")], UUID[("dra-node-1", "gpu-2")]
SMALL0, SMALL1 = UUID[("dra-node-2", "gpu-0")], UUID[("dra-node-2", "gpu-1")]


def usage(state: ClusterState, node: str, uuid: str) -> tuple[int, int, int]:
    table = state.nodes[node].tables[NVIDIA]
    used, mem, cores, _ = table.usage_of(table.index_of[uuid])
    return used, mem, cores


def loaded(*claims: str) -> DraLedger:
    book = ledger()
    book.slice_event(slice_("resourceslice"))
    book.slice_event(slice_("resourceslice-memory-only"))
    for name in claims:
        assert book.claim_event(claim(name)) == []
    return book


# --- what a captured claim is charged ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sample", "node", "charges"),
    [
        pytest.param(
            "claim-shared-memory", "dra-node-1", [Charge(NVIDIA, GPU0, 1, 10240, 100)], id="memory-only-takes-cores"
        ),
        pytest.param(
            "claim-shared-memory-cores", "dra-node-1", [Charge(NVIDIA, GPU1, 1, 20480, 30)], id="memory-and-cores"
        ),
        pytest.param(
            "claim-exclusive", "dra-node-1", [Charge(NVIDIA, GPU2, 10, A100_MIB, 100)], id="exclusive-whole-card"
        ),
        pytest.param(
            "claim-default-capacity", "dra-node-2", [Charge(NVIDIA, SMALL0, 1, 1024, 0)], id="policy-default-memory"
        ),
        pytest.param(
            "claim-two-devices",
            "dra-node-2",
            [Charge(NVIDIA, SMALL0, 1, 3072, 0), Charge(NVIDIA, SMALL1, 1, 3072, 0)],
            id="two-devices",
        ),
    ],
)
def test_captured_claims_are_charged_in_hami_units(sample: str, node: str, charges: list[Charge]) -> None:
    book = loaded(sample)
    (record,) = book.records()
    assert isinstance(record, DraRecord)
    assert (record.node, list(record.charges)) == (node, charges)
    for ch in charges:
        assert usage(book.state, node, ch.uuid) == (ch.slots, ch.mem, ch.cores)
    assert book.problems() == ()
    assert book.state.verify() == []


def test_a_claim_shared_by_two_pods_is_counted_once() -> None:
    book = loaded("claim-shared-memory")
    assert len(claim("claim-shared-memory").status.reserved_for) == 2
    assert usage(book.state, "dra-node-1", GPU0) == (1, 10240, 100)
    assert len(book.state.held) == 1


def test_claims_count_toward_their_namespace_quota_once_and_give_it_back() -> None:
    """Issue 38: a claim counts what it holds (memory MiB, cores percent) in its namespace, once however many pods
    share it (this one is reserved for two), without becoming a pod; deallocated or deleted, it gives it back."""
    state = registered()
    state.upsert_quota(resource_quota("dra-samples", "q", {"limits.nvidia.com/gpumem": 20000}))
    book = ledger(state)
    book.slice_event(slice_())
    shared = claim("claim-shared-memory")
    assert len(shared.status.reserved_for) == 2
    book.claim_event(shared)
    book.claim_event(shared)  # the same claim again (an update): still once
    assert state.quotas.used["dra-samples"] == {"nvidia.com/gpumem": 10240, "nvidia.com/gpucores": 100}
    assert state.quotas.fits("dra-samples", {"nvidia.com/gpumem": 9760}, {})
    assert not state.quotas.fits("dra-samples", {"nvidia.com/gpumem": 9761}, {})
    assert state.pods == {}
    assert state.verify() == []
    deallocated = claim("claim-shared-memory")
    deallocated.status.allocation = None
    book.claim_event(deallocated)
    assert "dra-samples" not in state.quotas.used
    book.claim_event(shared)
    book.claim_event(shared, deleted=True)
    assert "dra-samples" not in state.quotas.used
    assert state.verify() == []


def test_claims_on_nodes_without_a_registration_count_toward_quota() -> None:
    """A node served by DRA alone: nothing is charged to a card, but the namespace's quota still counts the claim
    (an exclusive device: its whole published memory and 100 cores)."""
    state = ClusterState(vendors())
    book = ledger(state)
    book.slice_event(synthetic_slice("s", "bare", [exclusive_device("gpu-0", "GPU-X", "8Gi")]))
    book.claim_event(synthetic_claim("c", [result("gpu-0", "bare")], namespace="team"))
    assert state.held == {}
    assert state.quotas.used["team"] == {"nvidia.com/gpumem": 8192, "nvidia.com/gpucores": 100}
    assert state.verify() == []


def test_a_claim_on_a_device_not_yet_published_counts_once_its_slice_arrives() -> None:
    state = ClusterState(vendors())
    book = ledger(state)
    book.claim_event(synthetic_claim("c", [result("gpu-0", "bare", "s1", memory="3Gi")], namespace="team"))
    assert "team" not in state.quotas.used
    book.slice_event(synthetic_slice("s", "bare", [shared_device("gpu-0", "GPU-X", "8Gi")]))
    assert state.quotas.used["team"] == {"nvidia.com/gpumem": 3072}


def test_held_by_card_sums_the_claims_on_each_card() -> None:
    book = loaded("claim-shared-memory", "claim-shared-memory-cores", "claim-exclusive")
    held = held_by_card(book.state)
    assert held[("dra-node-1", NVIDIA, GPU0)].mem == 10240
    assert held[("dra-node-1", NVIDIA, GPU1)].cores == 30
    assert held[("dra-node-1", NVIDIA, GPU2)].slots == 10
    assert {h.claims for h in held.values()} == {1}


# --- order and change ---------------------------------------------------------------------------------------------


def test_a_slice_arriving_after_its_claim_charges_it_then() -> None:
    book = ledger()
    (problem,) = book.claim_event(claim("claim-shared-memory"))
    assert problem.kind is ProblemKind.UNKNOWN_DEVICE
    assert "not counted until it is" in problem.message
    assert book.state.held == {}
    assert book.slice_event(slice_()) == []
    assert usage(book.state, "dra-node-1", GPU0) == (1, 10240, 100)
    assert book.problems() == ()


def test_a_claim_whose_allocation_is_cleared_or_deleted_frees_the_card() -> None:
    book = loaded("claim-shared-memory")
    book.claim_event(claim("claim-shared-memory-cleared"))
    assert usage(book.state, "dra-node-1", GPU0) == (0, 0, 0)
    book.claim_event(claim("claim-shared-memory"))
    book.claim_event(claim("claim-shared-memory"), deleted=True)
    assert usage(book.state, "dra-node-1", GPU0) == (0, 0, 0)
    assert book.state.held == {}
    assert book.state.verify() == []


def test_a_terminating_claim_counts_until_its_allocation_is_removed() -> None:
    """Deleting a claim without kube-controller-manager leaves it Terminating (finalizer) and still allocated; the
    captured one had its status cleared first, so it holds nothing."""
    book = loaded("claim-shared-memory")
    terminating = claim("claim-shared-memory")
    terminating.metadata.deletion_timestamp = "2026-11-24T01:52:44Z"
    book.claim_event(terminating)
    assert usage(book.state, "dra-node-1", GPU0) == (1, 10240, 100)
    captured = claim("claim-shared-memory-deleted-terminating")
    assert captured.metadata.deletion_timestamp is not None
    assert captured.status.allocation is None
    book.claim_event(captured)
    assert usage(book.state, "dra-node-1", GPU0) == (0, 0, 0)


def test_a_deleted_slice_keeps_its_held_devices_counted_where_they_were() -> None:
    book = loaded("claim-shared-memory")
    (problem,) = book.slice_event(slice_(), deleted=True)
    assert (problem.kind, problem.node) == (ProblemKind.UNKNOWN_DEVICE, "dra-node-1")
    assert "still counted on dra-node-1" in problem.message
    assert usage(book.state, "dra-node-1", GPU0) == (1, 10240, 100)
    assert book.slice_event(slice_()) == []
    assert book.problems() == ()
    book.claim_event(claim("claim-shared-memory"), deleted=True)
    assert book.state.held == {}


def test_a_device_no_longer_published_stays_counted_when_its_claim_is_derived_again() -> None:
    book = loaded("claim-shared-memory")
    book.slice_event(slice_(), deleted=True)
    book.node_event("dra-node-1")  # the registration changed: the claim is derived again
    book.claim_event(claim("claim-shared-memory"))  # and its claim changed
    assert usage(book.state, "dra-node-1", GPU0) == (1, 10240, 100)


def test_only_the_highest_pool_generation_counts() -> None:
    book = ledger()
    old = synthetic_slice("s-old", "dra-node-2", [shared_device("gpu-0", SMALL1)], pool="p", generation=1)
    new = synthetic_slice("s-new", "dra-node-2", [shared_device("gpu-0", SMALL0)], pool="p", generation=2)
    book.slice_event(old)
    book.claim_event(synthetic_claim("c", [result("gpu-0", "p", "s1", memory="2Gi")]))
    assert usage(book.state, "dra-node-2", SMALL1)[1] == 2048
    book.slice_event(new)  # the driver republished the pool: gpu-0 is now the other card
    assert usage(book.state, "dra-node-2", SMALL1) == (0, 0, 0)
    assert usage(book.state, "dra-node-2", SMALL0)[1] == 2048
    assert book.state.verify() == []


def test_an_unknown_uuid_is_reported_and_counted_once_the_node_registers_it() -> None:
    state = ClusterState(vendors())
    state.set_node("dra-node-1", {NVIDIA: NodeInventory((gpu("GPU-other", devmem=A100_MIB),))})
    book = ledger(state)
    book.slice_event(slice_())
    (problem,) = book.claim_event(claim("claim-exclusive"))
    assert (problem.kind, problem.object, problem.node) == (
        ProblemKind.UNKNOWN_UUID,
        "ResourceClaim dra-samples/claim-exclusive",
        "dra-node-1",
    )
    assert f"UUID {GPU2}" in problem.message
    assert "not counted" in problem.message
    assert state.held == {}
    state.set_node("dra-node-1", {NVIDIA: NodeInventory(cards("dra-node-1", A100_MIB))})
    assert book.node_event("dra-node-1") == []
    assert usage(state, "dra-node-1", GPU2) == (10, A100_MIB, 100)
    assert book.problems() == ()


def test_a_node_without_a_registration_of_the_vendor_is_not_hamis_to_count() -> None:
    """A node moved wholly to DRA: hami places no pod there, so its claims are neither counted nor reported."""
    state = ClusterState(vendors())
    book = ledger(state)
    book.slice_event(slice_())
    assert book.claim_event(claim("claim-exclusive")) == []
    assert state.held == {}
    assert book.problems() == ()
    state.set_node("dra-node-1", {NVIDIA: NodeInventory(cards("dra-node-1", A100_MIB))})  # hami's plugin comes
    assert book.node_event("dra-node-1") == []
    assert usage(state, "dra-node-1", GPU2) == (10, A100_MIB, 100)


# --- stale allocations --------------------------------------------------------------------------------------------


def test_an_allocation_whose_pods_are_all_deleted_is_stale_and_still_counted() -> None:
    book = loaded("claim-shared-memory")
    pods = claim("claim-shared-memory").status.reserved_for
    assert book.pod_event("dra-samples", pods[0].name, pods[0].uid) == []
    assert book.pod_event("dra-samples", pods[0].name, pods[0].uid, deleted=True) == []  # the other pod lives on
    (problem,) = book.pod_event("dra-samples", pods[1].name, pods[1].uid, deleted=True)
    assert problem.kind is ProblemKind.STALE_ALLOCATION
    assert "still counted until its allocation is removed" in problem.message
    assert usage(book.state, "dra-node-1", GPU0) == (1, 10240, 100)
    book.claim_event(claim("claim-shared-memory-cleared"))
    assert book.problems() == ()


def test_pods_seen_before_their_claim_are_found_through_the_lookup() -> None:
    book = ledger()
    uid = "82802f02-8ce5-454e-964a-e251feb7f0d5"
    asked: list[tuple[str, str]] = []

    def lookup(ns: str, name: str) -> str | None:
        asked.append((ns, name))
        return uid if name == "pod-shared-memory" else None

    book.pod_lookup = lookup
    book.slice_event(slice_())
    assert book.claim_event(claim("claim-shared-memory")) == []  # one of its two pods lives
    assert book.recheck() == []
    assert sorted(asked) == [("dra-samples", "pod-shared-memory"), ("dra-samples", "pod-shared-memory-b")]  # once
    (problem,) = book.pod_event("dra-samples", "pod-shared-memory", uid, deleted=True)  # the watch says the rest
    assert problem.kind is ProblemKind.STALE_ALLOCATION


def test_unseen_pods_count_as_live_until_the_pod_watch_has_synced() -> None:
    book = ledger()
    book.pod_lookup = lambda ns, name: None
    book.settled = lambda: False
    book.slice_event(slice_())
    assert book.claim_event(claim("claim-exclusive")) == []
    book.settled = lambda: True
    assert [p.kind for p in book.recheck()] == [ProblemKind.STALE_ALLOCATION]


def test_order_problems_wait_until_the_first_lists_are_in() -> None:
    """At start-up a claim may be listed before its slice and its node: no problem is raised for that race; what
    is still missing once every watch has listed is raised by ``recheck``."""
    book = ledger(ClusterState(vendors()))
    book.settled = lambda: False
    assert book.claim_event(claim("claim-exclusive")) == []  # its slice, its node and its pod: not listed yet
    assert book.claim_event(claim("claim-shared-memory")) == []
    assert book.slice_event(slice_()) == []
    book.state.set_node("dra-node-1", {NVIDIA: NodeInventory(cards("dra-node-1", A100_MIB)[:2])})  # no GPU2
    assert book.node_event("dra-node-1") == []
    assert book.problems() == ()
    assert usage(book.state, "dra-node-1", GPU0) == (1, 10240, 100)  # counted at once
    assert book.recheck() == []  # not settled yet
    book.settled = lambda: True
    (problem,) = book.recheck()
    assert (problem.kind, problem.object) == (ProblemKind.UNKNOWN_UUID, "ResourceClaim dra-samples/claim-exclusive")
    assert book.recheck() == []
    assert book.problems() == (problem,)


def test_an_allocation_reserved_for_nobody_is_stale() -> None:
    book = ledger()
    book.slice_event(slice_())
    (problem,) = book.claim_event(synthetic_claim("c", [result("gpu-2", "dra-node-1")], pods=[]))
    assert (problem.kind, problem.node) == (ProblemKind.STALE_ALLOCATION, "dra-node-1")
    assert usage(book.state, "dra-node-1", GPU2) == (10, A100_MIB, 100)


# --- units and malformed input ------------------------------------------------------------------------------------


def test_consumed_bytes_are_rounded_up_to_whole_mib() -> None:
    book = ledger()
    book.slice_event(synthetic_slice("s", "dra-node-2", [shared_device("gpu-0", SMALL0)]))
    book.claim_event(synthetic_claim("c", [result("gpu-0", "dra-node-2", "s1", memory="1500000")]))
    assert usage(book.state, "dra-node-2", SMALL0) == (1, 2, 0)


def test_memory_in_mib_is_read_as_configured() -> None:
    book = ledger(memory_unit="MiB")
    book.slice_event(synthetic_slice("s", "dra-node-2", [shared_device("gpu-0", SMALL0, memory=SMALL_MIB)]))
    book.claim_event(synthetic_claim("c", [result("gpu-0", "dra-node-2", "s1", memory=4096)]))
    assert usage(book.state, "dra-node-2", SMALL0) == (1, 4096, 0)
    assert book.problems() == ()


def test_a_unit_mismatch_is_reported_and_charged_by_share() -> None:
    book = ledger()  # bytes, but this driver publishes MiB counts
    book.slice_event(synthetic_slice("s", "dra-node-2", [shared_device("gpu-0", SMALL0, memory=SMALL_MIB)]))
    (problem,) = book.claim_event(synthetic_claim("c", [result("gpu-0", "dra-node-2", "s1", memory=4096)]))
    assert problem.kind is ProblemKind.UNIT_MISMATCH
    assert "memoryUnit" in problem.message
    assert "16384 MiB" in problem.message
    assert usage(book.state, "dra-node-2", SMALL0) == (1, 4096, 0)  # a quarter of the device = a quarter of the card


def test_cores_in_percent_must_be_100_per_card_else_share() -> None:
    book = ledger()
    dev = shared_device("gpu-0", SMALL0, cores=132, cores_default=1)  # SMs, not percent
    book.slice_event(synthetic_slice("s", "dra-node-2", [dev]))
    (problem,) = book.claim_event(synthetic_claim("c", [result("gpu-0", "dra-node-2", "s1", cores=66)]))
    assert (problem.kind, "coresUnit" in problem.message) == (ProblemKind.UNIT_MISMATCH, True)
    assert usage(book.state, "dra-node-2", SMALL0) == (1, 1024, 50)
    shares = ledger(cores_unit="share")
    shares.slice_event(synthetic_slice("s", "dra-node-2", [dev]))
    assert shares.claim_event(synthetic_claim("c", [result("gpu-0", "dra-node-2", "s1", cores=66)])) == []
    assert usage(shares.state, "dra-node-2", SMALL0)[2] == 50


def test_a_malformed_device_is_left_out_and_named() -> None:
    book = ledger()
    bad = shared_device("gpu-0", SMALL0, memory="lots")
    (problem,) = book.slice_event(synthetic_slice("s", "dra-node-2", [bad, shared_device("gpu-1", SMALL1)]))
    assert (problem.kind, problem.object) == (ProblemKind.MALFORMED, "ResourceSlice s")
    assert "spec.devices[0].capacity[memory].value" in problem.message
    assert "'lots'" in problem.message
    (unknown,) = book.claim_event(synthetic_claim("c", [result("gpu-0", "dra-node-2", "s1")]))
    assert unknown.kind is ProblemKind.UNKNOWN_DEVICE


def test_a_malformed_consumed_amount_is_charged_as_the_whole_card() -> None:
    book = ledger()
    book.slice_event(synthetic_slice("s", "dra-node-2", [shared_device("gpu-0", SMALL0)]))
    (problem,) = book.claim_event(synthetic_claim("c", [result("gpu-0", "dra-node-2", "s1", memory="-3Gi")]))
    assert problem.kind is ProblemKind.MALFORMED
    assert "consumedCapacity[memory]" in problem.message
    assert "whole card" in problem.message
    assert usage(book.state, "dra-node-2", SMALL0) == (1, SMALL_MIB, 100)


@pytest.mark.parametrize("memory", ["17Gi", "9999999999Ti", "1e400"])
def test_a_consumed_amount_beyond_the_device_is_charged_as_the_whole_card(memory: str) -> None:
    book = ledger()
    book.slice_event(synthetic_slice("s", "dra-node-2", [shared_device("gpu-0", SMALL0, memory="16Gi")]))
    (problem,) = book.claim_event(synthetic_claim("c", [result("gpu-0", "dra-node-2", "s1", memory=memory)]))
    assert problem.kind is ProblemKind.MALFORMED
    assert "consumedCapacity[memory]: is more than the device's whole memory capacity" in problem.message
    assert repr(memory) in problem.message
    assert usage(book.state, "dra-node-2", SMALL0) == (1, SMALL_MIB, 100)
    assert book.state.verify() == []


def test_a_shared_device_without_memory_capacity_is_charged_the_whole_memory() -> None:
    book = ledger()
    dev = shared_device("gpu-0", SMALL0)
    dev["capacity"] = {}
    book.slice_event(synthetic_slice("s", "dra-node-2", [dev]))
    (problem,) = book.claim_event(synthetic_claim("c", [result("gpu-0", "dra-node-2", "s1")]))
    assert problem.kind is ProblemKind.MALFORMED
    assert "publishes no 'memory' capacity" in problem.message
    assert usage(book.state, "dra-node-2", SMALL0) == (1, SMALL_MIB, 0)


def test_a_device_without_uuid_is_reported() -> None:
    book = ledger()
    dev = shared_device("gpu-0", SMALL0)
    dev["attributes"] = {}
    book.slice_event(synthetic_slice("s", "dra-node-2", [dev]))
    (problem,) = book.claim_event(synthetic_claim("c", [result("gpu-0", "dra-node-2", "s1")]))
    assert problem.kind is ProblemKind.UNKNOWN_UUID
    assert "has no 'uuid' attribute" in problem.message


def test_qualified_attribute_and_capacity_names_mean_the_same() -> None:
    book = ledger()
    dev = shared_device("gpu-0", SMALL0)
    dev["attributes"] = {"gpu.nvidia.com/uuid": {"string": SMALL0}}
    dev["capacity"] = {"gpu.nvidia.com/memory": dev["capacity"]["memory"]}
    book.slice_event(synthetic_slice("s", "dra-node-2", [dev]))
    book.claim_event(synthetic_claim("c", [result("gpu-0", "dra-node-2", "s1", **{"gpu.nvidia.com/memory": "2Gi"})]))
    assert usage(book.state, "dra-node-2", SMALL0) == (1, 2048, 0)


def test_several_shares_of_one_card_in_one_claim_take_a_slot_each() -> None:
    book = ledger()
    book.slice_event(synthetic_slice("s", "dra-node-2", [shared_device("gpu-0", SMALL0)]))
    shares = [result("gpu-0", "dra-node-2", "a", memory="1Gi"), result("gpu-0", "dra-node-2", "b", memory="2Gi")]
    book.claim_event(synthetic_claim("c", shares))
    assert usage(book.state, "dra-node-2", SMALL0) == (2, 3072, 0)


def test_other_drivers_and_admin_access_are_not_counted() -> None:
    book = ledger()
    book.slice_event(synthetic_slice("nic", "dra-node-2", [shared_device("eth0", "x")], driver="nic.example.com"))
    admin = result("gpu-0", "dra-node-2", "s1", memory="2Gi")
    admin["adminAccess"] = True
    book.slice_event(synthetic_slice("s", "dra-node-2", [shared_device("gpu-0", SMALL0)]))
    book.claim_event(synthetic_claim("c", [result("eth0", "dra-node-2", driver="nic.example.com"), admin]))
    assert book.state.held == {}
    assert book.problems() == ()


def test_a_disabled_section_counts_nothing() -> None:
    book = DraLedger(registered(), DraConfig(enabled=False))
    book.slice_event(slice_())
    assert book.claim_event(claim("claim-exclusive")) == []
    assert book.state.held == {}


# --- warnings -------------------------------------------------------------------------------------------------------


def test_devices_whose_cores_default_to_the_whole_card_are_warned_about() -> None:
    book = ledger()
    book.slice_event(slice_("resourceslice"))
    book.slice_event(slice_("resourceslice-memory-only"))
    (warning,) = book.warnings()
    assert (warning.kind, warning.object) == (WarningKind.CORES_WHOLE_CARD, "ResourceSlice dra-node-1-gpu.nvidia.com")
    assert "2 shared device(s)" in warning.message
    assert "takes all of the card's cores" in warning.message
    book.slice_event(slice_("resourceslice"), deleted=True)
    assert book.warnings() == ()


def test_a_device_class_serving_a_hami_resource_is_warned_about() -> None:
    book = ledger()
    assert book.class_event(device_class("deviceclass-extended-resource")) == []  # example.com/gpu: not hami's
    assert book.warnings() == ()
    trap = device_class("deviceclass-extended-resource")
    trap.spec.extended_resource_name = "nvidia.com/gpu"
    book.class_event(trap)
    (warning,) = book.warnings()
    assert warning.kind is WarningKind.EXTENDED_RESOURCE
    assert "every node whose allocatable lacks it" in warning.message
    book.class_event(trap, deleted=True)
    assert book.warnings() == ()


def test_a_driver_mapped_to_an_unknown_vendor_is_warned_about() -> None:
    book = DraLedger(registered(), DraConfig(drivers=(DraDriverConfig(driver="x.example.com", vendor="NVDIA"),)))
    (warning,) = book.warnings()
    assert (warning.kind, warning.object) == (WarningKind.UNKNOWN_VENDOR, "dra.drivers[0]")
    assert "'NVDIA'" in warning.message


def test_exclusive_device_and_raw_fixture_agree() -> None:
    """The captured exclusive device publishes no allowMultipleAllocations and its result no shareID."""
    device = raw("resourceslice")["spec"]["devices"][2]
    assert "allowMultipleAllocations" not in device
    assert "shareID" not in raw("claim-exclusive")["status"]["allocation"]["devices"]["results"][0]
    book = ledger()
    book.slice_event(synthetic_slice("s", "dra-node-2", [exclusive_device("gpu-1", SMALL1)]))
    book.claim_event(synthetic_claim("c", [result("gpu-1", "dra-node-2", "ignored-share", memory="1Gi")]))
    assert usage(book.state, "dra-node-2", SMALL1) == (10, SMALL_MIB, 100)  # a shareID on an exclusive device


def test_held_records_survive_node_refreshes_and_recount_right() -> None:
    book = loaded("claim-shared-memory", "claim-exclusive")
    state = book.state
    (record, _) = sorted(state.held.values(), key=lambda r: r.uid)
    assert state.apply(record, add=True) is False  # idempotent, as for pods
    state.set_node("dra-node-1", {NVIDIA: NodeInventory(cards("dra-node-1", A100_MIB))})
    assert usage(state, "dra-node-1", GPU2) == (10, A100_MIB, 100)
    state.remove_node("dra-node-1")
    state.set_node("dra-node-1", {NVIDIA: NodeInventory(cards("dra-node-1", A100_MIB))})
    assert usage(state, "dra-node-1", GPU0) == (1, 10240, 100)
    assert state.verify() == []
    assert state.orphans() == []


def test_a_claim_allocated_over_hamis_pods_is_reported_while_it_overlaps() -> None:
    """kube-scheduler sees no device-plugin pod: it may allocate a whole card hami's pod uses."""
    book = ledger()
    state = book.state
    pod = PodRecord("uid-p", "ml", "p", "dra-node-1", {}, (Charge(NVIDIA, GPU2, 1, 8000, 30),))
    state.apply(pod, add=True)
    book.slice_event(slice_())
    (problem,) = book.claim_event(claim("claim-exclusive"))
    assert (problem.kind, problem.node) == (ProblemKind.OVER_CAPACITY, "dra-node-1")
    assert f"card {GPU2} on dra-node-1 is over capacity (slots 11/10, MiB 89920/81920, cores 130/100)" in (
        problem.message
    )
    assert "DRA claims hold 10 slots, 81920 MiB, 100 cores, hami's pods 1 slots, 8000 MiB, 30 cores" in (
        problem.message
    )
    assert usage(state, "dra-node-1", GPU2) == (11, 89920, 130)  # both counted: that is what the card holds
    assert book.recheck() == []
    state.apply(pod, add=False)
    assert book.recheck() == []
    assert book.problems() == ()


def test_claims_alone_beyond_hamis_slot_count_are_no_conflict() -> None:
    book = ledger(registered(count=1))
    book.slice_event(slice_())
    assert book.claim_event(claim("claim-shared-memory")) == []
    second = synthetic_claim("c2", [result("gpu-0", "dra-node-1", "s2", memory="1Gi", cores="0")])
    assert book.claim_event(second) == []  # 2 shares on a card hami splits once: DRA's business, no pod involved
    assert usage(book.state, "dra-node-1", GPU0) == (2, 11264, 100)


def test_memory_sizes_are_the_distinct_card_sizes_a_driver_publishes_in_mib() -> None:
    book = ledger()
    assert book.memory_sizes(DRIVER) == ()
    book.slice_event(slice_("resourceslice"))
    book.slice_event(slice_("resourceslice-memory-only"))
    assert book.memory_sizes(DRIVER) == (SMALL_MIB, A100_MIB)
    assert book.memory_sizes("other.example.com") == ()
    book.slice_event(slice_("resourceslice-memory-only"), deleted=True)
    assert book.memory_sizes(DRIVER) == (A100_MIB,)


def test_memory_sizes_are_read_once_until_a_slice_changes() -> None:
    """Every DRA-mode admission asks for the sizes: reading every published device each time is O(the cluster)."""
    book = ledger()
    book.slice_event(slice_("resourceslice"))
    first = book.memory_sizes(DRIVER)
    assert book.memory_sizes(DRIVER) is first
    book.slice_event(slice_("resourceslice-memory-only"))
    assert book.memory_sizes(DRIVER) == (SMALL_MIB, A100_MIB)
