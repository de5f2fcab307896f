"""Lock housekeeping: the node locks hami sees on the node watch, handed over to waiting binds, and released when
their holder is done with them and nobody else will (HAMi never does this).

A lock whose holder pod finished or was deleted is released at once; one whose holder's device plugin wrote its
bind phase ``success``/``failed`` but lost its own release is released after ``left_behind_grace``; every
``LOCK_SWEEP_SECONDS`` each node holding a lock is checked for a holder that is gone. Every release goes through
``NodeLocker``, which reads the node and the holder again, so a pod of the same name created since keeps its lock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from hami.errors import ApiError
from hami.k8s.lockwaits import NodeLockWaits
from hami.k8s.nodelock import RELEASE_GRACE, NodeLocker, allocation_over, follows_bind_phase
from hami.k8s.tasks import Supervisor
from hami.protocol import keys
from hami.protocol.nodelock import decode_node_lock
from hami.protocol.objects import Node, Pod
from hami.scheduling.records import is_terminal

__all__ = ["LEFT_BEHIND_GRACE_SECONDS", "LOCK_SWEEP_SECONDS", "LockHousekeeping"]

log = logging.getLogger("hami.scheduler")

LOCK_SWEEP_SECONDS = 30.0
"""How often nodes holding a lock are checked for a finished or deleted holder (HAMi never does this)."""
LEFT_BEHIND_GRACE_SECONDS = RELEASE_GRACE.total_seconds()
"""How long the device plugin has, after writing a holder's bind phase ``success``/``failed``, to release
``hami.io/mutex.lock`` itself (it does so right after) before hami releases it: releasing at once would race the
plugin's own release on every pod, two needless API requests and a conflict for the plugin each time (as 2 s did
on a loaded API server, where the plugin's GET and PATCH of the node took longer: 0.4 GETs per pod)."""


@dataclass
class LockHousekeeping:
    """The locks the node watch shows (``locks``), and their release when their holder is done with them. The
    locker and the supervisor that runs the releases are attached once the API client exists (``attach``)."""

    lock_keys: Sequence[str]
    """Every node lock annotation a vendor takes (``VendorKeys.lock``): watched, released, swept."""
    lock_waits: NodeLockWaits = field(default_factory=NodeLockWaits)
    """Binds waiting for a node lock hand-over, woken by the node watch."""
    left_behind_grace: float = LEFT_BEHIND_GRACE_SECONDS
    locks: dict[str, dict[str, str]] = field(default_factory=dict)
    """Node → lock key → lock annotation value, as the node watch last showed them."""
    left_behind: dict[tuple[str, str, str], asyncio.TimerHandle] = field(default_factory=dict)
    """(node, lock key, lock value) → the pending check of a lock whose holder the device plugin is done with."""
    locker: NodeLocker | None = None
    tasks: Supervisor | None = None

    def attach(self, locker: NodeLocker, tasks: Supervisor) -> None:
        self.locker, self.tasks = locker, tasks

    def node_seen(self, node: Node) -> None:
        """Note the locks a node event shows, and wake the binds waiting for one that was released."""
        name = node.metadata.name
        held: dict[str, str] = {}
        for key in self.lock_keys:
            lock = node.metadata.annotations.get(key)
            self.lock_waits.seen(name, lock or None, key)
            if lock:
                held[key] = lock
        if held:
            self.locks[name] = held
        else:
            self.locks.pop(name, None)

    def node_gone(self, name: str) -> None:
        self.lock_waits.gone(name)
        self.locks.pop(name, None)

    def pod_seen(self, pod: Pod, deleted: bool) -> None:
        """Release the locks a finished or deleted pod holds; check later those its device plugin is done with."""
        if pod.spec.node_name not in self.locks:
            return
        if deleted or is_terminal(pod):
            self._release_if_holder(pod)
        elif allocation_over(pod):
            # bound with bind phase success/failed: the device plugin releases hami.io/mutex.lock right after
            # writing the phase; if that release is lost, the lock would block the node until it expires
            self._release_left_behind(pod)

    def stop_checks(self) -> None:
        """No release started once the client is closing."""
        for check in self.left_behind.values():
            check.cancel()

    async def sweep(self) -> None:
        """Every ``LOCK_SWEEP_SECONDS``, release each lock whose holder is gone."""
        locker = self._locker()
        while True:
            await asyncio.sleep(LOCK_SWEEP_SECONDS)
            for node, held in list(self.locks.items()):
                for key in list(held):
                    try:
                        await locker.release_if_stale(node, key=key)
                    except ApiError as err:
                        log.warning("checking the lock %s on %s failed: %s", key, node, err)

    def _held_by(self, pod: Pod) -> list[tuple[str, str]]:
        """(key, value) of each lock on the pod's node that ``pod`` holds (malformed ones are the next acquire's)."""
        held: list[tuple[str, str]] = []
        for key, value in self.locks[pod.spec.node_name].items():
            try:
                lock = decode_node_lock(value, key)
            except Exception:  # a malformed lock is handled by the next acquire; nothing to release here
                continue
            if lock.namespace == pod.metadata.namespace and lock.name == pod.metadata.name:
                held.append((key, value))
        return held

    def _release_left_behind(self, pod: Pod) -> None:
        """Check, ``left_behind_grace`` seconds from now, each ``hami.io/mutex.lock`` on the pod's node that ``pod``
        holds: if the node watch still shows that very lock, the device plugin's release was lost, and
        :meth:`NodeLocker.release_if_stale` releases it (reading the node and the holder again, so a pod of the
        same name created since keeps its lock). Normally the plugin's release comes first: no API request."""
        node = pod.spec.node_name
        for key, value in self._held_by(pod):
            pending = (node, key, value)
            if follows_bind_phase(key) and pending not in self.left_behind:
                loop = asyncio.get_running_loop()
                self.left_behind[pending] = loop.call_later(self.left_behind_grace, self._check_left_behind, pending)

    def _check_left_behind(self, pending: tuple[str, str, str]) -> None:
        node, key, value = pending
        self.left_behind.pop(pending, None)
        if self.locks.get(node, {}).get(key) == value:
            self._tasks().once(self._release_stale(node, key), name=f"unlock-left-{node}" + _lock_suffix(key))

    async def _release_stale(self, node: str, key: str) -> None:
        try:
            await self._locker().release_if_stale(node, key=key)
        except ApiError as err:
            log.warning("releasing the lock %s on %s left behind by its device plugin failed: %s", key, node, err)

    def _release_if_holder(self, pod: Pod) -> None:
        node = pod.spec.node_name
        for key, _ in self._held_by(pod):
            self._tasks().once(self._release(node, pod, key), name=f"unlock-{node}" + _lock_suffix(key))

    async def _release(self, node: str, pod: Pod, key: str) -> None:
        try:
            await self._locker().release(node, pod.metadata.namespace, pod.metadata.name, key=key)
        except ApiError as err:
            log.warning("releasing the lock %s on %s held by finished pod %s failed: %s", key, node, pod.key, err)

    def _locker(self) -> NodeLocker:
        if self.locker is None:
            raise RuntimeError("lock housekeeping has no locker attached")
        return self.locker

    def _tasks(self) -> Supervisor:
        if self.tasks is None:
            raise RuntimeError("lock housekeeping has no supervisor attached")
        return self.tasks


def _lock_suffix(key: str) -> str:
    """The task-name suffix of a lock other than ``hami.io/mutex.lock`` ("" for that one: names unchanged)."""
    return "" if key == keys.NODE_LOCK else f"-{key}"
