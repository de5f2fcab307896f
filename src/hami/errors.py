"""The exception tree of hami: every exception hami raises on purpose, in one place.

Every error hami raises on purpose is a :class:`HamiError`, so callers can catch at any level. Beside each class,
the modules that raise it::

    HamiError
    ├── InvalidInput            bad input from a user or a peer; carries ``field`` and ``value``
    │   │                       (hami.protocol, hami.devices, hami.scheduling.request, hami.k8s.config, ...)
    │   ├── AnnotationError     a wire value (annotation, label) that does not decode; adds ``position``
    │   │                       (hami.protocol.*, hami.devices.*)
    │   ├── QuantityError       a Kubernetes quantity not acceptable for its resource (hami.protocol.quantity)
    │   ├── ConfigError         a configuration key with an invalid value, or an unknown key (hami.config.*)
    │   └── MalformedReview     an AdmissionReview hami cannot read (hami.protocol.admission)
    ├── LedgerError             the usage ledger was asked to do something inconsistent (hami.scheduling.state)
    ├── LockContention          a node lock is held by another live pod; carries ``node``, ``holder``, ``since``
    │                           (hami.k8s.nodelock; re-raised after a wait by hami.scheduling.bind)
    ├── ApiError                a Kubernetes API call failed; ``status`` is the HTTP status, 0 if none
    │   │                       (hami.k8s.client, hami.k8s.memory)
    │   ├── Conflict            409: a precondition (resourceVersion; a Binding's UID) did not hold
    │   │   └── PodReplaced     the pod of that name is no longer the one with the UID written against
    │   │                       (422 ``metadata.uid`` on a patch; hami.k8s.cluster, hami.k8s.memory)
    │   ├── NotFound            404
    │   ├── Gone                410: the watch must relist
    │   └── TooManyRequests     429: the API server sheds load; carries ``retry_after``
    │       └── BudgetRefused   429 from the Eviction API: a PodDisruptionBudget allows no disruption now
    │                           (hami.k8s.client; never retried there: preemption picks another node)
    ├── CannotListen            a listener could not be bound (hami.server.listen)
    ├── BodyTooLarge            a request body over the route's limit (hami.server.app)
    ├── NvmlError               an NVML call failed; carries ``code`` and ``call`` (hami.deviceplugin.nvml, .fakenvml)
    ├── DiscoveryError          NVML cannot be used on this machine at all (hami.deviceplugin.discovery)
    ├── MigError                a MIG reservation cannot be made real (hami.deviceplugin.mig)
    ├── AllocationError         kubelet's Allocate cannot be served; ``failure`` an ``AllocationFailure``
    │                           (hami.deviceplugin.allocate)
    └── RegionError             a HAMi-core region file cannot be used (hami.monitor.region)

The decision core (``hami.protocol``, ``hami.devices``, ``hami.scheduling``) raises only ``InvalidInput`` (for
input it cannot understand), ``LedgerError`` and, re-raising the port's, ``LockContention``. A node or device that
merely does not fit is *not* an exception: it is data (see ``hami.protocol.reasons``), and so is a refused /filter
or /bind (``hami.scheduling.outcomes``).
"""

from __future__ import annotations

import difflib
import enum
import json
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

__all__ = [
    "AllocationError",
    "AllocationFailure",
    "AnnotationError",
    "ApiError",
    "BodyTooLarge",
    "BudgetRefused",
    "CannotListen",
    "ConfigError",
    "Conflict",
    "DiscoveryError",
    "Gone",
    "HamiError",
    "InvalidInput",
    "LedgerError",
    "LockContention",
    "MalformedReview",
    "MigError",
    "NotFound",
    "NvmlError",
    "PodReplaced",
    "QuantityError",
    "RegionError",
    "TooManyRequests",
    "did_you_mean",
    "readable_validation",
]

_TYPE_WORDS = {
    "int": "an integer",
    "str": "a string",
    "float": "a number",
    "bool": "true or false",
    "null": "null",
    "array": "a list",
    "object": "an object",
    "bytes": "base64 text",
}
_EXPECTED = re.compile(r"^Expected `([^`]*)`(.*?)(?:, got `([^`]*)`)?$")


def _type_words(spec: str) -> str:
    return " or ".join(_TYPE_WORDS.get(part.strip(), part.strip()) for part in spec.split("|"))


