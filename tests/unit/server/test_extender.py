"""The extender's stages over an in-memory cluster: /filter, /bind and the watch handlers (spec webhook §2–§4)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import timedelta

import msgspec
import pytest

from hami.errors import ApiError, Conflict, NotFound, TooManyRequests
from hami.k8s.client import ClientSettings, KubeClient
from hami.k8s.cluster import KubeCluster
from hami.k8s.config import KubeConfig
from hami.k8s.memory import MemoryCluster
from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice, decode_pod_devices
from hami.protocol.extender import BindingArgs, FilterArgs, FilterResult, encode_filter_result
from hami.protocol.nodelock import NodeLock, decode_node_lock, encode_node_lock
from hami.protocol.objects import Node, NodeSpec, NodeStatus, ObjectMeta, Pod, SchedulingGroup
from hami.scheduling.records import pod_group
from hami.scheduling.request import SchedulingDefaults
from tests.unit.k8s.fakeapi import FakeApi, serve
from tests.unit.server.support import (
    NOW,
    NOW_DT,
    NS,
    Usage,
    World,
    garbage_node,
    gpu_node,
    gpu_pod,
    make_world,
    plain_pod,
)

NVIDIA = keys.NVIDIA_KEYS
SERVER_ERROR = ApiError("etcdserver: request timed out", 500)
ALLOCATION_KEYS = {keys.VGPU_NODE, keys.VGPU_TIME, "hami.io/vgpu-devices-to-allocate", NVIDIA.allocated}


def allocation_of(pod: Pod) -> dict[str, str]:
    """The scheduler-written allocation annotations of a pod."""
    return {k: v for k, v in pod.metadata.annotations.items() if k in ALLOCATION_KEYS}


def usage_from_annotations(pods: Iterable[Pod]) -> Usage:
    """Per-device usage recounted from the pods' ``vgpu-devices-allocated`` annotations (as HAMi would)."""
    out: Usage = {}
    for pod in pods:
        value = pod.metadata.annotations.get(NVIDIA.allocated)
        if value is None:
            continue
        for container in decode_pod_devices(value):
            for dev in container:
                slots, mem, cores = out.get(dev.uuid, (0, 0, 0))
                out[dev.uuid] = (slots + 1, mem + dev.usedmem, cores + dev.usedcores)
    return out


def cluster_of_three(world: World) -> None:
    """n1, n2: two 24000 MiB A100s each; small: two 2000 MiB cards (can never hold 3000 MiB)."""
    world.add_node(gpu_node("n1"))
    world.add_node(gpu_node("n2"))
    world.add_node(gpu_node("small", mem=2000))


# --- node events ------------------------------------------------------------------------------------------


def test_a_node_event_that_only_moves_a_lock_keeps_the_tables_and_the_memo(world: World) -> None:
    """A lock taken and released (two node events per scheduled pod) changes nothing the state reads: the node
    is not decoded again and its verdicts stay valid (same generation); any other change rebuilds it."""
    world.add_node(gpu_node("n1"))
    before = world.state.nodes["n1"]
    locked = gpu_node("n1", annotations={keys.NODE_LOCK: encode_node_lock(NodeLock(NOW_DT, NS, "p1"))})
    locked.metadata.resource_version = "7"
    world.extender.on_node(locked)
    world.extender.on_node(gpu_node("n1"))
    assert world.state.nodes["n1"] is before
    changes: list[Node] = [gpu_node("n1", mem=16000), gpu_node("n1", annotations={"other": "x"})]
    relabelled = gpu_node("n1")
    relabelled.metadata.labels = {"zone": "b"}
    cordoned = gpu_node("n1")
    cordoned.spec.unschedulable = True
    sized = gpu_node("n1")
    sized.status.capacity = {"nvidia.com/gpu": 20}
    for changed in [*changes, relabelled, cordoned, sized]:
        generation = world.state.nodes["n1"].generation
        world.extender.on_node(changed)
        assert world.state.nodes["n1"].generation == generation + 1
    world.extender.on_node(sized, deleted=True)
    world.extender.on_node(sized)  # back after a deletion: decoded again
    assert world.state.nodes["n1"].generation == 1


def test_the_node_fields_compared_are_every_field_the_node_view_decodes() -> None:
    """``Extender._inputs_of`` lists the view's fields by hand: a field added to the view must be added there."""
    fields = {t.__name__: {f.name for f in msgspec.structs.fields(t)} for t in (Node, ObjectMeta, NodeSpec, NodeStatus)}
    assert fields == {
        "Node": {"metadata", "spec", "status", "kind"},
        "ObjectMeta": {
            "name", "namespace", "uid", "resource_version", "annotations", "labels", "deletion_timestamp",
            "creation_timestamp",
        },
        "NodeSpec": {"unschedulable"},
        "NodeStatus": {"capacity", "allocatable"},
    }  # fmt: skip


# --- /filter: success -------------------------------------------------------------------------------------


async def test_filter_success_writes_hami_annotations_and_reserves(world: World) -> None:
    cluster_of_three(world)
    pod = world.add_pod(gpu_pod("p1", mem=3000, cores=30))

    result = await world.filter(pod, ["n1", "n2", "small", "ghost"])

    assert result == FilterResult(
        node_names=["n1"],
        failed_nodes={"n2": "fits, but hami chose n1 under the binpack node policy"},
        failed_and_unresolvable_nodes={"small": "2/2 CardInsufficientMemory", "ghost": "node unregistered"},
    )
    stored = world.pod("p1")
    allocation = "GPU-n1-0,NVIDIA,3000,30:;"  # HAMi's PodSingleDevice encoding: one container, one device
    assert stored.metadata.annotations == {
        keys.VGPU_NODE: "n1",
        keys.VGPU_TIME: str(NOW),
        NVIDIA.to_allocate: allocation,
        NVIDIA.allocated: allocation,
        # Written with the allocation (one PATCH per pod), not by /bind as HAMi does; the device plugin reads
        # them only once the pod is bound.
        keys.BIND_PHASE: "allocating",
        keys.BIND_TIME: str(NOW),
    }
    assert stored.metadata.labels == {keys.VGPU_NODE: "n1"}
    assert decode_pod_devices(allocation) == ((ContainerDevice("GPU-n1-0", "NVIDIA", 3000, 30),),)
    # Reserved before the write, so the next pod already sees it; pending until the watch brings it back.
    assert world.usage() == {"GPU-n1-0": (1, 3000, 30)}
    assert world.extender.cycle.pending == {"uid-p1"}
    assert world.state.verify() == []
    assert await world.events() == [
        ("Normal", "FilteringSucceed", "find fit node(n1), 2 nodes not fit, 2 nodes fit(n2:0.00,n1:0.00)"),
        (
            "Normal",
            "FilteredNodes",
            "nodes not chosen: ghost: node unregistered; small: 2/2 CardInsufficientMemory",
        ),
    ]


async def test_without_success_events_a_scheduled_pod_costs_no_event_and_a_failure_still_writes_one(
    world: World,
) -> None:
    """``--no-success-events``: FilteringSucceed, FilteredNodes and BindingSucceed are not written (two or three
    API requests per pod less); the allocation, the lock and the Binding are the same, and failures are written."""
    world.extender.success_events = False
    cluster_of_three(world)
    await filtered(world)  # small rejects it: FilteredNodes would be written too
    world.cluster.calls.clear()

    assert (await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))).error == ""

    assert world.pod("p1").spec.node_name == "n1"
    assert world.cluster.calls == ["get_node", "patch_node_annotations", "bind"]
    assert await world.events() == []
    too_big = world.add_pod(gpu_pod("p2", mem=30000))
    assert (await world.filter(too_big, ["n1"])).node_names in (None, [])
    assert [(kind, reason) for kind, reason, _ in await world.events()][-1] == ("Warning", "FilteringFailed")


async def test_filter_answer_uses_go_field_names(world: World) -> None:
    cluster_of_three(world)
    pod = world.add_pod(gpu_pod("p1"))

    wire = encode_filter_result(await world.filter(pod, ["n1", "small"]))

    assert wire == (
        b'{"NodeNames":["n1"],"FailedAndUnresolvableNodes":{"small":"2/2 CardInsufficientMemory"}}'
    )  # no "Error" key: Go reads the missing field as ""


