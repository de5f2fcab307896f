"""Contract tests of the I/O seam: ``MemoryCluster`` and ``KubeCluster`` (over HTTP) behave the same."""

from __future__ import annotations

import msgspec
import pytest

from hami.errors import ApiError, Conflict, NotFound
from hami.k8s.client import KubeClient
from hami.k8s.cluster import KubeCluster
from hami.k8s.memory import MemoryCluster, RecordedEvent
from hami.k8s.records import ObjectRef
from hami.protocol.objects import Node, ObjectMeta, Pod, PodSpec
from tests.unit.k8s.conftest import NOW, Seam
from tests.unit.k8s.fakeapi import FakeApi, Reply, obj


def node(name: str, **annotations: str) -> Node:
    return Node(metadata=ObjectMeta(name=name, annotations=dict(annotations)))


def pod(name: str, namespace: str = "default", node_name: str = "") -> Pod:
    return Pod(metadata=ObjectMeta(name=name, namespace=namespace), spec=PodSpec(node_name=node_name))


async def test_get_returns_the_object_or_not_found(seam: Seam) -> None:
    stored = seam.backing.put_node(node("n1", a="1"))
    got = await seam.cluster.get_node("n1")
    assert got.metadata.annotations == {"a": "1"}
    assert got.metadata.resource_version == stored.metadata.resource_version
    with pytest.raises(NotFound):
        await seam.cluster.get_node("n2")
    with pytest.raises(NotFound):
        await seam.cluster.get_pod("default", "p")


async def test_node_patch_merges_deletes_with_none_and_bumps_the_version(seam: Seam) -> None:
    before = seam.backing.put_node(node("n1", keep="k", drop="d"))
    after = await seam.cluster.patch_node_annotations("n1", {"drop": None, "new": "v"})
    assert after.metadata.annotations == {"keep": "k", "new": "v"}
    assert int(after.metadata.resource_version) > int(before.metadata.resource_version)
    assert seam.backing.nodes["n1"].metadata.annotations == {"keep": "k", "new": "v"}


async def test_node_patch_with_a_stale_version_is_a_conflict_and_writes_nothing(seam: Seam) -> None:
    first = seam.backing.put_node(node("n1"))
    await seam.cluster.patch_node_annotations("n1", {"x": "1"}, resource_version=first.metadata.resource_version)
    with pytest.raises(Conflict) as caught:
        await seam.cluster.patch_node_annotations("n1", {"x": "2"}, resource_version=first.metadata.resource_version)
    assert caught.value.status == 409
    assert seam.backing.nodes["n1"].metadata.annotations == {"x": "1"}


async def test_pod_metadata_patch_sets_and_removes_annotations_and_labels(seam: Seam) -> None:
    seam.backing.put_pod(Pod(metadata=ObjectMeta(name="p", namespace="ns", labels={"old": "x"})))
    patched = await seam.cluster.patch_pod_metadata(
        "ns", "p", annotations={"hami.io/vgpu-node": "n1"}, labels={"old": None, "hami.io/vgpu-node": "n1"}
    )
    assert patched.metadata.annotations == {"hami.io/vgpu-node": "n1"}
    assert patched.metadata.labels == {"hami.io/vgpu-node": "n1"}
    with pytest.raises(NotFound):
        await seam.cluster.patch_pod_metadata("ns", "missing", annotations={"a": "b"})


async def test_pod_patch_for_another_uid_or_a_stale_version_is_a_conflict_and_writes_nothing(seam: Seam) -> None:
    stored = seam.backing.put_pod(Pod(metadata=ObjectMeta(name="p", namespace="ns", uid="u1")))
    version = stored.metadata.resource_version

    with pytest.raises(Conflict) as replaced:  # a pod deleted and re-created under the same name
        await seam.cluster.patch_pod_metadata("ns", "p", annotations={"a": "1"}, uid="u0")
    with pytest.raises(Conflict) as stale:
        await seam.cluster.patch_pod_metadata("ns", "p", annotations={"a": "1"}, uid="u1", resource_version="0")

    assert replaced.value.status == 422  # as the API server answers (verified in tests/e2e/test_identity.py)
    assert str(replaced.value) == (
        "pod ns/p is no longer the pod with UID u0 (deleted, or deleted and re-created); nothing written: "
        'Pod "p" is invalid: metadata.uid: Invalid value: "u0": field is immutable'
    )
    assert stale.value.status == 409
    assert seam.backing.pods[("ns", "p")].metadata.annotations == {}
    assert seam.backing.pods[("ns", "p")].metadata.resource_version == version
    patched = await seam.cluster.patch_pod_metadata(
        "ns", "p", annotations={"a": "1"}, uid="u1", resource_version=version
    )
    assert patched.metadata.annotations == {"a": "1"}


async def test_bind_assigns_the_node_once_and_checks_the_uid(seam: Seam) -> None:
    stored = seam.backing.put_pod(pod("p"))
    with pytest.raises(Conflict, match="UID in precondition"):
        await seam.cluster.bind("default", "p", "some-other-uid", "n1")
    await seam.cluster.bind("default", "p", stored.metadata.uid, "n1")
    assert seam.backing.pods[("default", "p")].spec.node_name == "n1"
    with pytest.raises(Conflict, match="already assigned"):
        await seam.cluster.bind("default", "p", stored.metadata.uid, "n2")
    with pytest.raises(NotFound):
        await seam.cluster.bind("default", "ghost", "u", "n1")


