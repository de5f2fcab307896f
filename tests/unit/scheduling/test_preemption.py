"""Victim selection for preemption (``hami.scheduling.preemption``): one table test per rule, then properties over
random clusters and priorities, each checked with the real ``decide`` on a what-if copy of the node."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.devices.base import NodeInventory
from hami.protocol import keys
from hami.protocol.inventory import MigPlacement
from hami.protocol.objects import PodCondition
from hami.scheduling.decide import decide, reserve
from hami.scheduling.preemption import (
    NOT_EVEN_ALL_LOWER,
    Budget,
    Candidate,
    Preemption,
    candidate_limit,
    fits_without,
    preempt,
    victims_on,
)
from hami.scheduling.records import record_from_pod
from hami.scheduling.request import PodRequest, SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState, PodRecord
from tests.unit.scheduling.builders import (
    NVIDIA,
    container,
    gpu,
    mig_gpu,
    pod,
    pod_request,
    req,
    resource_quota,
    state,
    usage,
    vendors,
)
from tests.unit.scheduling.test_properties import GPU_POLICIES, PROPS, clusters, pods

NOW = 1_700_000_000
ALLOCATED = "hami.io/vgpu-devices-allocated"


def place(
    s: ClusterState,
    uid: str,
    node: str,
    mem: int,
    *,
    priority: int = 0,
    cores: int = 0,
    started: str | None = None,
    terminating: bool = False,
    preempted: bool = False,
    namespace: str = "default",
) -> PodRecord:
    """Place a one-GPU pod with the real decide/reserve on ``node``, then give its record a priority."""
    request = pod_request(req(1, mem, cores=cores), uid=uid, name=uid, namespace=namespace, gpu_policy="binpack")
    record = reserve(s, request, decide(s, request, [node], NOW))
    assert record is not None, f"{uid} does not fit on {node}"
    standing = {"priority": priority, "started": started, "terminating": terminating or preempted}
    return restand(s, record, preempted=preempted, **standing)


def restand(s: ClusterState, record: PodRecord, **standing: object) -> PodRecord:
    s.apply(record, add=False)
    changed = dataclasses.replace(record, **standing)  # type: ignore[arg-type]
    s.apply(changed, add=True)
    return changed


def preemptor(
    mem: int, priority: int = 100, *, nums: int = 1, never: bool = False, namespace: str = "default"
) -> PodRequest:
    base = pod_request(req(nums, mem), uid="hi", name="hi", namespace=namespace)
    return dataclasses.replace(base, priority=priority, preempts=not never)


def victim_names(outcome: Preemption) -> list[str]:
    assert outcome.chosen is not None, outcome.reason
    return sorted(r.name for r in outcome.chosen.victims)


# --- one rule per test -------------------------------------------------------------------------------------------


def test_a_card_full_of_memory_with_slots_free_loses_exactly_one_pod() -> None:
    s = state({"n1": [gpu("GPU-0", count=10, devmem=8192)]})
    for i in range(4):
        place(s, f"low-{i}", "n1", 2048)
    before = usage(s)
    outcome = preempt(s, preemptor(2048), ["n1"])
    assert outcome.chosen is not None
    assert outcome.chosen.node == "n1"
    assert len(outcome.chosen.victims) == 1
    assert usage(s) == before  # nothing changed: the outcome is data


def test_a_card_with_memory_free_but_no_slot_left_loses_one_pod() -> None:
    s = state({"n1": [gpu("GPU-0", count=2, devmem=8192)]})
    place(s, "a", "n1", 100, priority=1)
    place(s, "b", "n1", 100, priority=2)
    assert victim_names(preempt(s, preemptor(100), ["n1"])) == ["a"]


def test_the_lowest_priority_is_taken_first() -> None:
    s = state({"n1": [gpu("GPU-0", count=10, devmem=8192)]})
    for name, priority in [("p5", 5), ("p1", 1), ("p3", 3), ("p7", 7)]:
        place(s, name, "n1", 2048, priority=priority)
    outcome = preempt(s, preemptor(2048), ["n1"])
    assert victim_names(outcome) == ["p1"]
    assert outcome.chosen is not None
    assert outcome.chosen.highest == 1


def test_several_victims_when_one_is_not_enough_the_lowest_priorities() -> None:
    s = state({"n1": [gpu("GPU-0", count=10, devmem=8192)]})
    for name, priority in [("p4", 4), ("p2", 2), ("p9", 9), ("p1", 1)]:
        place(s, name, "n1", 2048, priority=priority)
    outcome = preempt(s, preemptor(6144), ["n1"])
    assert victim_names(outcome) == ["p1", "p2", "p4"]
    assert outcome.chosen is not None
    assert (outcome.chosen.highest, outcome.chosen.priorities) == (4, 7 + 3 * 2**31)


def test_the_vendors_slice_rules_decide_which_pod_goes_on_a_mig_card() -> None:
    """A 3g slice needs slices 0-3 or 4-7 free: the lowest-priority pod (slice 3) freeing memory is not enough
    with ``mid`` beside it; ``big`` (slices 4-7) alone frees a legal place. Memory alone would take small first."""
    s = state({"n1": [mig_gpu("MIG-0")]})
    big = place(s, "big", "n1", 19000, priority=2)
    mid = place(s, "mid", "n1", 9000, priority=3)
    small = place(s, "small", "n1", 4000, priority=1)
    assert [r.slices[0][2] for r in (big, mid, small)] == [MigPlacement(4, 4), MigPlacement(0, 2), MigPlacement(3, 1)]
    assert victim_names(preempt(s, preemptor(19000), ["n1"])) == ["big"]


def test_one_big_victim_rather_than_two_small_ones_on_one_card() -> None:
    s = state({"n1": [gpu("GPU-0", count=10, devmem=8192)]})
    place(s, "small-a", "n1", 2048)
    place(s, "big", "n1", 4096)
    place(s, "small-b", "n1", 2048)
    assert victim_names(preempt(s, preemptor(4096), ["n1"])) == ["big"]


def test_one_big_victim_rather_than_two_small_ones_across_nodes() -> None:
    s = state({"a": [gpu("A-0", devmem=8192)], "b": [gpu("B-0", devmem=8192)]})
    place(s, "big", "b", 4096)
    place(s, "filler", "b", 4096, priority=200)
    place(s, "small-a", "a", 2048)
    place(s, "small-b", "a", 2048)
    place(s, "filler-a", "a", 4096, priority=200)
    outcome = preempt(s, preemptor(4096), ["a", "b"])
    assert outcome.chosen is not None
    assert outcome.chosen.node == "b"
    assert victim_names(outcome) == ["big"]
    assert [c.node for c in outcome.candidates] == ["b", "a"]


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (preemptor(4096, never=True), "preemptionPolicy is Never"),
        (preemptor(4096, priority=0), "every pod of lower priority gone"),
        (preemptor(16384), "does not fit even on the empty node"),
        (preemptor(1024, nums=2), "does not fit even on the empty node"),
    ],
    ids=["preemption-policy-never", "equal-priority", "larger-than-any-card", "more-cards-than-the-node-has"],
)
def test_no_victims(request_: PodRequest, reason: str) -> None:
    s = state({"n1": [gpu("GPU-0", devmem=8192)]})
    place(s, "a", "n1", 4096)
    place(s, "b", "n1", 4096)
    outcome = preempt(s, request_, ["n1"])
    assert outcome.chosen is None
    assert outcome.candidates == ()
    assert reason in outcome.reason or reason in outcome.refused.get("n1", "")


def test_higher_priority_pods_are_never_victims_even_when_only_they_would_help() -> None:
    s = state({"n1": [gpu("GPU-0", devmem=8192)]})
    place(s, "low", "n1", 1024, priority=1)
    place(s, "high", "n1", 7168, priority=500)
    outcome = preempt(s, preemptor(4096), ["n1"])
    assert outcome.chosen is None
    assert "lower priority" in outcome.refused["n1"]


def test_a_disruption_budget_steers_the_choice_between_nodes() -> None:
    s = state({"a": [gpu("A-0", devmem=8192)], "b": [gpu("B-0", devmem=8192)]})
    guarded = place(s, "guarded", "a", 8192)
    place(s, "free", "b", 8192)
    without = preempt(s, preemptor(4096), ["a", "b"])
    assert without.chosen is not None
    assert without.chosen.node == "a"
    budget = Budget("keep-one", frozenset({guarded.uid}), allowed=0)
    outcome = preempt(s, preemptor(4096), ["a", "b"], [budget])
    assert outcome.chosen is not None
    assert outcome.chosen.node == "b"
    assert outcome.chosen.violations == 0
    assert outcome.candidates[1].node == "a"
    assert outcome.candidates[1].violations == 1
    allowing = Budget("keep-one", frozenset({guarded.uid}), allowed=1)
    assert preempt(s, preemptor(4096), ["a", "b"], [allowing]).chosen == without.chosen


def test_a_budget_keeps_its_pod_on_the_node_when_another_can_go() -> None:
    s = state({"n1": [gpu("GPU-0", devmem=8192)]})
    guarded = place(s, "guarded", "n1", 4096, priority=1)
    place(s, "other", "n1", 4096, priority=5)
    assert victim_names(preempt(s, preemptor(4096), ["n1"])) == ["guarded"]  # the lower priority goes
    budget = Budget("pdb", frozenset({guarded.uid}), allowed=0)
    outcome = preempt(s, preemptor(4096), ["n1"], [budget])
    assert victim_names(outcome) == ["other"]
    assert outcome.chosen is not None
    assert outcome.chosen.violations == 0


def test_pods_being_preempted_count_as_leaving_and_are_never_victims() -> None:
    s = state({"n1": [gpu("GPU-0", devmem=8192)]})
    place(s, "going", "n1", 2048, preempted=True, priority=900)
    place(s, "staying", "n1", 6144)
    outcome = preempt(s, preemptor(4096), ["n1"])
    assert victim_names(outcome) == ["staying"]
    restand(s, s.pods["staying"], terminating=True, preempted=True)
    waiting = preempt(s, preemptor(4096), ["n1"])
    assert waiting.chosen is not None
    assert waiting.chosen.victims == ()


def test_a_pod_hami_evicted_counts_as_leaving_before_its_condition_shows() -> None:
    s = state({"n1": [gpu("GPU-0", devmem=8192)]})
    place(s, "evicted", "n1", 6144)
    outcome = preempt(s, preemptor(4096), ["n1"], keep={"evicted"}, evicted={"evicted"})
    assert outcome.chosen is not None
    assert outcome.chosen.victims == ()


def test_a_pod_terminating_on_its_own_stays_in_the_dry_run_as_any_pod() -> None:
    """Deleted by its owner (a day-long grace period, a finalizer): its capacity is used until it is gone, and a
    lower-priority one is a victim like any other, ranked as one (kube-scheduler's dry run keeps it)."""
    s = state({"n1": [gpu("GPU-0", devmem=8192)]})
    place(s, "own-delete", "n1", 6144, terminating=True)
    outcome = preempt(s, preemptor(4096), ["n1"])
    assert outcome.chosen is not None
    assert victim_names(outcome) == ["own-delete"]
    assert outcome.chosen.rank()[0] == 1  # a candidate with a victim, not a free win
    restand(s, s.pods["own-delete"], priority=2000)  # not lower: it stays, and the pod does not fit
    assert preempt(s, preemptor(4096), ["n1"]).refused == {"n1": NOT_EVEN_ALL_LOWER}


def test_a_node_is_not_ranked_first_because_of_a_pod_terminating_on_its_own() -> None:
    """Issue 39: a tenant's pod deleted with a long grace period does not make its node a free candidate; the
    lower-priority pod on the other node is preempted."""
    s = state({"a": [gpu("A-0", devmem=8192)], "b": [gpu("B-0", devmem=8192)]})
    place(s, "tenant", "a", 8192, terminating=True, priority=1000)
    place(s, "low", "b", 8192, priority=1)
    outcome = preempt(s, preemptor(4096), ["a", "b"])
    assert outcome.chosen is not None
    assert (outcome.chosen.node, victim_names(outcome)) == ("b", ["low"])
    assert outcome.refused == {"a": NOT_EVEN_ALL_LOWER}


def test_ranking_lowest_highest_priority_then_latest_start() -> None:
    s = state({"a": [gpu("A-0", devmem=8192)], "b": [gpu("B-0", devmem=8192)], "c": [gpu("C-0", devmem=8192)]})
    place(s, "a-victim", "a", 8192, priority=5, started="2026-11-27T10:00:00Z")
    place(s, "b-victim", "b", 8192, priority=3, started="2026-11-27T09:00:00Z")
    place(s, "c-victim", "c", 8192, priority=3, started="2026-11-27T11:00:00Z")
    outcome = preempt(s, preemptor(4096), ["a", "b", "c"])
    assert [c.node for c in outcome.candidates] == ["c", "b", "a"]


def test_freeing_the_namespace_quota_counts_as_fitting() -> None:
    s = state({"n1": [gpu("GPU-0", devmem=8192)], "n2": [gpu("GPU-1", devmem=8192)]})
    s.upsert_quota(resource_quota("team", "q", {"limits.nvidia.com/gpumem": 6144}))
    place(s, "mine", "n1", 4096, namespace="team")
    place(s, "other-team", "n2", 2048, namespace="elsewhere")
    outcome = preempt(s, preemptor(4096, namespace="team"), ["n1", "n2"])
    assert outcome.chosen is not None
    assert outcome.chosen.node == "n1"
    assert victim_names(outcome) == ["mine"]
    assert "lower priority" in outcome.refused["n2"]  # the card has room, the namespace has not


def test_an_unknown_node_is_refused_by_name() -> None:
    s = state({"n1": [gpu("GPU-0")]})
    assert victims_on(s, preemptor(100), "ghost") == "node unknown to hami"


# --- what preemption reads ---------------------------------------------------------------------------------------


def test_a_records_priority_start_and_deletion_come_from_the_pod() -> None:
    raw = pod(
        [container({"nvidia.com/gpu": 1})], annotations={keys.VGPU_NODE: "n1", ALLOCATED: "GPU-0,NVIDIA,1000,0:;"}
    )
    plain = record_from_pod(raw, vendors())
    assert plain is not None
    assert (plain.priority, plain.started, plain.terminating) == (0, None, False)
    raw.spec.priority = -5
    raw.status.start_time = "2026-11-27T10:00:00Z"
    raw.metadata.deletion_timestamp = "2026-11-27T12:00:00Z"
    record = record_from_pod(raw, vendors())
    assert record is not None
    assert (record.priority, record.started, record.terminating) == (-5, "2026-11-27T10:00:00Z", True)


PREEMPTED_BY_SCHEDULER = ("DisruptionTarget", "True", "PreemptionByScheduler")


@pytest.mark.parametrize(
    ("deleted", "conditions", "preempted"),
    [
        (True, [("DisruptionTarget", "True", "PreemptionByScheduler")], True),
        (False, [("DisruptionTarget", "True", "PreemptionByScheduler")], False),  # not terminating (yet)
        (True, [], False),  # deleted by its owner
        (True, [("DisruptionTarget", "True", "EvictionByEvictionAPI")], False),  # evicted by someone else
        (True, [("DisruptionTarget", "False", "PreemptionByScheduler")], False),
        (True, [("Ready", "True", "PreemptionByScheduler")], False),
        # kube-scheduler reads the first DisruptionTarget condition only
        (
            True,
            [
                ("DisruptionTarget", "True", "DeletionByTaintManager"),
                ("DisruptionTarget", "True", "PreemptionByScheduler"),
            ],
            False,
        ),
    ],
)
def test_a_record_is_being_preempted_only_with_the_schedulers_condition(
    deleted: bool, conditions: list[tuple[str, str, str]], preempted: bool
) -> None:
    raw = pod(
        [container({"nvidia.com/gpu": 1})], annotations={keys.VGPU_NODE: "n1", ALLOCATED: "GPU-0,NVIDIA,1000,0:;"}
    )
    raw.metadata.deletion_timestamp = "2026-11-27T12:00:00Z" if deleted else None
    raw.status.conditions = tuple(PodCondition(t, s, r) for t, s, r in conditions)
    record = record_from_pod(raw, vendors())
    assert record is not None
    assert (record.terminating, record.preempted) == (deleted, preempted)


@pytest.mark.parametrize(("policy", "preempts"), [(None, True), ("PreemptLowerPriority", True), ("Never", False)])
def test_the_request_carries_priority_and_preemption_policy(policy: str | None, preempts: bool) -> None:
    raw = pod([container({"nvidia.com/gpu": 1})])
    raw.spec.priority, raw.spec.preemption_policy = 1000, policy
    request = prefilter(raw, vendors(), SchedulingDefaults())
    assert (request.priority, request.preempts) == (1000, preempts)
    assert prefilter(pod([container({"nvidia.com/gpu": 1})]), vendors(), SchedulingDefaults()).priority == 0


def test_a_what_if_copy_charges_the_node_without_the_leaving_pods_and_changes_nothing() -> None:
    s = state({"n1": [gpu("GPU-0", devmem=8192)], "n2": [gpu("GPU-1", devmem=8192)]})
    s.upsert_quota(resource_quota("team", "q", {"limits.nvidia.com/gpumem": 8192}))
    a = place(s, "a", "n1", 2048, namespace="team")
    place(s, "b", "n1", 3072, namespace="team")
    place(s, "c", "n2", 1024, namespace="team")
    before = usage(s)
    copy = s.what_if("n1", {a.uid})
    assert usage(s) == before
    assert sorted(copy.nodes) == ["n1"]
    assert sorted(copy.pods) == ["b"]
    assert usage(copy)["n1"][NVIDIA][0][:3] == (1, 3072, 0)
    assert copy.quotas.used["team"] == {"nvidia.com/gpumem": 3072 + 1024}  # the quota counts the whole namespace
    assert s.quotas.used["team"] == {"nvidia.com/gpumem": 2048 + 3072 + 1024}


# --- properties --------------------------------------------------------------------------------------------------


def _fits_by_decide(s: ClusterState, request: PodRequest, node: str, leaving: frozenset[str]) -> ClusterState | None:
    """The real ``decide`` on a what-if copy; the copy with the pod reserved when it fits."""
    copy = s.what_if(node, leaving)
    decision = decide(copy, request, [node], NOW)
    if decision.node is None:
        return None
    reserve(copy, request, decision)
    return copy


def _within_capacity(s: ClusterState) -> bool:
    for node in s.nodes.values():
        for table in node.tables.values():
            for i, info in enumerate(table.infos):
                if table.used[i] > info.count or table.usedmem[i] > info.devmem or table.usedcores[i] > info.devcore:
                    return False
    return True


@st.composite
def small_clusters(draw: st.DrawFn) -> dict[str, dict[str, NodeInventory]]:
    """One to three nodes of one to three small cards (few slots, little memory), sometimes a MIG card: full after a
    few pods, so preemption has work to do."""
    nodes: dict[str, dict[str, NodeInventory]] = {}
    for k in range(draw(st.integers(1, 3))):
        cards = []
        for i in range(draw(st.integers(1, 3))):
            uuid = f"n{k}-gpu{i}"
            if draw(st.integers(0, 7)) == 0:
                cards.append(mig_gpu(uuid, index=i))
            else:
                count, devmem = draw(st.integers(1, 4)), draw(st.sampled_from([4096, 8192]))
                cards.append(gpu(uuid, index=i, count=count, devmem=devmem, numa=draw(st.integers(0, 1))))
        nodes[f"node-{k}"] = {NVIDIA: NodeInventory(tuple(cards))}
    return nodes


@st.composite
def small_pods(draw: st.DrawFn) -> PodRequest:
    """One container asking for one or two NVIDIA cards with a share of their memory and cores."""
    nums = draw(st.sampled_from([1, 1, 2]))
    memreq, cores = draw(st.sampled_from([1024, 2048, 3072, 4096])), draw(st.sampled_from([0, 0, 25, 50]))
    return pod_request(req(nums, memreq, cores=cores), gpu_policy=draw(GPU_POLICIES), uid="pod", name="pod")


STAYING: dict[str, bool] = {"terminating": False, "preempted": False}
PREEMPTED: dict[str, bool] = {"terminating": True, "preempted": True}
OWN_DELETE: dict[str, bool] = {"terminating": True, "preempted": False}
"""A placed pod's standing: running, being preempted, or terminating on its own (deleted by its owner)."""


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ClusterState, PodRequest, list[Budget]]:
    s = ClusterState(vendors())
    for name, inventories in draw(st.one_of(small_clusters(), clusters())).items():
        s.set_node(name, inventories)
    shape = st.one_of(small_pods(), small_pods(), pods("pod"))
    shapes = [draw(shape) for _ in range(draw(st.integers(1, 4)))]
    placed: list[PodRequest] = []
    for k in range(40):  # fill the cluster to the brim with these shapes, in a drawn order
        request = draw(st.sampled_from(shapes))
        request = dataclasses.replace(request, uid=f"pod-{k}", name=f"pod-{k}")
        record = reserve(s, request, decide(s, request, sorted(s.nodes), NOW))
        if record is None:
            continue
        placed.append(request)
        restand(
            s,
            record,
            priority=draw(st.integers(0, 3)),  # the pending pod's priority is 0 to 3 too
            **draw(st.sampled_from([STAYING] * 8 + [PREEMPTED, OWN_DELETE])),
            started=draw(st.sampled_from([None, "2026-11-27T10:00:00Z", "2026-11-27T11:00:00Z"])),
        )
    # Mostly the shape of a pod already placed (it fits an empty node, likely not the full cluster), else any.
    pending = draw(st.sampled_from(shapes)) if draw(st.integers(0, 3)) else draw(pods("pending"))
    pending = dataclasses.replace(pending, uid="pending", name="pending")
    priority, preempts = draw(st.sampled_from([3, 2, 1, 0])), draw(st.sampled_from([True] * 7 + [False]))
    pending = dataclasses.replace(pending, priority=priority, preempts=preempts)
    uids = sorted(s.pods)
    budgets = [
        Budget(f"pdb-{i}", frozenset(draw(st.lists(st.sampled_from(uids), max_size=3))), draw(st.integers(0, 1)))
        for i in range(draw(st.integers(0, 2)) if uids else 0)
    ]
    return s, pending, budgets


