"""kube-scheduler's preempt verb (1.38+) over HTTP against the extender's app: the wire format of
``ExtenderPreemptionArgs`` / ``ExtenderPreemptionResult`` (k8s.io/kube-scheduler/extender/v1, Go field names, no
JSON tags), hami's victims per candidate node, the caller's token, and the statuses kube-scheduler reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from hami.errors import ApiError
from hami.protocol import keys
from hami.protocol.objects import (
    LabelSelector,
    ObjectMeta,
    Pod,
    PodCondition,
    PodDisruptionBudget,
    PodDisruptionBudgetSpec,
    PodDisruptionBudgetStatus,
)
from hami.server.access import BearerTokenGate, TokenFile
from hami.server.app import build_app, build_service_app
from tests.unit.server.support import NS, World, gpu_node, gpu_pod, plain_pod

NVIDIA = keys.NVIDIA_KEYS


def placed(
    world: World,
    name: str,
    mem: int,
    *,
    node: str = "n1",
    card: int = 0,
    priority: int = 0,
    started: str | None = "2026-11-27T10:00:00Z",
    deleting: bool = False,
    preempted: bool = False,
    labels: dict[str, str] | None = None,
) -> Pod:
    """A running pod holding ``mem`` MiB of card ``card`` of ``node`` (its allocation annotations, as hami wrote)."""
    allocation = f"GPU-{node}-{card},NVIDIA,{mem},0:;"
    pod = gpu_pod(name, mem=mem, cores=None, annotations={keys.VGPU_NODE: node, NVIDIA.allocated: allocation})
    pod.spec.priority = priority
    pod.spec.node_name = node
    pod.status.phase = "Running"
    pod.status.start_time = started
    pod.metadata.labels = dict(labels or {})
    if deleting or preempted:
        pod.metadata.deletion_timestamp = "2026-11-27T12:00:00Z"
    if preempted:
        pod.status.conditions = (PodCondition("DisruptionTarget", "True", "PreemptionByScheduler"),)
    return world.add_pod(pod)


def preemptor(mem: int, priority: int = 100, *, gpus: int = 1, policy: str | None = None) -> dict[str, Any]:
    pod = gpu_pod("urgent", gpu=gpus, mem=mem, cores=None)
    pod.spec.priority = priority
    pod.spec.preemption_policy = policy
    return msgspec.to_builtins(pod)  # type: ignore[no-any-return]


def meta_args(pod: dict[str, Any], *nodes: str, given: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """What kube-scheduler 1.38 sends a nodeCacheCapable extender: per node the UIDs its own dry run chose (empty
    for a node whose in-tree filters pass; Go writes the empty slice as ``[]`` here)."""
    chosen = given or {}
    return {
        "Pod": pod,
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {
            n: {"Pods": [{"UID": uid} for uid in chosen.get(n, [])], "NumPDBViolations": 0} for n in nodes
        },
    }


@pytest.fixture
async def http(world: World) -> AsyncIterator[httpx.AsyncClient]:
    world.add_node(gpu_node("n1", gpus=1, mem=8000))
    world.add_node(gpu_node("n2", gpus=1, mem=8000))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=build_app(world.extender)), base_url="http://hami"
    ) as c:
        yield c


async def preempt(http: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await http.post("/preempt", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    answer: dict[str, Any] = response.json()
    return answer


def victims(answer: dict[str, Any]) -> dict[str, list[str]]:
    return {node: [p["UID"] for p in v["Pods"]] for node, v in answer["NodeNameToMetaVictims"].items()}


# --- the answer ----------------------------------------------------------------------------------------------


async def test_a_card_full_of_low_priority_memory_gives_up_exactly_the_lowest_priority_pod(
    world: World, http: httpx.AsyncClient
) -> None:
    for name, priority in [("p5", 5), ("p1", 1), ("p3", 3), ("p7", 7)]:
        placed(world, name, 2000, priority=priority)
    before = world.usage()

    answer = await preempt(http, meta_args(preemptor(2000), "n1"))

    assert answer == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-p1"}], "NumPDBViolations": 0}}}
    assert world.usage() == before  # nothing reserved, nothing released
    assert world.cluster.calls == ["disruption_budgets"]  # the budgets read, nothing written: kube-scheduler evicts


async def test_only_nodes_where_the_pod_fits_after_the_victims_leave_are_answered(
    world: World, http: httpx.AsyncClient
) -> None:
    placed(world, "low", 6000, node="n1", priority=1)
    placed(world, "high", 6000, node="n2", priority=500)  # only a higher-priority pod would help on n2

    answer = await preempt(http, meta_args(preemptor(4000), "n1", "n2", "ghost"))

    assert victims(answer) == {"n1": ["uid-low"]}


async def test_one_big_victim_rather_than_two_small_ones(world: World, http: httpx.AsyncClient) -> None:
    placed(world, "small-a", 2000)
    placed(world, "big", 4000)
    placed(world, "small-b", 2000)

    assert victims(await preempt(http, meta_args(preemptor(4000), "n1"))) == {"n1": ["uid-big"]}


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(preemptor(4000, policy="Never"), id="preemption-policy-never"),
        pytest.param(preemptor(4000, priority=0), id="equal-priority"),
        pytest.param(preemptor(9000), id="larger-than-any-card"),
        pytest.param(preemptor(1000, gpus=2), id="more-cards-than-a-node-has"),
    ],
)
async def test_no_victims(world: World, http: httpx.AsyncClient, pod: dict[str, Any]) -> None:
    placed(world, "a", 4000)
    placed(world, "b", 4000, node="n2")

    assert await preempt(http, meta_args(pod, "n1", "n2")) == {"NodeNameToMetaVictims": {}}


async def test_kube_schedulers_own_victims_stay_and_hamis_are_added(world: World, http: httpx.AsyncClient) -> None:
    """A node offered with victims needs them gone for its CPU or memory: hami keeps them (counted as leaving,
    whatever they hold) and adds what the devices need; their budget count is kube-scheduler's."""
    placed(world, "gpu-low", 6000, priority=1)
    placed(world, "gpu-lower", 2000, priority=0)
    cpu_hog = plain_pod("cpu-hog")
    body = meta_args(preemptor(4000), "n1", given={"n1": ["uid-gpu-lower", cpu_hog.metadata.uid]})
    body["NodeNameToMetaVictims"]["n1"]["NumPDBViolations"] = 1

    answer = await preempt(http, body)

    assert answer["NodeNameToMetaVictims"] == {
        "n1": {
            "Pods": [{"UID": "uid-gpu-lower"}, {"UID": "uid-cpu-hog"}, {"UID": "uid-gpu-low"}],
            "NumPDBViolations": 1,
        }
    }


