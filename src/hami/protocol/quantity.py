"""Kubernetes resource quantities (``resource.Quantity``), parsed exactly.

A quantity is what a pod writes under ``resources.limits`` / ``requests`` and what a node reports under
``status.capacity``: ``3000``, ``1.5``, ``500m``, ``3Gi``, ``1e3``. hami needs two things from one:

* :func:`parse_quantity` — the exact value as a :class:`fractions.Fraction`, following the grammar of
  ``k8s.io/apimachinery/pkg/api/resource.ParseQuantity``::

      <quantity>  ::= <sign>? <digits>? ( "." <digits>? )? <suffix>?
      <suffix>    ::= binary: Ki Mi Gi Ti Pi Ei
                    | decimal: n u m "" k M G T P E
                    | exponent: ( "e" | "E" ) <sign>? <digits>

  Like Kubernetes, a value is rounded *away from zero* to a multiple of 10⁻⁹ (``1n``) — so
  ``0.9999999999`` is 1 and ``1e-12`` is ``1n`` — and the degenerate forms Kubernetes accepts as zero
  (``"."``, ``"+"``, ``"k"``, ``"Mi"``) are zero here too. Note ``1E`` is 10¹⁸ (exa), ``1E3`` is 1000.
* :func:`quantity_as_int` — the integer value, mirroring ``Quantity.AsInt64`` as HAMi uses it to read
  device counts, memory and cores (scheduler-core.md §3.2): ``1k`` → 1000, ``1Gi`` → 1073741824, while
  ``500m`` and ``1.5`` are not whole numbers and are refused.

:func:`format_quantity` writes the canonical form Kubernetes would print (``1500``, ``1k``, ``500m``,
``2Ki`` in binary format), so tests and the simulator can produce quantities that parse back unchanged.

Differences from Kubernetes, all deliberate and outside anything a device request can use:

* ``AsInt64`` on the *raw* text fails for non-canonical spellings such as ``1.0`` or ``1000m`` (they are
  stored with a negative scale). The API server canonicalises every quantity (to ``1``) before a
  scheduler reads the pod, so HAMi effectively sees "integer-valued or not"; hami implements that
  meaning directly and accepts ``1.0`` and ``1000m`` as 1.
* Kubernetes caps binary-suffixed values at 2⁶³−1 and wraps exponents beyond int32; hami refuses text
  longer than :data:`MAX_QUANTITY_TEXT` characters or with an exponent beyond ±:data:`MAX_EXPONENT`, and
  keeps other large values exact (:func:`quantity_as_int` then reports them as beyond int64).
* Whitespace is not trimmed (``ParseQuantity`` does not trim either; only its JSON decoder does).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Final

from hami.errors import QuantityError

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_EXPONENT",
    "MAX_QUANTITY_TEXT",
    "format_quantity",
    "parse_quantity",
    "quantity_as_int",
]

INT32_MAX: Final = 2**31 - 1
"""The largest value HAMi's int32 request fields and annotations can carry."""
INT64_MAX: Final = 2**63 - 1
INT64_MIN: Final = -(2**63)

MAX_QUANTITY_TEXT: Final = 1000
"""Longest quantity text hami parses (Python's int parser refuses very long digit strings anyway)."""
MAX_EXPONENT: Final = 1000
"""Largest decimal exponent accepted in ``<n>e<exp>`` (Kubernetes wraps at int32; hami refuses earlier)."""

_NANO: Final = 10**9

# Decimal SI suffixes → power of ten; binary SI suffixes → power of two.
_DECIMAL_SUFFIXES: Final[dict[str, int]] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES: Final[dict[str, int]] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_BY_EXPONENT: Final = {exp: suffix for suffix, exp in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_EXPONENT: Final = {exp // 10: suffix for suffix, exp in _BINARY_SUFFIXES.items()}

# Mirrors parseQuantityString: sign, integer digits, optional fraction, then one suffix. Every part may be
# empty (Kubernetes reads a missing number as 0). ASCII digits only: Python's \d would accept "٣".
_QUANTITY_RE: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE](?P<exp>[+-]?[0-9]+))?"
)


