"""Reading snapshot and pod files: kubectl's List output, multi-document YAML, and precise errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami.errors import InvalidInput
from hami.simulate.loading import load_pods, load_snapshot, read_documents, read_files, read_pods
from tests.unit.simulate.helpers import DATA


def _names(items: list) -> list[str]:  # type: ignore[type-arg]
    return [f"{i.obj.metadata.namespace}/{i.obj.metadata.name}" for i in items]


def test_kubectl_json_list_is_split_by_kind() -> None:
    snap = load_snapshot(read_files([DATA / "kubectl-list.json"]))
    assert _names(snap.nodes) == ["/gpu-node-1", "/gpu-node-2", "/cpu-node"]
    assert _names(snap.pods) == ["default/trainer-0", "default/finished-job", "kube-system/coredns-6f6b679f8f-abcde"]
    assert _names(snap.quotas) == ["team-a/gpu-quota"]
    node = snap.nodes[0].obj
    assert node.metadata.labels["pool"] == "t4"
    assert node.metadata.annotations["hami.io/node-nvidia-register"].startswith('[{"id":"GPU-1a","count":10,')
    assert snap.quotas[0].obj.spec.hard == {"limits.nvidia.com/gpumem": "8000", "pods": "20"}
    assert snap.pods[0].origin == f"{DATA / 'kubectl-list.json'}: items[3] (Pod default/trainer-0)"


def test_multi_document_yaml_mixes_lists_and_objects_and_keeps_timestamps_as_text() -> None:
    snap = load_snapshot(read_files([DATA / "snapshot-multi.yaml"]))
    assert _names(snap.nodes) == ["/alpha", "/beta", "/gamma"]
    assert snap.nodes[2].obj.spec.unschedulable is True
    assert snap.nodes[0].obj.metadata.creation_timestamp == "2025-02-01T10:00:00Z"
    assert _names(snap.pods) == ["default/running"]
    assert snap.nodes[1].origin.endswith("snapshot-multi.yaml: document 1 items[1] (Node beta)")
    assert snap.pods[0].origin.endswith("snapshot-multi.yaml: document 3 (Pod default/running)")


def test_several_files_are_read_in_order() -> None:
    snap = load_snapshot(read_files([DATA / "snapshot-multi.yaml", DATA / "malformed-node.yaml"]))
    assert _names(snap.nodes) == ["/alpha", "/beta", "/gamma", "/broken", "/healthy"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            '{"kind":"Pod"} {"kind":"Node"}\n{"a":1}',
            [{"kind": "Pod"}, {"kind": "Node"}, {"a": 1}],
            id="concatenated-json",
        ),
        pytest.param('[{"kind":"Pod"}]', [[{"kind": "Pod"}]], id="json-array"),
        pytest.param(
            "---\nkind: Pod\n---\n---\nkind: Node\n", [{"kind": "Pod"}, {"kind": "Node"}], id="yaml-empty-docs-dropped"
        ),
        pytest.param("", [], id="empty-file"),
    ],
)
def test_read_documents(text: str, expected: list[object]) -> None:
    assert read_documents(text, "f") == expected


def test_a_top_level_array_is_read_like_a_lists_items() -> None:
    pods = load_pods([("p.json", '[{"kind":"Pod","metadata":{"name":"a"}},{"kind":"Pod","metadata":{"name":"b"}}]')])
    assert [p.obj.metadata.name for p in pods] == ["a", "b"]
    assert [p.origin for p in pods] == ["p.json: items[0] (Pod a)", "p.json: items[1] (Pod b)"]


def test_unknown_kind_names_the_file_and_the_object() -> None:
    path = DATA / "unknown-kind.yaml"
    with pytest.raises(InvalidInput) as err:
        load_snapshot(read_files([path]))
    assert err.value.field == f"{path}: document 2 (Deployment shop/web)"
    assert err.value.value == "Deployment"
    assert str(err.value) == (
        f"{path}: document 2 (Deployment shop/web): unknown kind in a snapshot; "
        "expected DeviceClass, Node, Pod, ResourceClaim, ResourceQuota, ResourceSlice or a List"
    )


def test_a_pods_file_skips_other_kinds_with_a_note() -> None:
    text = "kind: Pod\nmetadata: {name: a}\n---\nkind: Service\nmetadata: {name: web}\n---\n"
    text += "kind: Node\nmetadata: {name: n1}\n"
    loaded = read_pods([("pods.yaml", text)])
    assert [p.obj.metadata.name for p in loaded.pods] == ["a"]
    assert loaded.warnings == []
    assert loaded.notes == [
        "pods.yaml: document 2 (Service web): skipped, a Service makes no pod",
        "pods.yaml: document 3 (Node n1): skipped, a Node makes no pod",
    ]


def test_a_pods_file_object_without_a_kind_is_an_error() -> None:
    with pytest.raises(InvalidInput) as err:
        load_pods([("pods.yaml", "kind: Pod\nmetadata: {name: a}\n---\nmetadata: {name: b}\n")])
    assert str(err.value) == (
        "pods.yaml: document 2 ((no kind) b): no kind; expected Pod, a workload (CronJob, DaemonSet, "
        "Deployment, Job, ReplicaSet, ReplicationController, StatefulSet) or a List"
    )


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n---\n"])
def test_an_empty_pods_file_is_an_error(text: str) -> None:
    with pytest.raises(InvalidInput, match=r"^pods.yaml: holds no Kubernetes object \(an empty file"):
        read_pods([("pods.yaml", text)])


def test_a_binary_file_is_named_in_words(tmp_path: Path) -> None:
    garbage = tmp_path / "pods.bin"
    garbage.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe")
    with pytest.raises(InvalidInput) as err:
        read_files([garbage])
    assert str(err.value) == (
        f"{garbage}: not a text file (byte 0xff at offset 8 is not UTF-8): give a YAML or JSON manifest, "
        "as `kubectl get -o yaml` or `helm template` print"
    )
    assert "codec" not in str(err.value)


def test_an_object_without_kind_is_an_unknown_kind() -> None:
    with pytest.raises(InvalidInput) as err:
        load_snapshot([("s.yaml", "metadata: {name: x}\n")])
    assert err.value.field == "s.yaml: document 1 ((no kind) x)"


@pytest.mark.parametrize(
    ("text", "field", "value", "reason"),
    [
        pytest.param(
            "kind: Pod\nmetadata:\n  name: flags\n  namespace: default\n"
            "  annotations:\n    nvidia.com/numa-bind: true\n",
            "f.yaml: document 1 (Pod default/flags): metadata.annotations[nvidia.com/numa-bind]",
            True,
            "Expected `str`, got `bool`",
            id="unquoted-annotation",
        ),
        pytest.param(
            "kind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: a\n"
            "  - name: b\n    resources: {limits: {nvidia.com/gpu: [1]}}\n",
            "f.yaml: document 1 (Pod p): spec.containers[1].resources.limits[nvidia.com/gpu]",
            [1],
            "Expected `int | float | str`, got `array`",
            id="list-quantity",
        ),
        pytest.param(
            "kind: Node\nmetadata: {name: n}\nspec: {unschedulable: maybe}\n",
            "f.yaml: document 1 (Node n): spec.unschedulable",
            "maybe",
            "Expected `bool`, got `str`",
            id="node-field",
        ),
    ],
)
def test_decode_failure_names_file_object_and_field(text: str, field: str, value: object, reason: str) -> None:
    with pytest.raises(InvalidInput) as err:
        load_snapshot([("f.yaml", text)])
    assert (err.value.field, err.value.value, err.value.reason) == (field, value, reason)


def test_a_pods_file_with_a_decode_failure() -> None:
    path = DATA / "pods-bad-field.yaml"
    with pytest.raises(InvalidInput) as err:
        load_pods(read_files([path]))
    assert err.value.field == f"{path}: document 1 (Pod default/flags): metadata.annotations[nvidia.com/numa-bind]"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("a: [\n", "f.yaml: not valid YAML at line 2: did not find expected node content", id="yaml"),
        pytest.param('{"kind": "Pod",}', "f.yaml: not valid JSON: ", id="json"),
        pytest.param(
            "kind: Pod\n---\n- 1\n",
            "f.yaml: document 2 items[0]: expected a Kubernetes object (a mapping with a kind) (got 1)",
            id="not-an-object",
        ),
    ],
)
def test_syntax_errors_name_the_file(text: str, message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        load_snapshot([("f.yaml", text)])
    assert str(err.value).startswith(message)


def test_unreadable_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(InvalidInput) as err:
        read_files([missing])
    assert str(err.value) == f"{missing}: cannot read the file: No such file or directory"
