"""Per-pod device scoring weights: the ``hami.io/device-scoring-weights`` annotation (scheduler-core.md §5.7).

Format ``slot=<int>,core=<int>,memory=<int>``: exactly three comma parts in any order, white space allowed
around keys and values, each key once, values base-10 int64 ≥ 0, not all zero. An absent annotation means
(1, 1, 1). Checks run in HAMi's order (``ParseDeviceScoringWeights``): part count; then per part: ``key=value``
shape, duplicate key, integer, non-negative, known key; finally "at least one positive". An invalid value fails
the whole Filter call, not a node.

``AnnotationError.reason`` is HAMi's tail text (e.g. ``duplicate "slot" weight``); ``hami_error_text`` gives
HAMi's full message (``invalid hami.io/device-scoring-weights annotation "<value>": <reason>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from hami.errors import AnnotationError
from hami.protocol import keys
from hami.protocol._gostrconv import GoNumError, go_quote, go_trim_space, parse_int

__all__ = ["DEFAULT_WEIGHTS", "ScoringWeights", "decode_scoring_weights", "encode_scoring_weights", "hami_error_text"]


@dataclass(frozen=True, slots=True)
class ScoringWeights:
    """Relative influence of slots, cores and memory on a device's score (§5.1); each ≥ 0, one > 0."""

    slot: int = 1
    core: int = 1
    memory: int = 1


DEFAULT_WEIGHTS: Final = ScoringWeights()
_KEYS: Final = ("slot", "core", "memory")


def decode_scoring_weights(value: str | None, field: str = keys.DEVICE_SCORING_WEIGHTS) -> ScoringWeights:
    """Parse the annotation value; ``None`` (absent) gives ``DEFAULT_WEIGHTS``.

    ``position`` of an error is the character offset of the offending part (``None`` for the part count and
    the all-zero check).
    """
    if value is None:
        return DEFAULT_WEIGHTS
    parts = value.split(",")
    if len(parts) != 3:
        raise AnnotationError(field, value, "expected slot, core, and memory weights")
    weights: dict[str, int] = {}
    offset = 0
    for part in parts:
        start = offset
        offset += len(part) + 1
        key_text, equals, number_text = go_trim_space(part).partition("=")
        if not equals:
            raise AnnotationError(field, value, "expected key=value entries", start)
        key = go_trim_space(key_text)
        if key in weights:
            raise AnnotationError(field, value, f"duplicate {go_quote(key)} weight", start)
        try:
            weight = parse_int(go_trim_space(number_text), 64)
        except GoNumError:
            raise AnnotationError(field, value, f"{go_quote(key)} weight must be an integer", start) from None
        if weight < 0:
            raise AnnotationError(field, value, f"{go_quote(key)} weight must not be negative", start)
        if key not in _KEYS:
            raise AnnotationError(field, value, f"unknown weight {go_quote(key)}", start)
        weights[key] = weight
    result = ScoringWeights(**weights)
    if result.slot == 0 and result.core == 0 and result.memory == 0:
        raise AnnotationError(field, value, "at least one weight must be positive")
    return result


def encode_scoring_weights(weights: ScoringWeights) -> str:
    """``slot=<s>,core=<c>,memory=<m>``."""
    return f"slot={weights.slot},core={weights.core},memory={weights.memory}"


def hami_error_text(error: AnnotationError) -> str:
    """HAMi's message for an invalid weights annotation: ``invalid <key> annotation "<value>": <reason>``."""
    return f"invalid {error.field} annotation {go_quote(str(error.value))}: {error.reason}"
