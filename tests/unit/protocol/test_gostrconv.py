from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.protocol._gostrconv import GoNumError, go_quote, go_trim_space, parse_bool, parse_int

from .support import HAMI


@pytest.mark.parametrize(
    ("text", "bits", "expected"),
    [
        pytest.param("0", 32, 0, id="zero"),
        pytest.param("+7", 32, 7, id="plus-sign"),
        pytest.param("-2147483648", 32, -(2**31), id="int32-min"),
        pytest.param("2147483647", 32, 2**31 - 1, id="int32-max"),
        pytest.param("-9223372036854775808", 64, -(2**63), id="int64-min"),
        pytest.param("007", 64, 7, id="leading-zeros"),
    ],
)
def test_parse_int_accepts_what_go_accepts(text: str, bits: int, expected: int) -> None:
    assert parse_int(text, bits) == expected


@pytest.mark.parametrize(
    ("text", "bits", "message"),
    [
        pytest.param("", 32, 'strconv.ParseInt: parsing "": invalid syntax', id="empty"),
        pytest.param("-", 32, 'strconv.ParseInt: parsing "-": invalid syntax', id="sign-only"),
        pytest.param(" 1", 32, 'strconv.ParseInt: parsing " 1": invalid syntax', id="space"),
        pytest.param("1_000", 32, 'strconv.ParseInt: parsing "1_000": invalid syntax', id="underscore"),
        pytest.param("١", 32, 'strconv.ParseInt: parsing "١": invalid syntax', id="non-ascii-digit"),
        pytest.param("0x10", 32, 'strconv.ParseInt: parsing "0x10": invalid syntax', id="hex"),
        pytest.param("2147483648", 32, 'strconv.ParseInt: parsing "2147483648": value out of range', id="over-int32"),
        pytest.param("-2147483649", 32, 'strconv.ParseInt: parsing "-2147483649": value out of range', id="under"),
        pytest.param(
            "99999999999x", 32, 'strconv.ParseInt: parsing "99999999999x": value out of range', id="range-before-syntax"
        ),
    ],
)
def test_parse_int_rejects_with_gos_message(text: str, bits: int, message: str) -> None:
    with pytest.raises(GoNumError) as caught:
        parse_int(text, bits)
    assert str(caught.value) == message


def test_parse_int_names_atoi_when_asked() -> None:
    with pytest.raises(GoNumError, match=r'^strconv\.Atoi: parsing "x": invalid syntax$'):
        parse_int("x", 64, "Atoi")


@given(st.integers(-(2**63), 2**63 - 1))
def test_parse_int_reads_every_int64_python_prints(number: int) -> None:
    assert parse_int(str(number), 64) == number


@pytest.mark.parametrize(
    ("text", "expected"),
    [(t, True) for t in ("1", "t", "T", "TRUE", "true", "True")]
    + [(f, False) for f in ("0", "f", "F", "FALSE", "false", "False")],
)
def test_parse_bool_spellings(text: str, expected: bool) -> None:
    assert parse_bool(text) is expected


@pytest.mark.parametrize("text", ["yes", "tRUE", " true", "", "2"])
def test_parse_bool_rejects_other_spellings(text: str) -> None:
    with pytest.raises(GoNumError, match=r"^strconv\.ParseBool: "):
        parse_bool(text)


@pytest.mark.parametrize("text", sorted(HAMI["quote"]))
def test_go_quote_matches_strconv_quote(text: str) -> None:
    assert go_quote(text) == HAMI["quote"][text]


def test_trim_space_is_gos_not_pythons() -> None:
    assert go_trim_space("\u3000\t x \n\xa0") == "x"
    assert go_trim_space("\x1cx\x1f") == "\x1cx\x1f"  # Python's strip() would remove these
