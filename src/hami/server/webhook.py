"""``POST /webhook``: the mutating admission webhook over HTTP (webhook-bind-plugin-vendors.md §1.1).

Transport rules, as controller-runtime's: the body is read up to 7 MiB (code 413 beyond), an empty body is
code 400, the ``Content-Type`` must be ``application/json`` (code 400). hami also accepts media-type
parameters such as ``; charset=utf-8``. The HTTP status is always 200 and the verdict travels in the
AdmissionReview ``response``, whose ``apiVersion`` and ``uid`` echo the request. A review hami cannot read
gets ``allowed: false`` with code 400 and a message; a bug gets code 500. Nothing a client sends can crash or
block the server.

Plug in with ``build_app(extender, extra_routes=[webhook_route(admission)])``; ``admission_for(extender, …)``
builds the decision from the extender's vendors, defaults and quota book.

``POST /webhook/dra`` (:func:`dra_webhook_route`, DRA mode, docs/dra-mode.md) follows the same transport rules, body
limit, errors and latency metric (endpoint ``webhook-dra``); its decision is ``DraAdmission`` (the pod's HAMi
request becomes ResourceClaim references; ``hami.scheduling.dra.translate``). It has no side effects: nothing is
created at admission (the claim controller creates the claims once the pod exists), so a dry run, a later
webhook's refusal or a ``generateName`` pod leaves nothing behind. The claims' names end in five random characters
drawn here (:func:`claim_suffix`, one draw per claim), so the decision stays pure. With ``--dra-mode`` off the route
still answers, refusing every pod with a message that says DRA mode is off: a webhook configuration that sends pods
here while the scheduler runs without DRA mode is a misconfiguration, and the pod's author should read so rather
than a 404.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hami.errors import BodyTooLarge, InvalidInput, MalformedReview
from hami.protocol.admission import (
    ADMISSION_V1,
    AdmissionResponse,
    decode_review,
    encode_review,
)
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.server.app import read_body
from hami.server.extender import Extender
from hami.server.metrics import Metrics

__all__ = [
    "CLAIM_SUFFIX_ALPHABET",
    "DRA_MODE_OFF",
    "DRA_WEBHOOK_PATH",
    "WEBHOOK_BODY_LIMIT",
    "WEBHOOK_PATH",
    "ClaimAdmission",
    "admission_for",
    "claim_suffix",
    "dra_webhook_route",
    "handle_review",
    "webhook_route",
]

log = logging.getLogger("hami.webhook")

WEBHOOK_PATH: Final = "/webhook"
DRA_WEBHOOK_PATH: Final = "/webhook/dra"
CLAIM_SUFFIX_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
"""The characters of a claim name's random suffix: Kubernetes' own for generated names (no vowels, no 0/1/3)."""
DRA_MODE_OFF: Final = (
    "hami scheduler runs with DRA mode off (--dra-mode, the chart's draMode.enabled), yet the webhook "
    "configuration sent this pod to /webhook/dra: turn draMode.enabled on, or take the namespace out of DRA mode "
    "(label hami.io/scheduling-mode)"
)
WEBHOOK_BODY_LIMIT: Final = 7 * 1024 * 1024  # controller-runtime's limit, 7340032 bytes
_JSON: Final = "application/json"


def admission_for(extender: Extender, settings: AdmissionSettings) -> Admission:
    """The webhook's decision over the extender's vendors, scheduling defaults and quota book."""
    return Admission(
        vendors=extender.vendors,
        admitters=admitters_for(extender.vendors),
        defaults=extender.defaults,
        settings=settings,
        quotas=extender.state.quotas,
        quota_factors=extender.state.quota_factors,
    )


def _answer(api_version: str, response: AdmissionResponse) -> Response:
    return Response(encode_review(api_version, response), media_type=_JSON)


def _refuse(code: int, message: str) -> Response:
    """An answer to a request refused before its review was read (no uid or apiVersion to echo)."""
    return _answer(ADMISSION_V1, AdmissionResponse("", allowed=False, code=code, message=message))


class _Verdict(Protocol):
    """What a decision answers: ``allowed`` with a ``patch`` (RFC 6902 ops), or refused with a ``message``."""

    @property
    def allowed(self) -> bool: ...
    @property
    def message(self) -> str: ...
    @property
    def patch(self) -> Any: ...


class ClaimAdmission(Protocol):
    """DRA mode's decision (``hami.scheduling.dra.translate.DraAdmission``): ``suffix()`` ends each claim's name."""

    def review(self, raw_pod: Mapping[str, Any], namespace: str, suffix: Callable[[], str]) -> _Verdict: ...


Decide = Callable[[Mapping[str, Any], str], _Verdict]
"""One pod (the review's ``request.object``) and its namespace → the verdict."""


def claim_suffix() -> str:
    """Five random characters of :data:`CLAIM_SUFFIX_ALPHABET` (as Kubernetes' generated names end)."""
    return "".join(secrets.choice(CLAIM_SUFFIX_ALPHABET) for _ in range(5))


def handle_review(admission: Admission | Decide, body: bytes) -> tuple[str, AdmissionResponse]:
    """Decode one AdmissionReview body, decide, and return ``(apiVersion, response)``. Never raises.

    ``admission``: hami's webhook decision, or any function of (pod, namespace) to a verdict."""
    decide: Decide = admission.review if isinstance(admission, Admission) else admission
    try:
        request = decode_review(body)
    except MalformedReview as err:
        return err.api_version, AdmissionResponse(err.uid, allowed=False, code=400, message=str(err))
    metadata = request.object.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    where = f"{request.namespace}/{name or '(generated name)'}"
    if request.kind and request.kind != "Pod":
        message = f"request.kind: hami admits pods only (got {request.kind!r})"
        return request.api_version, AdmissionResponse(request.uid, allowed=False, code=400, message=message)
    if request.operation and request.operation != "CREATE":
        # The configuration registers CREATE only; anything else is let through unchanged.
        return request.api_version, AdmissionResponse(request.uid, allowed=True)
    try:
        verdict = decide(request.object, request.namespace)
    except InvalidInput as err:
        log.info("admission of pod %s: unreadable: %s", where, err)
        return request.api_version, AdmissionResponse(request.uid, allowed=False, code=400, message=str(err))
    except Exception as err:  # a bug: answer, log, keep serving
        log.exception("admission of pod %s failed", where)
        message = f"internal error: {type(err).__name__}: {err}"
        return request.api_version, AdmissionResponse(request.uid, allowed=False, code=500, message=message)
    if verdict.allowed:
        log.debug("admission of pod %s: allowed with %d patch operations", where, len(verdict.patch))
        response = AdmissionResponse(request.uid, allowed=True, message=verdict.message, patch=verdict.patch)
    else:
        log.info("admission of pod %s: denied: %s", where, verdict.message)
        response = AdmissionResponse(request.uid, allowed=False, code=403, message=verdict.message)
    return request.api_version, response


def webhook_route(admission: Admission, metrics: Metrics | None = None, path: str = WEBHOOK_PATH) -> Route:
    """The ``POST /webhook`` route for ``build_app(..., extra_routes=[...])``."""
    return _review_route(admission.review, metrics, path, "webhook")


def dra_webhook_route(
    admission: ClaimAdmission | None,
    metrics: Metrics | None = None,
    path: str = DRA_WEBHOOK_PATH,
    suffix: Callable[[], str] = claim_suffix,
) -> Route:
    """The ``POST /webhook/dra`` route (DRA mode). ``admission`` None (``--dra-mode`` off): every pod is refused
    with :data:`DRA_MODE_OFF` (code 403)."""

    def decide(raw: Mapping[str, Any], namespace: str) -> _Verdict:
        if admission is None:
            return _Refusal(DRA_MODE_OFF)
        return admission.review(raw, namespace, suffix)

    return _review_route(decide, metrics, path, "webhook-dra")


class _Refusal:
    """A verdict refusing the pod with ``message``."""

    allowed = False
    patch = ()

    def __init__(self, message: str) -> None:
        self.message = message


def _review_route(decide: Decide, metrics: Metrics | None, path: str, endpoint: str) -> Route:
    """A ``POST`` route answering AdmissionReviews with ``decide``'s verdicts (the transport rules above);
    latency recorded under ``endpoint``."""

    async def webhook(request: Request) -> Response:
        started = time.perf_counter()
        try:
            try:
                body = await read_body(request, WEBHOOK_BODY_LIMIT)
            except BodyTooLarge:
                return _refuse(413, f"request entity is too large; limit is {WEBHOOK_BODY_LIMIT} bytes")
            if not body:
                return _refuse(400, "request body is empty")
            content_type = request.headers.get("content-type", "")
            if content_type.split(";", 1)[0].strip().lower() != _JSON:
                return _refuse(400, f"contentType={content_type}, expected {_JSON}")
            return _answer(*handle_review(decide, body))
        finally:
            if metrics is not None:
                metrics.latency.labels(endpoint).observe(time.perf_counter() - started)

    return Route(path, webhook, methods=["POST"])
