"""``hami explain``: per node and per card verdicts with numbers, and what would make the pod fit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
from typer.testing import CliRunner

from hami.cli import app
from hami.config import default_device_config
from hami.protocol.objects import Pod
from hami.scheduling.request import SchedulingDefaults
from hami.simulate.explain import explain, explain_json, render_explain
from hami.simulate.simulator import Simulator
from tests.unit.simulate.clusterfix import node, pod, simulator, snapshot_text


def as_pod(doc: dict[str, Any]) -> Pod:
    return msgspec.convert(doc, type=Pod)


def crowded() -> list[dict[str, Any]]:
    return [
        node("a", [(16000, 4)]),
        node("b", [(16000, 4)]),
        pod("p1", 6000, on="a"),
        pod("p2", 4000, on="a"),
        pod("p3", 3000, on="a"),
        pod("p4", 12000, on="b"),
    ]


def test_pending_pod_gets_every_node_s_numbers_and_the_smallest_eviction() -> None:
    sim = simulator(*crowded())
    before = sim.state.verify(), {u: r.node for u, r in sim.state.pods.items()}
    e = explain(sim, as_pod(pod("want", 8000)))
    assert e.status == "pending"
    a, b = e.verdicts
    assert (a.node, a.fits, a.counts, a.unresolvable) == ("a", False, {"CardInsufficientMemory": 1}, False)
    (card,) = a.cards
    assert (card.need_mem, card.free_mem, card.free_slots, card.verdict) == (8000, 3000, 1, "CardInsufficientMemory")
    # a: p3 (3000 MiB) or p2 (4000) alone is not enough; p1 (6000) is — one pod beats b's p4 (12000 MiB)
    assert a.eviction is not None
    assert (a.eviction.pods, a.eviction.freed_mem) == (("team/p1",), 6000)
    assert b.eviction is not None
    assert b.eviction.pods == ("team/p4",)
    assert e.suggestions[0] == "it would fit on a if team/p1 left (6000 MiB freed)"
    # the question left the ledger exactly as it was
    assert (sim.state.verify(), {u: r.node for u, r in sim.state.pods.items()}) == before


def test_eviction_needs_the_smallest_set_not_the_first_pod() -> None:
    sim = simulator(
        node("a", [(16000, 4)]),
        pod("p1", 5000, on="a"),
        pod("p2", 5000, on="a"),
        pod("p3", 5000, on="a"),
    )
    e = explain(sim, as_pod(pod("want", 10000)))
    (a,) = e.verdicts
    assert a.eviction is not None
    assert a.eviction.pods == ("team/p1", "team/p2")  # two must go (free 1000 + 2 x 5000)


def test_a_node_left_out_by_the_node_selector_is_named() -> None:
    sim = simulator(
        node("a", [(16000, 4)], labels={"zone": "x"}),
        node("c", [(16000, 4)], labels={"zone": "y"}),
        pod("p1", 12000, on="a"),
    )
    e = explain(sim, as_pod(pod("want", 8000, node_selector={"zone": "x"})))
    c = next(v for v in e.verdicts if v.node == "c")
    assert c.excluded == "nodeSelector zone=x does not match"
    assert c.fits
    assert "c would take it, but nodeSelector zone=x does not match" in e.suggestions


def test_an_annotation_that_keeps_the_pod_out_is_named() -> None:
    sim = simulator(node("a", [(16000, 4)]))
    e = explain(sim, as_pod(pod("want", 8000, annotations={"nvidia.com/nouse-gputype": "T4"})))
    assert e.status == "pending"
    assert e.verdicts[0].cards[0].verdict == "CardTypeMismatch"
    assert e.verdicts[0].unresolvable
    assert "without the annotation nvidia.com/nouse-gputype=T4 it would be placed on a" in e.suggestions


def test_too_big_for_any_node_says_so() -> None:
    sim = simulator(node("a", [(16000, 4)]))
    e = explain(sim, as_pod(pod("huge", 20000)))
    assert e.verdicts[0].unresolvable
    assert e.suggestions == ("no node could run it even if empty: it asks for more than any node has",)


def test_placed_pod_is_judged_without_its_own_usage() -> None:
    sim = simulator(
        node("a", [(16000, 4)], unhealthy=[]), node("b", [(8000, 4)], unhealthy=[0]), pod("p1", 12000, on="a")
    )
    e = explain(sim, as_pod(pod("p1", 12000, on="a")))
    assert (e.status, e.current_node, e.node) == ("placed", "a", "a")
    a, b = e.verdicts
    assert a.fits
    assert a.chosen
    assert a.cards[0].free_mem == 16000  # its own 12000 MiB do not count against it
    assert b.cards[0].verdict == "CardNotHealth"
    assert e.suggestions == ()
    assert sim.state.pods["uid-team-p1"].node == "a"  # put back


def test_text_and_json() -> None:
    sim = simulator(*crowded())
    e = explain(sim, as_pod(pod("want", 8000)))
    text = render_explain(e)
    assert text.splitlines()[0] == "team/want: pending"
    assert "a: does not fit: 1/1 CardInsufficientMemory" in text
    assert "would fit if team/p1 left (6000 MiB freed)" in text
    doc = explain_json(e)
    assert doc["nodes"][0]["cards"][0] == {
        "vendor": "NVIDIA",
        "index": 0,
        "uuid": "GPU-a-0",
        "model": "NVIDIA-Tesla T4",
        "needMemoryMiB": 8000,
        "freeMemoryMiB": 3000,
        "needCores": 0,
        "freeCores": 100,
        "freeSlots": 1,
        "verdict": "CardInsufficientMemory",
        "dra": None,
    }
    assert doc["nodes"][0]["eviction"] == {"pods": ["team/p1"], "freedMemoryMiB": 6000}
    json.dumps(doc)


def test_cli_explain_by_name_and_from_a_file(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot_text(*crowded(), pod("want", 8000)))
    result = CliRunner().invoke(app, ["explain", "team/want", "-s", str(snap)])
    assert result.exit_code == 0, result.output
    assert "team/want: pending" in result.stdout
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps(pod("new", 2000)))
    result = CliRunner().invoke(app, ["explain", "-f", str(manifest), "-s", str(snap), "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["node"] == "a"  # binpack: the fuller node that still fits
    missing = CliRunner().invoke(app, ["explain", "nope", "-n", "team", "-s", str(snap)])
    assert missing.exit_code == 1
    assert "pod team/nope not found" in missing.stderr


def test_no_table_header_without_rows() -> None:
    """Every card table explain prints has rows under its header, for every pod of the demo, placed or not."""
    from hami.simulate.demo import demo_sources
    from hami.simulate.explain import explain_manifest
    from hami.simulate.loading import load_snapshot, read_pods

    nodes, pods = demo_sources()
    for item in read_pods(pods).pods:
        sim = Simulator(default_device_config(), SchedulingDefaults(), admission=True)
        sim.add_snapshot(load_snapshot(nodes))
        lines = render_explain(explain_manifest(sim, item)).splitlines()
        headers = [i for i, line in enumerate(lines) if line.lstrip().startswith("#  DEVICE")]
        for i in headers:
            assert i + 1 < len(lines), (item.obj.key, lines)
            assert lines[i + 1].split()[0].isdigit(), (item.obj.key, lines[i : i + 2])


def test_simulate_prints_no_utilization_header_without_devices(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot_text({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu"}}))
    pod_file = tmp_path / "p.yaml"
    pod_file.write_text(json.dumps(pod("p", 1000)))
    result = CliRunner().invoke(app, ["simulate", "-s", str(snap), str(pod_file)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    after = lines[lines.index("Per-device utilization after placement") + 1]
    assert after == "no node registers a device"
