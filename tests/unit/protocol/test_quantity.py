from __future__ import annotations

import contextlib
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.errors import QuantityError
from hami.protocol.quantity import INT64_MAX, format_quantity, parse_quantity, quantity_as_int

F = "containers[0](main).limits[nvidia.com/gpumem]"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("3000", Fraction(3000), id="plain-integer"),
        pytest.param("0", Fraction(0), id="zero"),
        pytest.param("1k", Fraction(1000), id="kilo"),
        pytest.param("1M", Fraction(10**6), id="mega"),
        pytest.param("2G", Fraction(2 * 10**9), id="giga"),
        pytest.param("1T", Fraction(10**12), id="tera"),
        pytest.param("1P", Fraction(10**15), id="peta"),
        pytest.param("1E", Fraction(10**18), id="capital-E-alone-is-exa"),
        pytest.param("500m", Fraction(1, 2), id="milli"),
        pytest.param("5u", Fraction(5, 10**6), id="micro"),
        pytest.param("7n", Fraction(7, 10**9), id="nano"),
        pytest.param("1Ki", Fraction(1024), id="kibi"),
        pytest.param("3Gi", Fraction(3 * 2**30), id="gibi"),
        pytest.param("1Ei", Fraction(2**60), id="exbi"),
        pytest.param("1.5Gi", Fraction(3 * 2**29), id="fraction-with-binary-suffix"),
        pytest.param("16.0Gi", Fraction(16 * 2**30), id="needless-fraction-with-binary-suffix"),
        pytest.param("1e3", Fraction(1000), id="exponent"),
        pytest.param("1E3", Fraction(1000), id="capital-exponent"),
        pytest.param("1e+3", Fraction(1000), id="signed-exponent"),
        pytest.param("15e-1", Fraction(3, 2), id="negative-exponent"),
        pytest.param("1.5", Fraction(3, 2), id="decimal-fraction"),
        pytest.param(".5", Fraction(1, 2), id="leading-dot"),
        pytest.param("1.", Fraction(1), id="trailing-dot"),
        pytest.param("+2", Fraction(2), id="plus-sign"),
        pytest.param("-2Ki", Fraction(-2048), id="minus-sign"),
        pytest.param("007", Fraction(7), id="leading-zeros"),
        pytest.param("0.9999999999", Fraction(1), id="rounds-up-to-nano-precision"),
        pytest.param("1e-12", Fraction(1, 10**9), id="tiny-values-round-up-to-1n"),
        pytest.param("-1e-12", Fraction(-1, 10**9), id="rounding-is-away-from-zero"),
        pytest.param(".", Fraction(0), id="bare-dot-is-zero-as-in-kubernetes"),
        pytest.param("k", Fraction(0), id="bare-suffix-is-zero-as-in-kubernetes"),
        pytest.param("-", Fraction(0), id="bare-sign-is-zero-as-in-kubernetes"),
    ],
)
def test_parse_quantity_text(text: str, value: Fraction) -> None:
    assert parse_quantity(text, F) == value


