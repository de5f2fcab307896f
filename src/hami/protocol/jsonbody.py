"""Untrusted JSON request bodies (``/filter``, ``/bind``, ``/webhook``): every way a body can be unreadable is an
:class:`~hami.errors.InvalidInput` naming the problem, never another exception.

A body may be not JSON, not UTF-8 (JSON text is UTF-8; msgspec raises ``UnicodeDecodeError`` for such a
string), nested deeper than the decoder can follow (msgspec stops at the interpreter's recursion limit with a
``RecursionError``), or of the wrong shape for the type asked for (a ``ValidationError`` naming the path).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from hami.errors import InvalidInput

__all__ = ["convert_body", "decode_body"]

T = TypeVar("T")

_decoder = msgspec.json.Decoder()


def _shown(raw: bytes) -> str:
    return raw[:80].decode("utf-8", "replace")


def decode_body(raw: bytes, what: str) -> Any:
    """``raw`` as untyped JSON (dicts, lists, str, int, float, bool, None); ``what`` names it in errors."""
    try:
        return _decoder.decode(raw)
    except UnicodeDecodeError:
        raise InvalidInput(what, _shown(raw), "contains bytes that are not UTF-8 (JSON text must be UTF-8)") from None
    except RecursionError:
        raise InvalidInput(what, _shown(raw), "is nested too deeply to read") from None
    except msgspec.DecodeError as err:
        raise InvalidInput(what, _shown(raw), f"not valid JSON: {err}") from None


def convert_body(obj: Any, type: type[T], what: str) -> T:
    """``obj`` (from :func:`decode_body`) as ``type``; a wrong type anywhere names its path."""
    try:
        return msgspec.convert(obj, type=type)
    except msgspec.ValidationError as err:
        raise InvalidInput(what, "…", str(err)) from None
    except RecursionError:
        raise InvalidInput(what, "…", "is nested too deeply to read") from None
