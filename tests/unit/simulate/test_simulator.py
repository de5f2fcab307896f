"""The simulator: building the state from a snapshot and placing pods in order with the decision core."""

from __future__ import annotations

from hami.config import default_device_config
from hami.devices.base import NodeInventory
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Pod
from hami.scheduling.request import SchedulingDefaults
from hami.simulate.loading import Sourced, load_pods, load_snapshot
from hami.simulate.simulator import Simulator, container_devices
from tests.unit.simulate.helpers import DATA, NOW, simulate

A10_0 = "GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76"
A10_1 = "GPU-4b1e2c8a-9f0d-3e7b-a1c2-5d6e7f809a1b"


def _usage(sim: Simulator, node: str, vendor: str = "NVIDIA") -> dict[str, tuple[int, int, int]]:
    """uuid -> (slots, MiB, cores) used."""
    table = sim.state.nodes[node].tables[vendor]
    return {info.id: (table.used[i], table.usedmem[i], table.usedcores[i]) for i, info in enumerate(table.infos)}


def _uuids(outcome_devices: list[list[ContainerDevice]]) -> list[list[str]]:
    return [[d.uuid for d in c] for c in outcome_devices]


def test_pods_placed_by_hami_are_charged_from_their_annotations() -> None:
    sim, _ = simulate(["hami-encoded.yaml"], [])
    # infer-a + infer-b (3000/30 each); with-logger 1000/30 (its second container has no GPU); warmup's init
    # container (2000/0) and app container (4000/10) collapse to max: 4000 MiB, 10 cores, one slot.
    assert _usage(sim, "a10-node") == {A10_0: (2, 6000, 60), A10_1: (2, 5000, 40)}
    assert _usage(sim, "dcu-node", "DCU") == {"DCU-0": (1, 16000, 50), "DCU-1": (0, 0, 0)}
    assert sorted(r.key for r in sim.state.pods.values()) == [
        "research/dcu-train",
        "serving/infer-a",
        "serving/infer-b",
        "serving/warmup",
        "serving/with-logger",
    ]
    assert sim.warnings == []
    assert sim.state.verify() == []


def test_charged_usage_steers_the_next_placements() -> None:
    sim, outcomes = simulate(["hami-encoded.yaml"], ["pods-hami.yaml"])
    cores, dcu = outcomes
    # binpack would take GPU 0 (busiest) but it has 40 of the 45 cores asked; DCU-0 has 49520 of 50000 MiB.
    assert (cores.node, _uuids(container_devices(cores.decision))) == ("a10-node", [[A10_1]])
    assert cores.reasons == {"dcu-node": {"NodeUnregistered": 1}}
    assert (dcu.node, _uuids(container_devices(dcu.decision))) == ("dcu-node", [["DCU-1"]])
    assert _usage(sim, "a10-node")[A10_1] == (3, 15000, 85)
    assert sim.state.verify() == []


def test_finished_pods_and_pods_without_devices_are_not_charged() -> None:
    sim, _ = simulate(["kubectl-list.json"], [])
    assert _usage(sim, "gpu-node-1") == {"GPU-1a": (1, 10000, 50), "GPU-1b": (0, 0, 0)}
    assert _usage(sim, "gpu-node-2") == {"GPU-2a": (0, 0, 0), "GPU-2b": (0, 0, 0)}  # finished-job: Succeeded
    assert [r.key for r in sim.state.pods.values()] == ["default/trainer-0"]
    assert sim.state.nodes["cpu-node"].tables == {}


def test_each_placement_is_reserved_before_the_next_pod() -> None:
    sim, outcomes = simulate(["kubectl-list.json"], ["pods-fill.yaml"])
    placed = [(o.pod, o.node, _uuids(container_devices(o.decision))) for o in outcomes]
    assert placed == [
        ("batch/fill-1", "gpu-node-1", [["GPU-1b"]]),  # binpack: the busiest node; GPU-1a has only 5360 MiB free
        ("batch/fill-2", "gpu-node-2", [["GPU-2a"]]),
        ("batch/fill-3", "gpu-node-2", [["GPU-2b"]]),
        ("batch/fill-4", None, []),
    ]
    last = outcomes[3]
    assert last.status == "pending"
    assert last.reasons == {"gpu-node-1": {"CardInsufficientMemory": 2}, "gpu-node-2": {"CardInsufficientMemory": 2}}
    assert last.message == (
        "no available node, 2 nodes do not meet (1 more excluded: 1 not matching nodeSelector pool=t4)"
    )
    assert {o.rejected["gpu-node-1"].summary for o in outcomes[3:]} == {"2/2 CardInsufficientMemory"}
    assert sorted(sim.state.pods) == [
        "7a1e2b3c-0001-4d5e-8f90-aaaaaaaaaaa1",
        "sim-batch-fill-1",
        "sim-batch-fill-2",
        "sim-batch-fill-3",
    ]
    assert sim.state.verify() == []


