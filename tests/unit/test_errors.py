import pytest

from hami.errors import AnnotationError, HamiError, InvalidInput, QuantityError, readable_validation


def test_invalid_input_names_field_and_value() -> None:
    err = QuantityError("containers[0].limits[nvidia.com/gpumem]", "16Gi", "exceeds int32 MiB")
    assert isinstance(err, InvalidInput)
    assert isinstance(err, HamiError)
    assert str(err) == "containers[0].limits[nvidia.com/gpumem]: exceeds int32 MiB (got '16Gi')"


def test_annotation_error_names_position() -> None:
    err = AnnotationError("hami.io/node-dcu-register", "a,b:", "unexpected field count 2", position=0)
    assert err.position == 0
    assert str(err) == "hami.io/node-dcu-register: unexpected field count 2 at position 0 (in 'a,b:')"


def test_long_values_are_cut() -> None:
    err = InvalidInput("f", "x" * 500, "bad")
    assert "(+380 chars)" in str(err)


def test_messages_are_written_for_people() -> None:
    # no empty "(got '')", no value the field already spells, JSON rather than Python reprs
    assert str(InvalidInput("settings.yaml", "", "cannot read the file")) == "settings.yaml: cannot read the file"
    assert str(InvalidInput("/etc/x.yaml", "/etc/x.yaml", "not found")) == "/etc/x.yaml: not found"
    assert str(InvalidInput("f", None, "missing")) == "f: missing"
    assert str(InvalidInput("f", True, "not a number")) == "f: not a number (got true)"
    assert str(InvalidInput("f", ["a", 1], "bad")) == 'f: bad (got ["a", 1])'
    assert str(InvalidInput("containers[1]", "1", "too short")) == "containers[1]: too short (got '1')"


def test_a_value_nested_past_the_json_encoders_depth_is_named_by_its_type() -> None:
    nested: list[object] = []
    for _ in range(5000):
        nested = [nested]
    assert str(InvalidInput("body", nested, "nested too deep")) == "body: nested too deep (got list)"


@pytest.mark.parametrize(
    ("message", "reason", "path"),
    [
        ("Expected `int`, got `str` - at `$[1].count`", "expected an integer, got a string", "[1].count"),
        ("Expected `int` <= 2147483647 - at `$[0].devmem`", "expected an integer <= 2147483647", "[0].devmem"),
        ("Expected `array | null`, got `object`", "expected a list or null, got an object", ""),
        ("Expected `bool`, got `null` - at `$.spec.ok`", "expected true or false, got null", "spec.ok"),
        ("Object missing required field `uuid` - at `$[2]`", "object missing required field uuid", "[2]"),
    ],
)
def test_validation_messages_read_as_sentences_with_a_path(message: str, reason: str, path: str) -> None:
    assert readable_validation(message) == (reason, path)


def test_a_malformed_annotation_names_its_key_and_path_not_a_position() -> None:
    from hami.protocol.inventory import decode_inventory_json

    with pytest.raises(AnnotationError) as caught:
        decode_inventory_json('[{"id":"GPU-0","count":1},{"id":"GPU-1","count":"ten"}]')
    assert caught.value.position == 1  # the item, for code that wants it
    text = str(caught.value)
    assert text.startswith("hami.io/node-nvidia-register: invalid JSON value at [1].count: expected an integer, got a")
    assert "position" not in text
    assert "`" not in text
    assert "$" not in text
