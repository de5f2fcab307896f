"""The node lock annotation ``hami.io/mutex.lock`` (scheduler-core.md §2.7, webhook-bind-plugin-vendors.md §3.2).

Value ``<RFC3339 timestamp>,<namespace>,<pod name>`` (e.g. ``2026-08-21T08:20:39+02:00,default,gpu-pod``); legacy
locks are a bare RFC3339 timestamp and have no owner. Bind sets it; the device plugin clears it after
Allocate. Pure: expiry takes ``now`` from the caller.

*Difference from HAMi:* HAMi decides ownership with a suffix test (``HasSuffix(value, ",<ns>,<name>")``);
``is_owned_by`` compares the parsed namespace and name for equality.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from hami.errors import AnnotationError, InvalidInput
from hami.protocol import keys
from hami.protocol._gostrconv import go_quote
from hami.protocol._gotime import format_duration, format_rfc3339, parse_rfc3339

__all__ = [
    "LOCK_CONTENTION",
    "NodeLock",
    "decode_node_lock",
    "encode_node_lock",
    "is_expired",
    "is_owned_by",
    "locked_text",
    "locked_within_text",
]

LOCK_CONTENTION: Final = "node lock contention"
"""HAMi's sentinel error text; lock failures end with it so callers (and PodGroup retries) can recognise them."""

_SEPARATOR: Final = ","


@dataclass(frozen=True, slots=True)
class NodeLock:
    """A decoded node lock. ``timestamp`` is timezone-aware; a legacy lock has empty ``namespace`` and ``name``."""

    timestamp: datetime
    namespace: str = ""
    name: str = ""

    @property
    def has_owner(self) -> bool:
        """False for a legacy (timestamp-only) lock, which anybody may release."""
        return bool(self.namespace or self.name)


def decode_node_lock(value: str, field: str = keys.NODE_LOCK) -> NodeLock:
    """Parse a lock value as HAMi's ``ParseNodeLock``: no comma → legacy timestamp; otherwise exactly three
    comma parts (``malformed lock annotation: expected 3 parts, got N from <value>``). The timestamp is Go
    RFC3339: ``Z`` or ``±hh:mm``, optional fractional seconds."""
    if _SEPARATOR not in value:
        return NodeLock(_timestamp(value, value, field, 0))
    parts = value.split(_SEPARATOR)
    if len(parts) != 3:
        reason = f"malformed lock annotation: expected 3 parts, got {len(parts)} from {value}"
        raise AnnotationError(field, value, reason)
    return NodeLock(_timestamp(parts[0], value, field, 0), parts[1], parts[2])


def _timestamp(text: str, value: str, field: str, position: int) -> datetime:
    moment = parse_rfc3339(text)
    if moment is None:
        reason = f'parsing time {go_quote(text)} as "2006-01-02T15:04:05Z07:00": not an RFC3339 timestamp'
        raise AnnotationError(field, value, reason, position)
    return moment


def encode_node_lock(lock: NodeLock) -> str:
    """``<RFC3339>,<namespace>,<name>`` (Go ``time.RFC3339``: whole seconds, ``Z`` for UTC), or the bare
    timestamp for a lock without owner. ``ValueError`` for a naive timestamp; ``InvalidInput`` for a namespace
    or name holding a comma (Kubernetes names never do)."""
    stamp = format_rfc3339(lock.timestamp)
    if not lock.has_owner:
        return stamp
    for name, text in (("namespace", lock.namespace), ("name", lock.name)):
        if _SEPARATOR in text:
            raise InvalidInput(f"{keys.NODE_LOCK}.{name}", text, "holds a ',' separator")
    return _SEPARATOR.join((stamp, lock.namespace, lock.name))


def is_owned_by(lock: NodeLock, namespace: str, name: str) -> bool:
    """Whether the pod ``namespace/name`` holds ``lock``: exact equality of both parts (never a suffix test).
    A legacy lock has no owner."""
    return lock.has_owner and lock.namespace == namespace and lock.name == name


def is_expired(lock: NodeLock, now: datetime, timeout: timedelta) -> bool:
    """HAMi's expiry test: more than ``timeout`` has passed since the lock was taken (``now`` must be aware)."""
    return now - lock.timestamp > timeout


def locked_within_text(node: str, timeout: timedelta) -> str:
    """``node <n> has been locked within 5m0s: node lock contention`` (Go duration formatting)."""
    return f"node {node} has been locked within {format_duration(timeout)}: {LOCK_CONTENTION}"


def locked_text(node: str) -> str:
    """``node <n> is locked: node lock contention`` (``SetNodeLock`` found a lock)."""
    return f"node {node} is locked: {LOCK_CONTENTION}"
