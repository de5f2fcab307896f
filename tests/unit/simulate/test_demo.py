"""``hami simulate --demo``: the built-in cluster and workload, and the behaviours it claims to show."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from hami.config import default_device_config
from hami.devices.nvidia.mig import mig_allocations
from hami.protocol.inventory import decode_inventory_json, encode_inventory_json
from hami.scheduling.request import SchedulingDefaults
from hami.simulate.demo import DEMO_CLUSTER, DEMO_WORKLOAD, demo_sources
from hami.simulate.loading import load_pods, load_snapshot
from hami.simulate.simulator import Outcome, Simulator, container_devices
from tests.unit.simulate.helpers import NOW, run_cli

EXPECTED = {
    "demo/share-1": ("t4-b", [["GPU-t4b-0"]]),
    "demo/share-2": ("t4-b", [["GPU-t4b-0"]]),
    "demo/share-3": ("t4-b", [["GPU-t4b-0"]]),
    "demo/spread-1": ("t4-a", [["GPU-t4a-2"]]),
    "demo/spread-2": ("t4-a", [["GPU-t4a-3"]]),
    "demo/infer-a100": ("a100-nvlink", [["GPU-a100-4"]]),
    "demo/train-nvlink": ("a100-nvlink", [["GPU-a100-0", "GPU-a100-1", "GPU-a100-2", "GPU-a100-3"]]),
    "demo/batch-2gpu": ("a100-nvlink", [["GPU-a100-5", "GPU-a100-6"]]),
    "demo/numa-pair": ("a100-nvlink", [["GPU-a100-0", "GPU-a100-1"]]),
    "demo/mig-2g": ("mig-a100", [["GPU-mig-0"]]),
    "demo/mig-1g": ("mig-a100", [["GPU-mig-0"]]),
    "demo/dcu-job": ("dcu-z100", [["DCU-z100-2"]]),
    "demo/xpu-train": ("xpu-p800", [[f"xpu-p800-kunlun-{i}" for i in range(4)]]),
    "demo/vxpu-infer": ("vxpu-p800", [["XPU-p800-0", "XPU-p800-1"]]),
    "demo/gcu-drs": ("drs-s60", [["drs-s60-enflame-drs-0"]]),
    "demo/gcu-whole": ("gcu-s60", [["gcu-s60-GCU-0", "gcu-s60-GCU-1"]]),
    "demo/neuron-cores": ("inf2-24xl", [["inf2-24xl-AWSNeuron-0", "inf2-24xl-AWSNeuron-1"]]),
    "demo/mlu-job": ("mlu370", [["mlu370-cambricon-mlu-0"]]),
    "demo/mthreads-pair": ("mtt-s4000", [["mtt-s4000-mthreads-0"], ["mtt-s4000-mthreads-0"]]),
    "demo/amd-half": ("amd-mi300x", [["AMD-mi300x-0"]]),
    "demo/biren-pair": ("biren-br106", [["BR-br106-0", "BR-br106-1"]]),
    "demo/vastai-one": ("vastai-va1", [["VA-va1-0"]]),
    "demo/vastai-card": ("vastai-va1", [["VA-va1-2", "VA-va1-3"]]),
    "demo/iluvatar-job": ("iluvatar-mrv100", [["ilu-mrv100-0"]]),
    "demo/metax-cards": ("metax-c500", [["metax-c500-metax-0", "metax-c500-metax-1"]]),
    "demo/metax-slice": ("metax-sgpu", [["sgpu-0"]]),
    "demo/init-then-serve": ("t4-b", [["GPU-t4b-2"], ["GPU-t4b-2"]]),
    "demo/too-big": (None, []),
    "demo/npu-vnpu": ("ascend-910b3", [["NPU-910b3-0"]]),
    "demo/npu-pair": ("ascend-910b3", [["NPU-910b3-2", "NPU-910b3-3"]]),
}


def _run(workload_edit: tuple[str, str] | None = None) -> tuple[Simulator, dict[str, Outcome]]:
    cluster, workload = demo_sources()
    if workload_edit is not None:
        old, new = workload_edit
        assert old in workload[0][1]
        workload = [(workload[0][0], workload[0][1].replace(old, new)), *workload[1:]]
    sim = Simulator(default_device_config(), SchedulingDefaults())
    sim.add_snapshot(load_snapshot(cluster))
    return sim, {o.pod: o for o in (sim.place(p, NOW) for p in load_pods(workload))}


def test_demo_places_every_pod_as_described() -> None:
    sim, outcomes = _run()
    placed = {
        pod: (o.node, [[d.uuid for d in c] for c in container_devices(o.decision)]) for pod, o in outcomes.items()
    }
    assert placed == EXPECTED
    assert sim.warnings == []
    assert sim.state.verify() == []


def test_demo_mig_pods_get_the_smallest_fitting_profile() -> None:
    _, outcomes = _run()
    mig = {
        pod: mig_allocations(outcomes[pod].decision.slices["NVIDIA"])  # type: ignore[union-attr]
        for pod in ("demo/mig-2g", "demo/mig-1g")
    }
    assert {pod: [(m.profile, m.placement.start, m.placement.size) for m in ms] for pod, ms in mig.items()} == {
        "demo/mig-2g": [("2g.20gb", 0, 2)],
        "demo/mig-1g": [("1g.10gb", 6, 1)],
    }
    annotations = outcomes["demo/mig-2g"].decision.annotations  # type: ignore[union-attr]
    assert json.loads(annotations["hami.io/vgpu-mig-allocations"]) == [
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": "GPU-mig-0",
            "profile": "2g.20gb",
            "placement": {"start": 0, "size": 2},
        }
    ]


def test_demo_pending_pod_has_a_reason_for_every_node() -> None:
    _, outcomes = _run()
    assert outcomes["demo/too-big"].reasons == {
        "a100-nvlink": {"AllocatedCardsInsufficientRequest": 1, "CardInsufficientMemory": 7},
        "ascend-910b3": {"NodeUnregistered": 1},
        "dcu-z100": {"NodeUnregistered": 1},
        "drs-s60": {"NodeUnregistered": 1},
        "gcu-s60": {"NodeUnregistered": 1},
        "inf2-24xl": {"NodeUnregistered": 1},
        "amd-mi300x": {"NodeUnregistered": 1},
        "biren-br106": {"NodeUnregistered": 1},
        "vastai-va1": {"NodeUnregistered": 1},
        "iluvatar-mrv100": {"NodeUnregistered": 1},
        "metax-c500": {"NodeUnregistered": 1},
        "metax-sgpu": {"NodeUnregistered": 1},
        "mig-a100": {"CardInsufficientMemory": 1},
        "mlu370": {"NodeUnregistered": 1},
        "mtt-s4000": {"NodeUnregistered": 1},
        "t4-a": {"CardInsufficientMemory": 4},
        "t4-b": {"CardInsufficientMemory": 4},
        "vxpu-p800": {"NodeUnregistered": 1},
        "xpu-p800": {"NodeUnregistered": 1},
    }


def test_without_topology_aware_the_four_gpus_straddle_the_quads() -> None:
    """The workload's comment: spread alone would take GPUs 5, 6, 7, 0 (pair-score sum 1030, not 2000)."""
    _, outcomes = _run(('hami.io/gpu-scheduler-policy: "topology-aware"', 'hami.io/gpu-scheduler-policy: "spread"'))
    devices = container_devices(outcomes["demo/train-nvlink"].decision)
    assert [d.uuid for d in devices[0]] == ["GPU-a100-5", "GPU-a100-6", "GPU-a100-7", "GPU-a100-0"]


