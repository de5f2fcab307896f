"""Lock waits woken by the node watch (``hami.scheduling.ports.LockWaits``): a bind that waits for a node lock
hand-over sleeps on an asyncio future, not on a polling loop, and is woken as soon as the node watch shows the
lock released.

One waiter per release: the waiters of a node queue in arrival order, and a release wakes only the first one (its
*turn*); it tries the lock and reports back (``tried``). If it took the lock, the next waiter is woken by the
next release; if not (another writer won the race, or its bind ended), the turn passes on at once while the
watch shows the node free. So a burst of binds queued on one node costs one lock write per hand-over, not one
per waiter.

Each lock annotation of a node is its own queue (``key``: ``hami.io/mutex.lock`` by default, or a vendor's own
lock such as ``cambricon.com/dsmlu.lock``): a release of one lock wakes only the waiters for that lock.

A wait that starts after the watch already showed its holder's lock released (the release raced with the lock
read that found it) returns at once. The watch lagging behind a read (showing no lock, or an older one) does
not wake anyone: only a change of holder seen by the watch does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field

from hami.errors import InvalidInput
from hami.protocol.keys import NODE_LOCK
from hami.protocol.nodelock import decode_node_lock

__all__ = ["NodeLockWaits"]

RELEASED_KEPT = 32
"""Per node, this many holders whose release the watch showed are remembered (for waits that start late)."""


@dataclass(slots=True)
class _Node:
    holder: str | None = None
    """The lock's holder as the watch last showed it: ``namespace/name``; "" for a lock naming no owner (or one
    that does not parse); None when the node is not locked."""
    released: deque[str] = field(default_factory=lambda: deque(maxlen=RELEASED_KEPT))
    queue: deque[asyncio.Future[None]] = field(default_factory=deque)
    turn: bool = False
    """A waiter was woken (or returned at once) and has not reported its try yet."""


def lock_holder(value: str | None) -> str | None:
    """The holder named by a ``hami.io/mutex.lock`` value (see ``_Node.holder``)."""
    if value is None:
        return None
    try:
        lock = decode_node_lock(value)
    except InvalidInput:
        return ""
    return f"{lock.namespace}/{lock.name}" if lock.has_owner else ""


class NodeLockWaits:
    """``LockWaits`` over the node watch: feed it every node event (``seen``, ``gone``)."""

    def __init__(self) -> None:
        self._nodes: dict[tuple[str, str], _Node] = {}  # (node, lock key) -> its queue

    def waiting(self, node: str, key: str = NODE_LOCK) -> int:
        """How many binds wait for the lock ``key`` of ``node`` now (queued, not yet woken)."""
        entry = self._nodes.get((node, key))
        return sum(not f.done() for f in entry.queue) if entry is not None else 0

    # --- fed by the node watch ----------------------------------------------------------------------------
    def seen(self, node: str, lock: str | None, key: str = NODE_LOCK) -> None:
        """The watch shows ``node`` with the value ``lock`` of the lock annotation ``key`` (None: unlocked)."""
        entry = self._nodes.setdefault((node, key), _Node())
        holder = lock_holder(lock)
        if holder != entry.holder:
            if entry.holder:
                entry.released.append(entry.holder)
            if holder and holder in entry.released:
                entry.released.remove(holder)  # that pod holds it (again): its earlier release is history
            entry.holder = holder
        if holder is None and not entry.turn:
            self._wake(entry)

    def gone(self, node: str) -> None:
        """The node was deleted: its waiters are woken (their lock attempt then fails on the missing node)."""
        for at in [at for at in self._nodes if at[0] == node]:
            entry = self._nodes.pop(at)
            for waiter in entry.queue:
                if not waiter.done():
                    waiter.set_result(None)

    # --- used by the cycle --------------------------------------------------------------------------------
    async def wait(self, node: str, holder: str, timeout: float, key: str = NODE_LOCK) -> bool:
        entry = self._nodes.setdefault((node, key), _Node())
        if not entry.turn and holder in entry.released and entry.holder is None:
            entry.turn = True  # released before this wait began: try at once
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry.queue.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            pass  # the caller tries once more, and reports that try
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.tried(node, False, key)  # woken, but cancelled before its try: the turn passes on
            raise
        finally:
            if not waiter.done():
                waiter.cancel()
            self._discard(entry, waiter)
        return not waiter.cancelled()

    def tried(self, node: str, locked: bool, key: str = NODE_LOCK) -> None:
        entry = self._nodes.get((node, key))
        if entry is None:
            return
        entry.turn = False
        if not locked and entry.holder is None:
            self._wake(entry)

    # --- internals ----------------------------------------------------------------------------------------
    def _wake(self, entry: _Node) -> None:
        while entry.queue:
            waiter = entry.queue.popleft()
            if not waiter.done():
                waiter.set_result(None)
                entry.turn = True
                return

    @staticmethod
    def _discard(entry: _Node, waiter: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):  # already taken off by a wake-up
            entry.queue.remove(waiter)
