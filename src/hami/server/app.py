"""The HTTP surface (starlette): the extender listener (``/filter``, ``/bind``, ``/preempt``, ``/healthz``,
``/readyz``), the Service listener (``/webhook``, ``/healthz``, ``/readyz``; the extender's paths answer 404) and
``/metrics``.

Malformed bodies get HTTP 200 with a JSON ``{"Error": "..."}`` naming what is wrong (kube-scheduler reads
the error from the body, as with HAMi); bodies over the size limit are refused with 413 before decoding. The
preempt verb's answer has no error field, so there a malformed body is a 400 whose text names the field, a
replica that cannot answer yet (not synced, not the leader) a 503, and a bug a 500. No request can crash or block
the server: every handler catches hami's own errors and answers.
"""

from __future__ import annotations

import logging

import msgspec
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from hami.errors import BodyTooLarge, HamiError
from hami.protocol.extender import (
    BindingResult,
    FilterResult,
    PreemptionResult,
    decode_binding_args,
    decode_filter_args,
    decode_preemption_args,
    encode_binding_result,
    encode_filter_result,
    encode_host_priorities,
    encode_preemption_result,
)
from hami.server.extender import Extender
from hami.server.metrics import Metrics
from hami.server.scrape import scrape_chunks

__all__ = [
    "EXTENDER_BODY_LIMIT",
    "ExtenderRoutes",
    "build_app",
    "build_metrics_app",
    "build_service_app",
    "read_body",
]

log = logging.getLogger("hami.server")

EXTENDER_BODY_LIMIT = 1 << 20  # 1 MiB, as HAMi's extender routes
_JSON = "application/json"


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (``BodyTooLarge``) as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(err: BodyTooLarge) -> Response:
    return JSONResponse({"Error": str(err)}, status_code=413)


class ExtenderRoutes:
    """``POST /filter`` and ``POST /bind`` served straight from ASGI, everything else by ``fallback`` (Starlette).

    These two routes are kube-scheduler's, two calls per scheduled pod; Starlette's router, middleware stack and
    request/response objects cost more CPU than the work of a ``/bind``. The answers are byte for byte those of
    the Starlette routes (413 with a JSON ``Error`` over the size limit, 400 for an empty body, HAMi's 200 with an
    ``Error`` for anything else); TLS, the read deadline and the bearer-token gate stay where they were, around
    this application (uvicorn, ``hami.server.listen``, ``hami.server.access``)."""

    def __init__(self, extender: Extender, fallback: ASGIApp) -> None:
        self.extender = extender
        self.fallback = fallback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path")
        if scope["type"] != "http" or scope.get("method") != "POST" or path not in ("/filter", "/bind"):
            await self.fallback(scope, receive, send)
            return
        try:
            body = await _asgi_body(scope, receive, EXTENDER_BODY_LIMIT)
        except BodyTooLarge as err:
            await _answer(send, 413, _JSON, msgspec.json.encode({"Error": str(err)}))
            return
        if body is None:
            return  # the client went away
        if not body:
            await _answer(send, 400, "text/plain; charset=utf-8", b"Please send a request body")
        elif path == "/filter":
            await _answer(send, 200, _JSON, encode_filter_result(await _filter(self.extender, body)))
        else:
            await _answer(send, 200, _JSON, encode_binding_result(await _bind(self.extender, body)))