@PROPS
@given(scenarios())
def test_victims_are_lower_priority_minimal_and_make_the_pod_fit_within_capacity(
    scenario: tuple[ClusterState, PodRequest, Sequence[Budget]],
) -> None:
    s, pending, budgets = scenario
    before = usage(s)
    outcome = preempt(s, pending, sorted(s.nodes), budgets)
    assert usage(s) == before
    assert s.verify() == []
    if not pending.preempts:
        assert outcome.chosen is None
        assert outcome.candidates == ()
        return
    assert outcome.chosen == (outcome.candidates[0] if outcome.candidates else None)
    assert [c.rank() for c in outcome.candidates] == sorted(c.rank() for c in outcome.candidates)
    for candidate in outcome.candidates:
        _check_candidate(s, pending, candidate)
    for node, why in outcome.refused.items():
        if "lower priority" in why:  # nobody's removal helps: not even all of them
            lower = {u for u in s.pods_by_node.get(node, ()) if s.pods[u].priority < pending.priority}
            leaving = {u for u in s.pods_by_node.get(node, ()) if s.pods[u].preempted}
            assert _fits_by_decide(s, pending, node, frozenset(lower | leaving)) is None


def _check_candidate(s: ClusterState, pending: PodRequest, candidate: Candidate) -> None:
    node = candidate.node
    leaving = frozenset(u for u in s.pods_by_node.get(node, ()) if s.pods[u].preempted)
    victims = frozenset(r.uid for r in candidate.victims)
    assert all(r.priority < pending.priority and not r.preempted for r in candidate.victims)
    assert all(r.node == node for r in candidate.victims)
    assert candidate.highest == max((r.priority for r in candidate.victims), default=0)
    assert candidate.priorities == sum(r.priority + 2**31 for r in candidate.victims)
    after = _fits_by_decide(s, pending, node, leaving | victims)
    assert after is not None, f"{pending.key} does not fit on {node} without {sorted(victims)}"
    assert _within_capacity(after)
    for uid in victims:  # minimal: any one victim back and the pod no longer fits
        assert _fits_by_decide(s, pending, node, leaving | (victims - {uid})) is None
        assert fits_without(s, pending, node, leaving | (victims - {uid})) is None


