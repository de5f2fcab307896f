"""``hami simulate`` runs each pod through the admission webhook's own code before placing it."""

from __future__ import annotations

import json
import re
from collections.abc import Collection

import pytest

from hami.config import DeviceConfig, default_device_config
from hami.devices.base import Vendor
from hami.errors import InvalidInput
from hami.scheduling.request import SchedulingDefaults
from hami.simulate.admit import apply_patch
from hami.simulate.html import render_html
from hami.simulate.loading import load_pods, load_snapshot, read_files
from hami.simulate.report import render_summary
from hami.simulate.simulator import Outcome, Simulator
from tests.unit.simulate.helpers import DATA, NOW, run_cli

MEMORY_ONLY = """
apiVersion: v1
kind: Pod
metadata: {name: mem-only, namespace: default}
spec:
  containers: [{name: c, resources: {limits: {nvidia.com/gpumem: "2000"}}}]
"""

NODE_NAMED = """
apiVersion: v1
kind: Pod
metadata: {name: pinned, namespace: default}
spec:
  nodeName: gpu-node-2
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "1000"}}}]
"""

OTHER_SCHEDULER = """
apiVersion: v1
kind: Pod
metadata: {name: elsewhere, namespace: default}
spec:
  schedulerName: volcano
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "1000"}}}]
"""


def place(pods: str, *, admission: bool, snapshot: str = "kubectl-list.json") -> tuple[Simulator, list[Outcome]]:
    sim = Simulator(default_device_config(), SchedulingDefaults(), admission=admission)
    sim.add_snapshot(load_snapshot(read_files([DATA / snapshot])))
    return sim, [sim.place(p, NOW) for p in load_pods([("pods.yaml", pods)])]


def test_defaults_are_applied_before_placing() -> None:
    """The webhook adds ``nvidia.com/gpu: 1`` (defaultGPUNum) to a container asking for memory only; without
    admission the same pod asks for no device at all."""
    _, (admitted,) = place(MEMORY_ONLY, admission=True)
    assert admitted.status == "placed"
    assert admitted.decision is not None
    assert [[d.usedmem for d in c] for c in admitted.decision.devices["NVIDIA"]] == [[2000]]
    assert admitted.admission is not None
    paths = [op["path"] for op in admitted.admission]
    assert "/spec/containers/0/resources/limits/nvidia.com~1gpu" in paths
    assert "/spec/schedulerName" in paths
    _, (as_written,) = place(MEMORY_ONLY, admission=False)
    assert as_written.status == "no-devices"
    assert as_written.admission is None


@pytest.mark.parametrize(
    ("pods", "message"),
    [
        pytest.param(NODE_NAMED, "pod has node assigned: spec.nodeName is 'gpu-node-2'", id="node-name"),
        pytest.param(
            OTHER_SCHEDULER, "pod already has different scheduler assigned (spec.schedulerName: volcano)", id="other"
        ),
    ],
)
def test_a_denied_pod_is_not_placed_and_says_why(pods: str, message: str) -> None:
    sim, (outcome,) = place(pods, admission=True)
    charged = {uid: r for uid, r in sim.state.pods.items() if not uid.startswith("sim-")}
    assert sim.state.pods == charged  # the snapshot's pods only: nothing reserved for the denied pod
    assert outcome.status == "denied"
    assert outcome.node is None
    assert outcome.decision is None
    assert outcome.message.startswith("pods.yaml: document 1 (Pod default/")
    assert message in outcome.message
    _, (as_written,) = place(pods, admission=False)
    assert as_written.status == "placed"


def test_the_webhook_denies_a_pod_over_its_namespace_quota() -> None:
    """team-a may use 8000 MiB: the second 5000 MiB pod is denied at admission, the 3000 MiB one still fits."""
    _, outcomes = place((DATA / "pods-quota.json").read_text(), admission=True)
    assert [o.status for o in outcomes] == ["placed", "denied", "placed"]
    assert "exceeding resource quota: namespace team-a has 5000 of nvidia.com/gpumem in use" in outcomes[1].message
    _, as_written = place((DATA / "pods-quota.json").read_text(), admission=False)
    assert [o.status for o in as_written] == ["placed", "pending", "placed"]


def test_an_unreadable_quantity_is_the_webhooks_denial() -> None:
    _, outcomes = place((DATA / "pods-bad-quantity.yaml").read_text(), admission=True)
    assert [o.status for o in outcomes] == ["denied", "placed"]
    assert "limits[nvidia.com/gpumem]: is not a quantity" in outcomes[0].message


def test_tables_json_and_report_show_denied_pods() -> None:
    sim, outcomes = place(NODE_NAMED + "---" + MEMORY_ONLY, admission=True)
    table = render_summary("hami simulate", sim.state, outcomes)
    assert "2 pods in order: 1 placed, 0 pending, 1 denied at admission" in table
    assert re.search(r"^default/pinned +- +denied \(see below\)$", table, re.MULTILINE)
    assert "default/pinned: pods.yaml: document 1 (Pod default/pinned): denied by the admission webhook" in table
    # under a heading of their own, never under "Pending pods" (no node rejected them: the cluster never makes them)
    assert "Pending pods" not in table
    denied = table.split("\nDenied at admission (the webhook refuses them; the cluster would not create them)\n", 1)[1]
    assert denied.startswith("default/pinned: ")
    html = render_html("hami simulate", sim.state, outcomes)
    assert "AdmissionDenied" in html
    assert "denied by the admission webhook: pod has node assigned" in html


