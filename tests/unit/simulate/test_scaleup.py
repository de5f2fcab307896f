"""``hami simulate --template-node``: how many new nodes of a group the pods need, with the extender's simulation
code (``hami.scheduling.simulation.estimate``), a cold-zero group's profile, and the command's exit status."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from hami.cli import app
from hami.protocol import keys
from tests.unit.server.support import gpu_node

REGISTER = gpu_node("x", mem=81920).metadata.annotations[keys.NVIDIA_REGISTER]
TEMPLATE = """apiVersion: v1
kind: Node
metadata:
  name: template-a100x2
  labels: {node.kubernetes.io/instance-type: a100x2}
"""
PODS = """apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  parallelism: 5
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 40000}}}
---
apiVersion: v1
kind: Pod
metadata: {name: big, namespace: ml}
spec:
  containers:
  - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 4}}}
"""


def run(tmp_path: Path, *extra: str) -> tuple[int, str]:
    (tmp_path / "node.yaml").write_text(TEMPLATE)
    (tmp_path / "pods.yaml").write_text(PODS)
    profiles = tmp_path / "profiles"
    profiles.mkdir(exist_ok=True)
    (profiles / "a100x2").write_text(f"{keys.NVIDIA_REGISTER}: '{REGISTER}'\n")
    args = ["simulate", "--template-node", str(tmp_path / "node.yaml"), str(tmp_path / "pods.yaml"), "--now", "1"]
    result = CliRunner().invoke(app, [*args, *extra, "--device-profiles", str(profiles)])
    return result.exit_code, result.stdout


def test_pods_pack_onto_as_few_new_nodes_as_take_them(tmp_path: Path) -> None:
    code, out = run(tmp_path, "-o", "json")

    answer = json.loads(out)
    assert answer["newNodes"] == ["template-a100x2-1", "template-a100x2-2"]
    nodes = [row["node"] for row in answer["pods"]]
    assert nodes[:5] == ["template-a100x2-1"] * 4 + ["template-a100x2-2"]  # two 40000 MiB shares per card
    assert answer["pods"][5] == {"pod": "ml/big", "node": "", "reason": "2/2 NodeInsufficientDevice"}
    assert code == 3  # a pod fits no new node of this group


def test_the_table_says_how_many_new_nodes(tmp_path: Path) -> None:
    code, out = run(tmp_path)

    assert out.splitlines()[0] == "2 new node(s) like template-a100x2 take 5 of 6 pod(s)"
    assert "ml/big" in out
    assert "none: 2/2 NodeInsufficientDevice" in out
    assert code == 3


def test_a_template_node_is_refused_beside_a_snapshot(tmp_path: Path) -> None:
    code, _ = run(tmp_path, "--snapshot", str(tmp_path / "node.yaml"))

    assert code == 2