def test_without_numa_binding_the_pair_straddles_numa_nodes() -> None:
    """The workload's comment: without nvidia.com/numa-bind the pair would take GPU 7 (NUMA 1) and GPU 0 (NUMA 0)."""
    _, outcomes = _run(('nvidia.com/numa-bind: "true"', 'nvidia.com/numa-bind: "false"'))
    devices = container_devices(outcomes["demo/numa-pair"].decision)
    assert [d.uuid for d in devices[0]] == ["GPU-a100-7", "GPU-a100-0"]


def test_demo_registrations_are_in_hamis_encoder_format() -> None:
    snap = load_snapshot(demo_sources()[0])
    nvidia = [
        n.obj.metadata.annotations["hami.io/node-nvidia-register"]
        for n in snap.nodes
        if "hami.io/node-nvidia-register" in n.obj.metadata.annotations
    ]
    assert len(nvidia) == 4
    for value in nvidia:
        assert encode_inventory_json(decode_inventory_json(value, "hami.io/node-nvidia-register")) == value
    dcu = next(n.obj for n in snap.nodes if n.obj.metadata.name == "dcu-z100")
    records = dcu.metadata.annotations["hami.io/node-dcu-register"].split(":")
    assert records[-1] == ""  # every record is terminated by ':'
    assert all(len(r.split(",")) == 9 for r in records[:-1])


