"""``hami explain``'s preemption part: which pods would be preempted on the best nodes, and why the others stay."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from typer.testing import CliRunner

from hami.cli import app
from hami.protocol.objects import Pod
from hami.simulate.explain import explain, explain_json, render_explain
from tests.unit.simulate.clusterfix import node, pod, simulator, snapshot_text


def as_pod(doc: dict[str, Any]) -> Pod:
    return msgspec.convert(doc, type=Pod)


def contended() -> list[dict[str, Any]]:
    """a: full, a low- and a mid-priority pod could make room; b: full of pods as important as the preemptor or
    more; c: a card too small for it even empty."""
    return [
        node("a", [(16000, 4)]),
        node("b", [(16000, 4)]),
        node("c", [(4000, 4)]),
        pod("batch-low", 6000, 20, on="a", priority=1),
        pod("batch-mid", 6000, on="a", priority=5),
        pod("serving", 4000, on="a", priority=1000),
        pod("peer", 12000, on="b", priority=100),
        pod("leaving", 4000, on="b", priority=0, preempted=True),
        pod("tiny", 1000, on="c", priority=0),
    ]


def test_the_lowest_priority_pod_that_makes_room_is_preempted_and_the_others_say_why_they_stay() -> None:
    sim = simulator(*contended())
    e = explain(sim, as_pod(pod("infer", 6000, priority=100)))
    assert e.status == "pending"
    p = e.preemption
    assert p is not None
    assert (p.priority, p.policy) == (100, "PreemptLowerPriority")
    assert p.message == "would preempt 1 pod on a: team/batch-low"
    (a,) = p.candidates
    (victim,) = a.victims
    assert (victim.pod, victim.priority) == ("team/batch-low", 1)
    assert [(f.uuid, f.mem, f.cores, f.slots) for f in victim.freed] == [("GPU-a-0", 6000, 20, 1)]
    assert [(k.pod, k.why) for k in a.kept] == [
        ("team/batch-mid", "not needed: the pod fits with it staying"),
        ("team/serving", "higher priority"),
    ]
    assert p.refused == {
        "b": "every pod there has equal or higher priority (the pod's is 100)",
        "c": "the pod does not fit even on the empty node",
    }
    assert sim.state.verify() == []


def test_a_bigger_pod_takes_both_lower_priority_pods_and_one_being_preempted_is_named() -> None:
    sim = simulator(*contended())
    e = explain(sim, as_pod(pod("infer", 12000, priority=101)))
    assert e.preemption is not None
    first, second = e.preemption.candidates
    assert (first.node, [v.pod for v in first.victims]) == ("a", ["team/batch-mid", "team/batch-low"])
    assert (second.node, [v.pod for v in second.victims]) == ("b", ["team/peer"])
    assert [(k.pod, k.why) for k in second.kept] == [("team/leaving", "being preempted: leaves anyway")]


def test_a_pod_terminating_on_its_own_is_weighed_as_any_other() -> None:
    docs = [d for d in contended() if d["metadata"]["name"] != "leaving"]
    sim = simulator(*docs, pod("leaving", 4000, on="b", priority=0, deleting=True))
    e = explain(sim, as_pod(pod("infer", 12000, priority=101)))
    assert e.preemption is not None
    second = e.preemption.candidates[1]
    assert (second.node, [v.pod for v in second.victims]) == ("b", ["team/peer"])
    assert [(k.pod, k.why) for k in second.kept] == [("team/leaving", "not needed: the pod fits with it staying")]


def test_preemption_policy_never_preempts_nothing() -> None:
    sim = simulator(*contended())
    e = explain(sim, as_pod(pod("infer", 6000, priority=100, policy="Never")))
    assert e.preemption is not None
    assert e.preemption.policy == "Never"
    assert e.preemption.message.startswith("no pod would be preempted: preemptionPolicy is Never")
    assert e.preemption.candidates == ()


def test_a_pod_that_fits_or_is_placed_gets_no_preemption_part() -> None:
    sim = simulator(*contended())
    assert explain(sim, as_pod(pod("small", 1000, priority=100))).preemption is None
    assert explain(sim, as_pod(pod("batch-low", 6000, 20, on="a", priority=1))).preemption is None


def test_text_and_json() -> None:
    sim = simulator(*contended())
    e = explain(sim, as_pod(pod("infer", 6000, priority=100)))
    text = render_explain(e).split("\n\nPreemption", 1)[1]
    assert text.splitlines() == [
        " (priority 100, PreemptLowerPriority): would preempt 1 pod on a: team/batch-low",
        "  1. a",
        "     preempt team/batch-low (priority 1, frees GPU-a-0 6000 MiB, 20% cores, 1 slot)",
        "     keep    team/batch-mid (priority 5, holds GPU-a-0 6000 MiB, unlimited cores, 1 slot): "
        "not needed: the pod fits with it staying",
        "     keep    team/serving (priority 1000, holds GPU-a-0 4000 MiB, unlimited cores, 1 slot): higher priority",
        "  b: none, every pod there has equal or higher priority (the pod's is 100)",
        "  c: none, the pod does not fit even on the empty node",
    ]
    doc = explain_json(e)["preemption"]
    assert doc["candidates"][0]["victims"] == [
        {
            "pod": "team/batch-low",
            "priority": 1,
            "frees": [{"uuid": "GPU-a-0", "memoryMiB": 6000, "cores": 20, "slots": 1}],
        }
    ]
    assert doc["candidates"][0]["kept"][1] == {
        "pod": "team/serving",
        "priority": 1000,
        "frees": [{"uuid": "GPU-a-0", "memoryMiB": 4000, "cores": 0, "slots": 1}],
        "why": "higher priority",
    }
    assert (doc["priority"], doc["preemptionPolicy"], doc["moreCandidates"]) == (100, "PreemptLowerPriority", 0)


def test_the_command_shows_it_for_a_pod_of_the_snapshot(tmp_path: Any) -> None:
    path = tmp_path / "snapshot.json"
    path.write_text(snapshot_text(*contended(), pod("infer", 6000, priority=100)))
    result = CliRunner().invoke(app, ["explain", "team/infer", "--snapshot", str(path), "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["preemption"]["message"] == "would preempt 1 pod on a: team/batch-low"
