"""hami's node policy for DRA-mode pods (issue 38): the prioritize verb's scores from the one ledger."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.devices.base import NodeInventory
from hami.errors import InvalidInput
from hami.protocol import keys
from hami.protocol.objects import ObjectMeta, Pod
from hami.scheduling.dra.policy import (
    MAX_PRIORITY,
    Card,
    DraDemand,
    dra_demand,
    node_cards,
    node_fill,
    prioritize,
    rank_nodes,
)
from hami.scheduling.state import ClusterState, PodRecord
from hami.scheduling.usage import Charge
from tests.unit.scheduling.builders import NVIDIA, gpu, req, vendors
from tests.unit.scheduling.drafix import (
    exclusive_device,
    ledger,
    result,
    shared_device,
    synthetic_claim,
    synthetic_slice,
)

GIB = 1024


def card(used_mem: int, mem: int = 16 * GIB, cores: int = 0, slots: int = 0, used: int = 0) -> Card:
    return Card(NVIDIA, slots, used, mem, used_mem, 100, cores)


def entry(**resources: str) -> dict[str, Any]:
    return {"container": "main", "section": "containers", "resources": resources, "annotations": {}}


def dra_pod(requests: Any = None, *, label: bool = True, annotations: dict[str, str] | None = None) -> Pod:
    notes = dict(annotations or {})
    if requests is not None:
        notes[keys.DRA_REQUESTS] = requests if isinstance(requests, str) else json.dumps(requests)
    labels = {keys.DRA_LABEL: "true"} if label else {}
    return Pod(metadata=ObjectMeta(name="p", namespace="ns", uid="uid-p", labels=labels, annotations=notes))


# --- ranking ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "want"),
    [("binpack", {"empty": 1, "half": 6, "full": 10}), ("spread", {"empty": 10, "half": 5, "full": 1})],
)
def test_binpack_prefers_the_fuller_node_and_spread_the_emptier(policy: str, want: dict[str, int]) -> None:
    cards = {"empty": [card(0)], "half": [card(8 * GIB)], "full": [card(15 * GIB)]}
    demand = DraDemand((req(1, memreq=GIB),), known=True)
    ranking = rank_nodes(["empty", "half", "full"], cards, demand, policy)
    assert ranking.scores == want
    assert ranking.policy == policy


def test_the_pods_own_policy_wins_over_the_default() -> None:
    cards = {"a": [card(0)], "b": [card(4 * GIB)]}
    ranking = rank_nodes(["a", "b"], cards, DraDemand(node_policy="spread"), "binpack")
    assert ranking.scores == {"a": 10, "b": 1}


def test_nodes_the_ledger_says_cannot_take_the_demand_score_zero() -> None:
    """A card kube-scheduler sees as free may hold hami's extender pods: the ledger knows; so does the score."""
    cards = {"room": [card(4 * GIB)], "tight": [card(14 * GIB)], "none": [], "two": [card(0), card(0)]}
    demand = DraDemand((req(2, memreq=4 * GIB, cores=10),), known=True)
    scores = rank_nodes(["room", "tight", "none", "two", "unknown"], cards, demand, "binpack").scores
    assert scores == {"room": 0, "tight": 0, "none": 0, "two": 10, "unknown": 0}


def test_equal_fills_score_equal_and_every_candidate_is_answered_once() -> None:
    cards = {"a": [card(GIB)], "b": [card(GIB)]}
    ranking = rank_nodes(["b", "a"], cards, DraDemand(), "spread")
    assert ranking.scores == {"a": MAX_PRIORITY, "b": MAX_PRIORITY}


@given(st.lists(st.integers(0, 16 * GIB), min_size=1, max_size=8), st.sampled_from(["binpack", "spread"]))
def test_scores_stay_in_range_and_follow_the_fill(used: list[int], policy: str) -> None:
    names = [f"n{i}" for i in range(len(used))]
    cards = {n: [card(u)] for n, u in zip(names, used, strict=True)}
    scores = rank_nodes(names, cards, DraDemand(), policy).scores
    assert all(1 <= s <= MAX_PRIORITY for s in scores.values())
    for a, ua in zip(names, used, strict=True):
        for b, ub in zip(names, used, strict=True):
            if ua < ub:
                assert (scores[a] <= scores[b]) if policy == "binpack" else (scores[a] >= scores[b])


def test_node_fill_keeps_hamis_score_for_registered_cards_and_the_same_range_for_dra_ones() -> None:
    registered = Card(NVIDIA, 10, 5, 1000, 500, 100, 50)
    assert node_fill([registered]) == pytest.approx(15.0)  # 10 × (½ + ½ + ½), HAMi's node score
    assert node_fill([card(8 * GIB, cores=50)]) == pytest.approx(15.0)  # 15 × (½ + ½)
    assert node_fill([card(16 * GIB, cores=100)]) == pytest.approx(30.0)
    assert node_fill([]) == 0.0
    assert node_fill([Card(NVIDIA, 10, 0, 0, 0, 0, 0)]) == 0.0


def test_a_card_full_in_slots_takes_no_more_shares() -> None:
    assert not Card(NVIDIA, 2, 2, 1000, 0, 100, 0).fits(req(1, memreq=10))
    assert Card(NVIDIA, 2, 1, 1000, 0, 100, 0).fits(req(1, memreq=10))
    assert not card(1).fits(req(1))  # no memory asked: the whole card, as the DRA translation asks
    assert card(0).fits(req(1, pct=50))
    assert not card(9 * GIB).fits(req(1, pct=50))


# --- the demand -----------------------------------------------------------------------------------------------------


