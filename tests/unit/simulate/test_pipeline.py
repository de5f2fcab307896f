"""explain and simulate share one pipeline (admission -> decision), so they never disagree on a manifest; and
simulate's CI mode (``--fail-on-pending``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from hami.cli import app
from hami.config import default_device_config
from hami.scheduling.request import SchedulingDefaults
from hami.simulate.command import EXIT_NOT_PLACED
from hami.simulate.explain import explain_manifest
from hami.simulate.loading import load_snapshot, read_pods
from hami.simulate.simulator import Simulator
from tests.unit.simulate.clusterfix import node, pod, snapshot_text
from tests.unit.simulate.helpers import NOW, run_cli

CLUSTER = [
    node("a", [(16000, 10), (16000, 10)]),
    node("b", [(24000, 10)], labels={"pool": "big"}),
    pod("held", 12000, on="a", cards=(0,)),
]


def manifest(name: str, limits: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}], **spec},
    }


MANIFESTS = [
    manifest("mem-only", {"nvidia.com/gpumem": 3000}),
    manifest("whole", {"nvidia.com/gpu": 1}),
    manifest("too-big", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000}),
    manifest("big-pool", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000}, nodeSelector={"pool": "big"}),
    manifest("node-named", {"nvidia.com/gpu": 1}, nodeName="a"),
    manifest("other-scheduler", {"nvidia.com/gpu": 1}, schedulerName="volcano"),
    manifest("bad-quantity", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": "3 GiB"}),
    manifest("cpu-only", {"cpu": "1"}),
    manifest("typo", {"nvidia.com/gpumemory": 3000, "nvidia.com/gpu": 1}),
    manifest("zero", {"nvidia.com/gpu": 0, "nvidia.com/gpumem": 3000}),
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "field-typo", "namespace": "ml"},
        "spec": {"containers": [{"name": "c", "image": "x", "resource": {"limits": {"nvidia.com/gpumem": 3000}}}]},
    },
]


def fresh() -> Simulator:
    sim = Simulator(default_device_config(), SchedulingDefaults(), admission=True, families={"nvidia"})
    sim.add_snapshot(load_snapshot([("snap.json", snapshot_text(*CLUSTER))]))
    return sim


def _item(raw: dict[str, Any]) -> Any:
    (item,) = read_pods([("pod.yaml", yaml.safe_dump(raw))]).pods
    return item


@pytest.mark.parametrize("raw", MANIFESTS, ids=[m["metadata"]["name"] for m in MANIFESTS])
def test_explain_and_simulate_agree(raw: dict[str, Any]) -> None:
    placed = fresh().place(_item(raw), NOW)
    explained = explain_manifest(fresh(), _item(raw))
    same = {"would-place": "placed"}
    assert same.get(explained.status, explained.status) == placed.status
    assert explained.node == placed.node
    assert explained.admission == placed.admission
    assert list(explained.warnings) == list(placed.warnings)
    if raw["metadata"]["name"] in ("typo", "zero", "field-typo"):
        assert explained.warnings  # each of these is warned about, by both


def test_unknown_fields_reach_the_json_of_both_commands(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot_text(*CLUSTER))
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(MANIFESTS[-1]))
    simulated = run_cli("-s", snap, path, "-o", "json")
    (decision,) = json.loads(simulated.stdout)["decisions"]
    assert decision["status"] == "no-devices"
    assert 'unknown field "spec.containers[0].resource"' in decision["warnings"][0]
    assert simulated.stderr.count('unknown field "spec.containers[0].resource"') == 1
    explained = CliRunner().invoke(app, ["explain", "-f", str(path), "-s", str(snap), "-o", "json"])
    assert json.loads(explained.stdout)["warnings"] == decision["warnings"]
    assert explained.stderr.count('unknown field "spec.containers[0].resource"') == 1


def test_a_memory_only_pod_is_admitted_and_placed_by_explain_too() -> None:
    e = explain_manifest(fresh(), _item(MANIFESTS[0]))
    assert e.status == "would-place"
    assert e.admission is not None
    assert any(op["path"].endswith("/nvidia.com~1gpu") and op.get("value") == "1" for op in e.admission)
    assert e.node is not None


def test_explain_f_cli_shows_admission_and_typo_warnings(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot_text(*CLUSTER))
    for raw in (MANIFESTS[0], MANIFESTS[8]):
        path = tmp_path / f"{raw['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(raw))
        result = CliRunner().invoke(app, ["explain", "-f", str(path), "-s", str(snap), "-o", "json"])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert doc["status"] == "would-place"
        if raw is MANIFESTS[8]:
            assert "did you mean nvidia.com/gpumem?" in result.stderr
            assert doc["warnings"]
            assert "gpumemory" in doc["warnings"][0]
    denied = tmp_path / "denied.yaml"
    denied.write_text(yaml.safe_dump(MANIFESTS[4]))
    result = CliRunner().invoke(app, ["explain", "-f", str(denied), "-s", str(snap)])
    assert result.stdout.startswith("ml/node-named: denied")


def test_fail_on_pending(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot_text(*CLUSTER))
    ok, bad = tmp_path / "ok.yaml", tmp_path / "bad.yaml"
    ok.write_text(yaml.safe_dump_all([MANIFESTS[0], MANIFESTS[7]]))  # placed, and one asking for no device
    bad.write_text(yaml.safe_dump_all([MANIFESTS[0], MANIFESTS[2], MANIFESTS[4]]))  # placed, pending, denied
    assert run_cli("-s", snap, ok, "--fail-on-pending").code == 0
    assert run_cli("-s", snap, bad).code == 0
    failed = run_cli("-s", snap, bad, "--fail-on-pending", "-o", "json")
    assert failed.code == EXIT_NOT_PLACED == 3
    assert "--fail-on-pending: 2 of 3 pods not placed (1 denied, 1 pending); exit status 3" in failed.stderr
    assert json.loads(failed.stdout)["summary"]["pending"] == 1  # the document is still printed


def test_topology_aware_on_a_node_without_scores_is_placed_with_a_warning() -> None:
    from hami.protocol.scores import PairScore, encode_pair_scores

    scored = node("scored", [(16000, 10), (16000, 10)])
    scores = [PairScore("GPU-scored-0", {"GPU-scored-1": 100}), PairScore("GPU-scored-1", {"GPU-scored-0": 100})]
    scored["metadata"]["annotations"]["hami.io/node-nvidia-score"] = encode_pair_scores(scores)
    for cluster, warned in (([node("bare", [(16000, 10), (16000, 10)])], True), ([scored], False)):
        sim = Simulator(default_device_config(), SchedulingDefaults(), admission=True, families={"nvidia"})
        sim.add_snapshot(load_snapshot([("snap.json", snapshot_text(*cluster))]))
        raw = manifest("pair", {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 1000})
        raw["metadata"]["annotations"] = {"hami.io/gpu-scheduler-policy": "topology-aware"}
        outcome = sim.place(_item(raw), NOW)
        assert outcome.status == "placed"
        topology = [w for w in outcome.warnings if "topology-aware" in w]
        assert bool(topology) == warned
        if warned:
            assert "node bare publishes no topology for NVIDIA" in topology[0]
            assert "hami.io/node-nvidia-score" in topology[0]
            assert topology[0] in sim.warnings