async def test_a_node_whose_pods_being_preempted_free_enough_is_left_out(world: World, http: httpx.AsyncClient) -> None:
    """kube-scheduler refuses a candidate without victims; the pod is placed once the preempted pod is gone."""
    placed(world, "leaving", 6000, preempted=True)
    placed(world, "low", 2000, node="n2", priority=1)
    placed(world, "filler", 6000, node="n2", priority=1)

    assert victims(await preempt(http, meta_args(preemptor(4000), "n1", "n2"))) == {"n2": ["uid-filler"]}


async def test_a_pod_terminating_on_its_own_is_a_victim_like_any_other(world: World, http: httpx.AsyncClient) -> None:
    """Deleted by its owner, not preempted: it is no free room (kube-scheduler's dry run keeps it)."""
    placed(world, "own-delete", 6000, deleting=True)
    placed(world, "low", 2000, node="n2", priority=1)
    placed(world, "filler", 6000, node="n2", priority=1)

    answer = victims(await preempt(http, meta_args(preemptor(4000), "n1", "n2")))
    assert answer == {"n1": ["uid-own-delete"], "n2": ["uid-filler"]}


async def test_a_pod_hami_does_not_place_keeps_kube_schedulers_answer(world: World, http: httpx.AsyncClient) -> None:
    placed(world, "low", 6000, priority=1)
    body = meta_args(msgspec.to_builtins(plain_pod("web", {"cpu": "2"})), "n1", "n2", given={"n1": ["uid-x"]})

    assert victims(await preempt(http, body)) == {"n1": ["uid-x"], "n2": []}