@pytest.mark.parametrize(
    ("number", "value"),
    [
        pytest.param(3000, Fraction(3000), id="yaml-int"),
        pytest.param(1.5, Fraction(3, 2), id="yaml-float-is-its-decimal-text"),
        pytest.param(0.1, Fraction(1, 10), id="float-0.1-is-exactly-one-tenth"),
        pytest.param(1e20, Fraction(10**20), id="float-with-exponent"),
    ],
)
def test_parse_quantity_numbers(number: float, value: Fraction) -> None:
    assert parse_quantity(number, F) == value


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        pytest.param("", "is empty; expected a quantity such as 1, 500m or 3Gi", id="empty"),
        pytest.param("abc", "is not a quantity", id="letters"),
        pytest.param("1KiB", "is not a quantity", id="unknown-suffix"),
        pytest.param("1K", "is not a quantity", id="upper-case-K-is-not-kilo"),
        pytest.param("1e", "is not a quantity", id="exponent-without-digits"),
        pytest.param("1 ", "is not a quantity", id="trailing-space"),
        pytest.param(" 1", "is not a quantity", id="leading-space"),
        pytest.param("--1", "is not a quantity", id="double-sign"),
        pytest.param("1.2.3", "is not a quantity", id="two-dots"),
        pytest.param("\u0663", "is not a quantity", id="non-ascii-digit"),
        pytest.param("1e1001", "has an exponent beyond ±1000", id="huge-exponent"),
        pytest.param("1" * 1001, "is longer than 1000 characters", id="too-long"),
        pytest.param(True, "is a boolean, not a quantity", id="boolean"),
        pytest.param(float("nan"), "is not a finite number", id="nan"),
        pytest.param(float("inf"), "is not a finite number", id="infinity"),
    ],
)
def test_parse_quantity_rejects(value: object, reason: str) -> None:
    with pytest.raises(QuantityError) as caught:
        parse_quantity(value, F)  # type: ignore[arg-type]
    assert caught.value.field == F
    assert caught.value.value == value or value != value  # NaN is not equal to itself
    assert caught.value.reason.startswith(reason)
    assert str(caught.value).startswith(f"{F}: {reason}")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("1000", 1000, id="integer"),
        pytest.param("1k", 1000, id="kilo"),
        pytest.param("1Gi", 1073741824, id="gibi"),
        pytest.param("1.0", 1, id="canonicalises-like-the-api-server"),
        pytest.param("1000m", 1, id="milli-multiple-of-one-is-whole"),
        pytest.param("-5", -5, id="negative-is-whole"),
        pytest.param(4096, 4096, id="yaml-int"),
        pytest.param(2.0, 2, id="whole-float"),
        pytest.param("9223372036854775807", INT64_MAX, id="int64-max"),
    ],
)
def test_quantity_as_int(value: str | int | float, expected: int) -> None:
    assert quantity_as_int(value, F) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("500m", f"{F}: must be a whole number (got '500m')", id="milli"),
        pytest.param("1.5", f"{F}: must be a whole number (got '1.5')", id="fraction"),
        pytest.param(1.5, f"{F}: must be a whole number (got 1.5)", id="float"),
        pytest.param(
            "9223372036854775808", f"{F}: is outside the int64 range (got '9223372036854775808')", id="beyond-int64"
        ),
        pytest.param("8Ei", f"{F}: is outside the int64 range (got '8Ei')", id="binary-beyond-int64"),
    ],
)
def test_quantity_as_int_rejects(value: str | float, message: str) -> None:
    with pytest.raises(QuantityError) as caught:
        quantity_as_int(value, F)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("value", "binary", "text"),
    [
        pytest.param(Fraction(0), False, "0", id="zero"),
        pytest.param(Fraction(1500), False, "1500", id="not-a-multiple-of-1000"),
        pytest.param(Fraction(3000), False, "3k", id="kilo"),
        pytest.param(Fraction(1, 2), False, "500m", id="milli"),
        pytest.param(Fraction(3, 2), False, "1500m", id="fraction"),
        pytest.param(Fraction(10**21), False, "1000E", id="beyond-exa-keeps-E"),
        pytest.param(Fraction(-2000), False, "-2k", id="negative"),
        pytest.param(Fraction(2048), True, "2Ki", id="binary"),
        pytest.param(Fraction(1536), True, "1536", id="binary-not-a-multiple-of-1024"),
        pytest.param(Fraction(3 * 2**30), True, "3Gi", id="binary-gibi"),
        pytest.param(Fraction(1000), True, "1k", id="binary-below-1024-is-decimal"),
        pytest.param(Fraction(2049, 2), True, "1024500m", id="binary-fraction-is-decimal"),
    ],
)
def test_format_quantity(value: Fraction, binary: bool, text: str) -> None:
    assert format_quantity(value, binary=binary) == text


@given(st.one_of(st.text(), st.text(alphabet="0123456789.+-eEinumkKMGTP ")))
def test_arbitrary_text_raises_only_quantity_error(text: str) -> None:
    with contextlib.suppress(QuantityError):
        parse_quantity(text, F)


_QUANTITY_LIKE = st.from_regex(
    r"\A[+-]?[0-9]{0,12}(\.[0-9]{0,12})?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]{1,3})?\Z"
).filter(bool)


@given(_QUANTITY_LIKE)
def test_quantity_shaped_text_parses(text: str) -> None:
    value = parse_quantity(text, F)
    assert (value * 10**9).denominator == 1  # always a whole number of nanos


@given(_QUANTITY_LIKE, st.booleans())
def test_format_round_trip(text: str, binary: bool) -> None:
    value = parse_quantity(text, F)
    formatted = format_quantity(value, binary=binary)
    assert parse_quantity(formatted, F) == value
    assert format_quantity(parse_quantity(formatted, F), binary=binary) == formatted


@given(st.integers(min_value=-(2**70), max_value=2**70), st.integers(min_value=0, max_value=9), st.booleans())
def test_format_then_parse_is_identity(mantissa: int, nano_digits: int, binary: bool) -> None:
    value = Fraction(mantissa, 10**nano_digits)
    assert parse_quantity(format_quantity(value, binary=binary), F) == value
