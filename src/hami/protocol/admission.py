"""AdmissionReview on the wire (``admission.k8s.io/v1`` and ``v1beta1``): decode the request, encode the answer.

Both versions share the shape hami reads and writes. The answer echoes the request's ``apiVersion`` (v1 when
the request had none, or could not be read) and ``uid``, as controller-runtime does (spec §1.1). Status codes:
200 allowed, 403 denied (reason ``Forbidden``), 400 a request hami cannot read, 413 a body over the limit,
500 a bug. The HTTP status is always 200; the verdict travels in ``response``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from hami.errors import InvalidInput, MalformedReview
from hami.protocol.jsonbody import decode_body
from hami.protocol.podpatch import PatchOp

__all__ = [
    "ADMISSION_V1",
    "ADMISSION_V1BETA1",
    "MAX_CONTAINERS",
    "AdmissionRequest",
    "AdmissionResponse",
    "decode_review",
    "encode_review",
]

ADMISSION_V1: Final = "admission.k8s.io/v1"
ADMISSION_V1BETA1: Final = "admission.k8s.io/v1beta1"
_VERSIONS: Final = frozenset({ADMISSION_V1, ADMISSION_V1BETA1})
_KIND: Final = "AdmissionReview"

_encoder = msgspec.json.Encoder()

MAX_CONTAINERS: Final = 1000
"""Containers (app, init and ephemeral together) a reviewed pod may have. Admission does per-container work on
the event loop that also answers /healthz and /filter; without a bound, one 5 MB review of 60,000 containers held
it for seconds. Kubernetes sets no such limit, but no kubelet runs a pod anywhere near it."""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of ``request`` hami uses. ``object`` is the raw pod JSON (patches are built against it)."""

    api_version: str
    uid: str
    operation: str
    namespace: str
    kind: str
    object: dict[str, Any]
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class AdmissionResponse:
    uid: str
    allowed: bool
    code: int = 200
    message: str = ""
    patch: tuple[PatchOp, ...] = ()

    @property
    def reason(self) -> str:
        return "Forbidden" if self.code == 403 else ""


def _text(value: object, field: str, api_version: str, uid: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedReview(field, value, "must be a string", api_version, uid)
    return value


def decode_review(body: bytes) -> AdmissionRequest:
    """Decode an AdmissionReview; raises ``MalformedReview`` naming the offending field."""
    api_version, request = _envelope(body)
    uid = _text(request.get("uid"), "request.uid", api_version, "")
    if not uid:
        raise MalformedReview("request.uid", request.get("uid"), "the request has no uid", api_version)
    gvk = request.get("kind")
    object_kind = ""
    if isinstance(gvk, dict):
        object_kind = _text(gvk.get("kind"), "request.kind.kind", api_version, uid)
    obj = _object(request.get("object"), api_version, uid)
    return AdmissionRequest(
        api_version=api_version,
        uid=uid,
        operation=_text(request.get("operation"), "request.operation", api_version, uid),
        namespace=_text(request.get("namespace"), "request.namespace", api_version, uid),
        kind=object_kind,
        object=obj,
        dry_run=request.get("dryRun") is True,
    )


def _envelope(body: bytes) -> tuple[str, dict[str, Any]]:
    """The review's apiVersion and its request, checked: a JSON object of a known version and kind."""
    try:
        review = decode_body(body, "body")
    except InvalidInput as err:
        raise MalformedReview("body", err.value, err.reason) from None
    if not isinstance(review, dict):
        raise MalformedReview("body", review, "an AdmissionReview must be a JSON object")
    api_version = review.get("apiVersion") or ADMISSION_V1
    if not isinstance(api_version, str) or api_version not in _VERSIONS:
        raise MalformedReview("apiVersion", api_version, f"expected {ADMISSION_V1} or {ADMISSION_V1BETA1}")
    kind = review.get("kind") or _KIND
    if kind != _KIND:
        raise MalformedReview("kind", kind, f"expected {_KIND}", api_version)
    request = review.get("request")
    if not isinstance(request, dict):
        raise MalformedReview("request", request, "the AdmissionReview has no request", api_version)
    return api_version, request


def _object(obj: object, api_version: str, uid: str) -> dict[str, Any]:
    """The request's object: a non-empty JSON object whose pod spec has at most ``MAX_CONTAINERS`` containers."""
    if obj is None or obj == {}:
        raise MalformedReview("request.object", obj, "there is no content to decode", api_version, uid)
    if not isinstance(obj, dict):
        raise MalformedReview("request.object", obj, "the object must be a JSON object", api_version, uid)
    spec = obj.get("spec")
    if isinstance(spec, dict):
        lists = [spec.get(k) for k in ("containers", "initContainers", "ephemeralContainers")]
        count = sum(len(v) for v in lists if isinstance(v, list))
        if count > MAX_CONTAINERS:
            reason = f"a pod hami admits has at most {MAX_CONTAINERS} containers (app, init and ephemeral)"
            raise MalformedReview("request.object.spec.containers", count, reason, api_version, uid)
    return obj


def encode_review(api_version: str, response: AdmissionResponse) -> bytes:
    """The AdmissionReview answer; the patch (if any) is base64 of its JSON, ``patchType`` JSONPatch."""
    status: dict[str, Any] = {"code": response.code}
    if response.reason:
        status["reason"] = response.reason
    if response.message:
        status["message"] = response.message
    body: dict[str, Any] = {"uid": response.uid, "allowed": response.allowed, "status": status}
    if response.patch:
        body["patchType"] = "JSONPatch"
        body["patch"] = base64.b64encode(_encoder.encode(list(response.patch))).decode("ascii")
    return _encoder.encode({"apiVersion": api_version, "kind": _KIND, "response": body})