async def test_events_reach_the_cluster(seam: Seam) -> None:
    ref = ObjectRef("Pod", "p", "ns", "uid-p")
    await seam.cluster.emit_event(ref, "Warning", "FilteringFailed", "no available node", "hami-scheduler")
    assert seam.backing.events == [
        RecordedEvent(ref, "Warning", "FilteringFailed", "no available node", "hami-scheduler")
    ]


async def test_a_repeated_event_is_folded_with_a_patch_of_its_count(api: FakeApi, client: KubeClient) -> None:
    cluster = KubeCluster(client, instance="sched-0", clock=lambda: NOW)
    ref = ObjectRef("Pod", "p", "ns", "uid-p")
    name = await cluster.emit_event(ref, "Warning", "FilteringFailed", "no available node", "hami-scheduler")
    await cluster.fold_event("ns", name, 2)
    (request,) = api.calls("PATCH", f"/api/v1/namespaces/ns/events/{name}")
    assert msgspec.json.decode(request.body) == {"count": 2, "lastTimestamp": NOW.strftime("%Y-%m-%dT%H:%M:%SZ")}


async def test_the_real_event_body_is_a_legacy_core_v1_event(api: FakeApi, client: KubeClient) -> None:
    cluster = KubeCluster(client, instance="sched-0", clock=lambda: NOW)
    await cluster.emit_event(ObjectRef.for_node(node("gpu-1")), "Normal", "Registered", "ok", "hami-scheduler")
    (request,) = api.calls("POST", "/api/v1/namespaces/default/events")
    body = msgspec.json.decode(request.body)
    assert body == {
        "metadata": {"name": f"gpu-1.{int(NOW.timestamp() * 1e6) * 1000:x}", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": "gpu-1", "namespace": "", "uid": "gpu-1", "apiVersion": "v1"},
        "reason": "Registered",
        "message": "ok",
        "type": "Normal",
        "source": {"component": "hami-scheduler", "host": "sched-0"},
        "firstTimestamp": "2026-08-21T06:20:39Z",
        "lastTimestamp": "2026-08-21T06:20:39Z",
        "count": 1,
        "reportingComponent": "hami-scheduler",
        "reportingInstance": "sched-0",
    }


def test_memory_cluster_copies_in_and_out() -> None:
    original = node("n1", a="1")
    memory = MemoryCluster(nodes=[original], pods=[pod("p")])
    original.metadata.annotations["a"] = "changed"
    view = memory.nodes["n1"]
    view.metadata.annotations["b"] = "2"
    assert memory.nodes["n1"].metadata.annotations == {"a": "1"}
    assert memory.pods[("default", "p")].metadata.uid == "uid-default-p"


async def test_memory_cluster_injects_failures_and_records_calls() -> None:
    memory = MemoryCluster(nodes=[node("n1")])
    memory.fail("get_node", ApiError("etcd timeout", 504), times=2)
    for _ in range(2):
        with pytest.raises(ApiError, match="etcd timeout"):
            await memory.get_node("n1")
    assert (await memory.get_node("n1")).metadata.name == "n1"
    assert memory.calls == ["get_node"] * 3


async def test_memory_cluster_phase_changes_bump_the_version() -> None:
    memory = MemoryCluster()
    before = memory.put_pod(pod("p"))
    after = memory.set_pod_phase("default", "p", "Succeeded")
    assert after.status.phase == "Succeeded"
    assert int(after.metadata.resource_version) > int(before.metadata.resource_version)
    memory.delete_pod("default", "p")
    memory.delete_node("absent")  # deleting what is not there is a no-op
    assert memory.pods == {}


# --- list_pods (the ledger audit's re-list) ------------------------------------------------------------------


async def test_memory_list_pods_pages_one_snapshot_without_finished_pods() -> None:
    memory = MemoryCluster()
    for i in range(5):
        memory.put_pod(pod(f"p{i}"))
    memory.put_pod(Pod(metadata=ObjectMeta(name="done", namespace="default")))
    memory.set_pod_phase("default", "done", "Succeeded")

    pages = []
    async for page in memory.list_pods(page_size=2):
        pages.append(page)
        memory.put_pod(pod("created-during-the-list"))  # a later write: not in this snapshot

    assert [[p.metadata.name for p in page.items] for page in pages] == [["p0", "p1"], ["p2", "p3"], ["p4"]]
    assert [page.first for page in pages] == [True, False, False]
    assert [bool(page.continue_token) for page in pages] == [True, True, False]
    assert len({page.resource_version for page in pages}) == 1
    assert memory.calls == ["list_pods"]


async def test_kube_list_pods_asks_for_unfinished_pods_page_by_page(api: FakeApi, client: KubeClient) -> None:
    first = {"metadata": {"resourceVersion": "7", "continue": "tok"}, "items": [obj("a", "5"), obj("b", "6")]}
    second = {"metadata": {"resourceVersion": "7"}, "items": [obj("c", "7")]}
    api.script("GET", "/api/v1/pods", Reply(body=first), Reply(body=second))

    pages = [page async for page in KubeCluster(client).list_pods(page_size=2)]

    assert [[p.metadata.name for p in page.items] for page in pages] == [["a", "b"], ["c"]]
    queries = [r.query for r in api.calls("GET", "/api/v1/pods")]
    assert queries == [
        {"limit": "2", "fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"},
        {"limit": "2", "fieldSelector": "status.phase!=Succeeded,status.phase!=Failed", "continue": "tok"},
    ]