async def _asgi_body(scope: Scope, receive: Receive, limit: int) -> bytes | None:
    """The request body (None if the client disconnected), refusing past ``limit`` bytes as ``read_body`` does."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise BodyTooLarge(f"request body of {value.decode()} bytes exceeds the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _answer(send: Send, status: int, media_type: str, body: bytes) -> None:
    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", media_type.encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build_app(
    extender: Extender,
    extra_routes: list[Route] | None = None,
) -> ExtenderRoutes:
    """The main listener's application (extender, health; the webhook adds its route via ``extra_routes``):
    ``/filter`` and ``/bind`` by :class:`ExtenderRoutes`, the rest by Starlette (which has the same two routes, for
    a caller that reaches it directly)."""

    async def filter_route(request: Request) -> Response:
        body = await _extender_body(request)
        if isinstance(body, Response):
            return body
        return Response(encode_filter_result(await _filter(extender, body)), media_type=_JSON)

    async def bind_route(request: Request) -> Response:
        body = await _extender_body(request)
        if isinstance(body, Response):
            return body
        return Response(encode_binding_result(await _bind(extender, body)), media_type=_JSON)

    async def preempt_route(request: Request) -> Response:
        body = await _extender_body(request)
        if isinstance(body, Response):
            return body
        return await _preempt(extender, body)

    async def prioritize_route(request: Request) -> Response:
        body = await _extender_body(request)
        if isinstance(body, Response):
            return body
        return _prioritize(extender, body)

    routes = [
        Route("/filter", filter_route, methods=["POST"]),
        Route("/prioritize", prioritize_route, methods=["POST"]),
        Route("/bind", bind_route, methods=["POST"]),
        Route("/preempt", preempt_route, methods=["POST"]),
        *_health_routes(extender),
        *(extra_routes or []),
    ]
    return ExtenderRoutes(extender, Starlette(routes=routes))


async def _extender_body(request: Request) -> bytes | Response:
    """The body of a /filter or /bind, or the answer when it is missing or too large."""
    try:
        body = await read_body(request, EXTENDER_BODY_LIMIT)
    except BodyTooLarge as err:
        return _too_large(err)
    if not body:
        return PlainTextResponse("Please send a request body", status_code=400)
    return body


async def _filter(extender: Extender, body: bytes) -> FilterResult:
    try:
        return await extender.filter(decode_filter_args(body))
    except HamiError as err:
        return FilterResult(error=str(err))
    except Exception as err:  # a bug: answer, log, keep serving
        log.exception("filter failed")
        return FilterResult(error=f"internal error: {type(err).__name__}: {err}")


async def _bind(extender: Extender, body: bytes) -> BindingResult:
    try:
        return await extender.bind(decode_binding_args(body))
    except HamiError as err:
        return BindingResult(error=str(err))
    except Exception as err:  # a bug: answer, log, keep serving
        log.exception("bind failed")
        return BindingResult(error=f"internal error: {type(err).__name__}: {err}")


def _prioritize(extender: Extender, body: bytes) -> Response:
    """The prioritize verb's answer: 200 with a ``HostPriorityList``; a body that is no ``ExtenderArgs`` answers 400
    (kube-scheduler logs it and, the entry being ignorable, schedules on without hami's scores)."""
    try:
        answer = extender.prioritize(decode_filter_args(body))
    except HamiError as err:
        log.warning("/prioritize refused: %s", err)
        return PlainTextResponse(str(err), status_code=400)
    except Exception as err:  # a bug: answer, log, keep serving
        log.exception("prioritize failed")
        return PlainTextResponse(f"internal error: {type(err).__name__}: {err}", status_code=500)
    return Response(encode_host_priorities(answer), media_type=_JSON)


async def _preempt(extender: Extender, body: bytes) -> Response:
    """The preempt verb's answer: 200 with ``NodeNameToMetaVictims``, else a status kube-scheduler logs
    (``failed preempt with extender at URL …, code N``) with the reason in the body for a person."""
    try:
        answer = await extender.preempt(decode_preemption_args(body))
    except HamiError as err:
        log.warning("/preempt refused: %s", err)
        return PlainTextResponse(str(err), status_code=400)
    except Exception as err:  # a bug: answer, log, keep serving
        log.exception("preempt failed")
        return PlainTextResponse(f"internal error: {type(err).__name__}: {err}", status_code=500)
    if isinstance(answer, PreemptionResult):
        return Response(encode_preemption_result(answer), media_type=_JSON)
    log.warning("/preempt not answered: %s", answer)
    return PlainTextResponse(answer, status_code=503)


def _health_routes(extender: Extender) -> list[Route]:
    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(_: Request) -> Response:
        problem = extender.readiness.ready_problem()
        if problem is None:
            return PlainTextResponse("ok")
        return PlainTextResponse(problem, status_code=503)

    return [Route("/healthz", healthz, methods=["GET"]), Route("/readyz", readyz, methods=["GET"])]


def build_service_app(extender: Extender, routes: list[Route]) -> Starlette:
    """The Service-facing listener: ``routes`` (the webhook) and health. ``/filter``, ``/bind`` and ``/preempt``
    answer 404 without reading the body: they are served on the extender listener only (``--extender-bind``)."""

    async def not_here(request: Request) -> Response:
        log.warning("%s %s on the Service listener from %s refused (the extender listens on --extender-bind)",
                    request.method, request.url.path, request.client and request.client.host)  # fmt: skip
        return PlainTextResponse(
            f"{request.url.path} is not served on this listener (the extender listens on --extender-bind)",
            status_code=404,
        )

    every = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    extender_paths = [Route(path, not_here, methods=every) for path in ("/filter", "/bind", "/preempt", "/prioritize")]
    return Starlette(routes=[*routes, *_health_routes(extender), *extender_paths])


def build_metrics_app(metrics: Metrics) -> Starlette:
    async def metrics_route(_: Request) -> Response:
        # The cluster gauges are written in slices with the event loop's turn in between (hami.server.scrape).
        return StreamingResponse(scrape_chunks(metrics, metrics.state()), media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[Route("/metrics", metrics_route, methods=["GET"])])