def parse_quantity(value: str | int | float, field: str) -> Fraction:
    """The exact value of a Kubernetes quantity, rounded away from zero to a multiple of 10⁻⁹.

    ``value`` is the text from a manifest or the API (``"3Gi"``), or a number that a YAML file produced
    (``3000``, ``1.5``); booleans, NaN and infinities are refused. ``field`` names where the value came
    from and appears in the :class:`~hami.errors.QuantityError` raised for anything that is not a quantity.
    """
    if isinstance(value, bool):
        raise QuantityError(field, value, "is a boolean, not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(field, value, "is not a finite number")
        # repr() is the shortest text that reads back as the same float ("1.5", "1e+20"): parse that, so a
        # YAML 1.5 means exactly 1.5 and not its binary approximation.
        return parse_quantity(repr(value), field)
    if not isinstance(value, str):
        raise QuantityError(field, value, f"must be a quantity string or a number, not {type(value).__name__}")
    return _parse_text(value, field)


def _parse_text(text: str, field: str) -> Fraction:
    if not text:
        raise QuantityError(field, text, "is empty; expected a quantity such as 1, 500m or 3Gi")
    if len(text) > MAX_QUANTITY_TEXT:
        raise QuantityError(field, text, f"is longer than {MAX_QUANTITY_TEXT} characters")
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise QuantityError(
            field, text, "is not a quantity: expected a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, e3, …)"
        )
    digits = (match["int"] or "") + (match["frac"] or "")
    mantissa = int(digits) if digits else 0
    if mantissa == 0:
        return Fraction(0)
    scale10 = -len(match["frac"] or "")
    scale2 = 0
    suffix = match["suffix"] or ""
    if match["exp"] is not None:
        exponent = int(match["exp"])
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityError(field, text, f"has an exponent beyond ±{MAX_EXPONENT}")
        scale10 += exponent
    elif suffix in _BINARY_SUFFIXES:
        scale2 = _BINARY_SUFFIXES[suffix]
    else:
        scale10 += _DECIMAL_SUFFIXES[suffix]
    magnitude = Fraction(mantissa * 2**scale2)
    magnitude = magnitude * 10**scale10 if scale10 >= 0 else magnitude / 10**-scale10
    magnitude = _round_up_to_nano(magnitude)
    return -magnitude if match["sign"] == "-" else magnitude


def _round_up_to_nano(magnitude: Fraction) -> Fraction:
    """Round a non-negative value up to the next multiple of 10⁻⁹ (Kubernetes' ``inf.RoundUp`` at scale 9)."""
    nanos = magnitude * _NANO
    if nanos.denominator == 1:
        return magnitude
    return Fraction(math.ceil(nanos), _NANO)


def quantity_as_int(value: str | int | float, field: str) -> int:
    """The whole-number value of a quantity, as ``Quantity.AsInt64`` gives it on canonical input.

    Raises :class:`~hami.errors.QuantityError` when the value is not a quantity, is not a whole number
    (``500m``, ``1.5``), or lies outside int64.
    """
    exact = parse_quantity(value, field)
    if exact.denominator != 1:
        raise QuantityError(field, value, "must be a whole number")
    whole = exact.numerator
    if not INT64_MIN <= whole <= INT64_MAX:
        raise QuantityError(field, value, "is outside the int64 range")
    return whole


def format_quantity(value: Fraction | int, *, binary: bool = False) -> str:
    """The canonical Kubernetes spelling of ``value`` (rounded away from zero to a multiple of 10⁻⁹).

    Decimal format picks the largest power-of-1000 suffix that keeps the number whole (``1500``, ``1k``,
    ``500m``, ``1500k``). ``binary=True`` uses Ki…Ei for whole values of at least 1024 (``2Ki``, ``1536``),
    and falls back to the decimal form below 1024 or for fractions, as Kubernetes does.
    """
    exact = Fraction(value)
    if exact == 0:
        return "0"
    sign = "-" if exact < 0 else ""
    magnitude = _round_up_to_nano(abs(exact))
    if binary and magnitude >= 1024 and magnitude.denominator == 1:
        whole, power = magnitude.numerator, 0
        while power < 6 and whole % 1024 == 0:
            whole //= 1024
            power += 1
        return f"{sign}{whole}{_BINARY_BY_EXPONENT.get(power, '')}"
    nanos = magnitude * _NANO
    whole = nanos.numerator  # a whole number of nanos after rounding
    exponent = -9
    while exponent < 18 and whole % 1000 == 0:
        whole //= 1000
        exponent += 3
    return f"{sign}{whole}{_DECIMAL_BY_EXPONENT[exponent]}"
