"""DRA-mode pods in ``hami top`` and in the pod-level metrics with HAMi's names: a claim's share is shown and
exported under the pod it serves, like a device-plugin pod's allocation (issue 38), on a card hami's registration
describes and on a node only the DRA driver serves."""

from __future__ import annotations

from typing import Any

import msgspec

from hami.protocol.drapod import as_written, claim_containers, dra_requests
from hami.protocol.objects import Pod
from hami.scheduling.dra import claim_users
from hami.server.metrics import Metrics
from hami.server.scrape import state_text
from hami.simulate.loading import Sourced, load_snapshot
from hami.simulate.simulator import Simulator
from hami.simulate.top import TopFilter, build_top, render_top, top_json
from tests.unit.server.test_scrape import reference
from tests.unit.simulate.clusterfix import node, pod, simulator, snapshot_text
from tests.unit.simulate.dramodefix import claim_name, dra_claim, dra_pod, hami_slice, uuid

MIXED = "gpu-a"  # hami's device plugin and the DRA plugin both serve its cards (same UUIDs)
ONLY = "dra-b"  # only the DRA plugin: no hami registration


def mixed_slice() -> dict[str, Any]:
    sl = hami_slice(MIXED, [16000, 16000], model="NVIDIA-Tesla T4")
    for i, dev in enumerate(sl["spec"]["devices"]):
        dev["attributes"]["uuid"] = {"string": f"GPU-{MIXED}-{i}"}
    return sl


def world() -> Simulator:
    return simulator(
        node(MIXED, [(16000, 10), (16000, 10)]),
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": ONLY, "labels": {"gpu": "on"}}},
        mixed_slice(),
        hami_slice(ONLY, [24000, 24000]),
        pod("train", 6000, 30, namespace="ml", on=MIXED),
        dra_pod("infer", 3000, 20, namespace="ml", on=MIXED),
        dra_claim("infer", MIXED, [(0, 3000, 20)], namespace="ml"),
        dra_pod("serve", 8000, 50, namespace="web", on=ONLY, container="srv"),
        dra_claim("serve", ONLY, [(1, 8000, 50)], namespace="web", container="srv"),
    )


def test_a_claims_share_is_shown_under_its_pod_with_its_container() -> None:
    sim = world()
    view = build_top(sim.state, TopFilter(), sim.dra, sim.dra_served, sim.claim_containers)
    cards = {(c.node, c.index): c for n in view.nodes for c in n.cards}
    first = cards[(MIXED, 0)]
    assert [(p.pod, p.mem, p.cores, p.mode, p.container) for p in first.pods] == [
        ("ml/train", 6000, 30, "extender", ""),
        ("ml/infer", 3000, 20, "dra", "main"),
    ]
    assert first.memory == (9000, 16000)
    assert first.cores == (50, 100)
    text = render_top(view)
    assert "ml/train (6000 MiB, 30%), ml/infer (3000 MiB, 20%, DRA main); DRA 1 claim (3000 MiB, 20%)" in text
    doc = top_json(view)
    (entry,) = [p for n in doc["nodes"] for c in n["cards"] for p in c["pods"] if p["pod"] == "ml/infer"]
    assert entry == {
        "pod": "ml/infer",
        "memoryMiB": 3000,
        "cores": 20,
        "mode": "dra",
        "claim": claim_name("infer"),
        "container": "main",
    }


def test_a_node_only_the_dra_driver_serves_shows_its_published_cards() -> None:
    sim = world()
    assert sim.dra_served == {ONLY: frozenset({"NVIDIA"})}
    view = build_top(sim.state, TopFilter(node=ONLY), sim.dra, sim.dra_served, sim.claim_containers)
    (row,) = view.nodes
    assert row.schedulable
    assert row.dra_served == ("NVIDIA",)
    assert not row.not_allocatable
    assert [(c.index, c.uuid, c.model, c.memory, c.cores, c.dra_only) for c in row.cards] == [
        (0, uuid(ONLY, 0), "NVIDIA A10", (0, 24000), (0, 100), True),
        (1, uuid(ONLY, 1), "NVIDIA A10", (8000, 24000), (50, 100), True),
    ]
    assert [(p.pod, p.container) for p in row.cards[1].pods] == [("web/serve", "srv")]
    text = render_top(view)
    assert "dra-b  2 cards, schedulable, NVIDIA served by a DRA driver (DRA-mode pods)" in text
    line = next(x for x in text.splitlines() if uuid(ONLY, 1) in x)
    assert " 1/- " in line
    assert "web/serve (8000 MiB, 50%, DRA srv)" in line
    assert top_json(view)["nodes"][0]["draServed"] == ["NVIDIA"]


