"""``hami simulate`` and ``hami top`` with DRA objects in the snapshot: claims charged beside device-plugin pods,
their part shown per card, and DRA's problems and warnings reported (issue 18)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
from typer.testing import CliRunner

from hami.cli import app
from hami.config import default_device_config
from hami.protocol.inventory import encode_inventory_json
from hami.scheduling.dra import ProblemKind
from hami.scheduling.request import SchedulingDefaults
from hami.simulate.defrag import plan_defrag
from hami.simulate.html import render_html
from hami.simulate.loading import Sourced, load_snapshot
from hami.simulate.report import document, render_summary
from hami.simulate.simulator import Simulator
from hami.simulate.top import TopFilter, build_top, render_top, top_json
from tests.unit.scheduling.drafix import (
    A100_MIB,
    UUID,
    cards,
    raw,
    result,
    shared_device,
    synthetic_claim,
    synthetic_slice,
)
from tests.unit.simulate.clusterfix import node, pod, snapshot_text

NOW = 1_700_000_000
GPU0, GPU1, GPU2 = (UUID[("dra-node-1", f"gpu-{i}")] for i in range(3))
CLAIMS = ("claim-shared-memory", "claim-shared-memory-cores", "claim-exclusive")
PODS = ("pod-shared-memory", "pod-shared-memory-b", "pod-shared-memory-cores", "pod-exclusive")


def registered_node() -> dict[str, Any]:
    annotations = {"hami.io/node-nvidia-register": encode_inventory_json(list(cards("dra-node-1", A100_MIB)))}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "dra-node-1", "annotations": annotations}}


def simulator(*, pods: tuple[str, ...] = PODS, extra: tuple[dict[str, Any], ...] = ()) -> Simulator:
    objects = [registered_node(), raw("deviceclass"), raw("resourceslice"), *map(raw, CLAIMS), *map(raw, pods)]
    sim = Simulator(default_device_config(), SchedulingDefaults())
    sim.add_snapshot(load_snapshot([("snap.json", snapshot_text(*objects, *extra))]))
    return sim


def place(sim: Simulator, mem: int, cores: int) -> str | None:
    item = Sourced(load_snapshot([("p.json", snapshot_text(pod("p", mem, cores)))]).pods[0].obj, "p.json", "p")
    return sim.place(item, NOW).node


def test_the_snapshots_dra_objects_are_loaded_and_charged() -> None:
    sim = simulator()
    usage = {
        info.id: (t.used[i], t.usedmem[i], t.usedcores[i])
        for t in sim.state.nodes["dra-node-1"].tables.values()
        for i, info in enumerate(t.infos)
    }
    assert usage == {GPU0: (1, 10240, 100), GPU1: (1, 20480, 30), GPU2: (10, A100_MIB, 100)}
    assert [w for w in sim.dra_notes() if "cores-whole-card" in w]  # the captured slice defaults cores to 100
    assert not [w for w in sim.dra_notes() if "stale" in w]
    assert sim.warnings == []  # DRA's notes are apart: hami top shows them in its view


def test_a_device_plugin_pod_gets_only_what_claims_leave() -> None:
    sim = simulator()
    assert place(sim, 60000, 50) == "dra-node-1"  # only GPU1: GPU0's cores and all of GPU2 are held
    placed = sim.state.nodes["dra-node-1"].tables["NVIDIA"]
    assert placed.usedmem[1] == 20480 + 60000
    # GPU0 has 61440 MiB free, but the memory-only claim took all its cores (the warned-about trap): no fit
    item = Sourced(load_snapshot([("p.json", snapshot_text(pod("q", 20000)))]).pods[0].obj, "p.json", "q")
    outcome = sim.place(item, NOW)
    assert outcome.node is None
    assert outcome.reasons["dra-node-1"] == {
        "CardComputeUnitsExhausted": 1,  # GPU0: the claim's default cores
        "CardInsufficientMemory": 1,  # GPU1: 1440 MiB left
        "CardTimeSlicingExhausted": 1,  # GPU2: every slot held by the exclusive claim
    }


def test_claims_of_pods_missing_from_the_snapshot_are_stale_but_counted() -> None:
    sim = simulator(pods=("pod-shared-memory",), extra=(pod("someone", 1000),))
    stale = [w for w in sim.dra_notes() if ProblemKind.STALE_ALLOCATION in w]
    assert len(stale) == 2  # the cores claim and the exclusive claim; the shared one keeps one live pod
    assert sim.state.nodes["dra-node-1"].tables["NVIDIA"].used[2] == 10


def test_the_text_report_shows_the_dra_held_part_per_card() -> None:
    sim = simulator()
    text = render_summary("t", sim.state, [], sim.dra)
    row = next(line for line in text.splitlines() if GPU0 in line)
    assert "1/10" in row
    assert "1 claim: 10240 MiB, 100%" in row
    assert "DRA-HELD" in text
    assert "DRA: 3 claims charged beside device-plugin pods" in text


def test_the_json_document_carries_the_dra_part_and_the_reports() -> None:
    sim = simulator()
    doc = document(sim.state, [], sim.dra)
    rows = {r["uuid"]: r for r in doc["utilization"]}  # type: ignore[attr-defined]
    assert rows[GPU1]["dra"] == {"claims": 1, "slots": 1, "memoryMiB": 20480, "cores": 30}
    dra = doc["dra"]
    assert isinstance(dra, dict)
    assert dra["claims"] == 3
    assert [w["kind"] for w in dra["warnings"]] == ["cores-whole-card"]
    assert json.dumps(doc)  # JSON-able


def test_without_dra_objects_the_document_is_unchanged() -> None:
    sim = Simulator(default_device_config(), SchedulingDefaults())
    sim.add_snapshot(load_snapshot([("s.json", snapshot_text(registered_node()))]))
    doc = document(sim.state, [], sim.dra)
    assert list(doc) == ["summary", "decisions", "utilization", "fragmentation"]
    assert {r["dra"] for r in doc["utilization"]} == {None}  # type: ignore[attr-defined]


def test_the_html_report_lists_the_cards_claims_hold() -> None:
    sim = simulator()
    page = render_html("t", sim.state, [], sim.dra)
    assert "DRA claims beside device-plugin pods" in page
    assert "20480 MiB, 30 cores" in page
    assert "of which DRA claims hold 10240" in page


def test_top_shows_the_dra_part_beside_the_pods_and_the_warnings() -> None:
    sim = simulator()
    view = build_top(sim.state, dra=sim.dra)
    (node,) = view.nodes
    held = {c.uuid: c.dra for c in node.cards}
    assert held[GPU2] is not None
    assert (held[GPU2].slots, held[GPU2].mem) == (10, A100_MIB)
    text = render_top(view)
    assert "DRA 1 claim (20480 MiB, 30%)" in text
    assert "warning cores-whole-card ResourceSlice dra-node-1-gpu.nvidia.com" in text
    doc = top_json(view)
    card = next(c for c in doc["nodes"][0]["cards"] if c["uuid"] == GPU0)
    assert card["dra"] == {"claims": 1, "slots": 1, "memoryMiB": 10240, "cores": 100}
    assert [w["kind"] for w in doc["dra"]["warnings"]] == ["cores-whole-card"]


def test_defrag_never_counts_a_card_a_claim_holds_as_freed() -> None:
    """Same cluster as the defrag test whose one move frees card 0 — but a DRA claim holds 1Gi of card 0."""
    sl = msgspec.to_builtins(synthetic_slice("s", "a", [shared_device("gpu-0", "GPU-a-0")]))
    claim = msgspec.to_builtins(synthetic_claim("c", [result("gpu-0", "a", "s1", memory="1Gi")], pods=[]))
    objects = [
        node("a", [(16000, 4)] * 4),
        pod("x1", 4000, on="a", cards=(0,)),
        pod("y1", 4000, on="a", cards=(1,)),
        pod("y2", 4000, on="a", cards=(1,)),
        pod("z1", 4000, on="a", cards=(2,)),
        pod("z2", 4000, on="a", cards=(2,)),
        pod("z3", 4000, on="a", cards=(2,)),
        {**sl, "kind": "ResourceSlice"},
        {**claim, "kind": "ResourceClaim"},
    ]
    sim = Simulator(default_device_config(), SchedulingDefaults())
    sim.add_snapshot(load_snapshot([("s.json", snapshot_text(*objects))]))
    assert sim.state.nodes["a"].tables["NVIDIA"].usedmem[0] == 4000 + 1024
    plan = plan_defrag(sim)
    assert ("a", "GPU-a-0") not in plan.freed
    assert "team/x1" not in [m.pod for m in plan.moves]


def test_explain_says_what_claims_hold_of_each_card(tmp_path: Path) -> None:
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(pod("notebook", 20000)))
    snapshot = tmp_path / "snap.json"
    snapshot.write_text(snapshot_text(registered_node(), raw("resourceslice"), *map(raw, CLAIMS), *map(raw, PODS)))
    result = CliRunner().invoke(app, ["explain", "--snapshot", str(snapshot), "-f", str(manifest), "-o", "json"])
    assert result.exit_code == 0, result.output
    cards = {c["uuid"]: c for c in json.loads(result.stdout)["nodes"][0]["cards"]}
    assert cards[GPU0]["verdict"] == "CardComputeUnitsExhausted"
    assert cards[GPU0]["dra"] == {"claims": 1, "memoryMiB": 10240, "cores": 100}
    text = CliRunner().invoke(app, ["explain", "--snapshot", str(snapshot), "-f", str(manifest)]).stdout
    assert "CardComputeUnitsExhausted (DRA claims hold 10240 MiB, 100 cores)" in text


def hami_plugin_slice(node: str, gpus: list[tuple[str, int, bool]]) -> dict[str, Any]:
    """The slice hami's DRA plugin publishes (its own builder): (uuid, minor, healthy) per GPU."""
    from hami.deviceplugin.discovery import GpuInfo
    from hami.deviceplugin.dra.slices import NodeFacts, SliceDevice, device_name, resource_slice

    devices = [
        SliceDevice(device_name(minor), GpuInfo(uuid, minor, "A100", A100_MIB, minor=minor), A100_MIB << 20, healthy)
        for uuid, minor, healthy in gpus
    ]
    return resource_slice(node, f"uid-{node}", devices, NodeFacts("580.65.06"))


