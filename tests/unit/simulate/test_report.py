"""What ``hami simulate`` prints: the JSON document's exact shape, and the tables."""

from __future__ import annotations

import json

from hami.simulate.loading import load_pods
from hami.simulate.report import decisions_document, render_json, render_pending, render_placements, render_utilization
from tests.unit.simulate.helpers import NOW, simulate


def test_json_document_for_a_placed_pod() -> None:
    _, outcomes = simulate(["kubectl-list.json"], ["pods-web.yaml"])
    assert decisions_document(outcomes) == {
        "decisions": [
            {
                "pod": "default/web",
                "status": "placed",
                "node": "gpu-node-1",
                "devices": [[{"uuid": "GPU-1b", "vendor": "NVIDIA", "memoryMiB": 3000, "cores": 30}]],
                "annotations": {
                    "hami.io/vgpu-devices-allocated": "GPU-1b,NVIDIA,3000,30:;",
                    "hami.io/vgpu-devices-to-allocate": "GPU-1b,NVIDIA,3000,30:;",
                    "hami.io/vgpu-node": "gpu-node-1",
                    "hami.io/vgpu-time": str(NOW),
                },
                "reasons": {"cpu-node": {"NodeUnregistered": 1}},
                "message": "find fit node(gpu-node-1), 1 nodes not fit, 2 nodes fit(gpu-node-2:0.00,gpu-node-1:6.26)",
                "admission": None,  # the simulator of these tests places pods as written
                "warnings": [],
            }
        ]
    }


def test_json_document_for_pending_and_invalid_pods() -> None:
    _, outcomes = simulate(["malformed-node.yaml", "kubectl-list.json"], ["pods-fill.yaml", "pods-bad-quantity.yaml"])
    doc = decisions_document(outcomes)
    decisions = doc["decisions"]
    assert isinstance(decisions, list)
    pending, invalid = decisions[3], decisions[4]
    assert pending == {
        "pod": "batch/fill-4",
        "status": "pending",
        "node": None,
        "devices": [],
        "annotations": {},
        "reasons": {"gpu-node-1": {"CardInsufficientMemory": 2}, "gpu-node-2": {"CardInsufficientMemory": 2}},
        "message": "no available node, 2 nodes do not meet (3 more excluded: 3 not matching nodeSelector pool=t4)",
        "admission": None,
        "warnings": [],
    }
    assert list(invalid) == [
        "pod",
        "status",
        "node",
        "devices",
        "annotations",
        "reasons",
        "message",
        "admission",
        "warnings",
    ]
    assert invalid["status"] == "invalid"
    assert (invalid["pod"], invalid["node"], invalid["devices"], invalid["annotations"], invalid["reasons"]) == (
        "default/bad",
        None,
        [],
        {},
        {},
    )
    assert str(invalid["message"]).endswith(("'lots'", "(got 'lots')"))


def test_json_devices_have_one_list_per_container_init_first() -> None:
    sim, _ = simulate(["snapshot-multi.yaml"], [])
    text = """
kind: Pod
metadata: {name: staged}
spec:
  initContainers: [{name: fetch, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}}]
  containers:
  - {name: no-gpu}
  - {name: main, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 2000, nvidia.com/gpucores: 10}}}
"""
    outcome = sim.place(load_pods([("p.yaml", text)])[0], NOW)
    entry = decisions_document([outcome])["decisions"][0]  # type: ignore[index]
    # binpack: alpha already runs a pod (20000 MiB of 40960), so the busier node is chosen
    assert entry["devices"] == [
        [{"uuid": "GPU-alpha-0", "vendor": "NVIDIA", "memoryMiB": 1000, "cores": 0}],
        [],
        [{"uuid": "GPU-alpha-0", "vendor": "NVIDIA", "memoryMiB": 2000, "cores": 10}],
    ]
    assert (
        entry["annotations"]["hami.io/vgpu-devices-allocated"]
        == "GPU-alpha-0,NVIDIA,1000,0:;;GPU-alpha-0,NVIDIA,2000,10:;"
    )
    assert render_placements([outcome]) == [
        "POD             NODE   DEVICES",
        "default/staged  alpha  init fetch: GPU-alpha-0 (1000 MiB, unlimited cores) | main: GPU-alpha-0 "
        "(2000 MiB, 10%)",
    ]


def test_render_json_is_one_document_with_keys_in_the_documented_order() -> None:
    sim, outcomes = simulate(["kubectl-list.json"], ["pods-web.yaml", "pods-fill.yaml"])
    text = render_json(sim.state, outcomes)
    doc = json.loads(text)
    assert list(doc) == ["summary", "decisions", "utilization", "fragmentation"]
    fields = ["node", "uuid", "index", "vendor", "model", "slots", "memoryMiB", "cores"]
    fields += ["health", "cordoned", "unschedulable", "mig", "blocked", "slices", "dra"]
    assert [list(u) for u in doc["utilization"]] == [fields] * len(doc["utilization"])
    assert [list(d) for d in doc["decisions"]] == [
        ["pod", "status", "node", "devices", "annotations", "reasons", "message", "admission", "warnings"]
    ] * 5
    assert list(doc["decisions"][4]["reasons"]) == ["gpu-node-1", "gpu-node-2"]


def test_tables_for_placed_pending_and_invalid_pods() -> None:
    _, outcomes = simulate(["kubectl-list.json"], ["pods-web.yaml", "pods-fill.yaml"])
    assert render_placements(outcomes) == [
        "POD           NODE        DEVICES",
        "default/web   gpu-node-1  GPU-1b (3000 MiB, 30%)",
        "batch/fill-1  gpu-node-1  GPU-1b (12000 MiB, unlimited cores)",
        "batch/fill-2  gpu-node-2  GPU-2a (12000 MiB, unlimited cores)",
        "batch/fill-3  gpu-node-2  GPU-2b (12000 MiB, unlimited cores)",
        "batch/fill-4  -           pending (see below)",
    ]
    assert render_pending(outcomes) == [
        "batch/fill-4: no available node, 2 nodes do not meet (1 more excluded: 1 not matching nodeSelector pool=t4)",
        "  gpu-node-1: 2/2 CardInsufficientMemory",
        "  gpu-node-2: 2/2 CardInsufficientMemory",
    ]


def test_utilization_lists_every_device() -> None:
    sim, _ = simulate(["hami-encoded.yaml"], [])
    assert render_utilization(sim.state) == [
        "NODE      DEVICE                                    TYPE               SLOTS  MEMORY MiB   CORES   NOTE",
        "a10-node  GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76  NVIDIA-NVIDIA A10  2/10   6000/23028   60/100",
        "a10-node  GPU-4b1e2c8a-9f0d-3e7b-a1c2-5d6e7f809a1b  NVIDIA-NVIDIA A10  2/10   5000/23028   40/100",
        "dcu-node  DCU-0                                     DCU-Z100L          1/4    16000/65520  50/100",
        "dcu-node  DCU-1                                     DCU-Z100L          0/4    0/65520      0/100",
    ]
