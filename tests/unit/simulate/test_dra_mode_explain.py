"""``hami explain`` on a DRA-mode pod and ``hami simulate --dra`` (issue 38): the pod's claims judged per node and
per card by the model of kube-scheduler's allocator (``hami.scheduling.dra.allocate``) on hami's ledger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
from typer.testing import CliRunner

from hami.cli import app
from hami.protocol.objects import Pod
from hami.scheduling.dra.allocate import allocate, choose, published_cards
from hami.scheduling.request import prefilter
from hami.simulate.dramode import place_dra
from hami.simulate.explain import explain, explain_json, render_explain
from hami.simulate.loading import Sourced
from hami.simulate.simulator import Simulator
from tests.unit.simulate.clusterfix import node, pod, simulator, snapshot_text
from tests.unit.simulate.dramodefix import dra_claim, dra_pod, hami_slice, uuid

MIXED = "gpu-a"
ONLY = "dra-b"
CPU = "cpu-c"


def mixed_slice() -> dict[str, Any]:
    sl = hami_slice(MIXED, [16000, 16000], model="NVIDIA-Tesla T4")
    for i, dev in enumerate(sl["spec"]["devices"]):
        dev["attributes"]["uuid"] = {"string": f"GPU-{MIXED}-{i}"}
    return sl


def objects() -> list[dict[str, Any]]:
    """gpu-a: both plugins, card 0 holds a device-plugin pod (6000 MiB) and a claim (3000 MiB); dra-b: the DRA
    plugin alone, card 0 holds a claim (8000 MiB, 50 cores), card 1 tainted unhealthy; cpu-c: no GPU."""
    return [
        node(MIXED, [(16000, 10), (16000, 10)]),
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": ONLY}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": CPU}},
        mixed_slice(),
        hami_slice(ONLY, [24000, 24000], tainted=(1,)),
        pod("train", 6000, 30, namespace="ml", on=MIXED),
        dra_pod("infer", 3000, 20, namespace="ml", on=MIXED),
        dra_claim("infer", MIXED, [(0, 3000, 20)], namespace="ml"),
        dra_pod("serve", 8000, 50, namespace="web", on=ONLY),
        dra_claim("serve", ONLY, [(0, 8000, 50)], namespace="web"),
    ]


def world(gpu_policy: str = "spread") -> Simulator:
    return simulator(*objects(), gpu_policy=gpu_policy, allow_warnings=True)


def as_pod(raw: dict[str, Any]) -> Pod:
    return msgspec.convert(raw, type=Pod)


def test_a_pending_dra_pod_is_told_which_card_lacks_what() -> None:
    e = explain(world(), as_pod(dra_pod("big", 20000, 30)))
    assert e.status == "pending"
    assert e.message.startswith("DRA mode: 0/3 nodes can allocate claim big-main-x2b4z")
    verdicts = {v.node: v for v in e.verdicts}
    assert verdicts[CPU].counts == {"NodeNoDraDevices": 1}
    assert verdicts[CPU].unresolvable
    assert [(c.index, c.free_mem, c.free_cores, c.verdict) for c in verdicts[ONLY].cards] == [
        (0, 16000, 50, "CardInsufficientMemory"),
        (1, 24000, 100, "CardNotHealth"),
    ]
    # gpu-a card 0: the device-plugin pod's 6000 MiB and the claim's 3000 MiB are both out of the free amounts
    assert [(c.index, c.free_mem, c.verdict) for c in verdicts[MIXED].cards] == [
        (0, 7000, "CardInsufficientMemory"),
        (1, 16000, "CardInsufficientMemory"),
    ]
    text = render_explain(e)
    assert "cannot allocate all claims" in text
    head = "dra-b: does not fit: 0 of 2 card(s) fit, the claim asks for 1; "
    assert head + "1/2 CardInsufficientMemory, 1/2 CardNotHealth" in text
    assert "(DRA claims hold 8000 MiB, 50 cores)" in text
    doc = explain_json(e)
    assert {c["freeSlots"] for v in doc["nodes"] for c in v["cards"]} == {None}  # a DRA device counts no slots


def test_a_type_filter_and_a_count_beyond_the_published_cards_are_named() -> None:
    sim = world()
    typed = explain(sim, as_pod(dra_pod("t", 1000, annotations={"nvidia.com/use-gputype": "H100"})))
    assert {c.verdict for v in typed.verdicts for c in v.cards} == {"CardTypeMismatch", "CardNotHealth"}
    many = explain(sim, as_pod(dra_pod("m", 1000, gpus=3)))
    verdicts = {v.node: v for v in many.verdicts}
    assert verdicts[ONLY].counts["NodeInsufficientDevice"] == 2
    assert verdicts[ONLY].unresolvable
    assert "2 card(s) published, the claim asks for 3 distinct" in verdicts[ONLY].summary


def test_a_bound_dra_pod_is_judged_without_its_own_claim() -> None:
    sim = world()
    e = explain(sim, as_pod(dra_pod("serve", 8000, 50, namespace="web", on=ONLY)))
    assert e.status == "placed"
    assert e.current_node == ONLY
    first = next(v for v in e.verdicts if v.node == ONLY).cards[0]
    assert (first.free_mem, first.verdict) == (24000, "fits")  # its own 8000 MiB taken out while judged
    assert sim.state.nodes[ONLY].tables["NVIDIA"].usedmem[0] == 8000  # and put back


def test_a_dra_pod_whose_requests_do_not_decode_is_invalid_naming_the_annotation() -> None:
    raw = dra_pod("bad", 1000)
    raw["metadata"]["annotations"]["hami.io/dra-requests"] = "{not json"
    e = explain(world(), as_pod(raw))
    assert e.status == "invalid"
    assert "metadata.annotations[hami.io/dra-requests]" in e.message


def test_the_allocator_takes_the_first_cards_by_index_and_distinct_ones() -> None:
    sim = simulator(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": ONLY}},
        hami_slice(ONLY, [24000, 24000, 24000]),
        dra_pod("a", 20000, namespace="web", on=ONLY),
        dra_claim("a", ONLY, [(0, 20000, 0)], namespace="web"),
        allow_warnings=True,
    )
    published = published_cards(sim.dra.devices())
    two = prefilter(as_pod(pod("two", 3000, gpus=2)), sim.vendors, sim.defaults)
    placed = allocate(sim.state, ONLY, two, published)
    # card 0 has 4000 MiB left, so first fit takes 0 and 1 (not the emptier 1 and 2), one share each
    assert [d.uuid for d in placed.devices["NVIDIA"][0]] == [uuid(ONLY, 0), uuid(ONLY, 1)]
    four = prefilter(as_pod(pod("four", 3000, gpus=4)), sim.vendors, sim.defaults)
    assert not allocate(sim.state, ONLY, four, published).fits  # three cards: never four distinct ones


def test_the_node_policy_chooses_among_feasible_nodes() -> None:
    sim = world()
    req = prefilter(as_pod(pod("p", 1000)), sim.vendors, sim.defaults)
    published = published_cards(sim.dra.devices())
    placements = [allocate(sim.state, n, req, published) for n in (MIXED, ONLY, CPU)]
    assert [p.fits for p in placements] == [True, True, False]
    binpack, spread = choose(placements, "binpack"), choose(placements, "spread")
    assert binpack is not None
    assert binpack.node == MIXED  # the fuller node
    assert spread is not None
    assert spread.node == ONLY


def test_simulate_dra_places_pods_as_kube_scheduler_would_and_charges_them() -> None:
    sim = world()
    outcomes = [place_dra(sim, Sourced(as_pod(pod(f"n{i}", 10000, 10)), "p.json", f"n{i}"), 0) for i in range(3)]
    assert [(o.status, o.node) for o in outcomes] == [("placed", MIXED), ("placed", ONLY), ("pending", None)]
    assert outcomes[0].decision is not None
    assert [d.uuid for d in outcomes[0].decision.devices["NVIDIA"][0]] == [f"GPU-{MIXED}-1"]
    assert outcomes[2].reasons[ONLY] == {"CardInsufficientMemory": 1, "CardNotHealth": 1}
    assert sim.state.nodes[ONLY].tables["NVIDIA"].usedmem[0] == 18000  # the claim's 8000 and the placed 10000


def test_the_simulate_command_takes_dra(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    without_serve = [o for o in objects() if "serve" not in o["metadata"]["name"]]  # dra-b's card 0 empty
    snap.write_text(snapshot_text(*without_serve))
    pods = tmp_path / "pods.json"
    pods.write_text(snapshot_text(pod("x", 20000, 10, namespace="ml")))
    result = CliRunner().invoke(app, ["simulate", "--snapshot", str(snap), str(pods), "--dra", "-o", "json"])
    assert result.exit_code == 0, result.output
    (decision,) = json.loads(result.stdout)["decisions"]
    assert (decision["status"], decision["node"]) == ("placed", ONLY)  # 20000 MiB: only dra-b's card 0 has it
    assert decision["message"].startswith("DRA mode: 1/3 nodes")
    plain = CliRunner().invoke(app, ["simulate", "--snapshot", str(snap), str(pods), "-o", "json"])
    assert json.loads(plain.stdout)["decisions"][0]["status"] == "pending"  # hami's extender: no card has 20000


def test_the_text_report_counts_no_slots_on_a_card_only_the_dra_driver_serves(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot_text(*objects()))
    pods = tmp_path / "pods.json"
    pods.write_text(snapshot_text(pod("x", 10000, 10, namespace="ml")))
    result = CliRunner().invoke(app, ["simulate", "--snapshot", str(snap), str(pods), "--dra"])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith(f"{ONLY}  GPU-{ONLY}-0"))
    assert row.split()[4] == "1/-"  # the serve pod's claim (x went to gpu-a); slots are not DRA's limit
