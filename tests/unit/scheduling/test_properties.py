"""Ledger and decision invariants over random clusters and pod sequences (hypothesis).

* no device ever holds more than its slots, memory or cores;
* a decision does not depend on the order of the candidate list;
* reserve then unreserve is the identity on usage and quota usage;
* the incremental ledger always equals a full recount (``verify() == []``), whatever mix of reserve,
  unreserve and node updates (refresh, removal, a device disappearing and coming back) happened.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.devices.base import MEM_PERCENTAGE_UNSET, ContainerRequest, NodeInventory
from hami.devices.nvidia.mig import overlaps
from hami.protocol.inventory import DeviceInfo
from hami.scheduling.decide import Decision, decide, reserve, unreserve
from hami.scheduling.request import PodRequest
from hami.scheduling.state import ClusterState
from hami.scheduling.usage import Kind
from tests.unit.scheduling.builders import DCU, NVIDIA, gpu, mig_gpu, pod_request, resource_quota, usage, vendors

PROPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_700_000_000
NAMESPACES = ("ns-a", "ns-b")
INIT_MIXES = [
    (Kind.INIT, Kind.SIDECAR),
    (Kind.SIDECAR, Kind.INIT),
    (Kind.INIT, Kind.INIT),
    (Kind.INIT, Kind.SIDECAR, Kind.INIT),
]


# --- strategies ----------------------------------------------------------------------------------------------


@st.composite
def devices(draw: st.DrawFn, node: int) -> tuple[DeviceInfo, ...]:
    out = []
    for i in range(draw(st.integers(1, 8))):
        uuid = f"n{node}-gpu{i}"
        numa = draw(st.integers(0, 1))
        if draw(st.integers(0, 9)) == 0:
            out.append(mig_gpu(uuid, index=i, numa=numa))
            continue
        out.append(
            gpu(
                uuid,
                index=i,
                count=draw(st.integers(1, 10)),
                devmem=draw(st.sampled_from([1000, 8192, 8192, 16384, 40960])),
                devcore=draw(st.sampled_from([100, 100, 100, 200])),
                numa=numa,
            )
        )
    return tuple(out)


@st.composite
def clusters(draw: st.DrawFn) -> dict[str, dict[str, NodeInventory]]:
    """Nodes with NVIDIA devices (maybe pair scores, maybe a MIG GPU) and, on some, Hygon DCUs."""
    nodes: dict[str, dict[str, NodeInventory]] = {}
    for k in range(draw(st.integers(1, 6))):
        devs = draw(devices(k))
        scores: dict[str, dict[str, int]] = {}
        if draw(st.booleans()):
            for a in devs:
                for b in devs:
                    if a.id < b.id:
                        s = draw(st.integers(0, 100))
                        scores.setdefault(a.id, {})[b.id] = s
                        scores.setdefault(b.id, {})[a.id] = s
        nodes[f"node-{k}"] = {NVIDIA: NodeInventory(devs, scores)}
        if draw(st.integers(0, 2)) == 0:
            dcus = tuple(
                gpu(f"n{k}-dcu{i}", index=i, count=draw(st.integers(1, 4)), devmem=16384, type="DCU-Z100")
                for i in range(draw(st.integers(1, 4)))
            )
            nodes[f"node-{k}"][DCU] = NodeInventory(dcus)
    return nodes


def _request(vendor: str) -> st.SearchStrategy[ContainerRequest]:
    return st.builds(
        ContainerRequest,
        vendor=st.just(vendor),
        nums=st.integers(1, 3),
        memreq=st.one_of(st.just(0), st.sampled_from([500, 2500, 5000, 7000]), st.integers(100, 9000)),
        mem_percentage=st.one_of(st.just(MEM_PERCENTAGE_UNSET), st.sampled_from([25, 50, 100]), st.integers(1, 100)),
        coresreq=st.one_of(st.just(0), st.sampled_from([30, 60, 100]), st.integers(1, 100)),
    )


_NVIDIA_ONLY = _request(NVIDIA).map(lambda r: {NVIDIA: r})
_DCU_ONLY = _request(DCU).map(lambda r: {DCU: r})
_BOTH = st.tuples(_request(NVIDIA), _request(DCU)).map(lambda rs: {NVIDIA: rs[0], DCU: rs[1]})
# Built once: hypothesis validates a strategy the first time it draws from it.
CONTAINER_REQUESTS: st.SearchStrategy[dict[str, ContainerRequest] | None] = st.one_of(
    st.none(), _NVIDIA_ONLY, _NVIDIA_ONLY, _NVIDIA_ONLY, _DCU_ONLY, _BOTH
)
GPU_POLICIES = st.sampled_from(["binpack", "spread", "mutex", "topology-aware", "numa", "binpack,numa", "spread,mutex"])
KIND_PREFIXES = st.sampled_from([(), (Kind.INIT,), (Kind.SIDECAR,), *INIT_MIXES])
WEIGHTS = st.sampled_from([(1, 1, 1), (2, 0, 1), (0, 0, 1), (1, 3, 0)])


@st.composite
def pods(draw: st.DrawFn, uid: str) -> PodRequest:
    init_kinds = draw(KIND_PREFIXES)
    n_apps = draw(st.integers(1, 2))
    kinds = (*init_kinds, *([Kind.APP] * n_apps))
    containers = [draw(CONTAINER_REQUESTS) for _ in kinds]
    if not any(containers):
        containers[-1] = {NVIDIA: ContainerRequest(NVIDIA, 1, draw(st.integers(0, 4000)))}
    return pod_request(
        *containers,
        kinds=kinds,
        gpu_policy=draw(GPU_POLICIES),
        numa_bind=draw(st.booleans()),
        node_policy=draw(st.sampled_from(["binpack", "spread"])),
        weights=draw(WEIGHTS),
        uid=uid,
        namespace=draw(st.sampled_from(NAMESPACES)),
        name=uid,
    )


@st.composite
def operations(draw: st.DrawFn, n_nodes: int) -> list[tuple[str, Any]]:
    ops: list[tuple[str, Any]] = []
    for k in range(draw(st.integers(1, 12))):
        op = draw(st.sampled_from(["place", "place", "place", "unplace", "refresh", "drop", "restore", "shrink"]))
        if op == "place":
            ops.append((op, draw(pods(f"pod-{k}"))))
        elif op == "unplace":
            ops.append((op, draw(st.integers(0, 20))))
        else:
            ops.append((op, f"node-{draw(st.integers(0, n_nodes - 1))}"))
    return ops


@st.composite
def scenarios(
    draw: st.DrawFn,
) -> tuple[dict[str, dict[str, NodeInventory]], dict[str, tuple[int | None, int | None]], Any]:
    nodes = draw(clusters())
    quotas = {
        ns: (draw(st.none() | st.integers(0, 60000)), draw(st.none() | st.integers(0, 400)))
        for ns in NAMESPACES
        if draw(st.booleans())
    }
    return nodes, quotas, draw(operations(len(nodes)))


# --- helpers ---------------------------------------------------------------------------------------------------


@dataclass
class World:
    state: ClusterState
    inventories: dict[str, dict[str, NodeInventory]]
    placed: list[str] = field(default_factory=list)
    requests: dict[str, PodRequest] = field(default_factory=dict)


def build(nodes: dict[str, dict[str, NodeInventory]], quotas: dict[str, tuple[int | None, int | None]]) -> World:
    s = ClusterState(vendors())
    for name, inv in nodes.items():
        s.set_node(name, inv)
    for ns, (mem, cores) in quotas.items():
        hard: dict[str, int] = {}
        if mem is not None:
            hard["limits.nvidia.com/gpumem"] = mem
        if cores is not None:
            hard["limits.nvidia.com/gpucores"] = cores
        s.upsert_quota(resource_quota(ns, "q", hard))
    return World(s, dict(nodes))


def over_capacity(s: ClusterState) -> list[str]:
    out = []
    for node in s.nodes.values():
        for table in node.tables.values():
            for i, info in enumerate(table.infos):
                used, mem, cores, _ = table.usage_of(i)
                if used > info.count or mem > info.devmem or cores > info.devcore:
                    out.append(
                        f"{node.name}/{info.id}: {used}/{info.count} slots, "
                        f"{mem}/{info.devmem} MiB, {cores}/{info.devcore} cores"
                    )
    return out


def over_quota(s: ClusterState, quotas: dict[str, tuple[int | None, int | None]]) -> list[str]:
    out = []
    for ns, (mem, cores) in quotas.items():
        used = s.quotas.used.get(ns, {})
        for resource, limit in (("nvidia.com/gpumem", mem), ("nvidia.com/gpucores", cores)):
            if limit is not None and used.get(resource, 0) > limit:
                out.append(f"{ns}: {resource} {used[resource]} > {limit}")
    return out


def snapshot(s: ClusterState) -> tuple[Any, ...]:
    return (
        usage(s),
        {ns: dict(v) for ns, v in s.quotas.used.items()},
        dict(s.pods),
        {n: set(u) for n, u in s.pods_by_node.items()},
        {u: set(m) for u, m in s.dangling.items()},
    )


def run(world: World, op: str, arg: Any) -> Decision | None:
    s = world.state
    if op == "place":
        req: PodRequest = arg
        decision = decide(s, req, [*world.inventories, "ghost-node"], NOW)
        if decision.node is not None:
            reserve(s, req, decision)
            world.placed.append(req.uid)
            world.requests[req.uid] = req
        return decision
    if op == "unplace" and world.placed:
        unreserve(s, world.placed.pop(arg % len(world.placed)))
    elif op == "refresh" and arg in s.nodes:
        s.set_node(
            arg,
            {v: NodeInventory(t.infos, s.nodes[arg].pair_scores.get(v, {})) for v, t in s.nodes[arg].tables.items()},
        )
    elif op == "drop":
        s.remove_node(arg)
    elif op == "restore":
        s.set_node(arg, world.inventories[arg])
    elif op == "shrink" and len(world.inventories[arg][NVIDIA].devices) > 1:
        inv = world.inventories[arg][NVIDIA]
        s.set_node(arg, {**world.inventories[arg], NVIDIA: NodeInventory(inv.devices[:-1], inv.pair_scores)})
    return None


# --- properties ------------------------------------------------------------------------------------------------


@PROPS
@given(scenarios())
def test_no_device_is_ever_over_allocated(scenario: Any) -> None:
    nodes, quotas, ops = scenario
    world = build(nodes, quotas)
    for op, arg in ops:
        run(world, op, arg)
        assert over_capacity(world.state) == [], (op, arg)


@PROPS
@given(scenarios())
def test_no_namespace_ever_exceeds_its_quota(scenario: Any) -> None:
    nodes, quotas, ops = scenario
    world = build(nodes, quotas)
    for op, arg in ops:
        run(world, op, arg)
        assert over_quota(world.state, quotas) == [], (op, arg)


@PROPS
@given(
    st.lists(
        st.tuples(st.integers(1, 3), st.sampled_from([0, 4864, 5000, 9984, 15000, 19968, 30000])),
        min_size=1,
        max_size=10,
    ),
    st.lists(st.integers(0, 9), max_size=4),
)
def test_mig_instances_never_overlap(pods: list[tuple[int, int]], removals: list[int]) -> None:
    s = ClusterState(vendors())
    s.set_node("node-1", {NVIDIA: NodeInventory((mig_gpu("GPU-M"), mig_gpu("GPU-N", index=1)))})
    placed: list[str] = []
    for k, (nums, memory) in enumerate(pods):
        if k in removals and placed:
            unreserve(s, placed.pop(0))
        request = pod_request(ContainerRequest(NVIDIA, nums, memory), uid=f"pod-{k}", gpu_policy="binpack")
        decision = decide(s, request, ["node-1"], NOW)
        if decision.node is not None:
            reserve(s, request, decision)
            placed.append(request.uid)
        table = s.nodes["node-1"].tables[NVIDIA]
        for i in range(len(table)):
            taken = table.slices[i]
            for a in range(len(taken)):
                for b in range(a + 1, len(taken)):
                    assert not overlaps(taken[a], taken[b]), (table.infos[i].id, taken)
        assert over_capacity(s) == []
        assert s.verify() == []


@PROPS
@given(scenarios(), st.randoms(use_true_random=False))
def test_decision_does_not_depend_on_candidate_order(scenario: Any, rnd: random.Random) -> None:
    nodes, quotas, ops = scenario
    world = build(nodes, quotas)
    for op, arg in ops:
        if op == "place":
            candidates = [*world.inventories, "ghost-node"]
            first = decide(world.state, arg, candidates, NOW)
            rnd.shuffle(candidates)
            assert decide(world.state, arg, candidates, NOW) == first
        run(world, op, arg)


@PROPS
@given(scenarios())
def test_reserve_then_unreserve_is_the_identity(scenario: Any) -> None:
    nodes, quotas, ops = scenario
    world = build(nodes, quotas)
    for op, arg in ops:
        if op == "place":
            before = snapshot(world.state)
            decision = decide(world.state, arg, list(world.inventories), NOW)
            if decision.node is not None:
                assert reserve(world.state, arg, decision) is not None
                assert unreserve(world.state, arg.uid) is not None
                assert snapshot(world.state) == before
        run(world, op, arg)


@PROPS
@given(scenarios())
def test_ledger_always_equals_a_full_recount(scenario: Any) -> None:
    nodes, quotas, ops = scenario
    world = build(nodes, quotas)
    for op, arg in ops:
        run(world, op, arg)
        assert world.state.verify() == [], (op, arg)


@PROPS
@given(scenarios())
def test_decisions_are_complete_and_annotated(scenario: Any) -> None:
    nodes, quotas, ops = scenario
    world = build(nodes, quotas)
    for op, arg in ops:
        decision = run(world, op, arg)
        if decision is None or decision.node is None:
            continue
        req: PodRequest = arg
        assert sorted(decision.devices) == list(req.vendors)
        for vendor, per in decision.devices.items():
            assert len(per) == len(req.containers)
            for creq, devs in zip(req.containers, per, strict=True):
                assert len(devs) == (creq[vendor].nums if vendor in creq else 0)
                prefix = decision.node.replace("node-", "n") + "-"
                assert all(d.uuid.startswith(prefix) and d.type == vendor for d in devs), (decision.node, devs)
        ann = decision.annotations
        assert ann["hami.io/vgpu-node"] == decision.node
        assert ann["hami.io/vgpu-time"] == str(NOW)
        for vendor in req.vendors:
            vk = world.state.vendors[vendor].keys
            assert vk.to_allocate is not None
            assert ann[vk.to_allocate] == ann[vk.allocated]
