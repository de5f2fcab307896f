"""The nodes /filter passes over (``hami.scheduling.decide.rank``): node → the lock keys a bind would find taken
there (``BusyNodes``, the cycle's ``CycleParts.node_locks``).

Two sources: the locks the node watch shows held (``LockHousekeeping.locks``), and the binds of this process in
progress, which the watch cannot show yet. kube-scheduler pipelines pods: pod N's /bind runs while pods N+1, N+2…
are filtered, and the lock that bind takes shows in the node watch only after the allocation commit wait, the lock
PATCH and the watch's delay. Counting only the watch, several pods of a burst are filtered onto the same fullest
node in that window and their binds queue behind each other's lock hand-overs (at 5,000 nodes under ``binpack``,
126 of 5,000 binds outlasted ``--bind-lock-wait``).

So a /bind marks its node from the moment it starts (before the commit wait and the lock PATCH), with the lock keys
its pod's vendors take (``hami.scheduling.bind.bind_lock_keys``). The mark ends when the bind ends without the lock
(refused, failed: its lock, if taken, is released), or, once the bind took the lock, when the node watch shows that
pod holding each of those locks (the watched lock counts from then on), or at the latest ``BIND_MARK_SECONDS``
after the bind returned (a watch event missed in a relist must not keep a node busy). A mark never outlives its
/bind otherwise: the bind's end is reported in a ``finally``. Nothing is marked at /filter time: with no bind in
progress the decisions are HAMi's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, ItemsView, Iterator, Mapping
from dataclasses import dataclass

from hami.errors import InvalidInput
from hami.protocol.nodelock import decode_node_lock, is_owned_by
from hami.protocol.objects import Node

__all__ = ["BIND_MARK_SECONDS", "BusyNodes"]

BIND_MARK_SECONDS = 5.0
"""How long a node stays marked after a bind of this process took its lock, when the node watch does not show that
lock first. Normally the watch shows it within a second; a relist that skipped the event (lock taken and released
meanwhile) must not keep the node busy for long, and a node wrongly busy for a few seconds only sends pods to the
next-best node."""


@dataclass(slots=True)
class _Mark:
    """One /bind of this process on a node: the lock keys it takes that the node watch has not shown it holding,
    and until when the mark lasts (``None``: the bind still runs)."""

    keys: set[str]
    until: float | None = None


class BusyNodes(Mapping[str, Collection[str]]):
    """Node → the lock keys held there (as the node watch shows them, ``held``) or being taken by a /bind of this
    process (``bind_started`` … ``bind_ended``, ``node_seen``). A node with neither is absent. Read by /filter;
    written only by the /bind edge and the node watch handler. ``clock``: monotonic seconds (injected by tests)."""

    def __init__(
        self, held: Mapping[str, Collection[str]] | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.held: Mapping[str, Collection[str]] = held if held is not None else {}
        """Node → the lock keys held, as the node watch last showed them (``LockHousekeeping.locks``); read only."""
        self.clock = clock
        self.binding: dict[str, dict[tuple[str, str], _Mark]] = {}
        """Node → (namespace, name) of the pod → its bind's mark."""

    # --- written by the /bind edge and the node watch ------------------------------------------------------------
    def bind_started(self, node: str, namespace: str, name: str, lock_keys: Collection[str]) -> None:
        """A /bind of ``namespace/name`` to ``node`` starts and will take ``lock_keys`` (none: nothing marked)."""
        if lock_keys:
            self.binding.setdefault(node, {})[(namespace, name)] = _Mark(set(lock_keys))

    def bind_ended(self, node: str, namespace: str, name: str, locked: bool) -> None:
        """That /bind returned: with its locks taken (``locked``, the pod is bound) the mark lasts until the node
        watch shows them, at most ``BIND_MARK_SECONDS``; otherwise (refused, failed, its locks released) it ends."""
        marks = self.binding.get(node)
        if marks is None or (namespace, name) not in marks:
            return  # none was made, or the watch already showed its locks
        if locked:
            marks[(namespace, name)].until = self.clock() + BIND_MARK_SECONDS
        else:
            self._unmark(node, marks, (namespace, name))

    def node_seen(self, node: Node) -> None:
        """A node event: each lock it shows held by a pod whose bind marked the node is the watch's from now on."""
        name = node.metadata.name
        marks = self.binding.get(name)
        if not marks:
            return
        annotations = node.metadata.annotations
        for pod, mark in list(marks.items()):
            mark.keys -= {key for key in mark.keys if _holds(annotations.get(key), key, pod)}
            if not mark.keys:
                self._unmark(name, marks, pod)

    def node_gone(self, name: str) -> None:
        self.binding.pop(name, None)

    # --- read by /filter ------------------------------------------------------------------------------------------
    def __getitem__(self, node: str) -> Collection[str]:
        held = self.held.get(node)
        binding = self._binding(node)
        if not binding:
            if held:
                return held
            raise KeyError(node)
        return binding.union(held or ())

    def __iter__(self) -> Iterator[str]:
        return iter(self._snapshot())

    def __len__(self) -> int:
        return len(self._snapshot())

    def __contains__(self, node: object) -> bool:
        return isinstance(node, str) and (bool(self.held.get(node)) or bool(self._binding(node)))

    def items(self) -> ItemsView[str, Collection[str]]:
        """Every busy node with its keys, read once (what /filter does for each pod)."""
        return self._snapshot().items()

    def _snapshot(self) -> Mapping[str, Collection[str]]:
        """Node → keys now; the watched locks themselves while no bind is marked (no copy: /filter's common case)."""
        if not self.binding:
            return self.held
        taken: dict[str, Collection[str]] = {node: keys for node, keys in self.held.items() if keys}
        for node in list(self.binding):
            binding = self._binding(node)
            if binding:
                taken[node] = binding.union(taken.get(node, ()))
        return taken

    def _binding(self, node: str) -> set[str]:
        """The lock keys the marks on ``node`` still stand for; the marks that lapsed are dropped."""
        marks = self.binding.get(node)
        if not marks:
            return set()
        now = self.clock()
        taken: set[str] = set()
        for pod, mark in list(marks.items()):
            if mark.until is not None and now >= mark.until:
                self._unmark(node, marks, pod)
            else:
                taken |= mark.keys
        return taken

    def _unmark(self, node: str, marks: dict[tuple[str, str], _Mark], pod: tuple[str, str]) -> None:
        del marks[pod]
        if not marks:
            del self.binding[node]


def _holds(value: str | None, key: str, pod: tuple[str, str]) -> bool:
    """Whether the lock annotation ``value`` (under ``key``) is held by ``pod`` (namespace, name)."""
    if not value:
        return False
    try:
        lock = decode_node_lock(value, key)
    except InvalidInput:
        return False  # not ours: hami writes well-formed locks
    return is_owned_by(lock, *pod)
