"""The node lock ``hami.io/mutex.lock`` (spec webhook §3.2), taken by Bind and released by the device plugin.

Every method takes the lock annotation as ``key`` (default ``hami.io/mutex.lock``): a vendor whose device plugin
honours a lock of its own (``VendorKeys.lock``, e.g. Cambricon's ``cambricon.com/dsmlu.lock``) is locked the same
way under its key, with its own expiry (``VendorKeys.lock_expiry_s``, passed as ``timeout``).

Every write is a compare-and-swap: a merge patch carrying the resourceVersion of the node we just read, so of
two writers racing for a node exactly one wins and the other gets 409, re-reads and decides again. That makes
HAMi's in-process per-node mutex unnecessary.

Acquire (:meth:`NodeLocker.acquire`) reads the node and:

* no lock → write ours;
* ours (the parsed namespace and name are equal to the pod's; not HAMi's suffix test on the raw text) and not
  expired → re-entrant success, nothing written;
* older than the timeout → take it over (overwrite, same CAS);
* held by a pod that no longer exists (404) or has finished (phase Succeeded/Failed) → take it over (HAMi only
  checks 404; a finished holder can never run Allocate, so its lock would otherwise block the node until expiry);
* ``hami.io/mutex.lock`` held by a pod that is bound and whose ``hami.io/bind-phase`` is ``success`` or ``failed``
  → take it over (seen through the watches, a lock younger than :data:`RELEASE_GRACE` whose holder shows
  ``success`` is contention instead: its release is on its way): HAMi's device plugins write that phase once
  every vendor's Allocate of the pod is done (or one failed) and release this lock right after; the release was
  lost (say the API server died between the two writes). A holder still ``allocating``, or not yet bound, is
  never overwritten. A vendor's own lock (Cambricon's) is released by a device plugin that does not follow the
  bind phase, so this rule does not apply to it;
* otherwise → :class:`~hami.errors.LockContention` naming the holder and the lock's time.

A lock value that does not parse raises :class:`~hami.errors.AnnotationError` as in HAMi: we cannot tell whose it
is or how old, so we never overwrite it. Release (:meth:`NodeLocker.release`) only removes a lock whose owner is
exactly the given pod, or a legacy lock that names no owner; it never removes someone else's lock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from hami.errors import ApiError, Conflict, InvalidInput, LockContention, NotFound
from hami.k8s.cluster import ClusterClient, WallClock, utc_now
from hami.k8s.ratelimit import Sleep
from hami.protocol.keys import BIND_PHASE, NODE_LOCK
from hami.protocol.nodelock import NodeLock, decode_node_lock, encode_node_lock, is_expired, is_owned_by
from hami.protocol.objects import Node, Pod

__all__ = [
    "ALLOCATED_BIND_PHASES",
    "FINISHED_PHASES",
    "RELEASE_GRACE",
    "NodeLocker",
    "PodLookup",
    "allocation_over",
    "follows_bind_phase",
    "stale_reason",
]

log = logging.getLogger(__name__)

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
ALLOCATED_BIND_PHASES = frozenset({"success", "failed"})
"""``hami.io/bind-phase`` values the device plugin writes once it has answered a pod's Allocate."""

RELEASE_GRACE = timedelta(seconds=10)
"""How young a ``hami.io/mutex.lock`` whose holder the pod watch shows done (bind phase ``success``) still counts as
about to be released: HAMi's device plugin writes ``success`` and then releases the lock, so for that moment the
watches show both. A bind that sees it waits for the release the node watch shows next instead of reading the
node and the holder and taking the lock over (the plugin's own release then loses its compare-and-swap); an older
one is read afresh and taken over as a release that was lost. Ten seconds: on a loaded API server the plugin's
GET and PATCH of the node, and the node watch event of its release, can come seconds after its bind-phase write
(at 5 s, a 2-core machine at load 14 still read 0.5 nodes and 0.2 pods per scheduled pod)."""

PodLookup = Callable[[str, str], Awaitable[Pod | None]]
"""``(namespace, name) → pod`` or ``None`` if it does not exist (e.g. the pod cache, or a GET)."""


def _holder(lock: NodeLock) -> str:
    return f"{lock.namespace}/{lock.name}" if lock.has_owner else ""


def allocation_over(pod: Pod) -> bool:
    """Whether the device plugin is done with ``pod``: it is bound and its bind phase is ``success``/``failed``.

    Both are needed: an unbound pod may carry ``failed`` from an earlier bind attempt and be about to bind again
    (the next bind marks it ``allocating`` before binding), and a bound pod in ``allocating`` is the very one the
    device plugin is serving. A bound pod never goes back to ``allocating``, so a cached copy showing this is safe.
    """
    return bool(pod.spec.node_name) and pod.metadata.annotations.get(BIND_PHASE) in ALLOCATED_BIND_PHASES


def follows_bind_phase(key: str) -> bool:
    """Whether the device plugins releasing the lock ``key`` do so right after writing ``success``/``failed``: HAMi's
    ``hami.io/mutex.lock`` only (a vendor's own lock is released by its own plugin, on its own schedule)."""
    return key == NODE_LOCK