def test_demo_iluvatar_and_metax_pods_carry_their_vendors_annotations() -> None:
    _, outcomes = _run()
    iluvatar = outcomes["demo/iluvatar-job"].decision.annotations  # type: ignore[union-attr]
    assert iluvatar["hami.io/MR-V100-devices-allocated"] == "ilu-mrv100-0,MR-V100,4096,50:;"
    cards = outcomes["demo/metax-cards"].decision.annotations  # type: ignore[union-attr]
    assert cards["hami.io/metax-gpu-devices-allocated"] == (
        "metax-c500-metax-0,Metax-GPU,65536,100:metax-c500-metax-1,Metax-GPU,65536,100:;"
    )
    sgpu = outcomes["demo/metax-slice"].decision.annotations  # type: ignore[union-attr]
    assert sgpu["hami.io/metax-sgpu-devices-allocated"] == "sgpu-0,Metax-SGPU,8192,30:;"
    assert sgpu["metax-tech.com/gpu-devices-allocated"] == '[[{"uuid":"sgpu-0","compute":30,"vRam":8192}]]'


def test_demo_files_are_package_data() -> None:
    root = resources.files("hami.simulate")
    assert root.joinpath(DEMO_CLUSTER).is_file()
    assert root.joinpath(DEMO_WORKLOAD).is_file()


def test_demo_command_prints_placements_utilization_and_reasons() -> None:
    result = run_cli("--demo")
    assert result.code == 0
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == "hami simulate --demo: 19 nodes, 71 devices; 30 pods in order: 29 placed, 1 pending"
    for heading in (
        "Placements",
        "Per-device utilization after placement",
        "Pending pods and why each node was rejected",
    ):
        assert heading in lines
    words = [" ".join(line.split()) for line in lines]  # column widths follow the longest names
    assert (
        "demo/train-nvlink a100-nvlink GPU-a100-0, GPU-a100-1, GPU-a100-2, GPU-a100-3 (40000 MiB, unlimited cores each)"
        in words
    )
    assert "demo/mig-2g mig-a100 GPU-mig-0 (19968 MiB, 28%, MIG 2g.20gb@0)" in words
    assert "t4-b GPU-t4b-0 NVIDIA-Tesla T4 4/10 14000/15360 90/100" in words
    assert "mig-a100 GPU-mig-0 NVIDIA A100-SXM4-80GB 2/7 29696/81920 42/100 MIG: 1g.10gb@6 2g.20gb@0" not in words
    assert "mig-a100 GPU-mig-0 NVIDIA A100-SXM4-80GB 2/7 29696/81920 42/100 MIG: 2g.20gb@0 1g.10gb@6" in words
    assert "demo/amd-half amd-mi300x AMD-mi300x-0 (65536 MiB, 152/304 cores)" in words
    assert "demo/npu-vnpu ascend-910b3 NPU-910b3-0 (16384 MiB, slice vir05_1c_16g)" in words
    assert "demo/npu-pair ascend-910b3 NPU-910b3-2, NPU-910b3-3 (65536 MiB, unlimited cores each)" in words
    others = (
        "amd-mi300x, ascend-910b3, biren-br106, dcu-z100, drs-s60, gcu-s60, iluvatar-mrv100, inf2-24xl, metax-c500, "
        "metax-sgpu, mlu370, mtt-s4000, vastai-va1, vxpu-p800, xpu-p800"
    )
    assert lines[-6:] == [
        "demo/too-big: no available node, 19 nodes do not meet",
        "  a100-nvlink: 1/8 AllocatedCardsInsufficientRequest, 7/8 CardInsufficientMemory",
        f"  15 nodes ({others}): node unregistered for NVIDIA",
        "  mig-a100: 1/1 CardInsufficientMemory",
        # two nodes with the same reason stay on their own lines
        "  t4-a: 4/4 CardInsufficientMemory",
        "  t4-b: 4/4 CardInsufficientMemory",
    ]