def test_the_demand_is_the_hami_request_of_each_claim() -> None:
    pod = dra_pod(
        {
            "p-main-abcde": entry(**{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}),
            "p-side-fghjk": {**entry(**{"nvidia.com/gpu": "1"}), "annotations": {keys.NODE_SCHEDULER_POLICY: "spread"}},
        }
    )
    demand = dra_demand(pod, vendors())
    assert demand.known
    assert demand.node_policy == "spread"
    assert [(r.vendor, r.nums, r.memreq, r.coresreq) for r in demand.requests] == [
        (NVIDIA, 2, 3000, 30),
        (NVIDIA, 1, 0, 0),
    ]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        pytest.param("{not json", keys.DRA_REQUESTS, id="not-json"),
        pytest.param("[]", keys.DRA_REQUESTS, id="not-an-object"),
        pytest.param({"c": "x"}, f"{keys.DRA_REQUESTS}[c]", id="entry-not-an-object"),
        pytest.param({"c": {"resources": {"nvidia.com/gpu": 1}}}, f"{keys.DRA_REQUESTS}[c]", id="number-not-string"),
        pytest.param({"c": entry(**{"nvidia.com/gpu": "lots"})}, "nvidia.com/gpu", id="bad-quantity"),
        pytest.param(
            {"c": {**entry(), "annotations": {keys.NODE_SCHEDULER_POLICY: "fullest"}}}, "annotations", id="bad-policy"
        ),
    ],
)
def test_a_demand_that_cannot_be_read_names_the_field(raw: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        dra_demand(dra_pod(raw), vendors())
    assert field in str(err.value)


def test_a_bad_annotation_scores_zero_everywhere_with_a_reason_never_an_error() -> None:
    book = ledger(ClusterState(vendors()))
    ranking = prioritize(book, dra_pod("{oops"), ["a", "b"], "binpack")
    assert ranking.scores == {"a": 0, "b": 0}
    assert ranking.problem is not None
    assert keys.DRA_REQUESTS in ranking.problem


def test_pods_not_in_dra_mode_score_zero_without_reading_anything() -> None:
    book = ledger(ClusterState(vendors()))
    book.slice_event(synthetic_slice("s", "a", [shared_device("gpu-0", "GPU-A")]))
    ranking = prioritize(book, dra_pod("{oops", label=False), ["a"], "binpack")
    assert (ranking.scores, ranking.problem) == ({"a": 0}, None)


# --- the ledger's cards ---------------------------------------------------------------------------------------------


def dra_only_world() -> Any:
    """Two nodes served by DRA alone (no hami registration), 16 GiB shared cards; ``full`` has 12 GiB taken."""
    state = ClusterState(vendors())
    book = ledger(state)
    for node in ("empty", "full"):
        devices = [shared_device(f"gpu-{i}", f"GPU-{node}-{i}", "16Gi", cores=100, cores_default=0) for i in (0, 1)]
        book.slice_event(synthetic_slice(f"s-{node}", node, devices))
    taken = [result("gpu-0", "full", "s1", memory="12Gi", cores="40")]
    book.claim_event(synthetic_claim("c", taken, namespace="other"))
    return book


def test_nodes_served_by_dra_alone_are_read_from_their_slices_and_claims() -> None:
    book = dra_only_world()
    assert node_cards(book, "full") == [
        Card(NVIDIA, 0, 0, 16 * GIB, 12 * GIB, 100, 40),
        Card(NVIDIA, 0, 0, 16 * GIB, 0, 100, 0),
    ]
    pod = dra_pod({"c": entry(**{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"})})
    assert prioritize(book, pod, ["empty", "full"], "binpack").scores == {"empty": 1, "full": 10}
    assert prioritize(book, pod, ["empty", "full"], "spread").scores == {"empty": 10, "full": 1}
    spread = dra_pod({"c": entry(**{"nvidia.com/gpu": "1"})}, annotations={keys.NODE_SCHEDULER_POLICY: "spread"})
    assert prioritize(book, spread, ["empty", "full"], "binpack").scores == {"empty": 10, "full": 1}


def test_an_exclusive_claim_fills_its_device_and_a_deleted_one_frees_it() -> None:
    book = ledger(ClusterState(vendors()))
    book.slice_event(synthetic_slice("s", "n", [exclusive_device("gpu-0", "GPU-N", "8Gi")]))
    claim = synthetic_claim("c", [result("gpu-0", "n")])
    book.claim_event(claim)
    assert node_cards(book, "n") == [Card(NVIDIA, 0, 0, 8 * GIB, 8 * GIB, 100, 100)]
    book.claim_event(claim, deleted=True)
    assert node_cards(book, "n") == [Card(NVIDIA, 0, 0, 8 * GIB, 0, 100, 0)]


def test_registered_nodes_count_hamis_pods_and_the_claims_charged_to_their_cards_once() -> None:
    """A node with a hami registration: its cards come from the ledger's tables, where hami's extender pods and
    the DRA claims on the same UUIDs are both charged; its slice's devices are not counted a second time."""
    state = ClusterState(vendors())
    state.set_node("reg", {NVIDIA: NodeInventory((gpu("GPU-R", devmem=16 * GIB),))})
    book = ledger(state)
    book.slice_event(synthetic_slice("s", "reg", [shared_device("gpu-0", "GPU-R", "16Gi")]))
    book.claim_event(synthetic_claim("c", [result("gpu-0", "reg", "s1", memory="4Gi")]))
    state.apply(PodRecord("uid-x", "ns", "x", "reg", {}, (Charge(NVIDIA, "GPU-R", 1, 2 * GIB, 20),)), add=True)
    assert node_cards(book, "reg") == [Card(NVIDIA, 10, 2, 16 * GIB, 6 * GIB, 100, 20)]
