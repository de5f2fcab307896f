"""Scale-up simulation on template nodes (``hami.scheduling.simulation``): every vendor's inventory is read from
the given Node alone at zero usage, several pods pack onto one template, cold-zero groups take their profile, and
nothing of the live state ever changes (hypothesis)."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.config import default_device_config
from hami.config.profiles import DeviceProfiles
from hami.devices import vendors_from_config
from hami.errors import ConfigError
from hami.protocol import keys
from hami.protocol.objects import Node, ObjectMeta, Pod, ResourceQuota
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.decide import decide, reserve
from hami.scheduling.request import PodRequest, SchedulingDefaults, prefilter
from hami.scheduling.simulation import estimate, simulate, simulated_reason, template_state
from hami.scheduling.state import ClusterState
from hami.simulate.admit import Admitted, admit_pod, apply_patch
from tests.e2e.vendors import FAMILY_CASES, FamilyCase
from tests.unit.server.support import garbage_node, gpu_node, gpu_pod

VENDORS = vendors_from_config(default_device_config())
"""Every vendor of every family: a family added to the registry with its e2e case joins these tests."""
DEFAULTS = SchedulingDefaults()
NOW = 1_700_000_000
GROUP = "node.kubernetes.io/instance-type"


def request(pod: Pod, vendors: Any = VENDORS) -> PodRequest:
    return prefilter(pod, vendors, DEFAULTS)


def whole(name: str) -> PodRequest:
    """A pod asking for one whole 24000 MiB card (all of its memory)."""
    return request(gpu_pod(name, mem=24000, cores=100))


def template(case: FamilyCase, name: str) -> Node:
    fake = case.node(name)
    capacity = {k: str(v) for k, v in fake.capacity.items()}
    raw = {
        "metadata": {"name": name, "labels": dict(fake.labels), "annotations": dict(fake.annotations)},
        "status": {"capacity": capacity, "allocatable": capacity},
    }
    return msgspec.convert(raw, type=Node)


def admitted(case: FamilyCase, name: str) -> Pod:
    limits = {k: str(v) for k, v in case.limits.items()}
    raw: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "annotations": dict(case.pod_annotations)},
        "spec": {"containers": [{"name": "c0", "resources": {"limits": limits}}]},
    }
    admission = Admission(VENDORS, admitters_for(VENDORS), DEFAULTS, AdmissionSettings("hami-scheduler"))
    answer = admit_pod(admission, raw, "ns")
    assert isinstance(answer, Admitted), answer
    return msgspec.convert(apply_patch(raw, answer.patch), type=Pod)


def snapshot(state: ClusterState) -> Any:
    """Everything of a state a simulation must leave alone: nodes (tables with usage), records, quota usage."""
    tables = {
        name: {v: (t.used[:], t.usedmem[:], t.usedcores[:]) for v, t in node.tables.items()}
        for name, node in state.nodes.items()
    }
    gens = {name: node.generation for name, node in state.nodes.items()}
    return tables, gens, dict(state.pods), copy.deepcopy(state.quotas.used), dict(state.held)


@pytest.mark.parametrize("case", FAMILY_CASES.values(), ids=FAMILY_CASES.keys())
def test_every_vendor_places_a_pod_on_its_template_node_at_zero_usage(case: FamilyCase) -> None:
    live = ClusterState(VENDORS)
    live.upsert_node(template(case, "live"))  # the same node, full, in the live ledger
    pod = admitted(case, "p")
    before = snapshot(live)

    scratch = template_state(VENDORS, [template(case, "template-a")], live=live)
    (decision,) = simulate(scratch, [request(pod, VENDORS)], NOW)

    assert decision.node == "template-a", decision.rejected
    assert case.vendor in decision.devices
    assert snapshot(live) == before
    assert "template-a" not in live.nodes


def test_a_template_without_inventory_is_node_unregistered_with_hamis_reason() -> None:
    scratch = template_state(VENDORS, [Node(metadata=ObjectMeta(name="bare")), garbage_node("broken")])

    (decision,) = simulate(scratch, [request(gpu_pod("p"))], NOW)

    assert decision.node is None
    assert simulated_reason(decision.rejected["bare"]) == "node unregistered for NVIDIA"
    broken = simulated_reason(decision.rejected["broken"])
    assert broken.startswith("node unregistered: registration refused: hami.io/node-nvidia-register")


def test_a_vendor_shortfall_keeps_hamis_reason() -> None:
    scratch = template_state(VENDORS, [gpu_node("small", mem=8000)])

    (decision,) = simulate(scratch, [request(gpu_pod("p", mem=12000))], NOW)

    assert simulated_reason(decision.rejected["small"]) == "2/2 CardInsufficientMemory"


def test_several_pods_pack_onto_one_template_each_seeing_the_ones_before() -> None:
    scratch = template_state(VENDORS, [gpu_node("t", gpus=2)])

    placed = simulate(scratch, [whole("a"), whole("b"), whole("c")], NOW)

    assert [d.node for d in placed] == ["t", "t", None]
    assert simulated_reason(placed[2].rejected["t"]) == "2/2 CardInsufficientMemory"
    assert {d.devices["NVIDIA"][0][0].uuid for d in placed[:2]} == {"GPU-t-0", "GPU-t-1"}


def test_estimate_adds_copies_of_the_template_while_pods_fit_an_empty_one() -> None:
    pods = [whole("a"), whole("b"), whole("c"), request(gpu_pod("huge", gpu=3)), whole("d")]

    answer = estimate(VENDORS, gpu_node("group-a", gpus=2), pods, NOW)

    assert answer.copies == ("group-a-1", "group-a-2")
    assert answer.placed == ("group-a-1", "group-a-1", "group-a-2", None, "group-a-2")
    assert [simulated_reason(r) for r in answer.decisions[3].rejected.values()] == ["2/2 NodeInsufficientDevice"]


def test_estimate_stops_at_max_nodes() -> None:
    answer = estimate(VENDORS, gpu_node("g", gpus=1), [whole("a"), whole("b")], NOW, max_nodes=1)

    assert answer.placed == ("g-1", None)


def cold(name: str, group: str = "a100x2") -> Node:
    return Node(metadata=ObjectMeta(name=name, labels={GROUP: group}))


PROFILE = {"a100x2": keys.NVIDIA_REGISTER + ": '" + gpu_node("x").metadata.annotations[keys.NVIDIA_REGISTER] + "'"}


def test_a_cold_zero_template_takes_its_groups_profile() -> None:
    profiles = DeviceProfiles.parse(PROFILE)
    scratch = template_state(VENDORS, [cold("t-cold"), cold("t-other", "cpu-only")], profiles)

    (decision,) = simulate(scratch, [whole("p")], NOW)

    assert decision.node == "t-cold"
    assert simulated_reason(decision.rejected["t-other"]) == "node unregistered for NVIDIA"


def test_a_templates_own_registration_wins_over_the_profile() -> None:
    profiles = DeviceProfiles.parse(PROFILE)
    warm = gpu_node("warm", gpus=1, mem=8000)
    warm = msgspec.structs.replace(warm, metadata=msgspec.structs.replace(warm.metadata, labels={GROUP: "a100x2"}))

    (decision,) = simulate(template_state(VENDORS, [warm], profiles), [whole("p")], NOW)

    assert decision.node is None  # its own 8000 MiB card, not the profile's two 24000 MiB cards


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[1, 2]", "expected a mapping of node annotations"),
        ("a: [1]", "device profile g: a: expected the annotation's text"),
        ("{a: 1", "is not YAML or JSON"),
    ],
)
def test_a_bad_profile_is_refused_naming_the_group(text: str, error: str) -> None:
    with pytest.raises(ConfigError, match="device profile g") as err:
        DeviceProfiles.parse({"g": text})
    assert error in str(err.value)


def test_a_quota_that_refuses_the_pod_refuses_it_on_a_template_too() -> None:
    live = ClusterState(VENDORS)
    quota = msgspec.convert(
        {"metadata": {"name": "q", "namespace": "team-a"}, "spec": {"hard": {"limits.nvidia.com/gpumem": "1000"}}},
        type=ResourceQuota,
    )
    live.upsert_quota(quota)

    (decision,) = simulate(template_state(VENDORS, [gpu_node("t")], live=live), [whole("p")], NOW)

    assert decision.node is None
    assert simulated_reason(decision.rejected["t"]) == "2/2 ResourceQuotaNotFit"
    assert template_state(VENDORS, [gpu_node("t")]).quotas.has_limits("team-a") is False  # only from ``live``


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    live_pods=st.lists(st.integers(1, 24000), max_size=6),
    sims=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 30000), st.integers(0, 3)), min_size=1, max_size=6),
)
def test_a_simulation_never_changes_the_live_state(live_pods: list[int], sims: list[tuple[int, int, int]]) -> None:
    live = ClusterState(VENDORS)
    live.upsert_node(gpu_node("n1", gpus=2))
    for i, mem in enumerate(live_pods):
        req = request(gpu_pod(f"live-{i}", mem=mem))
        reserve(live, req, decide(live, req, ["n1"], NOW))
    before = snapshot(live)
    reqs = [
        request(gpu_pod(f"live-{i}" if i < len(live_pods) else f"s-{i}", gpu=g, mem=m))
        for i, (g, m, _) in enumerate(sims)
    ]
    templates = [gpu_node(f"t{k}", gpus=1 + k) for k in range(max(s[2] for s in sims) + 1)] + [gpu_node("n1")]

    simulate(template_state(VENDORS, templates, live=live, requests=reqs), reqs, NOW)
    estimate(VENDORS, templates[0], reqs, NOW, live=live)

    assert snapshot(live) == before
    assert live.verify() == []