def test_top_shows_a_gpu_hamis_dra_plugin_tainted_as_unhealthy_in_text_and_json() -> None:
    dra_only = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "dra-only"}}
    slices = (
        hami_plugin_slice("dra-node-1", [(GPU0, 0, True), (GPU1, 1, False)]),
        hami_plugin_slice("dra-only", [("GPU-elsewhere", 3, False), ("GPU-fine", 4, True)]),
    )
    sim = simulator(extra=(dra_only, *slices))
    view = build_top(sim.state, dra=sim.dra)
    health = {c.uuid: c.health for n in view.nodes for c in n.cards}
    assert (health[GPU0], health[GPU1], health[GPU2]) == ("healthy", "unhealthy", "healthy")
    text = render_top(view)
    driver = "hami-core-gpu.project-hami.io"
    taint = f"{driver}/unhealthy=true:NoSchedule"
    assert f"unhealthy {driver}/dra-node-1/hami-gpu-1 ({GPU1}) on dra-node-1: tainted {taint}" in text
    assert f"unhealthy {driver}/dra-only/hami-gpu-3 (GPU-elsewhere) on dra-only: tainted {taint}" in text
    assert f"unhealthy {driver}/dra-only/hami-gpu-4" not in text  # healthy devices are not listed
    assert sum(line.startswith("unhealthy ") for line in text.splitlines()) == 2
    doc = top_json(view)
    card = next(c for c in doc["nodes"][0]["cards"] if c["uuid"] == GPU1)
    assert card["health"] == "unhealthy"
    assert [(t["node"], t["device"], t["uuid"], t["taints"]) for t in doc["dra"]["tainted"]] == [
        ("dra-node-1", "hami-gpu-1", GPU1, [taint]),
        ("dra-only", "hami-gpu-3", "GPU-elsewhere", [taint]),
    ]
    only = top_json(build_top(sim.state, TopFilter(node="dra-only"), dra=sim.dra))
    assert [t["device"] for t in only["dra"]["tainted"]] == ["hami-gpu-3"]


def test_a_taint_with_effect_none_is_not_unhealthy() -> None:
    body = hami_plugin_slice("dra-node-1", [(GPU0, 0, False)])
    body["spec"]["devices"][0]["taints"][0]["effect"] = "None"
    sim = simulator(extra=(body,))
    view = build_top(sim.state, dra=sim.dra)
    assert {c.health for c in view.nodes[0].cards} == {"healthy"}
    assert top_json(view)["dra"]["tainted"] == []