async def test_filter_with_full_node_objects_echoes_the_chosen_one(world: World) -> None:
    cluster_of_three(world)
    pod = world.add_pod(gpu_pod("p1"))
    raw = [{"metadata": {"name": n, "annotations": {"x": n}}} for n in ("n2", "n1")]
    nodes = [Node(metadata=world.cluster.nodes[n].metadata) for n in ("n2", "n1")]

    result = await world.extender.filter(FilterArgs(pod, nodes=nodes, raw_nodes=raw))

    assert result.node_names == ["n1"]
    assert result.nodes == {"items": [raw[1]]}


async def test_filter_then_watch_event_clears_pending_without_double_counting(world: World) -> None:
    cluster_of_three(world)
    pod = world.add_pod(gpu_pod("p1"))
    await world.filter(pod, ["n1"])

    world.deliver(NS, "p1")  # the pod watch brings the annotated pod back

    assert world.extender.cycle.pending == set()
    assert world.usage() == {"GPU-n1-0": (1, 3000, 30)}
    assert world.state.verify() == []


async def test_refiltering_a_pod_does_not_double_count(world: World) -> None:
    cluster_of_three(world)
    pod = world.add_pod(gpu_pod("p1"))

    first = await world.filter(pod, ["n1", "n2"])
    again = await world.filter(pod, ["n1", "n2"])
    world.deliver(NS, "p1")
    moved = await world.filter(world.pod("p1"), ["n2"])  # e.g. after a failed bind, only n2 is offered

    assert (first.node_names, again.node_names, moved.node_names) == (["n1"], ["n1"], ["n2"])
    assert world.usage() == {"GPU-n2-0": (1, 3000, 30)}
    assert list(world.state.pods) == ["uid-p1"]
    assert world.state.verify() == []
    assert allocation_of(world.pod("p1"))[keys.VGPU_NODE] == "n2"


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param("binpack", ["n1", "n1", "n1"], id="binpack-fills-the-busiest-node"),
        pytest.param("spread", ["n1", "n2", "n1"], id="spread-picks-the-least-used-node-ties-by-name"),
    ],
)
async def test_node_policy_places_a_sequence_of_pods(policy: str, expected: list[str]) -> None:
    world = make_world(SchedulingDefaults(node_policy=policy))
    world.add_node(gpu_node("n1"))
    world.add_node(gpu_node("n2"))

    placed = []
    for i in range(3):
        result = await world.filter(world.add_pod(gpu_pod(f"p{i}")), ["n2", "n1"])
        placed.append((result.node_names or ["-"])[0])

    assert placed == expected


# --- /filter: nothing fits, pass-through, bad input ------------------------------------------------------


async def test_filter_nothing_fits_reports_every_node_and_writes_events(world: World) -> None:
    cluster_of_three(world)
    world.add_node(garbage_node("bad"))
    hog = world.add_pod(gpu_pod("hog", gpu=2, mem=23000, cores=10))
    await world.filter(hog, ["n1"])
    world.deliver(NS, "hog")
    before = world.usage()
    pod = world.add_pod(gpu_pod("p1", mem=3000))
    await world.clear_events()

    result = await world.filter(pod, ["n1", "small", "bad", "ghost"])

    refused = (
        "registration refused: hami.io/node-nvidia-register: invalid JSON: object keys must be strings "
        "at position 2 (in '[{garbage')"
    )
    assert result == FilterResult(
        failed_nodes={"n1": "2/2 CardInsufficientMemory"},  # would fit once hog leaves: resolvable
        failed_and_unresolvable_nodes={
            "small": "2/2 CardInsufficientMemory",
            "bad": refused,
            "ghost": "node unregistered",
        },
    )
    assert await world.events() == [
        ("Warning", "FilteringFailed", "2 nodes CardInsufficientMemory(n1,small)"),
        ("Warning", "FilteringFailed", "1 nodes NodeQuarantined(bad)"),
        ("Warning", "FilteringFailed", "1 nodes NodeUnregistered(ghost)"),
        ("Warning", "FilteringFailed", "no available node, 4 nodes do not meet"),
        (
            "Warning",
            "FilteringFailed",
            f"nodes not chosen: bad: {refused}; ghost: node unregistered; n1: 2/2 CardInsufficientMemory; "
            "small: 2/2 CardInsufficientMemory",
        ),
    ]
    assert allocation_of(world.pod("p1")) == {}
    assert world.usage() == before
    assert "uid-p1" not in world.state.pods
    assert world.metrics.registry.get_sample_value("hami_filter_decisions_total", {"result": "unschedulable"}) == 1


async def test_a_refused_pod_sheds_the_allocation_of_an_earlier_filter(world: World) -> None:
    # x was filtered onto n1, but its bind never happened (kube-scheduler or hami went down in between), so it
    # still carries that allocation. Now kube-scheduler offers it only "small" (n1 was cordoned, say) and it
    # fits nowhere. If the refusal left the annotations, the next watch event of x (any status update) would
    # charge n1 again: a card held by a pod that runs nowhere, for as long as it stays pending.
    cluster_of_three(world)
    stale = {keys.VGPU_NODE: "n1", keys.VGPU_TIME: str(NOW - 60), NVIDIA.allocated: "GPU-n1-0,NVIDIA,3000,30:;"}
    x = world.add_pod(gpu_pod("x", annotations=stale))
    assert world.usage() == {"GPU-n1-0": (1, 3000, 30)}

    result = await world.filter(x, ["small"])
    world.deliver(NS, "x")  # the next watch event of x

    assert result.failed_and_unresolvable_nodes == {"small": "2/2 CardInsufficientMemory"}
    assert allocation_of(world.pod("x")) == {}
    assert keys.VGPU_NODE not in world.pod("x").metadata.labels
    assert world.usage() == {}


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(plain_pod("web"), id="no-resources"),
        pytest.param(plain_pod("cpu", {"cpu": "2", "memory": "1Gi"}), id="cpu-and-memory-only"),
        pytest.param(plain_pod("zero", {"nvidia.com/gpu": "0"}), id="zero-gpus"),
    ],
)
async def test_pod_without_gpu_passes_every_node_unchanged_without_side_effects(world: World, pod: Pod) -> None:
    cluster_of_three(world)
    stored = world.add_pod(pod)
    world.readiness["synced"] = False  # pass-through does not need the caches
    world.cluster.calls.clear()

    result = await world.filter(stored, ["small", "ghost", "n1"])

    assert result == FilterResult(node_names=["small", "ghost", "n1"])
    assert await world.events() == []
    assert world.cluster.calls == []
    assert world.state.pods == {}
    assert world.pod(stored.metadata.name).metadata.annotations == {}


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        pytest.param(
            gpu_pod("p", mem="16Gi"),
            "containers[0](main).limits[nvidia.com/gpumem]: 17179869184 MiB exceeds the int32 range HAMi's "
            "annotations can carry; it counts MiB: did you mean 16384? (got '16Gi')",
            id="gpumem-16Gi-is-not-16-GiB",
        ),
        pytest.param(
            gpu_pod("p", cores=150),
            "containers[0](main).limits[nvidia.com/gpucores]: must be at most 100 (percent of one GPU) (got 150)",
            id="gpucores-above-100",
        ),
        pytest.param(
            gpu_pod("p", gpu="1.5"),
            "containers[0](main).limits[nvidia.com/gpu]: must be a whole number (got '1.5')",
            id="fractional-gpu-count",
        ),
    ],
)
async def test_invalid_request_answers_error_naming_the_field_and_reserves_nothing(
    world: World, pod: Pod, message: str
) -> None:
    cluster_of_three(world)
    stored = world.add_pod(pod)

    result = await world.filter(stored, ["n1", "n2"])

    assert result == FilterResult(error=message)
    assert await world.events() == [("Warning", "FilteringFailed", message)]
    assert world.state.pods == {}
    assert world.pod("p").metadata.annotations == {}