def test_namespace_quota_from_the_snapshot_is_enforced() -> None:
    _, outcomes = simulate(["kubectl-list.json"], ["pods-quota.json"])
    q1, q2, q3 = outcomes
    assert q1.node == "gpu-node-1"
    assert q2.node is None  # 5000 + 5000 > 8000
    assert q2.reasons == {
        "cpu-node": {"NodeUnregistered": 1},
        "gpu-node-1": {"ResourceQuotaNotFit": 2},
        "gpu-node-2": {"ResourceQuotaNotFit": 2},
    }
    assert q3.node is not None  # 5000 + 3000 = 8000 still fits


def test_node_selector_and_unschedulable_nodes_are_not_candidates() -> None:
    _, outcomes = simulate(["snapshot-multi.yaml"], ["pods-zones.yaml"])
    east1, east2, anywhere = outcomes
    assert east1.node == "alpha"  # gamma is east too but unschedulable
    assert east2.node is None
    assert east2.reasons == {"alpha": {"CardInsufficientMemory": 1}}  # 20000 + 20000 + 20000 > 40960
    assert anywhere.node == "beta"
    assert set(anywhere.reasons) == {"alpha"}  # gamma never considered


def test_a_malformed_node_is_skipped_with_a_warning_and_the_rest_schedules() -> None:
    sim, outcomes = simulate(["malformed-node.yaml"], ["pods-web.yaml"])
    assert [(o.pod, o.node) for o in outcomes] == [("default/web", "healthy")]
    assert len(sim.warnings) == 1
    warning = sim.warnings[0]
    assert warning.startswith(f"{DATA / 'malformed-node.yaml'}: document 1 (Node broken): ")
    assert "hami.io/node-nvidia-register" in warning
    assert "GPU-broken-0" not in {i.id for n in sim.state.nodes.values() for t in n.tables.values() for i in t.infos}


def _sim_with_nodes(**inventories: tuple[DeviceInfo, ...]) -> Simulator:
    sim = Simulator(default_device_config(), SchedulingDefaults())
    for name, devices in inventories.items():
        sim.state.set_node(name, {"NVIDIA": NodeInventory(devices)} if devices else {})
    return sim


def _pod(name: str, limits: str = "nvidia.com/gpu: 1", extra: str = "") -> Sourced[Pod]:
    """A pod to place, from ``pods.yaml``: ``limits`` and ``extra`` are YAML flow-map entries."""
    containers = f"[{{name: c, resources: {{limits: {{{limits}}}}}}}]"
    text = f"kind: Pod\nmetadata: {{name: {name}{extra}}}\nspec:\n  containers: {containers}\n"
    return load_pods([("pods.yaml", text)])[0]


def _node_yaml(name: str, annotations: dict[str, str] | None = None) -> str:
    lines = [f"    {k}: '{v}'" for k, v in (annotations or {}).items()]
    return "\n".join(["kind: Node", "metadata:", f"  name: {name}", "  annotations:" if lines else "", *lines, ""])


def _placed_pod_yaml(name: str, node: str, allocated: str) -> str:
    return "\n".join(
        [
            "kind: Pod",
            "metadata:",
            f"  name: {name}",
            "  namespace: x",
            "  annotations:",
            f"    hami.io/vgpu-node: {node}",
            f'    hami.io/vgpu-devices-allocated: "{allocated}"',
            "",
        ]
    )


T4_REGISTER = '[{"id":"GPU-a","count":10,"devmem":1000,"devcore":100,"type":"T","health":true}]'


T4 = DeviceInfo(id="GPU-t4", count=10, devmem=15360, devcore=100, type="NVIDIA-Tesla T4", mode="hami-core", health=True)


def test_node_level_reasons_are_one_code_with_count_one() -> None:
    sim = _sim_with_nodes(good=(T4,), cpu=())
    sim.state.set_node("quarantined", {}, problems={"NVIDIA": "hami.io/node-nvidia-register: invalid JSON"})
    outcome = sim.place(_pod("big", "nvidia.com/gpu: 1, nvidia.com/gpumem: 20000"), NOW)
    assert outcome.reasons == {
        "cpu": {"NodeUnregistered": 1},
        "good": {"CardInsufficientMemory": 1},
        "quarantined": {"NodeQuarantined": 1},
    }
    assert outcome.rejected["quarantined"].summary == "registration refused: hami.io/node-nvidia-register: invalid JSON"