def readable_validation(message: str) -> tuple[str, str]:
    """A msgspec validation message for a person: ``Expected `int`, got `str` - at `$[1].count``` becomes the
    reason ``expected an integer, got a string`` and the path ``[1].count`` (``""`` for the whole value)."""
    text, _, at = message.partition(" - at `")
    path = at.removesuffix("`").removeprefix("$").removeprefix(".")
    match = _EXPECTED.match(text)
    if match is None:
        reason = text.replace("`", "")
        return reason[:1].lower() + reason[1:], path
    bound = match[2].strip()
    reason = f"expected {_type_words(match[1])}{' ' + bound if bound else ''}"
    if match[3]:
        reason += f", got {_type_words(match[3])}"
    return reason, path


_MAX_SHOWN_DEPTH = 100
"""Values nested deeper are named by their type: the same message on every Python (3.11's JSON encoder gives up
near 1,000 levels, 3.13's goes much further)."""


def _nested_deeper_than(value: object, depth: int) -> bool:
    """Whether lists, tuples and mappings nest more than ``depth`` levels in ``value`` (iterative, no recursion)."""
    level: list[object] = [value]
    for _ in range(depth + 1):
        inner = [
            item
            for node in level
            for item in (node.values() if isinstance(node, dict) else node if isinstance(node, list | tuple) else ())
        ]
        if not inner:
            return False
        level = inner
    return True


