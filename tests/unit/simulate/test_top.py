"""``hami top``'s view: rows, filters, sort, text (plain and coloured) and JSON."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hami.cli import app
from hami.simulate.top import TopFilter, build_top, fragmentation_json, render_top, top_json
from tests.unit.simulate.clusterfix import node, pod, simulator, snapshot_text


def cluster():
    return simulator(
        node("gpu-a", [(16000, 4), (16000, 4)]),
        node("gpu-b", [(80000, 4)], model="NVIDIA A100", unschedulable=True),
        node("gpu-c", [(16000, 4)], unhealthy=[0]),
        pod("train", 6000, 30, on="gpu-a", namespace="ml"),
        pod("serve", 2000, on="gpu-a", cards=(1,), namespace="web"),
        pod("big", 40000, on="gpu-b", namespace="ml"),
    )


def test_rows_carry_usage_pods_health_and_cordon() -> None:
    view = build_top(cluster().state)
    assert [n.name for n in view.nodes] == ["gpu-a", "gpu-b", "gpu-c"]
    a, b, c = view.nodes
    card0 = a.cards[0]
    assert (card0.slots, card0.memory, card0.cores) == ((1, 4), (6000, 16000), (30, 100))
    assert [(p.pod, p.mem, p.cores) for p in card0.pods] == [("ml/train", 6000, 30)]
    assert a.schedulable
    assert not b.schedulable
    assert c.cards[0].health == "unhealthy"
    assert view.fragmentation_index > 0


@pytest.mark.parametrize(
    ("flt", "cards"),
    [
        (TopFilter(node="gpu-[ab]"), ["GPU-gpu-a-0", "GPU-gpu-a-1", "GPU-gpu-b-0"]),
        (TopFilter(model="*a100*"), ["GPU-gpu-b-0"]),
        (TopFilter(vendor="nvidia", node="gpu-c"), ["GPU-gpu-c-0"]),
        (TopFilter(vendor="DCU"), []),
        (TopFilter(namespace="ml"), ["GPU-gpu-a-0", "GPU-gpu-b-0"]),
        (TopFilter(sort="used-memory"), ["GPU-gpu-b-0", "GPU-gpu-a-0", "GPU-gpu-a-1", "GPU-gpu-c-0"]),
        (TopFilter(sort="free-memory"), ["GPU-gpu-b-0", "GPU-gpu-c-0", "GPU-gpu-a-1", "GPU-gpu-a-0"]),
    ],
    ids=[
        "node-pattern",
        "model-pattern-any-case",
        "vendor-any-case",
        "vendor-absent",
        "namespace",
        "sort-used",
        "sort-free",
    ],
)
def test_filters_and_sort(flt: TopFilter, cards: list[str]) -> None:
    view = build_top(cluster().state, flt)
    assert [c.uuid for n in view.nodes for c in n.cards] == cards


def test_namespace_filter_shows_only_that_namespace_s_pods() -> None:
    view = build_top(cluster().state, TopFilter(namespace="web"))
    assert [(c.uuid, [p.pod for p in c.pods]) for n in view.nodes for c in n.cards] == [("GPU-gpu-a-1", ["web/serve"])]


def test_text_is_plain_unless_colour_is_asked_for() -> None:
    view = build_top(cluster().state)
    plain = render_top(view)
    assert "\033[" not in plain
    assert "gpu-b  1 card, cordoned (unschedulable)" in plain
    assert "6000/16000" in plain
    assert "ml/train (6000 MiB, 30%)" in plain
    assert "Fragmentation (cluster index" in plain
    coloured = render_top(view, colour=True)
    assert "\033[1m" in coloured
    assert "\033[31munhealthy" in coloured


def test_json_document() -> None:
    doc = top_json(build_top(cluster().state, TopFilter(node="gpu-a")))
    (a,) = doc["nodes"]
    assert (a["node"], a["schedulable"], a["cordoned"]) == ("gpu-a", True, False)  # simulate's and explain's word
    assert a["cards"][0]["memoryMiB"] == {"used": 6000, "total": 16000}
    assert a["cards"][0]["pods"] == [{"pod": "ml/train", "memoryMiB": 6000, "cores": 30}]
    assert a["cards"][0]["strandedMemoryMiB"] == 4000
    models = {m["model"]: m for m in doc["fragmentation"]["models"]}
    # the A100 sits on a cordoned node: its free 40000 MiB are stranded, no slice of it can be had
    assert models["NVIDIA A100"]["largestSlice"] == {"memoryMiB": 0, "cores": 0}
    assert models["NVIDIA A100"]["strandedMemoryMiB"] == 40000
    json.dumps(doc)


def test_cli_top_from_a_snapshot(tmp_path) -> None:
    sim_objects = [
        node("gpu-a", [(16000, 4)]),
        pod("train", 6000, 30, on="gpu-a", namespace="ml"),
    ]
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot_text(*sim_objects))
    result = CliRunner().invoke(app, ["top", "--snapshot", str(snap), "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["nodes"][0]["cards"][0]["pods"][0]["pod"] == "ml/train"
    piped = CliRunner().invoke(app, ["top", "-s", str(snap)])
    assert piped.exit_code == 0
    assert "\033[" not in piped.stdout
    forced = CliRunner().invoke(app, ["top", "-s", str(snap), "--color", "always"])
    assert "\033[1m" in forced.stdout
    bad = CliRunner().invoke(app, ["top", "-s", str(snap), "--sort", "size"])
    assert bad.exit_code == 2
    assert "--sort" in bad.stderr


def test_nothing_to_show_says_so() -> None:
    assert (
        render_top(build_top(cluster().state, TopFilter(node="none-*")))
        == "no node with accelerators matches (or the cluster has none)"
    )


def test_fragmentation_document_for_the_simulate_json() -> None:
    doc = fragmentation_json(cluster().state)
    assert doc["index"] == round(build_top(cluster().state).fragmentation_index, 4)
    assert [m["model"] for m in doc["models"]] == ["NVIDIA A100", "NVIDIA-Tesla T4"]
    card = next(c for c in doc["cards"] if c["uuid"] == "GPU-gpu-a-0")
    assert card == {
        "node": "gpu-a",
        "uuid": "GPU-gpu-a-0",
        "model": "NVIDIA-Tesla T4",
        "strandedMemoryMiB": 4000,
        "strandedCores": 40,
        "largestSlice": {"memoryMiB": 10000, "cores": 70},
    }


def _cpu_and_refused() -> tuple[dict, dict]:  # type: ignore[type-arg]
    cpu = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a-cpu"}}
    refused = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "b-refused", "annotations": {"hami.io/node-nvidia-register": '[{"id":'}},
    }
    return cpu, refused


def test_cpu_nodes_are_hidden_unless_asked_and_refused_nodes_are_not_schedulable() -> None:
    cpu, refused = _cpu_and_refused()
    sim = simulator(node("z-gpu", [(16000, 4)]), node("c-gpu", [(16000, 4)]), cpu, refused, allow_warnings=True)
    view = build_top(sim.state)
    assert [n.name for n in view.nodes] == ["b-refused", "c-gpu", "z-gpu"]  # sorted by name, card-less included
    assert view.cpu_nodes_hidden == 1
    refused_row = view.nodes[0]
    assert not refused_row.schedulable
    assert not refused_row.cordoned
    text = render_top(view)
    assert text.startswith("b-refused  0 cards, not schedulable by hami; NVIDIA registration refused: ")
    assert "schedulable" not in text.splitlines()[0].split(";")[0].replace("not schedulable by hami", "")
    assert text.endswith("1 node without accelerators not shown (--cpu-nodes shows them)")
    assert top_json(view)["cpuNodesHidden"] == 1
    shown = build_top(sim.state, TopFilter(cpu_nodes=True))
    assert [n.name for n in shown.nodes] == ["a-cpu", "b-refused", "c-gpu", "z-gpu"]
    assert "a-cpu  0 cards, no accelerator registered" in render_top(shown)


def test_cli_cpu_nodes_flag(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cpu, _ = _cpu_and_refused()
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot_text(node("gpu", [(16000, 4)]), cpu))
    hidden = CliRunner().invoke(app, ["top", "-s", str(snap)])
    assert "a-cpu" not in hidden.stdout
    shown = CliRunner().invoke(app, ["top", "-s", str(snap), "--cpu-nodes"])
    assert shown.stdout.startswith("a-cpu  0 cards, no accelerator registered")


def test_a_node_whose_kubelet_does_not_back_its_registration_is_shown_not_schedulable() -> None:
    """A snapshot node whose ``status.allocatable`` has no nvidia.com/gpu left (its device plugin was restarting):
    a warning when loaded, the node's state and reason in ``hami top``, and no pod placed on it."""
    restarting = node("gpu-r", [(16000, 4), (16000, 4)])
    restarting["status"] = {"allocatable": {"cpu": "8", "nvidia.com/gpu": "0"}}
    sim = simulator(restarting, node("gpu-s", [(16000, 4)]), allow_warnings=True)
    assert sim.warnings == [
        "snapshot.json: items[0] (Node gpu-r): kubelet reports nvidia.com/gpu allocatable 0 where the registration "
        "(hami.io/node-nvidia-register) of 2 healthy device(s) needs 8: the device plugin is gone or restarting; "
        "no pod is placed on its NVIDIA devices"
    ]
    view = build_top(sim.state)
    row = next(n for n in view.nodes if n.name == "gpu-r")
    assert not row.schedulable
    assert render_top(view).startswith(
        "gpu-r  2 cards, devices not allocatable (kubelet); NVIDIA devices not allocatable: kubelet reports "
        "nvidia.com/gpu allocatable 0"
    )
    assert top_json(view)["nodes"][0]["notAllocatable"] == {"NVIDIA": row.not_allocatable["NVIDIA"]}
    assert next(n for n in view.nodes if n.name == "gpu-s").schedulable