async def test_failed_background_commit_rolls_back_and_fails_the_bind(world: World) -> None:
    cluster_of_three(world)
    other = world.add_pod(gpu_pod("other", mem=5000))
    await world.filter(other, ["n1"])
    before = world.usage()
    pod = world.add_pod(gpu_pod("p1"))
    world.cluster.fail("patch_pod_metadata", SERVER_ERROR)
    await world.clear_events()

    result = await world.filter(pod, ["n1", "n2"], settle=False)

    assert result.node_names == ["n1"]  # answered before the PATCH: kube-scheduler's cycle does not wait for it
    assert world.usage() != before  # reserved at once
    bound = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))  # waits for the commit

    message = "writing the allocation annotations failed: etcdserver: request timed out"
    assert bound.error == f"binding {NS}/p1 to n1 failed: {message}"
    assert world.pod("p1").spec.node_name == ""
    assert world.usage() == before
    assert "uid-p1" not in world.state.pods
    assert "uid-p1" not in world.extender.cycle.pending
    assert world.state.verify() == []
    assert allocation_of(world.pod("p1")) == {}
    assert world.cluster.nodes["n1"].metadata.annotations.get(keys.NODE_LOCK) is None
    assert (await world.events())[-2:] == [
        ("Warning", "FilteringFailed", message),
        ("Warning", "BindingFailed", f"binding {NS}/p1 to n1 failed: {message}"),
    ]
    assert world.metrics.registry.get_sample_value("hami_kube_api_errors_total", {"operation": "patch_pod"}) == 1

    retried = await world.filter(world.pod("p1"), ["n1", "n2"])  # kube-scheduler retries; the API is back

    assert retried.node_names == ["n1"]
    assert world.state.verify() == []


async def test_failed_commit_in_the_foreground_answers_an_error() -> None:
    world = make_world(background_commit=False)
    cluster_of_three(world)
    pod = world.add_pod(gpu_pod("p1"))
    world.cluster.fail("patch_pod_metadata", SERVER_ERROR)

    result = await world.filter(pod, ["n1", "n2"])

    assert result == FilterResult(error="writing the allocation annotations failed: etcdserver: request timed out")
    assert world.state.pods == {}
    assert world.state.verify() == []


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        pytest.param("synced", "hami is starting: its node and pod caches are not synced yet", id="caches-not-synced"),
        pytest.param(
            "leader",
            "this hami replica is not the leader; kube-scheduler must call the leader (check the Service)",
            id="follower",
        ),
    ],
)
async def test_not_ready_or_not_leader_answers_at_once_with_a_clear_error(
    world: World, flag: str, message: str
) -> None:
    cluster_of_three(world)
    pod = world.add_pod(gpu_pod("p1"))
    world.readiness[flag] = False
    world.cluster.calls.clear()

    result = await world.filter(pod, ["n1"])

    assert result == FilterResult(error=message)
    assert world.cluster.calls == []  # nothing awaited: no API call, no wait for a sync
    assert world.state.pods == {}


# --- /filter: concurrency ----------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "http"])
async def busy_world(request: pytest.FixtureRequest) -> AsyncIterator[World]:
    """A world whose extender talks to the in-memory cluster directly, or over HTTP to a fake API server
    backed by it (real network round-trips, so concurrent filters really interleave at every await)."""
    if request.param == "memory":
        yield make_world()
        return
    api = FakeApi()
    async with serve(api.app) as url:
        settings = ClientSettings(qps=10_000, burst=10_000, request_timeout=10)
        async with KubeClient(KubeConfig(server=url, token="t0ken"), settings) as client:
            world = make_world(backing=api.memory, seam=KubeCluster(client, instance="sched-0", clock=lambda: NOW_DT))
            yield world
            await world.recorder.flush()  # event writes still in flight would outlive the client


async def test_concurrent_filters_never_hand_out_the_same_capacity(busy_world: World) -> None:
    world = busy_world
    # 5 nodes × 2 cards of 16000 MiB and 100 cores; each pod takes 4000 MiB and 25 cores → 4 per card, 40 in all.
    names = [f"n{i}" for i in range(5)]
    for name in names:
        world.add_node(gpu_node(name, mem=16000, count=10))
    pods = [world.add_pod(gpu_pod(f"p{i:02}", mem=4000, cores=25)) for i in range(60)]

    results = await asyncio.gather(*(world.filter(pod, names) for pod in pods))

    placed = [r for r in results if r.node_names]
    refused = [r for r in results if not r.node_names]
    assert len(placed) == 40
    assert len(refused) == 20
    assert all(r.error == "" and r.failed_nodes and set(r.failed_nodes) == set(names) for r in refused)
    assert world.state.verify() == []
    for node in world.state.nodes.values():
        table = node.tables["NVIDIA"]
        for i, info in enumerate(table.infos):
            assert table.used[i] <= info.count, info.id
            assert table.usedmem[i] <= info.devmem, info.id
            assert table.usedcores[i] <= info.devcore, info.id
    # What the pods carry is what the ledger holds: a full recount from the annotations agrees.
    annotated = world.cluster.pods.values()
    assert usage_from_annotations(annotated) == world.usage()
    assert world.usage() == {f"GPU-{n}-{i}": (4, 16000, 100) for n in names for i in range(2)}
    assert sum(1 for p in annotated if keys.VGPU_NODE in p.metadata.annotations) == 40


async def test_concurrent_filters_with_failing_commits_leave_no_trace(busy_world: World) -> None:
    world = busy_world
    names = [f"n{i}" for i in range(5)]
    for name in names:
        world.add_node(gpu_node(name, mem=16000, count=10))
    pods = [world.add_pod(gpu_pod(f"p{i:02}", mem=4000, cores=25)) for i in range(60)]
    world.cluster.fail("patch_pod_metadata", SERVER_ERROR, times=5)

    results = await asyncio.gather(*(world.filter(pod, names, settle=False) for pod in pods))
    await world.extender.settle_all()

    assert sum(1 for r in results if r.node_names) == 40  # all decided before any commit finished
    failed = world.metrics.registry.get_sample_value("hami_filter_decisions_total", {"result": "commit-failed"})
    assert failed == 5
    assert len(world.state.pods) == 35  # the five failed commits were rolled back
    assert world.state.verify() == []
    assert world.usage() == usage_from_annotations(world.cluster.pods.values())


# --- /bind ------------------------------------------------------------------------------------------------


async def filtered(world: World, name: str = "p1", node: str = "n1") -> Pod:
    """A pod filtered onto ``node`` (and delivered back by the watch), ready to bind."""
    pod = world.add_pod(gpu_pod(name))
    result = await world.filter(pod, [node])
    assert result.node_names == [node]
    return world.deliver(NS, name)


def lock_of(world: World, node: str) -> str | None:
    return world.cluster.nodes[node].metadata.annotations.get(keys.NODE_LOCK)


def set_lock(world: World, node: str, value: str) -> None:
    current = world.cluster.nodes[node]
    current.metadata.annotations[keys.NODE_LOCK] = value
    world.add_node(current)


async def test_bind_takes_the_node_lock_marks_allocating_and_binds(world: World) -> None:
    cluster_of_three(world)
    await filtered(world)
    await world.clear_events()
    world.cluster.calls.clear()

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    assert result.error == ""
    assert lock_of(world, "n1") == f"2026-08-21T06:20:39Z,{NS},p1"  # <RFC3339>,<ns>,<pod>, as HAMi writes
    assert decode_node_lock(lock_of(world, "n1") or "") == NodeLock(NOW_DT, NS, "p1")
    bound = world.pod("p1")
    assert bound.spec.node_name == "n1"
    assert bound.metadata.annotations[keys.BIND_PHASE] == "allocating"
    assert bound.metadata.annotations[keys.BIND_TIME] == str(NOW)
    assert allocation_of(bound)[keys.VGPU_NODE] == "n1"  # the allocation stays for the device plugin
    api_calls = [c for c in world.cluster.calls if c != "emit_event"]
    assert api_calls == ["get_node", "patch_node_annotations", "bind"]  # the pod is known from /filter
    assert await world.events() == [("Normal", "BindingSucceed", f"Successfully binding node [n1] to {NS}/p1")]
    assert world.usage() == {"GPU-n1-0": (1, 3000, 30)}


async def test_bind_is_refused_while_another_live_pod_holds_the_lock(world: World) -> None:
    cluster_of_three(world)
    world.add_pod(gpu_pod("holder"))
    held = encode_node_lock(NodeLock(NOW_DT - timedelta(seconds=10), NS, "holder"))
    set_lock(world, "n1", held)
    await filtered(world)
    await world.clear_events()

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    message = (
        f"binding {NS}/p1 to n1 failed: node n1 is locked by {NS}/holder since 2026-08-21T06:20:29+00:00 "
        "(expires after 300s): node lock contention"
    )
    assert result.error == message
    assert lock_of(world, "n1") == held  # untouched
    pod = world.pod("p1")
    assert pod.spec.node_name == ""
    assert allocation_of(pod) == {}  # released, so the pod cannot come back to the ledger on the next event
    assert keys.VGPU_NODE not in pod.metadata.labels
    assert world.state.pods == {}
    assert world.usage() == {}
    assert await world.events() == [("Warning", "BindingFailed", message)]