async def test_full_pods_without_node_cache_and_lowercase_keys_are_read(world: World, http: httpx.AsyncClient) -> None:
    """Not nodeCacheCapable: the victims come as whole pods (``NodeNameToVictims``); Go's decoder matches field
    names case-insensitively, so hami does too. The answer is always ``NodeNameToMetaVictims``."""
    placed(world, "low", 6000, priority=1)
    other = placed(world, "other", 1000, priority=2)
    body = {
        "pod": preemptor(4000),
        "nodenametovictims": {"n1": {"pods": [msgspec.to_builtins(other)], "numpdbviolations": 0}, "n2": None},
        "nodenametometavictims": None,
    }

    assert victims(await preempt(http, body)) == {"n1": ["uid-other", "uid-low"]}


async def test_the_answer_lists_the_best_node_first(world: World, http: httpx.AsyncClient) -> None:
    placed(world, "a-victim", 8000, node="n1", priority=5)
    placed(world, "b-victim", 8000, node="n2", priority=3)

    answer = await preempt(http, meta_args(preemptor(4000), "n1", "n2"))

    assert list(answer["NodeNameToMetaVictims"]) == ["n2", "n1"]  # the lower highest victim priority first


def budget(name: str, allowed: int, **labels: str) -> PodDisruptionBudget:
    selector = LabelSelector(match_labels=labels)
    return PodDisruptionBudget(
        ObjectMeta(name=name, namespace=NS), PodDisruptionBudgetSpec(selector), PodDisruptionBudgetStatus(allowed)
    )


async def test_the_cluster_s_disruption_budgets_are_read_counted_and_steer_the_order(
    world: World, http: httpx.AsyncClient
) -> None:
    guarded = placed(world, "guarded", 8000, node="n1", priority=1, labels={"app": "db"})
    placed(world, "free", 8000, node="n2", priority=3, labels={"app": "batch"})
    world.cluster.budgets = [budget("db", 0, app="db"), budget("batch", 1, app="batch")]

    answer = await preempt(http, meta_args(preemptor(4000), "n1", "n2"))

    assert "disruption_budgets" in world.cluster.calls
    assert answer["NodeNameToMetaVictims"] == {  # without the budget n1's lower priority would come first
        "n2": {"Pods": [{"UID": "uid-free"}], "NumPDBViolations": 0},
        "n1": {"Pods": [{"UID": guarded.metadata.uid}], "NumPDBViolations": 1},
    }
    assert list(answer["NodeNameToMetaVictims"]) == ["n2", "n1"]


async def test_a_budget_spent_by_kube_scheduler_s_own_victims_is_broken_by_hami_s(
    world: World, http: httpx.AsyncClient
) -> None:
    placed(world, "cpu-hog", 1000, node="n1", priority=1, labels={"app": "db"})
    placed(world, "holder", 7000, node="n1", priority=1, labels={"app": "db"})
    world.cluster.budgets = [budget("db", 1, app="db")]  # one of the two may go, not both

    answer = await preempt(http, meta_args(preemptor(4000), "n1", given={"n1": ["uid-cpu-hog"]}))

    assert answer["NodeNameToMetaVictims"] == {
        "n1": {"Pods": [{"UID": "uid-cpu-hog"}, {"UID": "uid-holder"}], "NumPDBViolations": 1},
    }


async def test_an_unreadable_budget_list_answers_without_budgets(world: World, http: httpx.AsyncClient) -> None:
    placed(world, "guarded", 8000, node="n1", priority=1, labels={"app": "db"})
    world.cluster.budgets = [budget("db", 0, app="db")]
    world.cluster.fail("disruption_budgets", ApiError("forbidden", 403))

    answer = await preempt(http, meta_args(preemptor(4000), "n1"))

    assert answer["NodeNameToMetaVictims"] == {"n1": {"Pods": [{"UID": "uid-guarded"}], "NumPDBViolations": 0}}
    assert world.metrics.registry.get_sample_value("hami_kube_api_errors_total", {"operation": "list_budgets"}) == 1