def stale_reason(lock: NodeLock, holder: Pod | None, key: str = NODE_LOCK) -> str | None:
    """Why the owned ``lock`` (annotation ``key``) no longer protects anything, given its holder pod (``None``:
    gone), or ``None``."""
    if holder is None:
        return f"holder {_holder(lock)} no longer exists"
    if holder.status.phase in FINISHED_PHASES:
        return f"holder {_holder(lock)} has {holder.status.phase.lower()}"
    if follows_bind_phase(key) and allocation_over(holder):
        phase = holder.metadata.annotations.get(BIND_PHASE)
        return f"holder {_holder(lock)} is bound with bind phase {phase} (its device plugin left the lock behind)"
    return None


def _release_coming(lock: NodeLock, holder: Pod, now: datetime) -> bool:
    """Whether the device plugin that just wrote ``success`` on ``holder`` is about to release ``lock`` (see
    :data:`RELEASE_GRACE`)."""
    return holder.metadata.annotations.get(BIND_PHASE) == "success" and now - lock.timestamp < RELEASE_GRACE


class NodeLocker:
    """Takes and releases node locks through a :class:`ClusterClient`.

    ``timeout`` is ``--node-lock-timeout`` (HAMi's default 5 minutes). ``attempts`` bounds the read-decide-write
    rounds of one call (each 409 costs one). ``clock`` gives the wall time written into locks and compared with
    them; ``sleep`` spaces retries after transport errors.
    """

    def __init__(
        self,
        cluster: ClusterClient,
        *,
        timeout: timedelta = timedelta(minutes=5),
        attempts: int = 5,
        clock: WallClock = utc_now,
        sleep: Sleep = asyncio.sleep,
        retry_delay: float = 0.1,
    ) -> None:
        self.cluster = cluster
        self.timeout = timeout
        self.attempts = attempts
        self._clock = clock
        self._sleep = sleep
        self._retry_delay = retry_delay

    async def _pod_or_none(self, namespace: str, name: str) -> Pod | None:
        try:
            return await self.cluster.get_pod(namespace, name)
        except NotFound:
            return None

    async def _retry_pause(self, attempt: int, exc: ApiError) -> None:
        """Conflicts retry at once (the re-read is the wait); transport and server errors back off."""
        if attempt + 1 >= self.attempts or not (exc.status == 0 or exc.status >= 500 or isinstance(exc, Conflict)):
            raise exc
        if not isinstance(exc, Conflict):
            await self._sleep(self._retry_delay * 2**attempt)

    async def _takeover_reason(
        self, lock: NodeLock, now: datetime, lookup: PodLookup, timeout: timedelta, key: str
    ) -> str | None:
        """Why ``lock`` may be overwritten, or ``None`` if its holder still counts."""
        if is_expired(lock, now, timeout):
            return f"expired (taken at {lock.timestamp.isoformat()}, timeout {timeout})"
        if not lock.has_owner:
            return None
        return stale_reason(lock, await lookup(lock.namespace, lock.name), key)

    async def acquire(
        self,
        node: str,
        namespace: str,
        name: str,
        hint: Node | None = None,
        *,
        key: str = NODE_LOCK,
        timeout: timedelta | None = None,
        watched: Callable[[str, str], Pod | None] | None = None,
    ) -> NodeLock:
        """Lock ``node`` for pod ``namespace/name`` under the annotation ``key``; returns the lock now on the node.
        ``timeout`` is that lock's expiry (default: this locker's ``timeout``).

        ``hint`` is the node as a watch last saw it: when it shows no lock, the first write uses its
        resourceVersion instead of a fresh GET (one API call less per bind). A stale hint costs nothing but
        a 409 and a normal retry. A hint that shows another pod's lock, not expired, whose holder the pod watch
        (``watched``: ``(namespace, name)`` → the pod as the watch last saw it) shows alive and not finished, is
        contention without a request (two API calls less per bind that waits for a hand-over: the node and the
        holder are not read again); any other lock in a hint is read afresh and decided as below. Raising
        contention writes nothing, so a view a little behind costs at most a wait that the watch then ends. On a
        fresh read, too, a holder the pod watch shows alive is not read again (only a gone or finished holder
        makes a lock stale, or for ``hami.io/mutex.lock`` one bound with bind phase ``success``/``failed``, and that
        is always confirmed by a GET).

        Raises :class:`LockContention` if another live pod holds it, :class:`AnnotationError` for an unparsable
        lock, :class:`NotFound` if the node is gone, :class:`Conflict` if every attempt lost a race.
        """
        expiry = self.timeout if timeout is None else timeout
        if hint is not None and watched is not None:
            busy = self._busy_per_watch(node, hint.metadata.annotations.get(key), namespace, name, watched, key, expiry)
            if busy is not None:
                raise busy
        for attempt in range(self.attempts):
            if attempt == 0 and hint is not None and key not in hint.metadata.annotations:
                current = hint
            else:
                current = await self.cluster.get_node(node)
            value = current.metadata.annotations.get(key)
            now = self._clock()
            if value is not None:
                lock = decode_node_lock(value, key)
                if is_owned_by(lock, namespace, name) and not is_expired(lock, now, expiry):
                    return lock  # re-entrant: one pod may lock through several vendors
                reason = await self._takeover_reason(lock, now, self._lookup(watched), expiry, key)
                if reason is None:
                    named = "" if key == NODE_LOCK else key
                    raise LockContention(node, _holder(lock), lock.timestamp, expiry.total_seconds(), key=named)
                log.info("node %s: taking over lock %s=%r for %s/%s: %s", node, key, value, namespace, name, reason)
            value = encode_node_lock(NodeLock(now, namespace, name))
            try:
                await self.cluster.patch_node_annotations(
                    node, {key: value}, resource_version=current.metadata.resource_version
                )
                return decode_node_lock(value)  # as others will read it (RFC3339 keeps whole seconds)
            except ApiError as exc:
                await self._retry_pause(attempt, exc)
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    def _lookup(self, watched: Callable[[str, str], Pod | None] | None) -> PodLookup:
        """The holder lookup of ``acquire``: a holder the pod watch shows alive, not finished and not done with its
        Allocate (``allocation_over``) is taken from there (contention either way, so a GET would change nothing);
        anything else is read (the watch may be behind: a pod of that name re-created since holds the lock)."""
        if watched is None:
            return self._pod_or_none

        async def lookup(namespace: str, name: str) -> Pod | None:
            seen = watched(namespace, name)
            if seen is not None and seen.status.phase not in FINISHED_PHASES and not allocation_over(seen):
                return seen
            return await self._pod_or_none(namespace, name)

        return lookup

    def _busy_per_watch(
        self,
        node: str,
        value: str | None,
        namespace: str,
        name: str,
        watched: Callable[[str, str], Pod | None],
        key: str,
        expiry: timedelta,
    ) -> LockContention | None:
        """The contention a watched lock ``value`` shows (see ``acquire``), or None when a fresh read must decide."""
        if value is None:
            return None
        try:
            lock = decode_node_lock(value, key)
        except InvalidInput:
            return None  # the fresh read raises it
        if not lock.has_owner or is_owned_by(lock, namespace, name) or is_expired(lock, self._clock(), expiry):
            return None
        holder = watched(lock.namespace, lock.name)
        if holder is None or holder.status.phase in FINISHED_PHASES:
            return None  # perhaps stale: read and decide
        if follows_bind_phase(key) and allocation_over(holder) and not _release_coming(lock, holder, self._clock()):
            return None
        named = "" if key == NODE_LOCK else key
        return LockContention(node, _holder(lock), lock.timestamp, expiry.total_seconds(), key=named)

    async def release(self, node: str, namespace: str, name: str, *, key: str = NODE_LOCK) -> bool:
        """Remove the lock ``key`` if ``namespace/name`` owns it (or it is a legacy lock with no owner).

        Returns whether this call removed a lock. A missing node, no lock, a lock of another pod or an
        unparsable lock → ``False`` (logged), nothing written.
        """
        return await self._release(node, lambda lock: not lock.has_owner or is_owned_by(lock, namespace, name), key)

    async def release_if_stale(self, node: str, lookup: PodLookup | None = None, *, key: str = NODE_LOCK) -> bool:
        """Remove the lock ``key`` if its holder pod was deleted, has finished, or (``hami.io/mutex.lock`` only) is
        bound with bind phase ``success`` or ``failed`` (HAMi leaves these until expiry).

        ``lookup`` finds the holder (default: a GET). Locks of live holders, expired locks (the next acquire
        takes them over) and legacy locks are left alone. Returns whether a lock was removed.
        """
        find = lookup or self._pod_or_none
        lock_key = key
        holders: dict[tuple[str, str], bool] = {}

        async def holder_is_stale(lock: NodeLock) -> bool:
            if not lock.has_owner:
                return False
            key = (lock.namespace, lock.name)
            if key not in holders:
                reason = stale_reason(lock, await find(*key), lock_key)
                if reason is not None:
                    log.info("node %s: releasing stale lock: %s", node, reason)
                holders[key] = reason is not None
            return holders[key]

        return await self._release(node, holder_is_stale, key)

    async def _release(
        self, node: str, may_release: Callable[[NodeLock], bool | Awaitable[bool]], key: str = NODE_LOCK
    ) -> bool:
        for attempt in range(self.attempts):
            try:
                current: Node = await self.cluster.get_node(node)
            except NotFound:
                return False
            value = current.metadata.annotations.get(key)
            if value is None:
                return False
            try:
                lock = decode_node_lock(value, key)
            except InvalidInput as exc:
                log.warning("node %s: not releasing unparsable lock %r: %s", node, value, exc)
                return False
            verdict = may_release(lock)
            if not isinstance(verdict, bool):
                verdict = await verdict
            if not verdict:
                log.debug("node %s: lock %r is not ours to release", node, value)
                return False
            try:
                await self.cluster.patch_node_annotations(
                    node, {key: None}, resource_version=current.metadata.resource_version
                )
                return True
            except ApiError as exc:
                await self._retry_pause(attempt, exc)
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover
