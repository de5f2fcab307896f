from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.errors import AnnotationError, InvalidInput
from hami.protocol import keys
from hami.protocol.scores import PairScore, decode_pair_scores, encode_pair_scores, pair_score_table

from .support import HAMI, INT64, WIRE_TEXT, decodes_or_rejects, mutated

SPEC_EXAMPLE = '[{"uuid":"GPU-0","score":{"GPU-1":50,"GPU-2":20}}]'

pair_scores = st.builds(PairScore, uuid=WIRE_TEXT, scores=st.dictionaries(WIRE_TEXT, INT64, max_size=4))


def test_spec_example_decodes_and_reencodes() -> None:
    decoded = decode_pair_scores(SPEC_EXAMPLE)
    assert decoded == [PairScore("GPU-0", {"GPU-1": 50, "GPU-2": 20})]
    assert encode_pair_scores(decoded) == SPEC_EXAMPLE


def test_go_fixture_round_trips_with_sorted_keys_and_omitted_empties() -> None:
    value = HAMI["score"]["a100_8gpu_numa"]
    decoded = decode_pair_scores(value)
    assert encode_pair_scores(decoded) == value
    assert decoded[-2:] == [PairScore("GPU-lonely"), PairScore("", {"<b>": -1, "a": 0})]


def test_encoder_sorts_score_keys_as_go_does() -> None:
    entry = PairScore("GPU-0", {"GPU-3": 1, "GPU-10": 2, "GPU-1": 3})
    assert encode_pair_scores([entry]) == '[{"uuid":"GPU-0","score":{"GPU-1":3,"GPU-10":2,"GPU-3":1}}]'


def test_table_looks_up_scores_and_first_entry_wins() -> None:
    scores = [PairScore("a", {"b": 50}), PairScore("b", {"a": 50}), PairScore("a", {"b": 0})]
    assert pair_score_table(scores) == {"a": {"b": 50}, "b": {"a": 50}}


@pytest.mark.parametrize(
    ("value", "reason", "position"),
    [
        pytest.param("[{", "invalid JSON: Input data was truncated", None, id="truncated"),
        pytest.param(
            '[{"uuid":"a","score":{"b":"50"}}]',
            "invalid JSON value at [0].score[...]: expected an integer, got a string",
            0,
            id="score-not-a-number",
        ),
        pytest.param(
            '[{"uuid":"a"},{"uuid":1}]',
            "invalid JSON value at [1].uuid: expected a string, got an integer",
            1,
            id="uuid",
        ),
    ],
)
def test_rejections(value: str, reason: str, position: int | None) -> None:
    with pytest.raises(AnnotationError) as caught:
        decode_pair_scores(value)
    assert (caught.value.field, caught.value.reason, caught.value.position) == (keys.NVIDIA_SCORE, reason, position)


def test_encoder_refuses_scores_beyond_go_int() -> None:
    with pytest.raises(InvalidInput):
        encode_pair_scores([PairScore("a", {"b": 1 << 63})])


@given(st.lists(pair_scores, max_size=4))
def test_encode_then_decode_is_identity(scores: list[PairScore]) -> None:
    assert decode_pair_scores(encode_pair_scores(scores)) == scores


@given(WIRE_TEXT | mutated(st.lists(pair_scores, max_size=3).map(encode_pair_scores)))
def test_decoder_raises_only_annotation_error(text: str) -> None:
    decodes_or_rejects(decode_pair_scores, text)
