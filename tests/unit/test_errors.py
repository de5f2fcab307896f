from hami.errors import AnnotationError, HamiError, InvalidInput, QuantityError


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
