"""``hami explain`` and ``hami top`` on a gang (``hami.simulate.gangview``): a member waiting for its gang, which
members hold devices unbound, and what the gang still lacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import yaml
from typer.testing import CliRunner

from hami.cli import app
from hami.config import default_device_config
from hami.devices import vendors_from_config
from hami.protocol import keys
from hami.protocol.objects import Pod
from hami.scheduling.decide import decide, reserve
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from tests.unit.server.support import gpu_node, gpu_pod

VENDORS = vendors_from_config(default_device_config())


def member(name: str, group: str = "train") -> Pod:
    pod = gpu_pod(name, mem=24000, cores=100, namespace="ml")
    return msgspec.structs.replace(
        pod, metadata=msgspec.structs.replace(pod.metadata, labels={keys.POD_GROUP_LABEL: group})
    )


def snapshot(tmp_path: Path, bound: bool = False) -> Path:
    """n1 (two cards); gang ml/train: a and b placed by /filter (unbound, or bound), c pending."""
    state = ClusterState(VENDORS)
    state.upsert_node(gpu_node("n1"))
    pods: list[dict[str, Any]] = []
    for name in ("a", "b"):
        pod = member(name)
        req = prefilter(pod, VENDORS, SchedulingDefaults())
        decision = decide(state, req, ["n1"], 1)
        reserve(state, req, decision)
        raw = msgspec.to_builtins(pod)
        raw["metadata"]["annotations"] = dict(decision.annotations)
        if bound:
            raw["spec"]["nodeName"] = "n1"
        pods.append({"apiVersion": "v1", "kind": "Pod", **raw})
    pods.append({"apiVersion": "v1", "kind": "Pod", **msgspec.to_builtins(member("c"))})
    node = {"apiVersion": "v1", "kind": "Node", **msgspec.to_builtins(gpu_node("n1"))}
    path = tmp_path / "snap.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node, *pods]}))
    return path


def run(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_explain_shows_a_member_waiting_for_its_gang_and_what_the_gang_lacks(tmp_path: Path) -> None:
    out = json.loads(run("explain", "-s", str(snapshot(tmp_path)), "-n", "ml", "c", "-o", "json"))

    gang = out["gang"]
    assert gang["members"] == [
        {"pod": "a", "state": "holds devices, unbound"},
        {"pod": "b", "state": "holds devices, unbound"},
        {"pod": "c", "state": "waits"},
    ]
    assert gang["lacking"] == [{"pod": "c", "why": "n1: 2/2 CardInsufficientMemory"}]
    assert gang["summary"].startswith("gang train: 2 of 3 members placed (bound or holding devices); the gang lacks")


def test_top_lists_the_gangs_not_yet_bound_whole(tmp_path: Path) -> None:
    text = run("top", "-s", str(snapshot(tmp_path)), "-A", "--color", "never")

    assert "Gangs waiting:" in text
    assert "  gang train: 2 of 3 members placed" in text
    assert "    c: waits" in text


def test_a_gang_bound_whole_is_not_listed_by_top(tmp_path: Path) -> None:
    path = snapshot(tmp_path, bound=True)
    doc = yaml.safe_load(path.read_text())
    doc["items"] = [i for i in doc["items"] if i["metadata"]["name"] != "c"]
    path.write_text(yaml.safe_dump(doc))

    assert json.loads(run("top", "-s", str(path), "-A", "-o", "json"))["gangs"] == []