@pytest.mark.parametrize(
    ("holder", "lock"),
    [
        pytest.param(
            gpu_pod("holder"), NodeLock(NOW_DT - timedelta(minutes=5, seconds=1), NS, "holder"), id="expired-lock"
        ),
        pytest.param(None, NodeLock(NOW_DT, NS, "gone"), id="holder-deleted"),
        pytest.param(gpu_pod("holder", phase="Succeeded"), NodeLock(NOW_DT, NS, "holder"), id="holder-succeeded"),
        pytest.param(gpu_pod("holder", phase="Failed"), NodeLock(NOW_DT, NS, "holder"), id="holder-failed"),
    ],
)
async def test_bind_takes_over_a_stale_lock(world: World, holder: Pod | None, lock: NodeLock) -> None:
    cluster_of_three(world)
    if holder is not None:
        world.add_pod(holder)
    set_lock(world, "n1", encode_node_lock(lock))
    await filtered(world)

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    assert result.error == ""
    assert lock_of(world, "n1") == f"2026-08-21T06:20:39Z,{NS},p1"
    assert world.pod("p1").spec.node_name == "n1"


async def test_bind_failure_releases_our_lock_and_the_allocation(world: World) -> None:
    cluster_of_three(world)
    await filtered(world)
    world.cluster.fail("bind", SERVER_ERROR)
    await world.clear_events()

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    message = f"binding {NS}/p1 to n1 failed: etcdserver: request timed out"
    assert result.error == message
    assert lock_of(world, "n1") is None
    assert allocation_of(world.pod("p1")) == {}
    assert keys.BIND_PHASE not in world.pod("p1").metadata.annotations
    assert world.state.pods == {}
    assert await world.events() == [("Warning", "BindingFailed", message)]
    assert world.metrics.registry.get_sample_value("hami_bind_results_total", {"result": "failed"}) == 1


THROTTLED = TooManyRequests("too many requests, please try again later", 429, retry_after=1.0)


async def test_a_throttled_clean_up_keeps_the_reservation_and_is_retried_until_it_lands(world: World) -> None:
    # A 429 storm: the bind fails, and so does the first removal of the allocation (and the next read of the pod).
    cluster_of_three(world)
    await filtered(world)
    world.extender.cycle.settings.cleanup_backoff = (0.01, 0.02)
    world.cluster.fail("bind", THROTTLED)
    world.cluster.fail("patch_pod_metadata", THROTTLED, times=2)
    world.cluster.fail("get_pod", THROTTLED, times=2)  # the bind's fresh read, then the first retry's read

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    assert "too many requests" in result.error
    # the annotations are still on the pod, so the ledger still charges them: the two never disagree
    assert allocation_of(world.pod("p1"))[keys.VGPU_NODE] == "n1"
    assert set(world.state.pods) == {"uid-p1"}
    assert set(world.extender.cycle.cleanups) == {"uid-p1"}
    task = world.extender.cycle.cleanups["uid-p1"]
    await asyncio.wait_for(task, 5)
    assert allocation_of(world.pod("p1")) == {}
    assert world.state.pods == {}
    assert world.extender.cycle.cleanups == {}
    assert lock_of(world, "n1") is None
    # the edge's share: the first failure is an API error (the pod could not be read back, so no removal was
    # tried unguarded: it went straight to the read-first retries), the landed retry a decision
    assert world.metrics.registry.get_sample_value("hami_kube_api_errors_total", {"operation": "get_pod"}) == 1
    assert world.metrics.registry.get_sample_value("hami_kube_api_errors_total", {"operation": "patch_pod"}) is None
    assert world.metrics.registry.get_sample_value("hami_filter_decisions_total", {"result": "cleanup-retried"}) == 1


RESET = ApiError(
    f"POST /api/v1/namespaces/{NS}/pods/p1/binding: RemoteProtocolError: connection lost: "
    "ConnectionResetError(104, 'Connection reset by peer')",
    0,
)
API_DOWN = ApiError(f"GET /api/v1/namespaces/{NS}/pods/p1: ConnectError: connecting to 127.0.0.1:6443: refused", 0)


class _BoundThenReset(MemoryCluster):
    """kube-apiserver SIGKILLed mid-bind: the Binding reaches etcd, the connection is reset before the answer, and
    the pod cannot be read back while the API server restarts (``fail("get_pod", …)``); writes land again after."""

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, *, resource_version: str | None = None
    ) -> None:
        await super().bind(namespace, name, uid, node, resource_version=resource_version)
        raise RESET


async def test_a_bind_that_landed_before_a_reset_keeps_the_allocation_of_the_bound_pod(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="hami.extender")
    world = make_world(backing=_BoundThenReset())
    cluster_of_three(world)
    await filtered(world)
    world.extender.cycle.settings.cleanup_backoff = (0.01, 0.02)
    world.cluster.fail("get_pod", API_DOWN)  # the bind's read-back, while the API server is still down
    allocated = allocation_of(world.pod("p1"))

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    assert "connection lost" in result.error  # kube-scheduler hears of a failure; the pod is bound all the same
    assert world.pod("p1").spec.node_name == "n1"
    assert allocation_of(world.pod("p1")) == allocated  # not removed blind, by UID alone, while it was unreadable
    await asyncio.wait_for(world.extender.cycle.cleanups["uid-p1"], 5)
    stored = world.pod("p1")
    assert allocation_of(stored) == allocated  # nor later: the retry read the pod first and found it bound
    assert allocated[keys.VGPU_NODE] == "n1"
    assert allocated[NVIDIA.allocated]
    assert set(world.state.pods) == {"uid-p1"}  # the ledger still charges what the bound pod uses
    assert world.usage() == usage_from_annotations([stored])
    assert lock_of(world, "n1") is None  # our own lock, released as on any failed bind
    assert world.extender.cycle.cleanups == {}
    assert world.metrics.registry.get_sample_value("hami_filter_decisions_total", {"result": "cleanup-retried"}) is None
    assert f"clean-up of {NS}/p1 not needed: bound meanwhile" in caplog.text


class _ResetBeforeBinding(MemoryCluster):
    """The connection is reset before the Binding reaches the API server: the pod stays unbound."""

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, *, resource_version: str | None = None
    ) -> None:
        self._enter("bind")
        raise RESET


async def test_a_bind_lost_in_a_reset_is_cleaned_up_once_the_pod_can_be_read() -> None:
    world = make_world(backing=_ResetBeforeBinding())
    cluster_of_three(world)
    await filtered(world)
    world.extender.cycle.settings.cleanup_backoff = (0.01, 0.02)
    world.cluster.fail("get_pod", API_DOWN, times=2)  # the bind's read-back and the first retry's read

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    assert "connection lost" in result.error
    assert allocation_of(world.pod("p1"))[keys.VGPU_NODE] == "n1"  # kept until the pod is known unbound
    assert set(world.state.pods) == {"uid-p1"}
    await asyncio.wait_for(world.extender.cycle.cleanups["uid-p1"], 5)
    assert world.pod("p1").spec.node_name == ""
    assert allocation_of(world.pod("p1")) == {}
    assert world.state.pods == {}
    assert lock_of(world, "n1") is None
    assert world.metrics.registry.get_sample_value("hami_filter_decisions_total", {"result": "cleanup-retried"}) == 1


TIMED_OUT = ApiError(f"POST /api/v1/namespaces/{NS}/pods/p1/binding: ReadTimeout: no answer within 30 s", 0)