def test_pods_without_uid_get_deterministic_unique_ones() -> None:
    sim = _sim_with_nodes(good=(T4,))
    first = sim.place(_pod("same", "nvidia.com/gpu: 1, nvidia.com/gpumem: 1000"), NOW)
    second = sim.place(_pod("same", "nvidia.com/gpu: 1, nvidia.com/gpumem: 1000"), NOW)
    assert first.decision is not None
    assert second.decision is not None
    assert (first.decision.uid, second.decision.uid) == ("sim-default-same", "sim-default-same-2")
    assert _usage(sim, "good") == {"GPU-t4": (2, 2000, 0)}  # both charged


def test_a_given_uid_is_kept() -> None:
    sim = _sim_with_nodes(good=(T4,))
    outcome = sim.place(_pod("named", extra=", namespace: ns, uid: abc-123"), NOW)
    assert outcome.decision is not None
    assert (outcome.pod, outcome.decision.uid) == ("ns/named", "abc-123")


def test_an_invalid_request_gives_no_node_and_the_error_then_the_next_pod_is_placed() -> None:
    _, outcomes = simulate(["malformed-node.yaml"], ["pods-bad-quantity.yaml"])
    bad, good = outcomes
    assert (bad.status, bad.node, bad.decision, bad.reasons) == ("invalid", None, None, {})
    assert bad.message.startswith(f"{DATA / 'pods-bad-quantity.yaml'}: document 1 (Pod default/bad): ")
    assert "'lots'" in bad.message
    assert (good.status, good.node) == ("placed", "healthy")
    assert "nvidia.com/gpumem" in bad.message


def test_an_invalid_policy_annotation_is_an_invalid_request() -> None:
    sim = _sim_with_nodes(good=(T4,))
    outcome = sim.place(_pod("p", extra=", annotations: {hami.io/gpu-scheduler-policy: fastest}"), NOW)
    assert outcome.status == "invalid"
    assert outcome.message == (
        "pods.yaml: document 1 (Pod p): hami.io/gpu-scheduler-policy: unknown GPU policy 'fastest'; expected one of "
        "binpack, mutex, numa, spread, topology-aware"
    )


def test_a_pod_without_device_requests_is_not_placed() -> None:
    sim = _sim_with_nodes(good=(T4,))
    outcome = sim.place(_pod("cpu-only", "cpu: 2"), NOW)
    assert (outcome.status, outcome.node, outcome.reasons) == ("no-devices", None, {})
    assert outcome.message == "pod requests no managed device"


def test_snapshot_problems_become_warnings() -> None:
    text = "---\n".join(
        [
            _node_yaml("n1", {"hami.io/node-nvidia-register": T4_REGISTER}),
            _placed_pod_yaml("elsewhere", "gone", "GPU-z,NVIDIA,10,0:;"),
            _placed_pod_yaml("ghost-device", "n1", "GPU-zz,NVIDIA,10,0:;"),
            _node_yaml("n1"),
        ]
    )
    sim = Simulator(default_device_config(), SchedulingDefaults())
    sim.add_snapshot(load_snapshot([("s.yaml", text)]))
    assert sim.warnings == [
        "s.yaml: document 4 (Node n1): node n1 also in s.yaml: document 1 (Node n1); the later one is used",
        "s.yaml: document 3 (Pod x/ghost-device): node n1 does not register device(s) GPU-zz",
        "pod x/elsewhere holds devices on node gone, which is not in the snapshot",
    ]


def test_an_undecodable_allocation_on_a_snapshot_pod_is_a_warning() -> None:
    sim = Simulator(default_device_config(), SchedulingDefaults())
    sim.add_snapshot(load_snapshot([("s.yaml", _placed_pod_yaml("odd", "n1", "GPU-a,NVIDIA,lots,0:;"))]))
    # The pod is kept (charged for what decoded) and reported; its node is not in the snapshot either.
    assert len(sim.warnings) == 2
    assert sim.warnings[0].startswith("s.yaml: document 1 (Pod x/odd): hami.io/vgpu-devices-allocated: invalid memory")
    assert "lots" in sim.warnings[0]
    assert sim.warnings[1] == "pod x/odd holds devices on node n1, which is not in the snapshot"


def test_devices_of_several_vendors_are_concatenated_per_container() -> None:
    registers = {
        "hami.io/node-nvidia-register": T4_REGISTER,
        "hami.io/node-dcu-register": "DCU-9,4,65520,100,DCU-Z100L,0,true,0,hami-core:",
    }
    node = _node_yaml("both", registers)
    sim = Simulator(default_device_config(), SchedulingDefaults())
    sim.add_snapshot(load_snapshot([("n.yaml", node)]))
    pod = _pod("mixed", "nvidia.com/gpu: 1, nvidia.com/gpumem: 100, hygon.com/dcunum: 1, hygon.com/dcumem: 100")
    outcome = sim.place(pod, NOW)
    assert outcome.node == "both"
    assert container_devices(outcome.decision) == [
        [ContainerDevice("DCU-9", "DCU", 100, 100), ContainerDevice("GPU-a", "NVIDIA", 100, 0)]
    ]