def test_demo_json_output() -> None:
    result = run_cli("--demo", "-o", "json", "--now", "7")
    decisions = json.loads(result.stdout)["decisions"]
    assert {d["pod"]: d["node"] for d in decisions} == {pod: node for pod, (node, _) in EXPECTED.items()}
    assert {d["annotations"].get("hami.io/vgpu-time") for d in decisions} == {"7", None}


def _shown(page: str) -> str:
    text = (Path(__file__).parents[3] / page).read_text(encoding="utf-8")
    return text.split("$ hami simulate --demo\n", 1)[1].split("\n```", 1)[0]


def test_the_docs_show_the_demos_real_output() -> None:
    assert _shown("docs/index.md") == run_cli("--demo").stdout.rstrip("\n")


def test_the_readmes_demo_excerpt_is_lines_of_the_real_output_in_order() -> None:
    """The README shows an excerpt: each of its lines is a line of the real output, in the output's order."""
    excerpt = _shown("README.md").splitlines()
    output = iter(run_cli("--demo").stdout.splitlines())
    missing = [line for line in excerpt if not any(line == real for real in output)]
    assert not missing, f"README demo lines not in the output (or out of order): {missing}"
    assert len(excerpt) >= 10


def test_demo_amd_biren_and_vastai_pods_write_hamis_annotations() -> None:
    _, outcomes = _run()
    annotations = {
        pod: outcomes[pod].decision.annotations  # type: ignore[union-attr]
        for pod in ("demo/amd-half", "demo/biren-pair", "demo/vastai-card")
    }
    assert annotations["demo/amd-half"]["hami.io/amd-devices-allocated"] == (
        "AMD-mi300x-0,AMD Instinct MI300X,65536,152:;"  # 50% of 304 compute units
    )
    assert (
        annotations["demo/biren-pair"]["hami.io/Biren-devices-allocated"]
        == "BR-br106-0,Biren,0,0:BR-br106-1,Biren,0,0:;"
    )
    assert annotations["demo/vastai-card"]["hami.io/Vastai-devices-allocated"] == (
        "VA-va1-2,Vastai,0,0:VA-va1-3,Vastai,0,0:;"
    )
    json_nodes = {"amd-mi300x": "hami.io/node-amd-register", "biren-br106": "hami.io/node-biren-register"}
    for node in load_snapshot(demo_sources()[0]).nodes:
        key = json_nodes.get(node.obj.metadata.name)
        if key is not None:
            value = node.obj.metadata.annotations[key]
            assert encode_inventory_json(decode_inventory_json(value, key)) == value


def test_neuron_core_masks_show_as_the_cores_they_hold() -> None:
    """AWS Neuron keeps a device's cores as a bitmask (0b11 for two); reports, hami top and /metrics show cores."""
    from hami.server.metrics import Metrics
    from hami.simulate.report import utilization_document
    from hami.simulate.top import build_top, render_top

    sim, _ = _run()
    neuron = [d for d in utilization_document(sim.state) if d["vendor"] == "AWSNeuron"]
    assert neuron
    assert {(d["uuid"], str(d["cores"])) for d in neuron if d["uuid"].endswith(("-0", "-2"))} == {
        ("inf2-24xl-AWSNeuron-0", "{'used': 2, 'total': 2}"),
        ("inf2-24xl-AWSNeuron-2", "{'used': 0, 'total': 2}"),
    }
    view = build_top(sim.state)
    cards = [c for n in view.nodes for c in n.cards if c.vendor == "AWSNeuron"]
    assert {c.cores for c in cards} == {(2, 2), (0, 2)}
    assert all(p.cores == 2 for c in cards for p in c.pods)
    assert "3/3" not in render_top(view)
    metrics = Metrics(lambda: sim.state)
    limit = metrics.registry.get_sample_value(
        "hami_gpu_core_allocated_ratio",
        {
            "node": "inf2-24xl",
            "device_uuid": "inf2-24xl-AWSNeuron-0",
            "device_index": "0",
            "device_type": "AWSNeuron",
            "zone": "vGPU",
        },
    )
    assert limit == 100  # both cores held: 100 %, not HAMi's ceil(3 / 3 × 100) by accident of the mask