class _BindingLandsLate(MemoryCluster):
    """The Binding's request runs past ``--kube-timeout`` while it is still queued in kube-apiserver: hami hears a
    timeout, and the Binding lands later (``land``), with the preconditions it was sent with."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight: list[tuple[str, str, str, str, str | None]] = []

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, *, resource_version: str | None = None
    ) -> None:
        self._enter("bind")
        self.in_flight.append((namespace, name, uid, node, resource_version))
        raise TIMED_OUT

    async def land(self) -> None:
        namespace, name, uid, node, resource_version = self.in_flight.pop()
        await MemoryCluster.bind(self, namespace, name, uid, node, resource_version=resource_version)


async def test_a_binding_landing_after_its_timeout_and_the_clean_up_never_binds_the_pod_without_its_devices() -> None:
    backing = _BindingLandsLate()
    world = make_world(backing=backing)
    cluster_of_three(world)
    await filtered(world)

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    assert "ReadTimeout" in result.error
    assert allocation_of(world.pod("p1")) == {}  # read back unbound: its allocation removed, its devices freed
    assert world.state.pods == {}
    with pytest.raises(Conflict, match="Precondition failed: ResourceVersion"):
        await backing.land()  # sent for the version carrying the allocation; the clean-up moved the pod on
    assert world.pod("p1").spec.node_name == ""  # kube-scheduler filters it again


async def test_a_write_by_someone_else_before_the_binding_is_bound_on_the_fresh_version() -> None:
    world = make_world()
    cluster_of_three(world)
    await filtered(world)
    allocated = allocation_of(world.pod("p1"))
    await world.cluster.patch_pod_metadata(NS, "p1", labels={"team": "a"})  # after hami's allocation write

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    assert result.error == ""
    assert world.pod("p1").spec.node_name == "n1"
    assert allocation_of(world.pod("p1")) == allocated
    assert world.cluster.calls.count("bind") == 2  # refused on the old version, bound on the one read again


class _AllocationWrittenThenReset(MemoryCluster):
    """kube-apiserver SIGKILLed mid-/filter: the allocation PATCH is stored, the connection reset before the
    answer; ``read_back`` says whether the pod can be read right after (False: the API server is still down)."""

    def __init__(self, read_back: bool) -> None:
        super().__init__()
        self.read_back = read_back

    async def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None] | None = None,
        labels: Mapping[str, str | None] | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> Pod:
        stored = await super().patch_pod_metadata(
            namespace, name, annotations, labels, uid=uid, resource_version=resource_version
        )
        if (annotations or {}).get(keys.VGPU_NODE):
            if not self.read_back:
                self.fail("get_pod", API_DOWN)
            raise ApiError(f"PATCH /api/v1/namespaces/{namespace}/pods/{name}: RemoteProtocolError: reset", 0)
        return stored


@pytest.mark.parametrize("read_back", [True, False], ids=["read-back", "api-still-down"])
async def test_an_allocation_write_that_landed_before_a_reset_is_never_forgotten(read_back: bool) -> None:
    # The answer to the allocation PATCH is lost, not the write: the pod holds the devices in the API. Forgetting
    # the reservation would hand them to the next pod (devices over capacity, invariant 1 of the fault tests).
    world = make_world(backing=_AllocationWrittenThenReset(read_back))
    cluster_of_three(world)
    pod = world.add_pod(gpu_pod("p1"))

    assert (await world.filter(pod, ["n1"], settle=False)).node_names == ["n1"]
    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))  # waits for the allocation write

    assert allocation_of(world.pod("p1"))[keys.VGPU_NODE] == "n1"
    assert world.usage() == usage_from_annotations(world.cluster.pods.values()) == {"GPU-n1-0": (1, 3000, 30)}
    assert world.state.verify() == []
    if read_back:  # read back: it landed, so the bind goes ahead
        assert result.error == ""
        assert world.pod("p1").spec.node_name == "n1"
    else:  # unknown: the bind fails and the reservation stays until the pod's next event settles it
        assert "RemoteProtocolError" in result.error
        assert set(world.state.pods) == {"uid-p1"}
        assert world.extender.cycle.pending == set()
        world.deliver(NS, "p1")
        assert world.usage() == usage_from_annotations(world.cluster.pods.values())
    assert world.usage() == {"GPU-n1-0": (1, 3000, 30)}


async def test_a_failed_replacing_write_leaves_the_earlier_allocation_charged(world: World) -> None:
    # kube-scheduler filters a pod again (its bind failed or never came); hami forgets the old reservation,
    # reserves anew, and the PATCH that would replace the allocation fails: the pod still carries the old one.
    cluster_of_three(world)
    pod = await filtered(world)
    world.cluster.fail("patch_pod_metadata", SERVER_ERROR)

    await world.filter(pod, ["n2"])

    assert allocation_of(world.pod("p1"))[keys.VGPU_NODE] == "n1"
    assert world.usage() == usage_from_annotations(world.cluster.pods.values()) == {"GPU-n1-0": (1, 3000, 30)}
    assert world.state.verify() == []


async def test_filtering_the_pod_again_stops_its_clean_up(world: World) -> None:
    cluster_of_three(world)
    await filtered(world)
    world.extender.cycle.settings.cleanup_backoff = (30.0, 30.0)
    world.cluster.fail("bind", THROTTLED)
    world.cluster.fail("patch_pod_metadata", THROTTLED)
    assert (await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))).error
    task = world.extender.cycle.cleanups["uid-p1"]

    await world.filter(world.pod("p1"), ["n1"])
    await world.extender.settle_all()

    assert task.cancelled() or task.done()
    assert world.extender.cycle.cleanups == {}
    assert allocation_of(world.pod("p1"))[keys.VGPU_NODE] == "n1"  # the new allocation stays
    assert set(world.state.pods) == {"uid-p1"}


async def filtered_gang_member(world: World, group: str) -> None:
    pod = gpu_pod("p1")
    if group:
        pod.metadata.labels[keys.POD_GROUP_LABEL] = group
    world.add_pod(pod)
    assert (await world.filter(pod, ["n1"])).node_names == ["n1"]
    world.deliver(NS, "p1")


@pytest.mark.parametrize("group", ["gang", ""], ids=["podgroup-member-waits", "lone-pod-fails-at-once"])
async def test_a_podgroup_member_waits_for_the_lock_of_a_fellow_member(world: World, group: str) -> None:
    cluster_of_three(world)
    world.add_pod(gpu_pod("holder"))
    set_lock(world, "n1", encode_node_lock(NodeLock(NOW_DT, NS, "holder")))
    await filtered_gang_member(world, group)
    world.extender.cycle.settings.lock_retry_timeout, world.extender.cycle.settings.lock_retry_interval = 5.0, 0.01

    async def allocated() -> None:  # the holder's device plugin allocates and releases the lock
        await asyncio.sleep(0.05)
        current = world.cluster.nodes["n1"]
        del current.metadata.annotations[keys.NODE_LOCK]
        world.add_node(current)

    release = asyncio.create_task(allocated())
    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))
    await release

    if group:
        assert result.error == ""
        assert world.pod("p1").spec.node_name == "n1"
        assert decode_node_lock(lock_of(world, "n1") or "").name == "p1"
    else:
        assert result.error.endswith("node lock contention")
        assert world.pod("p1").spec.node_name == ""


async def test_a_podgroup_member_gives_up_after_the_retry_timeout(world: World) -> None:
    cluster_of_three(world)
    world.add_pod(gpu_pod("holder"))
    held = encode_node_lock(NodeLock(NOW_DT, NS, "holder"))
    set_lock(world, "n1", held)
    await filtered_gang_member(world, "gang")
    world.extender.cycle.settings.lock_retry_timeout, world.extender.cycle.settings.lock_retry_interval = 0.05, 0.01

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    assert result.error == (
        f"binding {NS}/p1 to n1 failed: timed out after 0.05s waiting for node n1 to be unlocked (is locked by "
        f"{NS}/holder since 2026-08-21T06:20:39+00:00 (expires after 300s)): node lock contention"
    )
    assert lock_of(world, "n1") == held
    assert world.state.pods == {}


def test_podgroup_membership_comes_from_the_label_or_the_scheduling_group() -> None:
    labelled = gpu_pod("a")
    labelled.metadata.labels[keys.POD_GROUP_LABEL] = "g1"
    grouped = gpu_pod("b")
    grouped.spec.scheduling_group = SchedulingGroup(pod_group_name="g2")
    assert [pod_group(p) for p in (labelled, grouped, gpu_pod("c"))] == ["g1", "g2", ""]


async def test_a_repeated_bind_of_a_bound_pod_succeeds_and_keeps_its_allocation(world: World) -> None:
    # kube-scheduler retries a bind whose answer it did not get; the Binding already exists (409).
    cluster_of_three(world)
    await filtered(world)
    assert (await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))).error == ""
    await world.clear_events()

    again = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    assert again.error == ""
    assert world.pod("p1").spec.node_name == "n1"
    assert allocation_of(world.pod("p1"))[keys.VGPU_NODE] == "n1"
    assert decode_node_lock(lock_of(world, "n1") or "").name == "p1"  # the device plugin has not allocated yet
    assert world.usage() == {"GPU-n1-0": (1, 3000, 30)}
    assert world.state.verify() == []
    assert world.metrics.registry.get_sample_value("hami_bind_results_total", {"result": "already-bound"}) == 1


class _LockStolenDuringBind(MemoryCluster):
    """A cluster where, while the Binding is being created, another scheduler takes the node lock over (ours
    had expired) and the Binding then fails."""

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, *, resource_version: str | None = None
    ) -> None:
        stolen = encode_node_lock(NodeLock(NOW_DT, "other-ns", "thief"))
        await self.patch_node_annotations(node, {keys.NODE_LOCK: stolen})
        self.fail("bind", SERVER_ERROR)
        await super().bind(namespace, name, uid, node, resource_version=resource_version)


async def test_bind_failure_never_releases_a_lock_someone_else_holds_now() -> None:
    world = make_world(backing=_LockStolenDuringBind())
    cluster_of_three(world)
    await filtered(world)

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    assert result.error.endswith("etcdserver: request timed out")
    assert lock_of(world, "n1") == "2026-08-21T06:20:39Z,other-ns,thief"


async def test_bind_of_a_vanished_pod_forgets_its_reservation(world: World) -> None:
    cluster_of_three(world)
    await filtered(world)
    world.cluster.delete_pod(NS, "p1")

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    assert result.error == f'binding {NS}/p1 to n1 failed: pods "p1" not found'
    assert world.state.pods == {}
    assert lock_of(world, "n1") is None  # taken for the bind, released when it failed


async def test_bind_of_a_pod_without_gpu_takes_no_lock(world: World) -> None:
    cluster_of_three(world)
    world.add_pod(plain_pod("web"))

    result = await world.extender.bind(BindingArgs("web", NS, "uid-web", "n1"))

    assert result.error == ""
    assert world.pod("web").spec.node_name == "n1"
    assert lock_of(world, "n1") is None
    assert keys.BIND_PHASE not in world.pod("web").metadata.annotations


async def test_bind_of_a_pod_placed_before_a_restart_reads_it_back(world: World) -> None:
    cluster_of_three(world)
    allocation = "GPU-n1-0,NVIDIA,3000,30:;"
    placed = {keys.VGPU_NODE: "n1", keys.VGPU_TIME: str(NOW - 5), NVIDIA.allocated: allocation}
    world.cluster.put_pod(gpu_pod("p1", annotations=placed))  # not delivered: this process never saw it

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    assert result.error == ""
    assert world.pod("p1").spec.node_name == "n1"
    assert world.pod("p1").metadata.annotations[keys.BIND_PHASE] == "allocating"
    assert lock_of(world, "n1") == f"2026-08-21T06:20:39Z,{NS},p1"


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param({}, id="allocation-lost-before-its-commit"),
        pytest.param(
            {keys.VGPU_NODE: "n2", NVIDIA.allocated: "GPU-n2-0,NVIDIA,3000,30:;"}, id="allocation-on-another-node"
        ),
    ],
)
async def test_bind_refuses_a_gpu_pod_without_an_allocation_on_that_node(
    world: World, annotations: dict[str, str]
) -> None:
    # The answer to /filter goes out before its annotation PATCH; a process that dies in between leaves a
    # pod that kube-scheduler binds (through the next process) with no device allocation at all.
    cluster_of_three(world)
    world.cluster.put_pod(gpu_pod("p1", annotations=annotations))

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    message = (
        f"binding {NS}/p1 to n1 refused: hami holds no device allocation for it on n1 "
        "(kube-scheduler will filter it again)"
    )
    assert result.error == message
    assert world.pod("p1").spec.node_name == ""
    assert lock_of(world, "n1") is None
    assert (await world.events())[-1] == ("Warning", "BindingFailed", message)


async def test_bind_lock_write_failure_is_reported_and_releases_the_allocation(world: World) -> None:
    cluster_of_three(world)
    await filtered(world)
    world.cluster.fail("get_node", NotFound('nodes "n1" not found', 404))

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    assert result.error == f'binding {NS}/p1 to n1 failed: nodes "n1" not found'
    assert world.state.pods == {}
    assert world.pod("p1").spec.node_name == ""


# --- identity: stale, forged and already-bound pods -------------------------------------------------------

RUNNING_ALLOCATION = {
    keys.VGPU_NODE: "n1",
    keys.VGPU_TIME: str(NOW - 60),
    NVIDIA.allocated: "GPU-n1-0,NVIDIA,20000,30:;",
    keys.BIND_PHASE: "success",
}


def running_pod(world: World, name: str = "web") -> Pod:
    """A pod hami placed earlier, now bound and running on n1 with 20000 MiB of GPU-n1-0 (delivered by the watch)."""
    pod = gpu_pod(name, mem=20000, annotations=RUNNING_ALLOCATION, phase="Running")
    pod.spec.node_name = "n1"
    return world.add_pod(pod)


def api_calls(world: World) -> list[str]:
    return [c for c in world.cluster.calls if c != "emit_event"]


def card_memory(world: World) -> dict[str, int]:
    """MiB in use per card, recounted from every pod's annotations (the API's truth, not the ledger)."""
    return {uuid: mem for uuid, (_, mem, _) in usage_from_annotations(world.cluster.pods.values()).items()}


async def test_a_forged_filter_for_a_running_pod_changes_nothing(world: World) -> None:
    # The attack of issue 11: another tenant's running pod named with a made-up UID; before, hami rewrote its
    # allocation and the ledger, and the next honest pod landed on the card the running pod really uses.
    cluster_of_three(world)
    running_pod(world)
    before = world.pod("web")
    forged = gpu_pod("web", mem=1000)  # pending, unbound, no allocation
    forged.metadata.uid = "made-up"
    world.cluster.calls.clear()

    result = await world.filter(forged, ["n1", "n2"])

    assert result == FilterResult(
        error=(
            f"pod {NS}/web: the request is for UID made-up, but the pod of that name is UID uid-web (deleted and "
            "re-created, or a stale or forged request); nothing reserved or written"
        )
    )
    assert world.pod("web") == before
    assert world.usage() == {"GPU-n1-0": (1, 20000, 30)}
    assert world.state.verify() == []
    assert world.extender.cycle.pending == set()
    assert world.extender.cycle.commits == {}
    assert api_calls(world) == []
    assert world.metrics.registry.get_sample_value("hami_filter_decisions_total", {"result": "refused"}) == 1

    honest = world.add_pod(gpu_pod("p1", mem=10000))
    assert (await world.filter(honest, ["n1"])).node_names == ["n1"]
    world.deliver(NS, "p1")
    assert card_memory(world) == {"GPU-n1-0": 20000, "GPU-n1-1": 10000}  # not 30000 on a 24000 MiB card
    assert world.usage() == {"GPU-n1-0": (1, 20000, 30), "GPU-n1-1": (1, 10000, 30)}


@pytest.mark.parametrize("where", ["watch", "body-bound", "body-running"])
async def test_filter_never_replaces_the_allocation_of_a_bound_or_running_pod(world: World, where: str) -> None:
    # With the pod's real UID: the watch knows it is bound, or the body says it is bound or running.
    cluster_of_three(world)
    stored = running_pod(world)
    body = gpu_pod("web", mem=1000)
    if where == "body-bound":
        body.spec.node_name = "n2"
    elif where == "body-running":
        body.status.phase = "Running"
    if where != "watch":
        world.watched.clear()  # the watch has not seen the pod: the body alone must be enough
    world.cluster.calls.clear()

    result = await world.filter(body, ["n1", "n2"])

    expected = {
        "watch": f"pod {NS}/web (UID uid-web) is already bound to node n1; hami never places a bound pod again",
        "body-bound": f"pod {NS}/web (UID uid-web) is already bound to node n2; hami never places a bound pod again",
        "body-running": f"pod {NS}/web (UID uid-web) is Running; hami places only pending pods",
    }
    assert result == FilterResult(error=expected[where])
    assert world.pod("web") == stored
    assert world.usage() == {"GPU-n1-0": (1, 20000, 30)}  # its ledger record was not forgotten either
    assert api_calls(world) == []


async def test_a_body_without_a_uid_is_refused(world: World) -> None:
    cluster_of_three(world)
    body = gpu_pod("p1")
    body.metadata.uid = ""
    world.cluster.put_pod(gpu_pod("p1"))

    result = await world.filter(body, ["n1"])

    assert result == FilterResult(error=f"pod {NS}/p1: metadata.uid is empty; hami places a pod only under its UID")
    assert world.state.pods == {}
    assert world.pod("p1").metadata.annotations == {}


async def test_a_body_naming_the_uid_of_another_pod_is_refused(world: World) -> None:
    cluster_of_three(world)
    running_pod(world)
    body = gpu_pod("elsewhere", mem=1000)  # not in the watch yet, but carrying web's UID
    body.metadata.uid = "uid-web"

    result = await world.filter(body, ["n1", "n2"])

    assert result.error == f"pod {NS}/elsewhere: UID uid-web belongs to pod {NS}/web; nothing reserved or written"
    assert world.usage() == {"GPU-n1-0": (1, 20000, 30)}


async def test_a_stale_body_after_delete_and_recreate_reserves_and_writes_nothing(world: World) -> None:
    # kube-scheduler's cache can still hold web-0 after it was deleted and re-created under the same name.
    cluster_of_three(world)
    old = world.add_pod(gpu_pod("web-0"))
    world.remove_pod("web-0")
    recreated = gpu_pod("web-0")
    recreated.metadata.uid = "uid-web-0-new"
    new = world.add_pod(recreated)
    world.cluster.calls.clear()

    result = await world.filter(old, ["n1", "n2"])
    bind = await world.extender.bind(BindingArgs("web-0", NS, "uid-web-0", "n1"))

    assert result.error == (
        f"pod {NS}/web-0: the request is for UID uid-web-0, but the pod of that name is UID uid-web-0-new "
        "(deleted and re-created, or a stale or forged request); nothing reserved or written"
    )
    assert bind.error == (
        f"binding {NS}/web-0 to n1 refused: the request is for UID uid-web-0, but the pod of that name is UID "
        "uid-web-0-new (deleted and re-created, or a stale or forged request)"
    )
    assert world.state.pods == {}
    assert world.extender.cycle.pending == set()
    assert world.extender.cycle.commits == {}
    assert world.pod("web-0").metadata.annotations == {}
    assert lock_of(world, "n1") is None
    assert api_calls(world) == []  # the watch answered both; nothing was read or written
    assert world.metrics.registry.get_sample_value("hami_bind_results_total", {"result": "refused"}) == 1

    assert (await world.filter(new, ["n1"])).node_names == ["n1"]  # the new pod schedules as usual
    assert allocation_of(world.pod("web-0"))[keys.VGPU_NODE] == "n1"
    world.remove_pod("web-0")
    assert world.state.pods == {}
    assert world.usage() == {}


@pytest.mark.parametrize("bind_comes", ["while-committing", "after-the-commit"])
async def test_when_the_watch_lags_the_uid_precondition_refuses_the_commit_and_releases_it(
    world: World, bind_comes: str
) -> None:
    # The watch has delivered the deletion but not the re-created pod: /filter cannot tell them apart, so the
    # annotation PATCH (carrying the old UID) is what refuses; the reservation is rolled back, the bind fails.
    cluster_of_three(world)
    old = world.add_pod(gpu_pod("web-0"))
    world.remove_pod("web-0")
    recreated = gpu_pod("web-0")
    recreated.metadata.uid = "uid-web-0-new"
    world.cluster.put_pod(recreated)  # not delivered yet

    result = await world.filter(old, ["n1"], settle=False)
    assert result.node_names == ["n1"]  # answered before the PATCH
    if bind_comes == "after-the-commit":
        for _ in range(3):
            await asyncio.sleep(0)
        assert world.extender.cycle.commits == {}  # a commit for a pod that is gone is not kept for a bind
        assert world.state.pods == {}
    bind = await world.extender.bind(BindingArgs("web-0", NS, "uid-web-0", "n1"))

    replaced = (
        f"pod {NS}/web-0 is no longer the pod with UID uid-web-0 (deleted, or deleted and re-created); nothing "
        'written: Pod "web-0" is invalid: metadata.uid: Invalid value: "uid-web-0": field is immutable'
    )
    expected = {
        "while-committing": f"binding {NS}/web-0 to n1 failed: writing the allocation annotations failed: {replaced}",
        "after-the-commit": (
            f"binding {NS}/web-0 to n1 refused: the request is for UID uid-web-0, but the pod of that name is UID "
            "uid-web-0-new (deleted and re-created, or a stale or forged request)"
        ),
    }
    assert bind.error == expected[bind_comes]
    assert world.state.pods == {}
    assert world.usage() == {}
    assert world.extender.cycle.pending == set()
    assert world.extender.cycle.commits == {}
    assert world.pod("web-0").metadata.annotations == {}
    assert world.pod("web-0").spec.node_name == ""
    assert lock_of(world, "n1") is None


async def test_replacing_an_allocation_is_written_only_on_the_version_it_was_decided_on(world: World) -> None:
    # An allocation from an earlier /filter (its bind never came) is replaced only if the pod is still the
    # version hami read; here it has moved on since, so the PATCH gets 409 and the reservation is rolled back.
    cluster_of_three(world)
    earlier = {keys.VGPU_NODE: "n2", keys.VGPU_TIME: str(NOW - 5), NVIDIA.allocated: "GPU-n2-0,NVIDIA,3000,30:;"}
    pod = world.add_pod(gpu_pod("p1", annotations=earlier))
    await world.cluster.patch_pod_metadata(NS, "p1", {"example.com/touched": "yes"})  # not delivered yet

    result = await world.filter(pod, ["n1"])

    assert result.node_names == ["n1"]  # answered before the PATCH
    assert allocation_of(world.pod("p1")) == {k: v for k, v in earlier.items() if k in ALLOCATION_KEYS}
    # the new reservation is rolled back, and the allocation the pod still carries counts again at once
    assert world.usage() == {"GPU-n2-0": (1, 3000, 30)}
    world.deliver(NS, "p1")
    assert world.usage() == {"GPU-n2-0": (1, 3000, 30)}  # the newer version changes nothing
    assert world.state.verify() == []


@pytest.mark.parametrize("uid", ["", "made-up"])
async def test_bind_without_or_with_a_wrong_uid_locks_and_writes_nothing(world: World, uid: str) -> None:
    # The attack of issue 11: a /bind without PodUID reset a running pod's bind phase to allocating and took the
    # node lock in its name, so every GPU bind on that node failed for 5 minutes.
    cluster_of_three(world)
    running_pod(world)
    before = world.pod("web")
    world.cluster.calls.clear()

    result = await world.extender.bind(BindingArgs("web", NS, uid, "n1"))

    reason = (
        "ExtenderBindingArgs.PodUID is empty; hami binds a pod only by its UID"
        if not uid
        else (
            "the request is for UID made-up, but the pod of that name is UID uid-web "
            "(deleted and re-created, or a stale or forged request)"
        )
    )
    assert result.error == f"binding {NS}/web to n1 refused: {reason}"
    assert world.pod("web") == before  # bind phase still success
    assert lock_of(world, "n1") is None
    assert api_calls(world) == []  # refused from the request and the watch alone
    assert world.usage() == {"GPU-n1-0": (1, 20000, 30)}
    assert world.metrics.registry.get_sample_value("hami_bind_results_total", {"result": "refused"}) == 1


@pytest.mark.parametrize("known", ["watched", "read-back"])
async def test_bind_of_a_running_pod_takes_no_lock_and_writes_nothing(world: World, known: str) -> None:
    cluster_of_three(world)
    running_pod(world)
    if known == "read-back":  # a restarted hami whose watch has not listed the pod yet: it reads it back
        world.watched.clear()
        world.extender.on_pod(world.pod("web"), deleted=True)
    before = world.pod("web")
    world.cluster.calls.clear()

    same = await world.extender.bind(BindingArgs("web", NS, "uid-web", "n1"))
    other = await world.extender.bind(BindingArgs("web", NS, "uid-web", "n2"))

    assert same.error == ""  # kube-scheduler repeating a bind that went through
    assert other.error == f"binding {NS}/web to n2 refused: the pod is already bound to node n1"
    assert world.pod("web") == before
    assert lock_of(world, "n1") is None
    assert lock_of(world, "n2") is None
    assert api_calls(world) == ([] if known == "watched" else ["get_pod", "get_pod"])
    assert world.metrics.registry.get_sample_value("hami_bind_results_total", {"result": "already-bound"}) == 1


class _PodWrittenDuringLock(MemoryCluster):
    """A cluster where someone else writes the pod while hami takes the node lock (between its GET and PATCH)."""

    async def patch_node_annotations(
        self, name: str, annotations: Mapping[str, str | None], resource_version: str | None = None
    ) -> Node:
        node = await super().patch_node_annotations(name, annotations, resource_version)
        for (namespace, pod_name), pod in self.pods.items():
            if not pod.spec.node_name:
                await self.patch_pod_metadata(namespace, pod_name, {"example.com/touched": "yes"})
        return node


async def test_the_bind_phase_is_written_only_on_the_version_read_back() -> None:
    world = make_world(backing=_PodWrittenDuringLock())
    cluster_of_three(world)
    placed = {keys.VGPU_NODE: "n1", keys.VGPU_TIME: str(NOW - 5), NVIDIA.allocated: "GPU-n1-0,NVIDIA,3000,30:;"}
    world.cluster.put_pod(gpu_pod("p1", annotations=placed))  # placed before a restart; read back by /bind

    result = await world.extender.bind(BindingArgs("p1", NS, "uid-p1", "n1"))

    assert result.error == (
        f'binding {NS}/p1 to n1 failed: Operation cannot be fulfilled on pods "p1": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    pod = world.pod("p1")
    assert keys.BIND_PHASE not in pod.metadata.annotations
    assert pod.spec.node_name == ""
    assert lock_of(world, "n1") is None


# --- watch handlers ---------------------------------------------------------------------------------------


async def test_pending_reservation_survives_an_older_pod_event_without_annotations(world: World) -> None:
    cluster_of_three(world)
    old = world.add_pod(gpu_pod("p1"))
    await world.filter(old, ["n1"])

    world.extender.on_pod(old)  # a watch event from before the annotation patch

    assert world.usage() == {"GPU-n1-0": (1, 3000, 30)}
    assert world.extender.cycle.pending == {"uid-p1"}
    world.deliver(NS, "p1")
    assert world.extender.cycle.pending == set()
    assert world.usage() == {"GPU-n1-0": (1, 3000, 30)}


async def test_a_late_watch_event_never_frees_a_pending_reservation(world: World) -> None:
    world.add_node(gpu_node("n1", gpus=2, mem=8000))
    x = world.add_pod(gpu_pod("x", mem=5000, cores=10))
    await world.filter(x, ["n1"])
    first = world.pod("x")  # x on GPU-n1-0; the watch has not delivered this version yet
    world.cluster.fail("bind", SERVER_ERROR)
    await world.extender.bind(BindingArgs("x", NS, "uid-x", "n1"))
    released = world.pod("x")  # the failed bind removed the allocation
    on_card0 = {keys.VGPU_NODE: "n1", NVIDIA.allocated: "GPU-n1-0,NVIDIA,2000,10:;"}
    world.add_pod(gpu_pod("z", mem=2000, cores=10, annotations=on_card0))
    await world.filter(released, ["n1"])  # kube-scheduler retries x: now GPU-n1-1, the less used card
    second = world.pod("x")

    world.extender.on_pod(first)  # the watch catches up late, in order
    y = world.add_pod(gpu_pod("y", mem=5000, cores=10))
    await world.filter(y, ["n1"])
    world.extender.on_pod(released)
    world.extender.on_pod(second)
    world.deliver(NS, "y")

    assert allocation_of(second)[NVIDIA.allocated] == "GPU-n1-1,NVIDIA,5000,10:;"
    assert allocation_of(world.pod("y"))[NVIDIA.allocated] == "GPU-n1-0,NVIDIA,5000,10:;"  # beside z, not x
    assert world.usage() == {"GPU-n1-0": (2, 7000, 20), "GPU-n1-1": (1, 5000, 10)}  # within 8000 MiB each
    assert world.usage() == usage_from_annotations(world.cluster.pods.values())


async def test_a_pod_that_lost_its_annotations_is_released_once_not_pending(world: World) -> None:
    cluster_of_three(world)
    await filtered(world)
    await world.cluster.patch_pod_metadata(NS, "p1", dict.fromkeys(ALLOCATION_KEYS))

    world.deliver(NS, "p1")

    assert world.state.pods == {}
    assert world.usage() == {}


@pytest.mark.parametrize("end", ["Succeeded", "Failed", "deleted"])
async def test_finished_and_deleted_pods_release_their_devices(world: World, end: str) -> None:
    cluster_of_three(world)
    pod = await filtered(world)
    await filtered(world, "p2")

    if end == "deleted":
        world.extender.on_pod(pod, deleted=True)
    else:
        world.extender.on_pod(world.cluster.set_pod_phase(NS, "p1", end))

    assert set(world.state.pods) == {"uid-p2"}
    assert world.usage() == {"GPU-n1-1": (1, 3000, 30)}
    assert world.state.verify() == []


async def test_a_pod_deleted_between_filter_and_bind_leaves_no_commit_behind(world: World) -> None:
    cluster_of_three(world)
    pod = world.add_pod(gpu_pod("p1"))
    await world.filter(pod, ["n1"], settle=False)
    await asyncio.sleep(0)  # the commit runs on its own and finishes; no /bind ever comes for it

    world.cluster.delete_pod(NS, "p1")
    world.extender.on_pod(pod, deleted=True)

    assert world.extender.cycle.commits == {}
    assert world.state.pods == {}


async def test_pods_placed_before_a_restart_are_counted_from_their_annotations(world: World) -> None:
    cluster_of_three(world)
    for i in range(5):
        await filtered(world, f"p{i}", node=("n1", "n2")[i % 2])
    fresh = make_world()  # a restarted scheduler: empty ledger, then the watches list everything
    for node in world.cluster.nodes.values():
        fresh.extender.on_node(node)
    for pod in world.cluster.pods.values():
        fresh.extender.on_pod(pod)

    assert fresh.usage() == world.usage()
    assert fresh.state.verify() == []
    assert fresh.extender.cycle.pending == set()


def test_pod_with_undecodable_allocation_is_kept_and_reported(world: World) -> None:
    cluster_of_three(world)
    annotations: Mapping[str, str] = {keys.VGPU_NODE: "n1", NVIDIA.allocated: "GPU-n1-0,NVIDIA,lots,30:;"}

    world.add_pod(gpu_pod("odd", annotations=annotations))

    record = world.state.pods["uid-odd"]
    assert record.node == "n1"
    assert record.problem == (
        'hami.io/vgpu-devices-allocated: invalid memory field: strconv.ParseInt: parsing "lots": invalid syntax '
        "at position 16 (in 'GPU-n1-0,NVIDIA,lots,30:;')"
    )
    assert world.metrics.registry.get_sample_value("hami_pods_undecodable") == 1


async def test_node_with_garbage_inventory_is_quarantined_while_others_schedule(world: World) -> None:
    world.add_node(garbage_node("bad"))
    world.add_node(gpu_node("n1"))
    pod = world.add_pod(gpu_pod("p1"))

    result = await world.filter(pod, ["bad", "n1"])

    assert result.node_names == ["n1"]
    assert set(result.failed_and_unresolvable_nodes or {}) == {"bad"}
    assert world.state.nodes["bad"].tables == {}
    assert world.metrics.registry.get_sample_value("hami_quarantined_nodes", {"vendor": "NVIDIA"}) == 1
    world.add_node(gpu_node("bad"))  # the device plugin writes a good registration again
    assert world.metrics.registry.get_sample_value("hami_quarantined_nodes", {"vendor": "NVIDIA"}) is None


def test_deleted_node_forgets_its_devices_but_keeps_pod_records(world: World) -> None:
    world.add_node(gpu_node("n1"))
    world.add_pod(gpu_pod("p1", annotations={keys.VGPU_NODE: "n1", NVIDIA.allocated: "GPU-n1-0,NVIDIA,3000,30:;"}))

    world.extender.on_node(world.cluster.nodes["n1"], deleted=True)
    assert "n1" not in world.state.nodes
    world.add_node(gpu_node("n1"))  # the node comes back: its pods count again

    assert world.usage() == {"GPU-n1-0": (1, 3000, 30)}


async def test_a_pods_priority_start_and_deletion_reach_its_record_without_recharging(world: World) -> None:
    """What preemption reads of a placed pod follows the pod watch, also when its allocation did not change."""
    cluster_of_three(world)
    await world.filter(world.add_pod(gpu_pod("p1")), ["n1"])
    placed = world.deliver(NS, "p1")
    later = msgspec.structs.replace(
        placed,
        metadata=msgspec.structs.replace(placed.metadata, deletion_timestamp="2026-11-27T12:00:00Z"),
        spec=msgspec.structs.replace(placed.spec, priority=7),
        status=msgspec.structs.replace(placed.status, phase="Running", start_time="2026-11-27T10:00:00Z"),
    )
    world.extender.on_pod(later)
    record = world.state.pods["uid-p1"]
    assert (record.priority, record.started, record.terminating) == (7, "2026-11-27T10:00:00Z", True)
    assert world.usage() == {"GPU-n1-0": (1, 3000, 30)}
    assert world.state.verify() == []