def test_the_command_admits_unless_told_not_to() -> None:
    pods = DATA / "pods-quota.json"
    admitted = json.loads(run_cli("-s", DATA / "kubectl-list.json", pods, "-o", "json").stdout)
    assert (admitted["summary"]["placed"], admitted["summary"]["denied"]) == (2, 1)
    assert admitted["decisions"][1]["admission"] is None
    assert admitted["decisions"][0]["admission"] == [
        {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}
    ]
    skipped = json.loads(run_cli("-s", DATA / "kubectl-list.json", pods, "-o", "json", "--skip-admission").stdout)
    assert (skipped["summary"]["placed"], skipped["summary"]["pending"], skipped["summary"]["denied"]) == (2, 1, 0)
    assert [d["admission"] for d in skipped["decisions"]] == [None, None, None]


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        pytest.param([{"op": "add", "path": "/spec/x", "value": 1}], {"spec": {"a": [1, 2], "x": 1}}, id="add-key"),
        pytest.param([{"op": "add", "path": "/spec/a/-", "value": 3}], {"spec": {"a": [1, 2, 3]}}, id="append"),
        pytest.param([{"op": "add", "path": "/spec/a/0", "value": 0}], {"spec": {"a": [0, 1, 2]}}, id="insert"),
        pytest.param([{"op": "replace", "path": "/spec/a/1", "value": 9}], {"spec": {"a": [1, 9]}}, id="replace"),
        pytest.param([{"op": "remove", "path": "/spec/a"}], {"spec": {}}, id="remove"),
        pytest.param(
            [{"op": "add", "path": "/spec/b~1c~0d", "value": "v"}], {"spec": {"a": [1, 2], "b/c~d": "v"}}, id="escaped"
        ),
    ],
)
def test_apply_patch(ops: list[dict[str, object]], expected: object) -> None:
    raw = {"spec": {"a": [1, 2]}}
    assert apply_patch(raw, ops) == expected
    assert raw == {"spec": {"a": [1, 2]}}  # left alone


@pytest.mark.parametrize(
    "op",
    [
        pytest.param({"op": "replace", "path": "/spec/missing", "value": 1}, id="replace-missing"),
        pytest.param({"op": "add", "path": "/nope/x", "value": 1}, id="no-parent"),
        pytest.param({"op": "add", "path": "/spec/a/7", "value": 1}, id="index-out-of-range"),
        pytest.param({"op": "move", "path": "/spec/a/0", "from": "/spec/b"}, id="unsupported"),
        pytest.param({"op": "add", "path": "spec", "value": 1}, id="not-a-pointer"),
    ],
)
def test_apply_patch_refuses_what_it_cannot_apply(op: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        apply_patch({"spec": {"a": [1, 2]}}, [op])


TOY_PODS = """
apiVersion: v1
kind: Pod
metadata: {name: toy-a, namespace: default}
spec:
  containers:
    - {name: first, resources: {limits: {toy.example/tpu: "1"}}}
    - {name: second, resources: {limits: {toy.example/tpu: "1"}}}
---
apiVersion: v1
kind: Pod
metadata: {name: toy-refused, namespace: default, annotations: {toy.example/mode: forbidden}}
spec:
  containers: [{name: c, resources: {limits: {toy.example/tpu: "1"}}}]
"""

TOY_NODE = """
apiVersion: v1
kind: Node
metadata: {name: toy-node}
status: {capacity: {toy.example/tpu: "4"}}
"""


def test_a_vendors_admission_edits_and_denials_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    """The TOY vendor (``tests/toyvendor.py``) sets requests and a pod annotation from each container, and refuses
    a mode: the simulated pod carries the edits, the refused one is denied with the vendor's message."""
    import hami.simulate.simulator as simulator_module
    from tests.toyvendor import TOY, USERS, ToyVendor

    registry = simulator_module.vendors_from_config

    def with_toy(config: DeviceConfig, enabled: Collection[str] | None = None) -> dict[str, Vendor]:
        return {**registry(config, enabled), TOY: ToyVendor()}

    monkeypatch.setattr(simulator_module, "vendors_from_config", with_toy)
    sim = Simulator(default_device_config(), SchedulingDefaults(), admission=True)
    sim.add_snapshot(load_snapshot([("toy-node.yaml", TOY_NODE)]))
    placed, refused = (sim.place(p, NOW) for p in load_pods([("pods.yaml", TOY_PODS)]))
    assert placed.status == "placed"
    assert placed.admission is not None
    ops = {op["path"]: op["value"] for op in placed.admission}
    assert ops["/metadata/annotations"] == {USERS: "first,second"}
    assert ops["/spec/containers/0/resources/requests"] == {"toy.example/tpu": "1"}
    assert refused.status == "denied"
    assert refused.message.endswith(
        "metadata.annotations[toy.example/mode]: TOY devices refuse this mode (got 'forbidden')"
    )
