"""``hami simulate --defrag``: the fewest moves that free whole cards, on fixtures whose optimum is known; every
move is the one the scheduler makes once the pod is deleted (so under ``spread`` few are possible)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hami.cli import app
from hami.simulate.defrag import defrag_json, plan_defrag, render_defrag
from tests.unit.simulate import clusterfix
from tests.unit.simulate.clusterfix import node, simulator, snapshot_text


def pod(name: str, mem: int, **kw: Any) -> dict[str, Any]:
    """A pod of a Deployment (its ReplicaSet recreates it), unless ``owner`` says otherwise."""
    kw.setdefault("owner", ("ReplicaSet", "app-5d4f"))
    return clusterfix.pod(name, mem, **kw)


def card_usage(sim) -> dict[str, int]:
    return {
        info.id: table.usedmem[i]
        for n in sim.state.nodes.values()
        for table in n.tables.values()
        for i, info in enumerate(table.infos)
    }


def test_one_move_frees_the_card_held_by_a_single_pod() -> None:
    # 24000 MiB in use on 3 of 4 cards: at best they fit on 2, so one card can be freed, with one move (x1).
    sim = simulator(
        node("a", [(16000, 4)] * 4),
        pod("x1", 4000, on="a", cards=(0,)),
        pod("y1", 4000, on="a", cards=(1,)),
        pod("y2", 4000, on="a", cards=(1,)),
        pod("z1", 4000, on="a", cards=(2,)),
        pod("z2", 4000, on="a", cards=(2,)),
        pod("z3", 4000, on="a", cards=(2,)),
        gpu_policy="binpack",
    )
    plan = plan_defrag(sim)
    assert [m.pod for m in plan.moves] == ["team/x1"]
    assert plan.freed == (("a", "GPU-a-0"),)
    assert (plan.free_before, plan.free_after, plan.cards) == (1, 2, 4)
    assert sim.state.verify() == []
    assert all(used <= 16000 for used in card_usage(sim).values())


def test_two_cards_freed_with_two_moves_across_nodes() -> None:
    sim = simulator(
        node("a", [(16000, 4)]),
        node("b", [(16000, 4), (16000, 4)]),
        pod("p", 8000, on="a"),
        pod("q", 6000, on="b", cards=(0,)),
        pod("r", 2000, on="b", cards=(1,)),
        gpu_policy="binpack",
    )
    plan = plan_defrag(sim)
    assert len(plan.moves) == 2  # the optimum: every freed card costs at least one move
    assert len(plan.freed) == 2
    assert (plan.free_before, plan.free_after) == (0, 2)
    assert sorted(card_usage(sim).values()) == [0, 0, 16000]


def test_nothing_moves_when_no_card_can_be_emptied() -> None:
    sim = simulator(
        node("a", [(16000, 4), (16000, 4)]),
        pod("big1", 12000, on="a", cards=(0,)),
        pod("big2", 12000, on="a", cards=(1,)),
    )
    plan = plan_defrag(sim)
    assert plan.moves == ()
    assert "no card can be freed" in render_defrag(plan)
    assert sorted(card_usage(sim).values()) == [12000, 12000]  # the ledger is as it was


def test_node_selector_is_respected() -> None:
    sim = simulator(
        node("a", [(16000, 4)], labels={"zone": "x"}),
        node("b", [(16000, 4)], labels={"zone": "y"}),
        pod("p", 4000, on="a", node_selector={"zone": "x"}),
        pod("q", 4000, on="b", node_selector={"zone": "y"}),
    )
    assert plan_defrag(sim).moves == ()


def test_text_json_and_cli(tmp_path: Path) -> None:
    objects = [
        node("a", [(16000, 4)] * 2),
        pod("x1", 4000, on="a", cards=(0,)),
        pod("y1", 4000, on="a", cards=(1,)),
        pod("y2", 4000, on="a", cards=(1,)),
    ]
    plan = plan_defrag(simulator(*objects, gpu_policy="binpack"))
    assert render_defrag(plan).splitlines()[:5] == [
        "Defragmentation plan (dry run): 1 move frees 1 card; whole free cards 0 -> 1 of 2",
        "  1. move team/x1: a (GPU-a-0) -> a (GPU-a-1)",
        "     kubectl delete pod -n team x1",
        "  frees a/GPU-a-0",
        "",
    ]
    assert "run the commands in order, one at a time" in render_defrag(plan)
    assert defrag_json(plan)["moves"] == [
        {
            "pod": "team/x1",
            "from": {"node": "a", "devices": ["GPU-a-0"]},
            "to": {"node": "a", "devices": ["GPU-a-1"]},
            "command": "kubectl delete pod -n team x1",
        }
    ]
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot_text(*objects))
    args = ["simulate", "--snapshot", str(snap), "--defrag", "-o", "json", "--gpu-policy", "binpack"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["freedCards"] == [{"node": "a", "uuid": "GPU-a-0"}]
    missing = CliRunner().invoke(app, ["simulate", "--defrag"])
    assert missing.exit_code == 2


def test_under_spread_no_move_the_scheduler_would_not_make(tmp_path: Path) -> None:
    # deleting x1 empties GPU-a-0, the emptiest card: spread puts the replacement right back there
    objects = [
        node("a", [(16000, 4)] * 2),
        pod("x1", 4000, on="a", cards=(0,)),
        pod("y1", 4000, on="a", cards=(1,)),
        pod("y2", 4000, on="a", cards=(1,)),
    ]
    plan = plan_defrag(simulator(*objects))
    assert plan.moves == ()
    assert "the scheduler would put them back on it" in render_defrag(plan)
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot_text(*objects))
    result = CliRunner().invoke(app, ["simulate", "--snapshot", str(snap), "--defrag"])
    assert result.exit_code == 0, result.output
    assert "(dry run (node policy binpack, GPU policy spread))" not in result.stdout
    assert result.stdout.startswith("Defragmentation plan (dry run, node policy binpack, GPU policy spread): 0 move")


def test_defrag_refuses_pods_files(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot_text(node("a", [(16000, 4)])))
    pods = CliRunner().invoke(app, ["simulate", "--snapshot", str(snap), "--defrag", str(snap)])
    assert pods.exit_code == 2
    assert "places no PODS file" in pods.stderr


def test_defrag_report_shows_before_after_and_the_commands(tmp_path: Path) -> None:
    objects = [
        node("a", [(16000, 4)] * 2),
        pod("x1", 4000, on="a", cards=(0,)),
        pod("y1", 4000, on="a", cards=(1,)),
        pod("y2", 4000, on="a", cards=(1,)),
    ]
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot_text(*objects))
    page = tmp_path / "d.html"
    args = ["simulate", "-s", str(snap), "--defrag", "--gpu-policy", "binpack", "--report", str(page)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"report written to {page}" in result.stderr
    html = page.read_text(encoding="utf-8")
    assert html.count('class="plot heat"') == 2  # before and after
    assert "<h2>Memory used per card, before</h2>" in html
    assert "<td>kubectl delete pod -n team x1</td>" in html
    assert "run the commands in order, one at a time" in html
    assert result.stdout.startswith("Defragmentation plan (dry run, node policy binpack, GPU policy binpack): 1 move")
    # before: card 0 at 25% (4000 of 16000), after: empty; card 1 from 50% to 75%
    before, after = html.split("Memory used per card, after the moves")
    assert ">25%</text>" in before
    assert ">75%</text>" in after
    assert ">25%</text>" not in after


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        # the pods on one card (MiB each), as a real ledger holds them: never more than the card has
        st.lists(st.sampled_from([1000, 2000, 4000, 6000, 8000]), max_size=3).filter(lambda ps: sum(ps) <= 16000),
        min_size=2,
        max_size=5,
    )
)
def test_plans_never_over_allocate_and_only_ever_free_cards(cards: list[list[int]]) -> None:
    objects = [node("a", [(16000, 4)] * len(cards))]
    for c, pods in enumerate(cards):
        objects += [pod(f"p{c}-{i}", mem, on="a", cards=(c,)) for i, mem in enumerate(pods)]
    sim = simulator(*objects, gpu_policy="binpack")
    before = card_usage(sim)
    plan = plan_defrag(sim)
    after = card_usage(sim)
    assert sim.state.verify() == []
    assert all(0 <= used <= 16000 for used in after.values())
    assert sum(after.values()) == sum(before.values())  # pods move, none is lost
    assert plan.free_after == plan.free_before + len(plan.freed)
    assert all(after[uuid] == 0 for _, uuid in plan.freed)
    assert len(plan.moves) >= len(plan.freed)


def test_only_pods_a_controller_recreates_are_moved_and_the_others_say_why(tmp_path: Path) -> None:
    # x1 alone on card 0 would be the one move; as a bare pod (deleting it loses it) or a DaemonSet's (it comes back
    # on this node) it stays, and so does its card: the plan moves y1 and y2 onto it instead
    for owner, why in [
        (None, "no controller: deleting it would lose it"),
        (("DaemonSet", "exporter"), "DaemonSet exporter's pod: its controller recreates it on the same node"),
        (("Workflow", "w1"), "owned by Workflow w1, which is not known to recreate it elsewhere"),
    ]:
        objects = [
            node("a", [(16000, 4)] * 2),
            pod("x1", 4000, on="a", cards=(0,), owner=owner),
            pod("y1", 4000, on="a", cards=(1,)),
            pod("y2", 4000, on="a", cards=(1,)),
        ]
        plan = plan_defrag(simulator(*objects, gpu_policy="binpack"))
        assert [m.pod for m in plan.moves] == ["team/y1", "team/y2"]
        assert plan.freed == (("a", "GPU-a-1"),)
        assert plan.kept == (("team/x1", plan.kept[0][1]),)
        assert plan.kept[0][1].startswith(why)
        text = render_defrag(plan)
        assert "kubectl delete pod -n team x1" not in text
        assert f"1 pod not moved:\n  team/x1: {why}" in text
        assert defrag_json(plan)["kept"] == [{"pod": "team/x1", "reason": plan.kept[0][1]}]
    for kind in ["ReplicaSet", "StatefulSet", "Job", "ReplicationController"]:
        objects[1] = pod("x1", 4000, on="a", cards=(0,), owner=(kind, "app"))
        assert [m.pod for m in plan_defrag(simulator(*objects, gpu_policy="binpack")).moves] == ["team/x1"]


def test_a_bare_pod_on_the_destination_does_not_block_moves_elsewhere() -> None:
    sim = simulator(
        node("a", [(16000, 4)] * 2),
        pod("x1", 4000, on="a", cards=(0,)),
        pod("batch", 4000, on="a", cards=(1,), owner=None),
        gpu_policy="binpack",
    )
    plan = plan_defrag(sim)
    assert [(m.pod, m.to_devices) for m in plan.moves] == [("team/x1", ("GPU-a-1",))]
    assert plan.kept == (("team/batch", plan.kept[0][1]),)


def test_cordoned_cards_are_neither_a_gain_nor_a_destination() -> None:
    # b is cordoned (kubectl cordon): emptying its card gains nothing the scheduler could use, and nothing lands
    # there; a's card 1 is cordoned by hami.io/device-cordon: the same
    sim = simulator(
        node("a", [(16000, 4)] * 3, cordon=(1,)),
        node("b", [(16000, 4)], unschedulable=True),
        pod("x1", 4000, on="a", cards=(0,)),
        pod("y1", 4000, on="a", cards=(2,)),
        pod("y2", 4000, on="a", cards=(2,)),
        pod("c1", 2000, on="b"),
        gpu_policy="binpack",
    )
    plan = plan_defrag(sim)
    assert [(m.pod, m.to_node, m.to_devices) for m in plan.moves] == [("team/x1", "a", ("GPU-a-2",))]
    assert plan.freed == (("a", "GPU-a-0"),)
    # the whole free cards are the usable ones: a's 1 (cordoned) and b's (on a cordoned node) are not counted
    assert (plan.free_before, plan.free_after, plan.cards) == (0, 1, 4)


def test_top_and_defrag_agree_on_whole_free_and_stranded_cards() -> None:
    from hami.simulate.top import build_top

    objects = [
        node("a", [(16000, 4)] * 2),
        node("b", [(16000, 4)] * 2, unschedulable=True),
        pod("x1", 4000, on="a", cards=(0,)),
        pod("c1", 4000, on="b", cards=(0,)),
    ]
    sim = simulator(*objects, gpu_policy="binpack")
    view = build_top(sim.state)
    whole_free = sum(m.whole_free_cards for m in view.models)
    plan = plan_defrag(simulator(*objects, gpu_policy="binpack"))
    assert plan.free_before == whole_free == 1  # a's card 1; b's free card is stranded, not free
    stranded = {c.uuid: c.fragment.stranded_mem for n in view.nodes for c in n.cards}
    assert stranded["GPU-b-1"] == 16000
    assert stranded["GPU-b-0"] == 12000