# --- the bound on the search -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("nodes", "limit"), [(0, 0), (7, 7), (100, 100), (250, 100), (1000, 100), (2500, 250)])
def test_the_search_stops_at_the_larger_of_10_percent_and_100_nodes(nodes: int, limit: int) -> None:
    assert candidate_limit(nodes) == limit


def test_a_bounded_search_stops_at_the_limit_and_an_unbounded_one_searches_every_node() -> None:
    names = [f"n{i:03d}" for i in range(130)]
    s = state({name: [gpu(f"GPU-{name}", devmem=8192)] for name in names})
    for name in names:
        place(s, f"low-{name}", name, 8192, priority=1)

    bounded = preempt(s, preemptor(8192), names, bounded=True)
    every = preempt(s, preemptor(8192), names)

    assert len(bounded.candidates) == 100
    assert bounded.refused == {}  # the 30 nodes not searched are in neither
    skipped = [i for i, name in enumerate(names) if name not in {c.node for c in bounded.candidates}]
    assert len(skipped) == 30
    assert sum((b - a) % 130 != 1 for a, b in zip(skipped, skipped[1:] + skipped[:1], strict=True)) == 1  # one run
    other = preempt(s, dataclasses.replace(preemptor(8192), uid="other"), names, bounded=True)
    assert {c.node for c in other.candidates} != {c.node for c in bounded.candidates}  # another pod, another start
    assert len(every.candidates) == 130