# --- what kube-scheduler reads when hami cannot answer -------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "error"),
    [
        pytest.param(b"{", "ExtenderPreemptionArgs: not valid JSON", id="truncated-json"),
        pytest.param(b"[]", "ExtenderPreemptionArgs: expected a JSON object (got 'list')", id="not-an-object"),
        pytest.param(b"{}", "ExtenderPreemptionArgs.Pod: the pod to place is missing", id="missing-pod"),
        pytest.param(
            b'{"Pod": {"metadata": {"name": 3}}}',
            "ExtenderPreemptionArgs.Pod: Expected `str`, got `int` - at `$.metadata.name`",
            id="wrong-pod-field-type",
        ),
        pytest.param(
            b'{"Pod": {}, "NodeNameToMetaVictims": ["n1"]}',
            "ExtenderPreemptionArgs.NodeNameToMetaVictims: expected an object of node names (got 'list')",
            id="nodes-not-an-object",
        ),
        pytest.param(
            b'{"Pod": {}, "NodeNameToMetaVictims": {"n1": {"Pods": "x"}}}',
            "ExtenderPreemptionArgs.NodeNameToMetaVictims[n1].Pods: expected a list of pods (got 'str')",
            id="pods-not-a-list",
        ),
        pytest.param(
            b'{"Pod": {}, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": ""}]}}}',
            "ExtenderPreemptionArgs.NodeNameToMetaVictims[n1].Pods[0].UID: expected the victim pod's UID",
            id="empty-uid",
        ),
        pytest.param(
            b'{"Pod": {}, "NodeNameToVictims": {"n1": {"Pods": [{"metadata": {}}]}}}',
            "ExtenderPreemptionArgs.NodeNameToVictims[n1].Pods[0].metadata.uid: expected the victim pod's UID",
            id="victim-pod-without-uid",
        ),
        pytest.param(
            b'{"Pod": {}, "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": -1}}}',
            "ExtenderPreemptionArgs.NodeNameToMetaVictims[n1].NumPDBViolations: expected a count",
            id="negative-violations",
        ),
        pytest.param(
            b'{"Pod": {}, "NodeNameToVictims": {"n1": {}}, "NodeNameToMetaVictims": {"n2": {}}}',
            "NodeNameToVictims and NodeNameToMetaVictims both given",
            id="both-forms",
        ),
        pytest.param(
            msgspec.json.encode({"Pod": preemptor(4000) | {"metadata": {"name": "u", "annotations": {
                "hami.io/gpu-scheduler-policy": "sideways"}}}}),
            "hami.io/gpu-scheduler-policy",
            id="unreadable-pod-annotation",
        ),
    ],
)  # fmt: skip
async def test_a_malformed_body_is_a_400_naming_the_field(http: httpx.AsyncClient, body: bytes, error: str) -> None:
    response = await http.post("/preempt", content=body)

    assert response.status_code == 400
    assert error in response.text


async def test_an_empty_body_is_400(http: httpx.AsyncClient) -> None:
    response = await http.post("/preempt", content=b"")
    assert (response.status_code, response.text) == (400, "Please send a request body")


@pytest.mark.parametrize(("flag", "says"), [("leader", "not the leader"), ("synced", "caches are not synced")])
async def test_a_replica_that_cannot_answer_says_503(
    world: World, http: httpx.AsyncClient, flag: str, says: str
) -> None:
    placed(world, "low", 6000, priority=1)
    world.readiness[flag] = False

    response = await http.post("/preempt", json=meta_args(preemptor(4000), "n1"))

    assert response.status_code == 503
    assert says in response.text


async def test_the_latency_is_counted(world: World, http: httpx.AsyncClient) -> None:
    await preempt(http, meta_args(preemptor(4000), "n1"))
    count = world.metrics.registry.get_sample_value("hami_request_duration_seconds_count", {"endpoint": "preempt"})
    assert count == 1


# --- who may call ----------------------------------------------------------------------------------------------


async def test_the_preempt_verb_needs_the_extender_token(world: World, tmp_path: Path) -> None:
    world.add_node(gpu_node("n1", gpus=1, mem=8000))
    placed(world, "low", 6000, priority=1)
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    app = BearerTokenGate(build_app(world.extender), TokenFile(token))
    body = meta_args(preemptor(4000), "n1")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hami") as client:
        refused = await client.post("/preempt", json=body, headers={"Authorization": "Bearer wrong"})
        anonymous = await client.post("/preempt", json=body)
        allowed = await client.post("/preempt", json=body, headers={"Authorization": "Bearer s3cret"})

    assert (refused.status_code, anonymous.status_code) == (401, 401)
    assert allowed.status_code == 200
    assert victims(allowed.json()) == {"n1": ["uid-low"]}


async def test_the_service_listener_does_not_serve_the_preempt_verb(world: World) -> None:
    app = build_service_app(world.extender, [])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://hami") as client:
        response = await client.post("/preempt", json=meta_args(preemptor(4000), "n1"))
    assert response.status_code == 404
    assert "--extender-bind" in response.text
