"""List+watch of one resource kind into a cache, with incremental events for a handler (STYLE rule 10).

One :class:`Reflector` per kind, run as one task. The loop:

1. **List** page by page. The reflector keeps a store (key ``namespace/name`` → the latest view), and each listed
   item is diffed against it: new → ``ADDED``, changed resourceVersion → ``MODIFIED``, same name but a new UID
   → ``DELETED`` of the old then ``ADDED``, unchanged → nothing. After the last page every stored object the list
   no longer holds is emitted as ``DELETED`` (with its last known state). Then ``on_sync`` runs and
   :attr:`Reflector.synced` is set. So a relist reaches the handler as the same kind of incremental events as a
   watch, and the handler has one mutation path; there is no "replace everything" event.
2. **Watch** from the list's resourceVersion with bookmarks. Events update the store, then the handler, in
   stream order (sequential dispatch keeps per-object order). Types are normalised against the store: an
   ``ADDED`` for a known object arrives as ``MODIFIED`` (with ``old``), a ``MODIFIED`` for an unknown one as
   ``ADDED``. ``BOOKMARK`` only advances the resourceVersion.
3. The server ends the stream after ``timeout_seconds``: **resume** at once from the last resourceVersion seen
   (a stream that ends at once without any event is paused first, see ``min_watch_seconds``).
   On ``429 Too Many Requests``, a server error (5xx) or a transport failure (refused connection, broken
   stream): wait (exponential backoff with jitter, capped; at least the server's ``Retry-After``) and **resume**
   from the last resourceVersion: a server that is shedding load is not handed a full list on top (client-go
   resumes after 429s, too). If that version has expired meanwhile the resumed watch answers 410 and the
   reflector relists then. On ``410 Gone`` (from the watch or an ``ERROR`` event), any other API error (403, …)
   or an undecodable object (an event was skipped): wait and **relist**. The backoff restarts from its first
   step once a watch has delivered an event.

Handlers are synchronous and must not block: they update in-memory state (and may start tasks for I/O). A
handler that raises is logged and counted; the reflector goes on, because one bad object must not stop the
cache. Cancel the task running :meth:`Reflector.run` to stop it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, Protocol, TypeVar

from hami.errors import ApiError, Gone, InvalidInput, TooManyRequests
from hami.k8s.client import KubeClient
from hami.k8s.ratelimit import Clock, Sleep
from hami.k8s.records import EventType, KubeObject, object_key
from hami.k8s.resources import Resource

__all__ = ["Callbacks", "EventHandler", "Reflector", "WatchSettings"]

log = logging.getLogger(__name__)

T = TypeVar("T", bound=KubeObject)
T_contra = TypeVar("T_contra", bound=KubeObject, contravariant=True)


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """Timing of one reflector."""

    page_size: int = 500
    """Items per list page, the API server's recommended chunk: bounds the memory of one response at 100k pods."""
    timeout_seconds: int = 300
    """Server-side watch timeout. client-go picks 5–10 min; shorter streams only cost reconnects."""
    backoff_initial: float = 0.5
    """First wait before relisting after a failure: long enough to not hammer a restarting API server."""
    backoff_factor: float = 2.0
    """Growth per consecutive failure."""
    backoff_max: float = 30.0
    """Cap: after a long outage the cache is at most this much late in noticing recovery."""
    backoff_jitter: float = 0.2
    """Each wait is stretched by up to this fraction at random, so replicas do not relist in lock step."""
    min_watch_seconds: float = 1.0
    """A stream that ends normally sooner than this without a single event counts as a failure (backoff, then
    resume), so a server that closes every watch at once is not hammered in a tight loop (client-go does the
    same)."""


class EventHandler(Protocol[T_contra]):
    """What a reflector feeds. Calls arrive one at a time, in order; both must return quickly."""

    def on_event(self, event: EventType, obj: T_contra, old: T_contra | None) -> None:
        """``event`` is ADDED, MODIFIED (``old`` = previous view) or DELETED (``obj`` = last state seen)."""

    def on_sync(self) -> None:
        """A (re)list has been fully delivered: the handler's view equals the list's snapshot."""


class Callbacks(Generic[T]):
    """An :class:`EventHandler` from plain functions: ``on_change(obj, deleted)`` (the shape of the extender's
    ``on_pod``/``on_node``/``on_quota``) and an optional ``on_synced()``."""

    def __init__(self, on_change: Callable[[T, bool], None], on_synced: Callable[[], None] | None = None) -> None:
        self._on_change = on_change
        self._on_synced = on_synced

    def on_event(self, event: EventType, obj: T, old: T | None) -> None:
        self._on_change(obj, event is EventType.DELETED)

    def on_sync(self) -> None:
        if self._on_synced is not None:
            self._on_synced()


