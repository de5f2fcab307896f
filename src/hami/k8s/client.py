"""A small async Kubernetes API client over one ``httpx.AsyncClient`` (HTTP/1.1, pooled connections).

Responses are decoded from bytes straight into the caller's msgspec view type with a reused Decoder per type
(STYLE rule 8); nothing builds a dict of the whole object. Every request passes the client-side rate limiter.
Failures are mapped onto :mod:`hami.errors`: 409 → :class:`Conflict`, 404 → :class:`NotFound`, 410 →
:class:`Gone`, 429 → :class:`TooManyRequests` (with its ``Retry-After``), any other status → :class:`ApiError`
with that status and the message of the API's ``Status`` body; a transport failure (refused, reset, timed out,
broken stream) → :class:`ApiError` with status 0. A body that does not decode into the view raises
:class:`InvalidInput`.

Retries (as client-go does, within a per-call budget, see :class:`ClientSettings`): a request the server did not
process is sent again — 429, or any 5xx that carries ``Retry-After`` (every verb: the server says it refused it),
and a connection that could not be opened (every verb: nothing was sent). A GET is also repeated after a 5xx
without ``Retry-After`` or a transport failure after sending, because reading twice changes nothing. A write
whose fate is unknown (the connection broke after the request went out) is never repeated here: the callers'
preconditions (UID, resourceVersion, a Binding's 409) let them find out what happened instead. The wait is the
server's ``Retry-After`` (capped) or an exponential backoff. Watches are not retried here: the reflector resumes
them (``hami.k8s.watch``).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import time
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx
import msgspec

from hami import __version__
from hami.errors import ApiError, BudgetRefused, Conflict, Gone, InvalidInput, NotFound, TooManyRequests
from hami.k8s.config import KubeConfig
from hami.k8s.ratelimit import Clock, Sleep, TokenBucket
from hami.k8s.records import Binding, Bookmark, EventType, ObjectList, ObjectRef, Status, WatchLine
from hami.k8s.resources import PODS, Resource
from hami.k8s.wire import WireClient, WireResponse
from hami.protocol.objects import ObjectMeta

__all__ = [
    "ClientSettings",
    "KubeClient",
    "ListPage",
    "PatchType",
    "WatchEvent",
    "api_error",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class PatchType(enum.StrEnum):
    """The ``Content-Type`` of a PATCH."""

    MERGE = "application/merge-patch+json"  # RFC 7386: null deletes a key
    JSON = "application/json-patch+json"  # RFC 6902 operations
    STRATEGIC = "application/strategic-merge-patch+json"


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """Connection and throttling settings of :class:`KubeClient`."""

    qps: float = 300.0
    """Sustained requests per second (``--kube-qps``). HAMi's client-go default of 5 throttles binding: each
    scheduled pod costs an annotation PATCH, a lock PATCH, a Binding POST and two events."""
    burst: int = 600
    """Requests allowed at once above ``qps`` (``--kube-burst``): a burst of Filter/Bind calls after a
    deployment scales up should not queue behind the limiter."""
    request_timeout: float | None = 30.0
    """Seconds for one non-watch request; kube-scheduler gives an extender call 30 s in all. ``None``: no limit
    (kubectl's ``--request-timeout 0``)."""
    connect_timeout: float = 5.0
    """Seconds to open a connection; a healthy API server accepts in milliseconds."""
    watch_read_slack: float = 30.0
    """A watch is read with ``timeoutSeconds`` plus this slack before it counts as dead: the server closes the
    stream itself at ``timeoutSeconds``, so silence beyond that means a lost connection."""
    max_connections: int = 100
    """Pool size. Each watch holds one HTTP/1.1 connection for its whole life; the rest serve requests."""
    max_retries: int = 10
    """Retries of one call at most (client-go's default, too)."""
    retry_wait_max: float = 10.0
    """Longest single wait before a retry: a larger ``Retry-After`` is cut to this."""
    retry_budget: float = 20.0
    """Seconds from the start of a call after which no retry is begun (the last error is raised instead): a call
    takes at most this plus one ``request_timeout``. Below kube-scheduler's 30 s extender timeout, so a throttled
    /bind still answers in time."""
    retry_unreachable: bool = True
    """Send a request again when the server cannot be reached (a refused or timed-out connection, a lost one). The
    servers keep trying through an API server restart; the command line (``hami top``, ``hami explain``) turns
    this off and fails at once with the cause, as kubectl does."""
    retry_backoff: float = 0.2
    """First wait when the server names none (doubling per retry, up to ``retry_wait_max``)."""
    retry_jitter: float = 0.5
    """Each wait is stretched by up to this fraction at random. The API server answers every request it sheds
    with the same ``Retry-After: 1``; without jitter they would all come back in the same instant and be shed
    again (client-go waits exactly; hami's 429-storm test bound pods faster with jitter)."""


@dataclass(frozen=True, slots=True)
class ListPage(Generic[T]):
    """Items of one list page (or of a whole list), the list's resourceVersion and the continue token.

    ``first`` marks the first page of a listing; a second ``first`` page means the listing started over.
    """

    items: list[T]
    resource_version: str
    continue_token: str = ""
    first: bool = True


@dataclass(frozen=True, slots=True)
class WatchEvent(Generic[T]):
    type: EventType
    object: T


_status_decoder = msgspec.json.Decoder(Status)
_line_decoder = msgspec.json.Decoder(WatchLine)
_bookmark_decoder = msgspec.json.Decoder(Bookmark)
_encoder = msgspec.json.Encoder()


def api_error(status: int, body: bytes, what: str) -> ApiError:
    """The error for a failed response: the class by HTTP status, the message from the ``Status`` body.

    ``what`` (``"GET /api/v1/nodes/n1"``) is used when the body carries no message.
    """
    message = ""
    try:
        message = _status_decoder.decode(body).message
    except msgspec.DecodeError:
        message = body[:200].decode("utf-8", "replace").strip()
    return _error_for(status, message or f"{what}: HTTP {status}")


def _error_for(status: int, message: str) -> ApiError:
    if status == 429 and _BUDGET_REFUSAL in message:
        return BudgetRefused(message, status)
    cls = {409: Conflict, 404: NotFound, 410: Gone, 429: TooManyRequests}.get(status, ApiError)
    return cls(message, status)


_BUDGET_REFUSAL = "violate the pod's disruption budget"
"""What kube-apiserver's Eviction API says when a PodDisruptionBudget refuses (``pod/storage/eviction.go``)."""


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds (the API server sends whole seconds); ``None`` if absent or not a number."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _response_error(response: httpx.Response | WireResponse, what: str) -> ApiError:
    error = api_error(response.status_code, response.content, what)
    if isinstance(error, TooManyRequests):
        error.retry_after = retry_after(response.headers.get("Retry-After"))
    return error


_UNSENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
"""Transport failures that happen before a request leaves: repeating them is safe for every verb."""


class KubeClient:
    """The Kubernetes API, as hami uses it. Use as ``async with KubeClient(config) as client:``.

    ``type`` arguments name the msgspec view to decode into (``Pod``, ``Node``, ``msgspec.Raw`` for undecoded
    bytes). ``clock`` and ``sleep`` drive the rate limiter and token-file refresh; ``transport`` replaces the
    network (tests).
    """

    TOKEN_REFRESH_SECONDS = 60.0  # client-go re-reads a token file every minute, too

    def __init__(
        self,
        config: KubeConfig,
        settings: ClientSettings = ClientSettings(),
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config
        self.settings = settings
        self._clock = clock
        self.limiter = TokenBucket(settings.qps, settings.burst, clock=clock, sleep=sleep)
        verify: Any = config.ssl_context() if config.server.startswith("https://") else False
        self._http = httpx.AsyncClient(
            base_url=config.server,
            verify=verify,
            transport=transport,
            timeout=httpx.Timeout(settings.request_timeout, connect=settings.connect_timeout),
            limits=httpx.Limits(max_connections=settings.max_connections, max_keepalive_connections=20),
            headers={"Accept": "application/json", "User-Agent": f"hami/{__version__}"},
        )
        # Plain requests go through the lean HTTP/1.1 client (hami.k8s.wire: a tenth of httpx's CPU per request),
        # except with a test transport or a proxy in the environment (httpx honours those).
        self._wire = (
            WireClient(
                config.server,
                verify or None,
                {"Accept": "application/json", "User-Agent": f"hami/{__version__}"},
                connect_timeout=settings.connect_timeout,
                request_timeout=settings.request_timeout,
                max_connections=settings.max_connections,
            )
            if transport is None and not urllib.request.getproxies()
            else None
        )
        self._decoders: dict[Any, msgspec.json.Decoder[Any]] = {}
        self._token: str | None = config.token
        self._token_read_at: float | None = None
        self._sleep = sleep
        self._random = random.Random()
        self.retries = 0
        """Requests sent again so far (429s, refused connections, server errors; see the module docstring)."""

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._wire is not None:
            await self._wire.aclose()
        await self._http.aclose()

    # --- plumbing -----------------------------------------------------------------------------------------

    def _decoder(self, type: Any) -> msgspec.json.Decoder[Any]:
        decoder = self._decoders.get(type)
        if decoder is None:
            decoder = self._decoders[type] = msgspec.json.Decoder(type)
        return decoder

    def _decode(self, type: type[T] | Any, body: bytes, what: str) -> T:
        try:
            result: T = self._decoder(type).decode(body)
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            raise InvalidInput(what, body[:200].decode("utf-8", "replace"), f"undecodable response: {exc}") from None
        return result

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {}
        token = self._bearer_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _bearer_token(self) -> str | None:
        if self.config.credential is not None:
            return self.config.credential.token()
        path = self.config.token_file
        if path is None:
            return self._token
        now = self._clock()
        if self._token_read_at is None or now - self._token_read_at >= self.TOKEN_REFRESH_SECONDS:
            try:
                self._token = path.read_text().strip()
                self._token_read_at = now
            except OSError as exc:  # keep the previous token; the file may be mid-rotation
                log.warning("cannot re-read token file %s: %s", path, exc)
        return self._token

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: object = None,
        content_type: str | None = None,
    ) -> bytes:
        content = None if body is None else body if isinstance(body, bytes) else _encoder.encode(body)
        if content is not None and content_type is None:
            content_type = "application/json"
        what = f"{method} {path}"
        started = self._clock()
        refreshed = False
        for attempt in range(self.settings.max_retries + 1):
            await self.limiter.acquire()
            try:
                sender = self._http if self._wire is None else self._wire
                response = await sender.request(
                    method, path, params=params, content=content, headers=self._headers(content_type)
                )
            except httpx.HTTPError as exc:
                error = ApiError(f"{what}: {_type_name(exc)}: {exc}", 0)
                retry = self.settings.retry_unreachable and (isinstance(exc, _UNSENT) or method == "GET")
                delay = self._backoff(attempt) if retry else None
            else:
                if response.status_code < 400:
                    return response.content
                error = _response_error(response, what)
                delay = self._retry_delay(method, response, error, attempt)
                if response.status_code == 401 and self.config.credential is not None and not refreshed:
                    self.config.credential.invalidate()  # kubectl, too, runs an exec plugin again after a 401
                    refreshed, delay = True, 0.0
            if delay is None or attempt == self.settings.max_retries:
                raise error
            delay = min(
                self.settings.retry_wait_max, delay * (1.0 + self.settings.retry_jitter * self._random.random())
            )
            if self._clock() - started + delay > self.settings.retry_budget:
                raise error
            log.info("%s: %s; retry %d in %.2fs", what, error, attempt + 1, delay)
            self.retries += 1
            await self._sleep(delay)
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    def _backoff(self, attempt: int) -> float:
        return float(min(self.settings.retry_wait_max, self.settings.retry_backoff * 2**attempt))

    def _retry_delay(
        self, method: str, response: httpx.Response | WireResponse, error: ApiError, attempt: int
    ) -> float | None:
        """Seconds to wait before sending the request again, or ``None`` if it must not be repeated."""
        status = response.status_code
        after = retry_after(response.headers.get("Retry-After"))
        if isinstance(error, BudgetRefused):
            return None  # not load shedding: the budget decides, and preemption tries another node
        if status == 429 or (status >= 500 and after is not None):
            return self._backoff(attempt) if after is None else min(after, self.settings.retry_wait_max)
        if status in (500, 502, 503, 504) and method == "GET":
            return self._backoff(attempt)
        return None

    # --- verbs --------------------------------------------------------------------------------------------

    async def get(self, resource: Resource, name: str, *, type: type[T], namespace: str | None = None) -> T:
        path = resource.path(namespace, name)
        return self._decode(type, await self._request("GET", path), f"GET {path}")

    async def list_pages(
        self,
        resource: Resource,
        *,
        type: type[T],
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
    ) -> AsyncGenerator[ListPage[T]]:
        """Yield a list page by page (``limit`` items each, ``continue`` tokens followed).

        All pages are one consistent snapshot at the first page's resourceVersion. If a continue token expires
        (410) mid-way, the list starts again unpaginated, as client-go's pager does; consumers must therefore
        tolerate seeing an item twice.

        The next page is requested before a page is yielded, so the API server prepares and sends it while the
        consumer works on this one (at most one request ahead; cancelled if the consumer stops early).
        """
        path = resource.path(namespace)
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        token = ""
        first = True
        ahead: asyncio.Task[bytes] | None = None
        try:
            while True:
                try:
                    body = await (ahead or self._request("GET", path, params=_page_params(params, limit, token)))
                except Gone:
                    if not token:
                        raise
                    log.info("list %s: continue token expired; listing again without pages", resource)
                    token, limit, first, ahead = "", 0, True, None
                    continue
                page: ObjectList[T] = self._decode(ObjectList[type], body, f"GET {path}")  # type: ignore[valid-type]
                token, ahead = page.metadata.continue_, None
                if token:
                    ahead = asyncio.ensure_future(self._request("GET", path, params=_page_params(params, limit, token)))
                    await asyncio.sleep(0)  # the request goes out before the consumer takes the loop
                yield ListPage(page.items or [], page.metadata.resource_version, token, first)
                first = False
                if not token:
                    return
        finally:
            if ahead is not None:
                ahead.cancel()  # the consumer stopped early: the page ahead is not wanted
                if ahead.done() and not ahead.cancelled():
                    ahead.exception()  # a failure nobody will read is not logged as "never retrieved"

    async def list(
        self,
        resource: Resource,
        *,
        type: type[T],
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
    ) -> ListPage[T]:
        """The whole list (all pages) and its resourceVersion, the point to start a watch from."""
        items: list[T] = []
        resource_version = ""
        async for page in self.list_pages(
            resource,
            type=type,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
        ):
            if page.first:
                items = []  # the listing started over (expired continue token): drop the partial pages
            items.extend(page.items)
            resource_version = page.resource_version
        return ListPage(items, resource_version)

    @contextlib.asynccontextmanager
    async def watch(
        self,
        resource: Resource,
        *,
        type: type[T],
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        bookmarks: bool = True,
    ) -> AsyncIterator[AsyncIterator[WatchEvent[T]]]:
        """Open a watch from ``resource_version``; the context yields an async iterator of events.

        ``async with client.watch(PODS, type=Pod, resource_version=rv) as events: async for ev in events: …``

        The iterator ends when the server closes the stream normally (after ``timeout_seconds``). An ``ERROR``
        event raises the error its Status carries (410 → :class:`Gone`); a broken stream, or silence longer than
        ``timeout_seconds`` + ``watch_read_slack``, raises :class:`ApiError` with status 0. Event types other than
        ADDED/MODIFIED/DELETED/BOOKMARK are logged and skipped. Leaving the context closes the connection.
        """
        path = resource.path(namespace)
        what = f"WATCH {path}"
        params = {"watch": "1", "resourceVersion": resource_version, "timeoutSeconds": str(timeout_seconds)}
        if bookmarks:
            params["allowWatchBookmarks"] = "true"
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        await self.limiter.acquire()
        if self._wire is not None:
            async with self._wire_watch(path, params, timeout_seconds, type, what) as events:
                yield events
            return
        timeout = httpx.Timeout(
            self.settings.request_timeout,
            connect=self.settings.connect_timeout,
            read=timeout_seconds + self.settings.watch_read_slack,
        )
        request = self._http.build_request("GET", path, params=params, headers=self._headers(), timeout=timeout)
        try:
            response = await self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise ApiError(f"{what}: {_type_name(exc)}: {exc}", 0) from exc
        events = self._events(response.aiter_bytes(), type, what)
        try:
            if response.status_code >= 400:
                await self._read_all(response, what)
                raise _response_error(response, what)
            yield events
        finally:
            await events.aclose()
            await response.aclose()

    @contextlib.asynccontextmanager
    async def _wire_watch(
        self, path: str, params: Mapping[str, str], timeout_seconds: int, type: type[T], what: str
    ) -> AsyncIterator[AsyncIterator[WatchEvent[T]]]:
        """``watch`` over the lean client (hami.k8s.wire), with the same failures as over httpx."""
        assert self._wire is not None
        read_timeout = timeout_seconds + self.settings.watch_read_slack
        try:
            stream = await self._wire.stream(
                "GET", path, params=params, headers=self._headers(), read_timeout=read_timeout
            )
        except httpx.HTTPError as exc:
            raise ApiError(f"{what}: {_type_name(exc)}: {exc}", 0) from exc
        chunks = stream.chunks()
        events = self._events(chunks, type, what)
        try:
            if stream.status_code >= 400:
                try:
                    body = await stream.aread()
                except httpx.HTTPError as exc:
                    raise ApiError(f"{what}: {_type_name(exc)}: {exc}", 0) from exc
                raise _response_error(WireResponse(stream.status_code, stream.headers, body), what)
            yield events
        finally:
            await events.aclose()
            await chunks.aclose()
            stream.close()

    @staticmethod
    async def _read_all(response: httpx.Response, what: str) -> bytes:
        try:
            return await response.aread()
        except httpx.HTTPError as exc:
            raise ApiError(f"{what}: {_type_name(exc)}: {exc}", 0) from exc

    async def _events(self, chunks: AsyncIterator[bytes], type: type[T], what: str) -> AsyncGenerator[WatchEvent[T]]:
        decoder = self._decoder(type)
        buffer = b""
        try:
            async for chunk in chunks:
                lines = (buffer + chunk).split(b"\n")
                buffer = lines.pop()
                for line in lines:
                    event = self._watch_event(line, decoder, type, what)
                    if event is not None:
                        yield event
        except httpx.HTTPError as exc:
            raise ApiError(f"{what}: stream broken: {_type_name(exc)}: {exc}", 0) from exc
        event = self._watch_event(buffer, decoder, type, what)
        if event is not None:
            yield event

    @staticmethod
    def _watch_event(line: bytes, decoder: msgspec.json.Decoder[T], type: type[T], what: str) -> WatchEvent[T] | None:
        if not line.strip():
            return None
        try:
            raw = _line_decoder.decode(line)
            if raw.type == "ERROR":
                status = _status_decoder.decode(raw.object)
                raise _error_for(status.code, status.message or f"{what}: ERROR event, code {status.code}")
            try:
                kind = EventType(raw.type)
            except ValueError:
                log.warning("%s: skipping watch event of unknown type %r", what, raw.type)
                return None
            if kind is EventType.BOOKMARK:
                # A bookmark's object is a zero-valued shell around metadata.resourceVersion, and the shell need
                # not fit the compact view (a Pod's has "spec": {"containers": null}): read only the version
                # (decoding the whole shell fails, and the reflector would relist every pod at each bookmark).
                version = _bookmark_decoder.decode(raw.object).metadata.resource_version
                return WatchEvent(kind, msgspec.convert({"metadata": {"resourceVersion": version}}, type=type))
            return WatchEvent(kind, decoder.decode(raw.object))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise InvalidInput(what, line[:200].decode("utf-8", "replace"), f"undecodable watch event: {exc}") from None

    async def patch(
        self,
        resource: Resource,
        name: str,
        body: object,
        *,
        type: type[T],
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
    ) -> T:
        """PATCH ``body`` (a Struct, dict or list; bytes are sent as they are). Returns the patched object."""
        path = resource.path(namespace, name, subresource)
        content = await self._request("PATCH", path, body=body, content_type=patch_type)
        return self._decode(type, content, f"PATCH {path}")

    async def create(self, resource: Resource, body: object, *, type: type[T], namespace: str | None = None) -> T:
        path = resource.path(namespace)
        return self._decode(type, await self._request("POST", path, body=body), f"POST {path}")

    async def delete(
        self, resource: Resource, name: str, *, namespace: str | None = None, grace_period_seconds: int | None = None
    ) -> None:
        """DELETE; ``grace_period_seconds`` (0 = at once) goes in the DeleteOptions body."""
        body = None
        if grace_period_seconds is not None:
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": grace_period_seconds}
        await self._request("DELETE", resource.path(namespace, name), body=body)

    async def server_version(self) -> str:
        """The API server's ``gitVersion`` (``GET /version``: ``v1.36.3``)."""
        return _version_decoder.decode(await self._request("GET", "/version")).git_version

    async def served_resources(self, group: str, versions: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
        """API discovery: per version of ``group`` the server serves (of ``versions``, in that order), the plural
        names of its resources (``GET /apis/<group>``, then ``GET /apis/<group>/<version>``); ``{}`` when the
        group is not served (404)."""
        try:
            listed = msgspec.json.decode(await self._request("GET", f"/apis/{group}"))
        except NotFound:
            return {}
        served = {v.get("version") for v in listed.get("versions", []) if isinstance(v, dict)}
        out: dict[str, tuple[str, ...]] = {}
        for version in (v for v in versions if v in served):
            found = msgspec.json.decode(await self._request("GET", f"/apis/{group}/{version}"))
            out[version] = tuple(r.get("name", "") for r in found.get("resources", []) if isinstance(r, dict))
        return out

    async def evict(self, namespace: str, pod: str, uid: str) -> None:
        """Evict ``namespace/pod`` through the ``policy/v1`` Eviction subresource, gracefully (the pod's own
        grace period) and only if it is still the pod ``uid`` (a precondition). ``BudgetRefused`` when a
        PodDisruptionBudget allows no disruption now."""
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        await self._request("POST", PODS.path(namespace, pod, "eviction"), body=eviction)

    async def create_binding(
        self, namespace: str, pod: str, uid: str, node: str, resource_version: str | None = None
    ) -> None:
        """Bind ``namespace/pod`` to ``node``. ``uid`` is a precondition: a re-created pod of the same name → 409;
        so is ``resource_version``: a pod changed since that version → 409 (kube-apiserver's pods/binding passes
        both to its storage update as preconditions)."""
        binding = Binding(
            metadata=ObjectMeta(name=pod, namespace=namespace, uid=uid, resource_version=resource_version or ""),
            target=ObjectRef("Node", node),
        )
        await self._request("POST", PODS.path(namespace, pod, "binding"), body=binding)


class _Version(msgspec.Struct, rename="camel"):
    git_version: str = ""


_version_decoder = msgspec.json.Decoder(_Version)


def _page_params(params: Mapping[str, str], limit: int, token: str) -> dict[str, str]:
    """A list request's query: the selectors, ``limit`` when paging, ``continue`` after the first page."""
    page_params = dict(params)
    if limit > 0:
        page_params["limit"] = str(limit)
    if token:
        page_params["continue"] = token
    return page_params


def _type_name(exc: BaseException) -> str:
    return type(exc).__name__