def _show(value: object, limit: int = 120) -> str:
    """Render an offending value for a message: strings quoted, anything else as JSON (``true``, ``[1, 2]``,
    never a Python repr), cut when very long."""
    if isinstance(value, str):
        text = value
    elif _nested_deeper_than(value, _MAX_SHOWN_DEPTH):  # not written by a person: say what it is
        text = type(value).__name__
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (ValueError, RecursionError):  # circular, or past the encoder's depth on this Python
            text = type(value).__name__
    if len(text) > limit:
        text = text[:limit] + f"…(+{len(text) - limit} chars)"
    return f"{text!r}" if isinstance(value, str) else text


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """``"; did you mean spread?"`` for the choice closest to a mistyped ``value`` (``spred``), else ``""``."""
    close = difflib.get_close_matches(value.strip().casefold(), sorted(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _got(field: str, value: object, reason: str) -> str:
    """`` (got <value>)``, or nothing when it would tell the reader nothing new: no value (``None``, ``''``),
    or a value the field already spells out (a file path that is also the field) or the reason quotes."""
    if value is None or value == "":
        return ""
    if isinstance(value, str) and (value == field or (len(value) >= 4 and value in field) or repr(value) in reason):
        return ""
    return f" (got {_show(value)})"


class HamiError(Exception):
    """Root of every error hami raises deliberately."""


class InvalidInput(HamiError):
    """Input that hami cannot accept. ``field`` names where it came from, ``value`` is what was there.

    The message always names both, so a log line or an API answer is enough to find the culprit.
    """

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(self._message())

    def _message(self) -> str:
        return f"{self.field}: {self.reason}{_got(self.field, self.value, self.reason)}"


class AnnotationError(InvalidInput):
    """A wire value that does not decode.

    ``position`` is the index in the value where the problem starts (a character offset for text
    formats, or an item index for JSON arrays), or ``None`` when it concerns the whole value. ``path`` is where
    in a JSON value (``[1].count``); the message then names the path rather than the position.
    """

    def __init__(self, field: str, value: str, reason: str, position: int | None = None, path: str = "") -> None:
        self.position = position
        self.path = path
        super().__init__(field, value, reason)

    def _message(self) -> str:
        where = "" if self.position is None or self.path else f" at position {self.position}"
        shown = f" (in {_show(self.value)})" if self.value not in (None, "") else ""
        return f"{self.field}: {self.reason}{where}{shown}"


class QuantityError(InvalidInput):
    """A resource quantity that is malformed or out of range for its resource."""


class ConfigError(InvalidInput):
    """A configuration key whose value is invalid, or a key hami does not know."""


class MalformedReview(InvalidInput):
    """An AdmissionReview hami cannot read; carries what could be read so the answer can still echo it."""

    def __init__(
        self, field: str, value: object, reason: str, api_version: str = "admission.k8s.io/v1", uid: str = ""
    ) -> None:
        self.api_version = api_version
        self.uid = uid
        super().__init__(field, value, reason)


class LedgerError(HamiError):
    """The usage ledger was asked to do something inconsistent (a bug, never bad user input)."""


class LockContention(HamiError):
    """The node lock (``hami.io/mutex.lock``, spec webhook §3.2) is held by another pod that is still alive.

    Not an API failure: the lock works as intended. ``holder`` is ``namespace/name`` (empty for a legacy lock
    that names no owner), ``since`` the time written in the lock, ``timeout`` the expiry in seconds, ``key`` the
    lock annotation when it is a vendor's own (empty for ``hami.io/mutex.lock``). The message ends with HAMi's
    sentinel text ``node lock contention``.
    """

    def __init__(
        self, node: str, holder: str, since: datetime, timeout: float, *, waited: float = 0.0, key: str = ""
    ) -> None:
        self.node = node
        self.holder = holder
        self.since = since
        self.timeout = timeout
        self.waited = waited
        self.key = key
        who = f"by {holder}" if holder else "(legacy lock, no owner recorded)"
        lock = f" ({key})" if key else ""
        state = f"is locked{lock} {who} since {since.isoformat()} (expires after {timeout:g}s)"
        if waited:  # a PodGroup member's bind waited for it (HAMi's text, with who holds it)
            super().__init__(
                f"timed out after {waited:g}s waiting for node {node} to be unlocked ({state}): node lock contention"
            )
        else:
            super().__init__(f"node {node} {state}: node lock contention")


class ApiError(HamiError):
    """A Kubernetes API call failed. ``status`` is the HTTP status code (0 when there was no response)."""

    def __init__(self, message: str, status: int = 0) -> None:
        self.status = status
        super().__init__(message)


class Conflict(ApiError):
    """The object changed under us: a resourceVersion precondition failed (HTTP 409), or a UID precondition
    did (409 for a Binding; 422 ``metadata.uid: field is immutable`` for a patch: ``PodReplaced``)."""


class PodReplaced(Conflict):
    """A pod write whose UID precondition failed: the pod of that name is another one now, or none (deleted, or
    deleted and re-created). ``status`` is the API server's (422 for a patch)."""


class NotFound(ApiError):
    """HTTP 404."""


class Gone(ApiError):
    """HTTP 410: the resourceVersion is too old; a watch must relist."""


class TooManyRequests(ApiError):
    """HTTP 429: the API server is shedding load. ``retry_after`` is its ``Retry-After`` in seconds (``None`` when
    it sent none or one that is not a number of seconds). The request was refused before it was processed, so
    repeating it is safe for every verb."""

    def __init__(self, message: str, status: int = 429, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message, status)


class BudgetRefused(TooManyRequests):
    """HTTP 429 from the Eviction API: a PodDisruptionBudget allows no disruption of the pod now (the message names
    the budget). Unlike other 429s it is not load shedding, so the client does not repeat it."""


class CannotListen(HamiError):
    """A listener could not be bound (address in use, not permitted, no such address)."""


class BodyTooLarge(HamiError):
    """A request body over the route's limit."""


class NvmlError(HamiError):
    """An NVML call failed. ``code`` is NVML's error name without ``NVML_ERROR_`` (e.g. ``"NOT_SUPPORTED"``)."""

    def __init__(self, code: str, call: str = "", detail: str = "") -> None:
        self.code = code
        self.call = call
        text = f"NVML {call}: {code}" if call else f"NVML: {code}"
        super().__init__(f"{text} ({detail})" if detail else text)


class DiscoveryError(HamiError):
    """NVML cannot be used on this machine at all (no library, no driver, no GPU)."""


class MigError(HamiError):
    """A MIG reservation cannot be made real; the message names the GPU, the profile and the placement."""


class AllocationFailure(enum.Enum):
    """Why Allocate failed; the gRPC layer maps each to a status code."""

    NO_POD = "no pod is being bound on this node"
    BAD_REQUEST = "the pod's allocation does not fit kubelet's request"
    API = "the Kubernetes API failed"
    INTERNAL = "internal error"


class AllocationError(HamiError):
    """Allocate cannot be served; ``failure`` classifies it, the message says what and for which pod."""

    def __init__(self, failure: AllocationFailure, message: str) -> None:
        self.failure = failure
        super().__init__(message)


class RegionError(HamiError):
    """A region file cannot be used. ``reason`` is a short fixed word (a metric label); the message says more."""

    def __init__(self, path: Path, reason: str, detail: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"HAMi-core region {path}: {detail}")
