"""``hami simulate`` reads what users have: workloads expanded into the pods their controllers make, strict
decoding with kubectl's ``unknown field`` warnings, and the device families of a default install."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami.errors import InvalidInput
from hami.protocol.objects import Node, ObjectMeta
from hami.simulate.fields import unknown_fields
from hami.simulate.loading import read_pods
from hami.simulate.workloads import expand_workload
from tests.unit.simulate.clusterfix import node, snapshot_text
from tests.unit.simulate.helpers import run_cli

TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "x"}, "annotations": {"nvidia.com/use-gputype": "T4"}},
    "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpumem": 3000}}}]},
}


def workload(kind: str, spec: dict[str, Any], name: str = "w", namespace: str = "ml") -> dict[str, Any]:
    api = {"Job": "batch/v1", "CronJob": "batch/v1", "ReplicationController": "v1"}.get(kind, "apps/v1")
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def names(raw: dict[str, Any], nodes: list[Node] | None = None, now: int = 0) -> list[str]:
    return [p.raw["metadata"]["name"] for p in expand_workload(raw, "f.yaml", nodes or [], now)]


def test_deployment_makes_replicas_named_like_its_replicaset_s_pods() -> None:
    pods = expand_workload(workload("Deployment", {"replicas": 3, "template": TEMPLATE}), "f", [], 0)
    assert len(pods) == 3
    first = pods[0].raw
    _, pod_hash, suffix = first["metadata"]["name"].rsplit("-", 2)
    assert first["metadata"]["name"].startswith("w-")
    assert len(suffix) == 5
    assert set(suffix) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert first["metadata"]["labels"] == {"app": "x", "pod-template-hash": pod_hash}
    assert first["metadata"]["namespace"] == "ml"
    assert first["metadata"]["annotations"] == {"nvidia.com/use-gputype": "T4"}
    assert first["spec"] == TEMPLATE["spec"]
    assert first["spec"] is not TEMPLATE["spec"]
    assert len({p.raw["metadata"]["name"] for p in pods}) == 3  # distinct
    assert names(workload("Deployment", {"replicas": 3, "template": TEMPLATE})) == [
        p.raw["metadata"]["name"] for p in pods
    ]


@pytest.mark.parametrize(
    ("kind", "spec", "expected"),
    [
        ("StatefulSet", {"replicas": 2, "template": TEMPLATE}, ["w-0", "w-1"]),
        ("StatefulSet", {"replicas": 2, "ordinals": {"start": 5}, "template": TEMPLATE}, ["w-5", "w-6"]),
        ("StatefulSet", {"template": TEMPLATE}, ["w-0"]),  # replicas default to 1
        ("Deployment", {"replicas": 0, "template": TEMPLATE}, []),
        ("Job", {"parallelism": 4, "completions": 2, "template": TEMPLATE}, 2),
        ("Job", {"parallelism": 3, "template": TEMPLATE}, 3),
        ("Job", {"template": TEMPLATE}, 1),
        ("Job", {"parallelism": 3, "suspend": True, "template": TEMPLATE}, []),
        ("ReplicaSet", {"replicas": 2, "template": TEMPLATE}, 2),
        ("ReplicationController", {"replicas": 2, "template": TEMPLATE}, 2),
        ("CronJob", {"schedule": "* * * * *", "suspend": True, "jobTemplate": {"spec": {"template": TEMPLATE}}}, []),
    ],
)
def test_replicas_parallelism_and_suspension(kind: str, spec: dict[str, Any], expected: list[str] | int) -> None:
    got = names(workload(kind, spec))
    if isinstance(expected, int):
        assert len(got) == expected
        assert all(n.startswith("w-") for n in got)
    else:
        assert got == expected


def test_indexed_job_and_cronjob_names() -> None:
    indexed = expand_workload(
        workload("Job", {"parallelism": 2, "completionMode": "Indexed", "template": TEMPLATE}), "f", [], 0
    )
    assert [p.raw["metadata"]["name"][:4] for p in indexed] == ["w-0-", "w-1-"]
    assert indexed[1].raw["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "1"
    assert indexed[0].raw["metadata"]["labels"]["job-name"] == "w"
    cron = workload(
        "CronJob", {"schedule": "0 * * * *", "jobTemplate": {"spec": {"parallelism": 2, "template": TEMPLATE}}}
    )
    got = names(cron, now=1_700_000_000)
    assert len(got) == 2
    assert all(n.startswith(f"w-{1_700_000_000 // 60}-") for n in got)


def test_daemonset_makes_one_pod_per_matching_node_bound_to_it() -> None:
    def n(name: str, labels: dict[str, str]) -> Node:
        return Node(metadata=ObjectMeta(name=name, labels=labels))

    template = {**TEMPLATE, "spec": {**TEMPLATE["spec"], "nodeSelector": {"gpu": "yes"}}}
    pods = expand_workload(
        workload("DaemonSet", {"template": template}),
        "f",
        [n("b", {"gpu": "yes"}), n("a", {"gpu": "yes"}), n("c", {})],
        0,
    )
    assert [p.node for p in pods] == ["a", "b"]
    assert all(p.raw["metadata"]["name"].startswith("w-") for p in pods)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (workload("Deployment", {"replicas": -1, "template": TEMPLATE}), "f: spec.replicas"),
        (workload("Deployment", {"replicas": "2", "template": TEMPLATE}), "f: spec.replicas"),
        (workload("Job", {"parallelism": 1}), "f: spec.template"),
        ({"kind": "Deployment", "spec": {"template": TEMPLATE}}, "f: metadata.name"),
    ],
)
def test_bad_workloads_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        expand_workload(raw, "f", [], 0)
    assert err.value.field == field


def test_unknown_fields_in_kubectl_s_spelling() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "lables": {}},
        "spec": {"containers": [{"name": "c", "resource": {"limits": {}}}, {"name": "d", "resources": {"limit": {}}}]},
    }
    assert unknown_fields(pod) == [
        'unknown field "metadata.lables" (did you mean "labels"?)',
        'unknown field "spec.containers[0].resource" (did you mean "resources"?)',
        'unknown field "spec.containers[1].resources.limit" (did you mean "limits"?)',
    ]
    deploy = workload("Deployment", {"replica": 2, "template": {"spec": {"containers": [{"name": "c", "imag": "x"}]}}})
    assert unknown_fields(deploy) == [
        'unknown field "spec.replica" (did you mean "replicas"?)',
        'unknown field "spec.template.spec.containers[0].imag" (did you mean "image"?)',
    ]
    cron = workload("CronJob", {"schedule": "x", "jobTemplate": {"spec": {"template": {"spec": {"containerz": []}}}}})
    assert unknown_fields(cron) == [
        'unknown field "spec.jobTemplate.spec.template.spec.containerz" (did you mean "containers"?)'
    ]
    assert unknown_fields(workload("Job", {"template": TEMPLATE})) == []


def test_read_pods_expands_lists_of_workloads_and_warns(tmp_path: Path) -> None:
    docs = [
        workload("Deployment", {"replicas": 2, "template": TEMPLATE}, name="web"),
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [workload("StatefulSet", {"replicas": 1, "template": TEMPLATE}, name="db")],
        },
        workload("Deployment", {"replicas": 0, "template": TEMPLATE}, name="off"),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "typo"},
            "spec": {"containers": [{"name": "c", "resource": {}}]},
        },
    ]
    loaded = read_pods([("w.yaml", yaml.safe_dump_all(docs))])
    keys = [p.obj.key for p in loaded.pods]
    assert keys[0].startswith("ml/web-")
    assert keys[1].startswith("ml/web-")
    assert keys[2:] == ["ml/db-0", "/typo"]
    assert loaded.pods[2].origin == "w.yaml: document 2 items[0] (StatefulSet ml/db) pod 1 of 1 (Pod ml/db-0)"
    assert loaded.warnings == [
        "w.yaml: document 3 (Deployment ml/off): makes no pod now (replicas 0, suspended, or no node matches)",
        'w.yaml: document 4 (Pod typo): unknown field "spec.containers[0].resource" (did you mean "resources"?)',
    ]


def test_cli_places_a_deployment_and_a_daemonset(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot_text(node("a", [(16000, 10)]), node("b", [(16000, 10)], labels={"pool": "x"})))
    pods = tmp_path / "w.yaml"
    daemon_template = {**TEMPLATE, "spec": {**TEMPLATE["spec"], "nodeSelector": {"pool": "x"}}}
    pods.write_text(
        yaml.safe_dump_all(
            [
                workload("Deployment", {"replicas": 3, "template": TEMPLATE}),
                workload("DaemonSet", {"template": daemon_template}, name="agent"),
            ]
        )
    )
    result = run_cli("--snapshot", snap, pods, "-o", "json")
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["summary"]["placed"] == 4
    agent = [d for d in doc["decisions"] if d["pod"].startswith("ml/agent-")]
    assert [d["node"] for d in agent] == ["b"]


def test_typos_are_warned_and_the_exit_status_is_unchanged(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot_text(node("a", [(16000, 10)])))
    pods = tmp_path / "p.yaml"
    pods.write_text(
        "kind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    resource:\n      limit:\n"
        "        nvidia.com/gpumem: 3000\n"
    )
    result = run_cli("--snapshot", snap, pods)
    assert result.code == 0
    assert 'unknown field "spec.containers[0].resource" (did you mean "resources"?)' in result.stderr


def test_objects_without_a_namespace_go_to_the_one_given() -> None:
    docs = [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"}, "spec": {"containers": [{"name": "c"}]}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "own", "namespace": "ml"}, "spec": {}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"}, "spec": {"template": TEMPLATE}},
    ]
    text = yaml.safe_dump_all(docs)
    keys = [p.obj.key for p in read_pods([("p.yaml", text)], namespace="lab").pods]
    assert keys == ["lab/bare", "ml/own", "lab/db-0"]
    loaded = read_pods([("p.yaml", text)], namespace="lab").pods[0]
    assert loaded.raw is not None
    assert loaded.raw["metadata"]["namespace"] == "lab"  # what admission sees
    assert [p.obj.key for p in read_pods([("p.yaml", text)]).pods] == ["/bare", "ml/own", "/db-0"]
