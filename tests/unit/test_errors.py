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