class Reflector(Generic[T]):
    """Keeps :attr:`store` equal to the API's view of one resource kind and tells ``handler`` each change."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        type: type[T],
        handler: EventHandler[T],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        settings: WatchSettings = WatchSettings(),
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.type = type
        self.handler = handler
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.settings = settings
        self._sleep = sleep
        self._clock = clock
        self._random = rng or _module_random
        self._store: dict[str, T] = {}
        self.store: Mapping[str, T] = MappingProxyType(self._store)
        """Read-only: key (``namespace/name`` or ``name``) → latest view. Updated before the handler is told."""
        self.synced = asyncio.Event()
        """Set after the first complete list has been delivered; stays set (the store only gets fresher)."""
        self.resource_version = ""
        self.lists = 0
        self.watches = 0
        self.handler_errors = 0
        self.resumes = 0
        """Watches resumed from their resourceVersion after a 429, a server error or a broken connection."""
        self._watch_events = 0

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        s = self.settings
        base = min(s.backoff_max, s.backoff_initial * s.backoff_factor**attempt)
        return base * (1.0 + s.backoff_jitter * self._random.random())

    async def run(self) -> None:
        """List, then watch; resume or relist forever (see the module docstring). Cancel to stop."""
        attempt = 0
        relist = True
        while True:
            self._watch_events = 0
            server_wait = 0.0
            try:
                if relist:
                    await self._list()
                    relist = False
                started = self._clock()
                await self._watch()
                if self._watch_events or self._clock() - started >= self.settings.min_watch_seconds:
                    attempt = 0
                    continue  # normal end of stream: resume from the last resourceVersion, no wait
                # Closed at once with nothing in it (an overloaded or misbehaving server): pause, then resume.
                log.warning("%s: watch closed at once without events; resuming after a pause", self.resource)
            except Gone as exc:
                log.info("%s: resourceVersion %s expired (%s); relisting", self.resource, self.resource_version, exc)
                relist = True
            except ApiError as exc:
                relist, server_wait = self._api_failure(exc, relist)
            except InvalidInput as exc:
                log.warning("%s: list/watch failed: %s; relisting", self.resource, exc)
                relist = True
            if self._watch_events:
                attempt = 0
            delay = max(self.backoff(attempt), server_wait)
            attempt += 1
            await self._sleep(delay)

    def _api_failure(self, exc: ApiError, relist: bool) -> tuple[bool, float]:
        """After a failed list or watch: whether to list again, and how long the server asked to be left alone."""
        if not _resumable(exc):
            log.warning("%s: list/watch failed: %s; relisting", self.resource, exc)
            return True, 0.0
        # relist stays as it was: a failed list is listed again, a failed watch resumes
        server_wait = 0.0
        if isinstance(exc, TooManyRequests) and exc.retry_after:
            server_wait = min(exc.retry_after, self.settings.backoff_max)
        if not relist:
            self.resumes += 1
        action = "listing again" if relist else f"resuming from {self.resource_version}"
        log.warning("%s: list/watch failed: %s; %s after a pause", self.resource, exc, action)
        return relist, server_wait

    async def _list(self) -> None:
        seen: set[str] = set()
        resource_version = ""
        async for page in self.client.list_pages(
            self.resource,
            type=self.type,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            limit=self.settings.page_size,
        ):
            for obj in page.items:
                key = object_key(obj)
                seen.add(key)
                old = self._store.get(key)
                if old is None or old.metadata.resource_version != obj.metadata.resource_version:
                    self._apply(EventType.ADDED if old is None else EventType.MODIFIED, key, obj, old)
            resource_version = page.resource_version
        for key in [k for k in self._store if k not in seen]:
            gone = self._store[key]
            self._apply(EventType.DELETED, key, gone, gone)
        self.resource_version = resource_version
        self.lists += 1
        self._dispatch_sync()
        self.synced.set()

    async def _watch(self) -> None:
        self.watches += 1
        async with self.client.watch(
            self.resource,
            type=self.type,
            resource_version=self.resource_version,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=self.settings.timeout_seconds,
        ) as events:
            async for event in events:
                self._watch_events += 1
                obj = event.object
                if event.type is not EventType.BOOKMARK:
                    key = object_key(obj)
                    self._apply(event.type, key, obj, self._store.get(key))
                self.resource_version = obj.metadata.resource_version or self.resource_version

    def _apply(self, event: EventType, key: str, obj: T, old: T | None) -> None:
        """Update the store, then tell the handler (normalising the event type against the store)."""
        if event is EventType.DELETED:
            self._store.pop(key, None)
            self._dispatch(EventType.DELETED, obj, None)
            return
        if old is not None and old.metadata.uid != obj.metadata.uid:
            # The name was deleted and re-created while we were not watching: two objects, two events.
            self._store.pop(key)
            self._dispatch(EventType.DELETED, old, None)
            old = None
        self._store[key] = obj
        self._dispatch(EventType.ADDED if old is None else EventType.MODIFIED, obj, old)

    def _dispatch(self, event: EventType, obj: T, old: T | None) -> None:
        try:
            self.handler.on_event(event, obj, old)
        except Exception:
            self.handler_errors += 1
            log.exception("%s: handler failed on %s %s", self.resource, event, object_key(obj))

    def _dispatch_sync(self) -> None:
        try:
            self.handler.on_sync()
        except Exception:
            self.handler_errors += 1
            log.exception("%s: handler failed on sync", self.resource)


def _resumable(exc: ApiError) -> bool:
    """Failures after which the watch resumes from its resourceVersion instead of relisting."""
    return isinstance(exc, TooManyRequests) or exc.status == 0 or exc.status >= 500


_module_random = random.Random()
