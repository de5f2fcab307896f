from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.errors import AnnotationError
from hami.protocol import keys
from hami.protocol.weights import (
    DEFAULT_WEIGHTS,
    ScoringWeights,
    decode_scoring_weights,
    encode_scoring_weights,
    hami_error_text,
)

from .support import decodes_or_rejects, mutated


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(None, ScoringWeights(1, 1, 1), id="absent-means-equal-weights"),
        pytest.param("slot=1,core=1,memory=3", ScoringWeights(1, 1, 3), id="documented-form"),
        pytest.param("memory=2,slot=0,core=5", ScoringWeights(0, 5, 2), id="any-order"),
        pytest.param(" slot = 1 ,\tcore=+2,memory=0\n", ScoringWeights(1, 2, 0), id="white-space-and-sign"),
        pytest.param("slot=0,core=0,memory=9223372036854775807", ScoringWeights(0, 0, 2**63 - 1), id="int64-max"),
    ],
)
def test_decode(value: str | None, expected: ScoringWeights) -> None:
    assert decode_scoring_weights(value) == expected


@pytest.mark.parametrize(
    ("value", "reason", "position"),
    [
        pytest.param("", "expected slot, core, and memory weights", None, id="empty"),
        pytest.param("slot=1,core=1", "expected slot, core, and memory weights", None, id="two-parts"),
        pytest.param("slot=1,core=1,memory=1,", "expected slot, core, and memory weights", None, id="trailing-comma"),
        pytest.param("slot=1,core,memory=1", "expected key=value entries", 7, id="no-equals"),
        pytest.param("slot=1,slot=2,memory=1", 'duplicate "slot" weight', 7, id="duplicate"),
        pytest.param("slot=1,slot=x,memory=1", 'duplicate "slot" weight', 7, id="duplicate-checked-before-integer"),
        pytest.param("slot=1,core=1.5,memory=1", '"core" weight must be an integer', 7, id="not-integer"),
        pytest.param("slot=1,core=,memory=1", '"core" weight must be an integer', 7, id="empty-value"),
        pytest.param(
            "slot=1,core=1,memory=9223372036854775808", '"memory" weight must be an integer', 14, id="beyond-int64"
        ),
        pytest.param("slot=-1,core=1,memory=1", '"slot" weight must not be negative', 0, id="negative"),
        pytest.param("slot=1,core=1,mem=1", 'unknown weight "mem"', 14, id="unknown-key"),
        pytest.param("slot=1,core=1,Memory=1", 'unknown weight "Memory"', 14, id="keys-are-case-sensitive"),
        pytest.param("foo=x,core=1,memory=1", '"foo" weight must be an integer', 0, id="integer-checked-before-key"),
        pytest.param("slot=0,core=0,memory=0", "at least one weight must be positive", None, id="all-zero"),
    ],
)
def test_rejections_in_hamis_order_and_words(value: str, reason: str, position: int | None) -> None:
    with pytest.raises(AnnotationError) as caught:
        decode_scoring_weights(value)
    error = caught.value
    assert (error.field, error.reason, error.position) == (keys.DEVICE_SCORING_WEIGHTS, reason, position)
    assert hami_error_text(error) == f'invalid hami.io/device-scoring-weights annotation "{value}": {reason}'


def test_encode_default() -> None:
    assert encode_scoring_weights(DEFAULT_WEIGHTS) == "slot=1,core=1,memory=1"


weights = st.builds(
    ScoringWeights, st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)
).filter(lambda w: w.slot or w.core or w.memory)


@given(weights)
def test_encode_then_decode_is_identity(value: ScoringWeights) -> None:
    assert decode_scoring_weights(encode_scoring_weights(value)) == value


@given(st.text() | mutated(weights.map(encode_scoring_weights)))
def test_decoder_raises_only_annotation_error(text: str) -> None:
    decodes_or_rejects(decode_scoring_weights, text)
