"""``hami top`` on a card hami's DRA plugin holds back from claims because device-plugin pods use it
(docs/dra-mode-switching.md): the card stays healthy; the DRA section says it is held back and why."""

from __future__ import annotations

from hami.deviceplugin.dra.guard import HELD_BACK_TAINT
from hami.simulate.top import build_top, render_top, top_json
from tests.unit.simulate.test_dra_views import GPU0, GPU1, GPU2, hami_plugin_slice, simulator

DRIVER = "hami-core-gpu.project-hami.io"


def test_a_held_back_card_stays_healthy_and_top_says_why_it_takes_no_claims() -> None:
    body = hami_plugin_slice("dra-node-1", [(GPU0, 0, True), (GPU1, 1, False), (GPU2, 2, True)])
    for i in (0, 1):  # card 0 only held back; card 1 held back and unhealthy
        devices = body["spec"]["devices"]
        devices[i]["taints"] = [*devices[i].get("taints", []), {"key": HELD_BACK_TAINT, "value": "true",
                                                                  "effect": "NoSchedule"}]  # fmt: skip
    sim = simulator(extra=(body,))
    view = build_top(sim.state, dra=sim.dra)
    health = {c.uuid: c.health for n in view.nodes for c in n.cards}
    assert (health[GPU0], health[GPU1], health[GPU2]) == ("healthy", "unhealthy", "healthy")
    text = render_top(view)
    held = f"{HELD_BACK_TAINT}=true:NoSchedule"
    line = (
        f"held back {DRIVER}/dra-node-1/hami-gpu-0 ({GPU0}) on dra-node-1: tainted {held} (device-plugin pods use it)"
    )
    assert line in text
    assert f"unhealthy {DRIVER}/dra-node-1/hami-gpu-1 ({GPU1})" in text
    doc = top_json(view)
    assert [(t["device"], t["heldBack"]) for t in doc["dra"]["tainted"]] == [("hami-gpu-0", True), ("hami-gpu-1", True)]
