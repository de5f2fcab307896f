"""``BusyNodes``: the locks the node watch shows plus this process's binds in progress, as /filter reads them.

A bind's mark lasts from its start until it ends without its lock, until the node watch shows its pod holding each
of its locks, or at the latest ``BIND_MARK_SECONDS`` after it returned with them; a running bind's mark never
lapses (its end is reported in a ``finally``). The clock is injected.
"""

from __future__ import annotations

import pytest

from hami.devices.cambricon import DSMLU_LOCK
from hami.protocol import keys
from hami.protocol.nodelock import NodeLock, encode_node_lock
from hami.protocol.objects import Node, ObjectMeta
from hami.server.busy import BIND_MARK_SECONDS, BusyNodes
from tests.unit.server.support import NOW_DT, NS

LOCK = keys.NODE_LOCK


def busy_keys(busy: BusyNodes) -> dict[str, set[str]]:
    """Node → the lock keys held or being taken there, as /filter reads them."""
    return {node: set(taken) for node, taken in busy.items()}


def node(name: str, **locks: str) -> Node:
    """A node event showing ``locks`` (lock key → holder pod name in ``NS``)."""
    values = {key: encode_node_lock(NodeLock(NOW_DT, NS, holder)) for key, holder in locks.items()}
    return Node(metadata=ObjectMeta(name=name, annotations=values))


@pytest.fixture
def now() -> list[float]:
    return [100.0]


@pytest.fixture
def busy(now: list[float]) -> BusyNodes:
    return BusyNodes({"n9": {LOCK: "watched"}}, clock=lambda: now[0])


def test_a_mapping_of_the_watched_locks_and_the_binds_in_progress(busy: BusyNodes) -> None:
    busy.bind_started("n1", NS, "p1", {LOCK})
    busy.bind_started("n1", NS, "p2", {DSMLU_LOCK})
    busy.bind_started("n9", NS, "p3", {DSMLU_LOCK})

    assert busy_keys(busy) == {"n1": {LOCK, DSMLU_LOCK}, "n9": {LOCK, DSMLU_LOCK}}
    assert ("n1" in busy, "n2" in busy, len(busy)) == (True, False, 2)
    with pytest.raises(KeyError):
        busy["n2"]


def test_a_bind_with_no_lock_to_take_marks_nothing(busy: BusyNodes) -> None:
    busy.bind_started("n1", NS, "p1", ())

    assert busy_keys(busy) == {"n9": {LOCK}}


def test_a_bind_that_ends_without_its_lock_ends_its_mark(busy: BusyNodes) -> None:
    busy.bind_started("n1", NS, "p1", {LOCK})
    busy.bind_ended("n1", NS, "p1", locked=False)

    assert (busy.binding, busy_keys(busy)) == ({}, {"n9": {LOCK}})


def test_a_running_bind_never_lapses_one_that_took_its_lock_lapses_after_the_expiry(
    busy: BusyNodes, now: list[float]
) -> None:
    busy.bind_started("n1", NS, "p1", {LOCK})
    now[0] += 60  # waiting for a hand-over, say: the bind's own end removes its mark
    assert "n1" in busy

    busy.bind_ended("n1", NS, "p1", locked=True)
    now[0] += BIND_MARK_SECONDS - 0.01
    assert "n1" in busy
    now[0] += 0.01
    assert ("n1" in busy, busy.binding) == (False, {})


def test_the_watch_showing_the_pods_lock_ends_the_mark_and_only_that_pods(busy: BusyNodes) -> None:
    busy.bind_started("n1", NS, "p1", {LOCK})
    busy.bind_started("n1", NS, "p2", {LOCK})  # waits for p1's hand-over
    busy.node_seen(node("n1", **{LOCK: "p1"}))

    assert list(busy.binding["n1"]) == [(NS, "p2")]
    busy.bind_ended("n1", NS, "p1", locked=True)  # its mark already gone: nothing comes back
    busy.node_seen(node("n1"))  # p1's lock released: p2 is still to take its own
    assert list(busy.binding["n1"]) == [(NS, "p2")]


def test_a_mark_of_two_locks_lasts_until_the_watch_shows_both(busy: BusyNodes) -> None:
    busy.bind_started("n1", NS, "p1", {LOCK, DSMLU_LOCK})
    busy.node_seen(node("n1", **{DSMLU_LOCK: "p1"}))  # the locks are taken one after the other

    assert set(busy["n1"]) == {LOCK}
    busy.node_seen(node("n1", **{LOCK: "p1", DSMLU_LOCK: "p1"}))
    assert busy.binding == {}


def test_a_lock_held_by_another_pod_or_unreadable_leaves_the_mark(busy: BusyNodes) -> None:
    busy.bind_started("n1", NS, "p1", {LOCK})
    busy.node_seen(node("n1", **{LOCK: "p0"}))
    busy.node_seen(Node(metadata=ObjectMeta(name="n1", annotations={LOCK: "not,a,lock,at all"})))

    assert set(busy["n1"]) == {LOCK}


def test_a_deleted_node_drops_its_marks(busy: BusyNodes) -> None:
    busy.bind_started("n1", NS, "p1", {LOCK})
    busy.node_gone("n1")

    assert (busy.binding, busy_keys(busy)) == ({}, {"n9": {LOCK}})