def test_the_namespace_filter_keeps_dra_mode_pods_of_that_namespace() -> None:
    sim = world()
    view = build_top(sim.state, TopFilter(namespace="web"), sim.dra, sim.dra_served, sim.claim_containers)
    assert [(c.node, c.index) for n in view.nodes for c in n.cards] == [(ONLY, 1)]


def test_hami_places_no_device_plugin_pod_on_a_node_only_the_dra_driver_serves() -> None:
    sim = world()  # 20000 MiB: no card of gpu-a (16000) holds it; dra-b's (24000) would, were it hami's
    loaded = load_snapshot([("p.json", snapshot_text(pod("p", 20000)))]).pods[0].obj
    outcome = sim.place(Sourced(loaded, "p.json", "p"), 1_700_000_000)
    assert outcome.node is None
    assert outcome.reasons[ONLY] == {"NodeDevicesNotAllocatable": 1}


def test_the_per_pod_metrics_carry_a_claims_share_under_its_pod() -> None:
    sim = world()
    assert [(r.name, p) for r, p in claim_users(sim.state)] == [
        (claim_name("infer"), "infer"),
        (claim_name("serve", "srv"), "serve"),
    ]
    metrics = Metrics(lambda: sim.state)
    labels = {"namespace": "ml", "node": MIXED, "pod": "infer", "container_index": "0", "zone": "vGPU"}
    got = metrics.registry.get_sample_value(
        "hami_vgpu_memory_allocated_bytes", {**labels, "device_uuid": f"GPU-{MIXED}-0"}
    )
    assert got == 3000 * 1048576
    cores = metrics.registry.get_sample_value(
        "hami_vgpu_core_allocated_ratio", {**labels, "device_uuid": f"GPU-{MIXED}-0"}
    )
    assert cores == 20
    only = {"namespace": "web", "node": ONLY, "pod": "serve", "container_index": "0", "zone": "vGPU"}
    got = metrics.registry.get_sample_value("hami_vgpu_memory_allocated_bytes", {**only, "device_uuid": uuid(ONLY, 1)})
    assert got == 8000 * 1048576
    text = "".join(state_text(sim.state))
    assert text == reference(sim.state)  # the sliced scrape writes the claims' samples as the collector does
    sample = (
        'hami_vgpu_memory_allocated_bytes{container_index="0",device_uuid="GPU-gpu-a-0",namespace="ml",node="gpu-a",'
        'pod="infer",zone="vGPU"} 3.145728e+09'
    )
    assert sample in text
    # the device gauges of a DRA-only card, as the tools see it (the scheduler's own state has no such card)
    card = (
        f'hami_gpu_memory_allocated_bytes{{device_cores="100",device_index="1",device_type="NVIDIA A10",'
        f'device_uuid="{uuid(ONLY, 1)}",node="{ONLY}",zone="vGPU"}} 8.388608e+09'
    )
    assert card in text


def test_a_claim_not_reserved_yet_is_attributed_to_the_pod_it_was_made_for() -> None:
    sim = simulator(
        node(MIXED, [(16000, 10), (16000, 10)]),
        mixed_slice(),
        dra_pod("infer", 3000, 20, namespace="ml", on=MIXED),
        dra_claim("infer", MIXED, [(0, 3000, 20)], namespace="ml", reserved=False),
        allow_warnings=True,
    )
    assert [p for _, p in claim_users(sim.state)] == ["infer"]


def test_the_requests_annotation_reads_back_the_pod_as_written() -> None:
    raw = dra_pod("infer", 3000, 20, gpus=2, annotations={"nvidia.com/use-gputype": "A10"})
    p = msgspec.convert(raw, type=Pod)
    (entry,) = dra_requests(p).values()
    assert entry.container == "main"
    written = as_written(p)
    assert written.spec.containers[0].resources.limits == {
        "nvidia.com/gpu": "2",
        "nvidia.com/gpumem": "3000",
        "nvidia.com/gpucores": "20",
    }
    assert written.metadata.annotations["nvidia.com/use-gputype"] == "A10"
    assert claim_containers(p) == {claim_name("infer"): "main"}
