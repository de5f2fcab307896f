"""Topology pair scores: the ``hami.io/node-nvidia-score`` node annotation (scheduler-core.md §2.3).

``[{"uuid":"GPU-0","score":{"GPU-1":50,"GPU-2":20}}, …]``: for each GPU, how well it is connected to every
other GPU of the node (higher is better; NVLink pairs score 100 per link). The device plugin writes it only
when ``ENABLE_TOPOLOGY_SCORE=true``. Encoding matches Go's ``json.Marshal`` of HAMi's ``DevicePairScores``:
``uuid`` and ``score`` are ``omitempty`` and the ``score`` keys are sorted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from hami.errors import InvalidInput
from hami.protocol import _gojson, keys
from hami.protocol._gojson import GoInt

__all__ = ["PairScore", "decode_pair_scores", "encode_pair_scores", "pair_score_table"]


class PairScore(msgspec.Struct, frozen=True, omit_defaults=True, rename={"scores": "score"}):
    """One GPU's scores towards the other GPUs of its node. A pair that is missing scores 0."""

    uuid: str = ""
    scores: dict[str, GoInt] = {}


_DECODER: Final = msgspec.json.Decoder(list[PairScore] | None)
_INT64: Final = (-(1 << 63), (1 << 63) - 1)


def decode_pair_scores(value: str, field: str = keys.NVIDIA_SCORE) -> list[PairScore]:
    """Decode the annotation; ``null`` and ``[]`` give ``[]``. Malformed JSON or wrong types raise
    ``AnnotationError`` (HAMi then fails the whole node's registration, §2.2)."""
    return _gojson.decode(value, _DECODER, field) or []


def encode_pair_scores(scores: Iterable[PairScore]) -> str:
    """Encode as the device plugin does (Go ``json.Marshal``), byte for byte."""
    scores = list(scores)
    for position, entry in enumerate(scores):
        for other, score in entry.scores.items():
            if not _INT64[0] <= score <= _INT64[1]:
                raise InvalidInput(f"scores[{position}].score[{other}]", score, "outside the Go int range")
    try:
        return _gojson.encode(scores)
    except UnicodeEncodeError as exc:
        raise InvalidInput("scores", exc.object, "text with a lone surrogate cannot be encoded") from None


def pair_score_table(scores: Iterable[PairScore]) -> dict[str, dict[str, int]]:
    """``uuid → {other uuid → score}``. When a uuid appears twice the first entry wins, as in HAMi, which
    gives each device the first entry whose ``uuid`` equals its id."""
    table: dict[str, dict[str, int]] = {}
    for entry in scores:
        table.setdefault(entry.uuid, dict(entry.scores))
    return table
