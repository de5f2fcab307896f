"""Go's ``strconv`` and ``strings`` text rules, for decoders that must accept exactly what HAMi accepts.

Python's ``int()``, ``str.strip()`` and ``repr()`` are more lenient or differently spelled than Go's
``strconv.ParseInt``, ``strings.TrimSpace`` and ``%q``: ``int(" 1_0 ")`` is 10, Go rejects it. These helpers
follow the Go rules so a value HAMi rejects is rejected here too, with Go's error text.
"""

from __future__ import annotations

from typing import Final

__all__ = ["GoNumError", "go_quote", "go_trim_space", "parse_bool", "parse_int"]

_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})

# unicode.IsSpace: the Latin-1 spaces plus the Unicode White_Space property (Python's isspace() adds
# U+001C..U+001F, which Go does not trim).
_GO_SPACE: Final = "".join(
    ["\t\n\v\f\r \x85\xa0\u1680", *map(chr, range(0x2000, 0x200B)), "\u2028\u2029\u202f\u205f\u3000"]
)


class GoNumError(Exception):
    """A ``strconv`` failure; ``str()`` is Go's message, e.g. ``strconv.ParseInt: parsing "x": invalid syntax``.

    Private to ``hami.protocol``: decoders turn it into an ``AnnotationError`` and never let it escape.
    """

    def __init__(self, func: str, text: str, problem: str) -> None:
        self.func = func
        self.text = text
        self.problem = problem
        super().__init__(f"strconv.{func}: parsing {go_quote(text)}: {problem}")


def parse_int(text: str, bit_size: int = 64, func: str = "ParseInt") -> int:
    """``strconv.ParseInt(text, 10, bit_size)``: optional sign, ASCII digits only, no spaces or underscores.

    ``func`` names the Go function in the error (``"Atoi"`` for ``strconv.Atoi``, which is ParseInt with 64 bits).
    Overflow is reported as soon as the digits seen so far exceed the range, as Go does.
    """
    body = text
    negative = False
    if body[:1] in ("+", "-"):
        negative = body[0] == "-"
        body = body[1:]
    if not body:
        raise GoNumError(func, text, "invalid syntax")
    unsigned_max = (1 << bit_size) - 1
    value = 0
    for char in body:
        if not "0" <= char <= "9":
            raise GoNumError(func, text, "invalid syntax")
        value = value * 10 + (ord(char) - 48)
        if value > unsigned_max:
            raise GoNumError(func, text, "value out of range")
    limit = 1 << (bit_size - 1)
    if (not negative and value >= limit) or (negative and value > limit):
        raise GoNumError(func, text, "value out of range")
    return -value if negative else value


def parse_bool(text: str) -> bool:
    """``strconv.ParseBool``: exactly ``1 t T TRUE true True`` or ``0 f F FALSE false False``."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise GoNumError("ParseBool", text, "invalid syntax")


def go_trim_space(text: str) -> str:
    """``strings.TrimSpace``: strip leading and trailing Unicode white space as Go defines it."""
    return text.strip(_GO_SPACE)


def go_quote(text: str) -> str:
    """Go's ``%q`` / ``strconv.Quote``: double quotes, Go escapes for non-printable characters."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char.isprintable() and not 0xD800 <= code <= 0xDFFF:
            out.append(char)
        elif char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")  # a lone surrogate would be invalid UTF-8 in Go: it quotes the replacement
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


_SHORT_ESCAPES: Final = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
