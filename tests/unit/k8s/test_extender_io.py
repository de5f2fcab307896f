from __future__ import annotations

import inspect

import pytest

from hami.errors import Conflict, LockContention
from hami.k8s.events import EventRecorder
from hami.k8s.extender_io import ExtenderIO
from hami.k8s.memory import MemoryCluster, RecordedEvent
from hami.k8s.nodelock import NodeLocker
from hami.k8s.records import ObjectRef
from hami.protocol.events import EventReason, EventType
from hami.protocol.keys import NODE_LOCK
from hami.protocol.objects import Node, ObjectMeta, Pod
from hami.scheduling.ports import ClusterPort
from tests.unit.k8s.conftest import NOW


def test_it_has_the_shape_of_the_cycles_port() -> None:
    members = [(n, m) for n, m in inspect.getmembers(ClusterPort, inspect.isfunction) if not n.startswith("_")]
    assert {n for n, _ in members} >= {
        "bind",
        "event",
        "get_pod",
        "lock_node",
        "patch_pod_metadata",
        "unlock_node",
        "watched_pod",
    }
    for name, member in members:
        ours = getattr(ExtenderIO, name)
        assert list(inspect.signature(ours).parameters) == list(inspect.signature(member).parameters), name
        assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(member), name


async def test_calls_reach_the_cluster_the_lock_and_the_recorder() -> None:
    pod = Pod(metadata=ObjectMeta(name="p", namespace="ns", uid="u1"))
    memory = MemoryCluster(nodes=[Node(metadata=ObjectMeta(name="n1"))], pods=[pod])
    recorder = EventRecorder(memory, "hami-scheduler")
    io = ExtenderIO(memory, NodeLocker(memory, clock=lambda: NOW), recorder)

    await io.patch_pod_metadata("ns", "p", {"hami.io/bind-phase": "allocating"}, uid="u1")
    with pytest.raises(Conflict, match="no longer the pod with UID u0"):
        await io.patch_pod_metadata("ns", "p", {"hami.io/bind-phase": "failed"}, uid="u0")
    await io.lock_node("n1", "ns", "p")
    await io.lock_node("n1", "ns", "p")  # re-entrant
    with pytest.raises(LockContention):
        await io.lock_node("n1", "ns", "other")
    await io.bind("ns", "p", "u1", "n1")
    got = await io.get_pod("ns", "p")
    io.event(got, EventType.NORMAL, EventReason.BINDING_SUCCEED, "Successfully binding node [n1] to ns/p")
    await io.unlock_node("n1", "ns", "p")
    await recorder.flush()

    assert got.metadata.annotations == {"hami.io/bind-phase": "allocating"}
    assert got.spec.node_name == "n1"
    assert NODE_LOCK not in memory.nodes["n1"].metadata.annotations
    assert memory.events == [
        RecordedEvent(
            ObjectRef("Pod", "p", "ns", "u1"),
            "Normal",
            "BindingSucceed",
            "Successfully binding node [n1] to ns/p",
            "hami-scheduler",
        )
    ]


def test_watched_pod_comes_from_the_watch_store_only() -> None:
    pod = Pod(metadata=ObjectMeta(name="p", namespace="ns", uid="u1"))
    memory = MemoryCluster(pods=[pod])
    store = {"ns/p": pod}
    io = ExtenderIO(memory, NodeLocker(memory), EventRecorder(memory, "hami-scheduler"))
    hinted = ExtenderIO(
        memory,
        NodeLocker(memory),
        EventRecorder(memory, "hami-scheduler"),
        pod_hint=lambda ns, name: store.get(f"{ns}/{name}"),
    )

    assert io.watched_pod("ns", "p") is None  # no watch wired: nothing is known
    assert hinted.watched_pod("ns", "p") is pod
    assert hinted.watched_pod("ns", "other") is None
    assert memory.calls == []  # never an API call
