"""JSON as Go's ``encoding/json`` writes and reads it, on top of msgspec.

* **Encoding.** msgspec and Go agree on compact output, struct key order, sorted map keys (msgspec's
  ``order="deterministic"``), number formatting and the escapes
  of control characters (``\\b \\f \\n \\r \\t``, others ``\\u00XX`` in lower-case hex). Go additionally
  escapes ``<``, ``>``, ``&`` (``json.Marshal`` HTML-escapes) and U+2028/U+2029; ``encode`` adds those
  escapes. The characters can only occur inside strings in msgspec's output, so replacing them is safe.
* **Integer ranges.** Go rejects a number that does not fit the field's Go type; the ``Go*`` aliases carry
  those ranges as msgspec constraints.
* **Errors.** ``decode`` turns every msgspec failure into an ``AnnotationError`` naming the annotation key:
  a syntax error carries the character offset, a type error the array item index (``$[i]``) and the path.

Deliberate differences from Go, all on input HAMi's encoders never produce: object keys match exactly
(Go also matches them case-insensitively); ``null`` where a value is expected is rejected where the
struct says so (Go leaves the zero value); an escaped lone surrogate (``"\\ud800"``) is an error (Go
substitutes U+FFFD).
"""

from __future__ import annotations

import re
from typing import Annotated, Final, TypeVar

import msgspec

from hami.errors import AnnotationError, readable_validation

__all__ = ["GoInt", "GoInt32", "GoUint", "GoUint32", "decode", "encode"]

T = TypeVar("T")

GoInt32 = Annotated[int, msgspec.Meta(ge=-(1 << 31), le=(1 << 31) - 1)]
GoUint32 = Annotated[int, msgspec.Meta(ge=0, le=(1 << 32) - 1)]
GoInt = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]  # Go int on 64-bit platforms
GoUint = Annotated[int, msgspec.Meta(ge=0)]  # msgspec bounds stop at int64: callers check <= 2**64-1

_GO_ONLY_ESCAPES: Final = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)
_BYTE_OFFSET: Final = re.compile(r"\(byte (\d+)\)")
_ITEM_PATH: Final = re.compile(r"`\$\[(\d+)\]")

_ENCODER: Final = msgspec.json.Encoder(order="deterministic")  # Go sorts map keys; struct order is kept


def encode(obj: object) -> str:
    """Compact JSON, byte-identical to Go's ``json.Marshal`` of the equivalent Go value.

    Raises ``UnicodeEncodeError`` for a string holding a lone surrogate (no Go string can hold one); callers
    that take such strings from outside turn it into ``InvalidInput``.
    """
    return _ENCODER.encode(obj).decode("utf-8").translate(_GO_ONLY_ESCAPES)


def decode(value: str, decoder: msgspec.json.Decoder[T], field: str) -> T:
    """Decode ``value`` with ``decoder``; any failure becomes an ``AnnotationError`` for ``field``.

    Leading and trailing JSON white space (so a trailing newline) is accepted, as Go accepts it.
    """
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise AnnotationError(field, value, "not valid Unicode text (lone surrogate)", exc.start) from None
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        message = str(exc)
        item = _ITEM_PATH.search(message)
        said, path = readable_validation(message)
        reason = f"invalid JSON value at {path}: {said}" if path else f"invalid JSON value: {said}"
        raise AnnotationError(field, value, reason, int(item.group(1)) if item else None, path) from None
    except msgspec.DecodeError as exc:
        message = str(exc)
        offset = _BYTE_OFFSET.search(message)
        position = len(raw[: int(offset.group(1))].decode("utf-8", "ignore")) if offset else None
        reason = _BYTE_OFFSET.sub("", message).strip().removeprefix("JSON is malformed: ")
        raise AnnotationError(field, value, f"invalid JSON: {reason}", position) from None
