"""A scripted Kubernetes API server on loopback: a starlette app served by uvicorn inside the test's event loop.

Tests queue replies per route with :meth:`FakeApi.script`; each request takes the next one. A route's replies:
``Reply`` (a status and a JSON body), ``Stream`` (a watch stream: lines, then a normal end, a broken connection
or a hang until the client goes away). Requests are recorded. Routes that are not scripted fall back to a
:class:`MemoryCluster` (nodes, pods, bindings, events), so ``KubeCluster`` can be tested against the same
semantics as the in-memory seam. A watch with nothing scripted hangs and sets :attr:`FakeApi.idle`, which tests
await to know the client has consumed the whole script.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from hami.errors import ApiError, Conflict
from hami.k8s.memory import MemoryCluster
from hami.k8s.records import ObjectRef

__all__ = ["FakeApi", "Recorded", "Reply", "Stream", "event_line", "obj", "serve", "status_body"]


def status_body(code: int, message: str, reason: str = "") -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip


def obj(name: str, rv: str, *, namespace: str = "default", uid: str | None = None, **extra: Any) -> dict[str, Any]:
    """A minimal object as the API would send it."""
    meta = {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}", "resourceVersion": rv}
    return {"kind": "Pod", "apiVersion": "v1", "metadata": meta, **extra}


def event_line(type: str, body: dict[str, Any]) -> bytes:
    return msgspec.json.encode({"type": type, "object": body})


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    raw: bytes | None = None
    headers: dict[str, str] | None = None


@dataclass
class Stream:
    """A watch response: ``lines`` (bytes are sent as they are, so a test can split a line), then ``end``."""

    lines: list[bytes] = field(default_factory=list)
    end: Literal["close", "break", "hang"] = "close"


class StreamBroken(Exception):
    """Raised inside the app to make uvicorn drop the connection mid-stream."""


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: bytes
    headers: dict[str, str]


class FakeApi:
    def __init__(self) -> None:
        self.scripts: dict[tuple[str, str], deque[Reply | Stream]] = defaultdict(deque)
        self.requests: list[Recorded] = []
        self.memory = MemoryCluster()
        self.idle = asyncio.Event()
        self.url = ""
        self.app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["GET", "POST", "PATCH", "DELETE"])])

    def script(self, method: str, path: str, *replies: Reply | Stream) -> None:
        """Queue replies for ``method path``; method ``WATCH`` is a GET with ``watch=1``."""
        self.scripts[(method, path)].extend(replies)

    def calls(self, method: str, path: str | None = None) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and (path is None or r.path == path)]

    async def _handle(self, request: Request) -> Response:
        body = await request.body()
        query = dict(request.query_params)
        method = "WATCH" if query.get("watch") in ("1", "true") else request.method
        self.requests.append(Recorded(method, request.url.path, query, body, dict(request.headers)))
        queue = self.scripts.get((method, request.url.path))
        if queue:
            return self._render(queue.popleft())
        if method == "WATCH":
            self.idle.set()
            return self._render(Stream(end="hang"))
        return await self._memory(method, request.url.path, body)

    @staticmethod
    def _render(reply: Reply | Stream) -> Response:
        if isinstance(reply, Reply):
            raw = reply.raw if reply.raw is not None else msgspec.json.encode(reply.body)
            return Response(raw, reply.status, headers=reply.headers, media_type="application/json")

        async def lines() -> AsyncIterator[bytes]:
            for line in reply.lines:
                yield line
                await asyncio.sleep(0)
            if reply.end == "break":
                raise StreamBroken("dropping the connection")
            if reply.end == "hang":
                await asyncio.Event().wait()

        return StreamingResponse(lines(), media_type="application/json")

    async def _memory(self, method: str, path: str, body: bytes) -> Response:
        """Nodes, pods, bindings and events backed by :attr:`memory` (only what ``KubeCluster`` uses)."""
        parts = path.strip("/").split("/")
        try:
            result = await self._dispatch(method, parts, msgspec.json.decode(body) if body else None)
        except ApiError as exc:
            return Response(msgspec.json.encode(status_body(exc.status, str(exc))), exc.status)
        if result is None:
            return Response(msgspec.json.encode(status_body(404, f"unscripted {method} {path}")), 404)
        return Response(msgspec.json.encode(result), 201 if method == "POST" else 200, media_type="application/json")

    async def _dispatch(self, method: str, parts: list[str], body: Any) -> Any:
        m = self.memory
        match method, parts:
            case "GET", ["api", "v1", "nodes", name]:
                return await m.get_node(name)
            case "PATCH", ["api", "v1", "nodes", name]:
                meta = body["metadata"]
                return await m.patch_node_annotations(name, meta.get("annotations", {}), meta.get("resourceVersion"))
            case "GET", ["api", "v1", "namespaces", ns, "pods", name]:
                return await m.get_pod(ns, name)
            case "PATCH", ["api", "v1", "namespaces", ns, "pods", name]:
                meta = body["metadata"]
                try:
                    return await m.patch_pod_metadata(
                        ns,
                        name,
                        meta.get("annotations"),
                        meta.get("labels"),
                        uid=meta.get("uid"),
                        resource_version=meta.get("resourceVersion"),
                    )
                except Conflict as exc:  # answer as the API server does: a UID mismatch is 422, not 409
                    detail = str(exc).rpartition("nothing written: ")[2] if exc.status == 422 else str(exc)
                    raise ApiError(detail, exc.status) from None
            case "POST", ["api", "v1", "namespaces", ns, "pods", name, "binding"]:
                assert (body["metadata"]["name"], body["metadata"]["namespace"]) == (name, ns)
                await m.bind(ns, name, body["metadata"].get("uid", ""), body["target"]["name"])
                return {"kind": "Status", "status": "Success", "code": 201}
            case "POST", ["api", "v1", "namespaces", ns, "events"]:
                assert body["metadata"]["namespace"] == ns
                ref = msgspec.convert(body["involvedObject"], type=ObjectRef)
                src = body["source"]["component"]
                await m.emit_event(ref, body["type"], body["reason"], body["message"], src)
                m.events[-1] = dataclasses.replace(m.events[-1], name=body["metadata"]["name"])
                return body
            case "PATCH", ["api", "v1", "namespaces", ns, "events", name]:
                await m.fold_event(ns, name, body["count"])
                return body
        return None


@contextlib.asynccontextmanager
async def serve(app: Callable[..., Any], ssl_options: dict[str, Any] | None = None) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 at a free port for the duration of the context; yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, lifespan="off", ws="none", http="h11", log_level="critical", timeout_graceful_shutdown=1,
        **(ssl_options or {}),
    )  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.005)
    scheme = "https" if ssl_options else "http"
    try:
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        # uvicorn's own shutdown polls every 0.1 s; clients are closed by now, so stop it directly.
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for listener in server.servers:
            listener.close()
        for connection in list(server.server_state.connections):
            connection.shutdown()
        for pending in list(server.server_state.tasks):
            pending.cancel()
        sock.close()
