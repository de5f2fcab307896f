from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.errors import AnnotationError, InvalidInput
from hami.protocol import keys
from hami.protocol.nodelock import (
    NodeLock,
    decode_node_lock,
    encode_node_lock,
    is_expired,
    is_owned_by,
    locked_text,
    locked_within_text,
)

from .support import HAMI, decodes_or_rejects, mutated, text_without

PLUS_TWO = timezone(timedelta(hours=2))
SPEC_LOCK = "2026-08-21T08:20:39+02:00,default,gpu-pod"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(
            SPEC_LOCK, NodeLock(datetime(2026, 8, 21, 8, 20, 39, tzinfo=PLUS_TWO), "default", "gpu-pod"), id="spec"
        ),
        pytest.param(
            "2026-08-21T06:20:39Z", NodeLock(datetime(2026, 8, 21, 6, 20, 39, tzinfo=UTC)), id="legacy-bare-timestamp"
        ),
        pytest.param(
            "2026-08-21T06:20:39.123Z,ns,p",
            NodeLock(datetime(2026, 8, 21, 6, 20, 39, 123000, tzinfo=UTC), "ns", "p"),
            id="fractional-seconds",
        ),
        pytest.param(
            "2026-08-21T06:20:39Z,,", NodeLock(datetime(2026, 8, 21, 6, 20, 39, tzinfo=UTC)), id="empty-owner-parts"
        ),
    ],
)
def test_decode(value: str, expected: NodeLock) -> None:
    decoded = decode_node_lock(value)
    assert decoded == expected
    assert decoded.timestamp.utcoffset() == expected.timestamp.utcoffset()


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        pytest.param(
            "2026-08-21T06:20:39Z,default",
            "malformed lock annotation: expected 3 parts, got 2 from 2026-08-21T06:20:39Z,default",
            id="two-parts",
        ),
        pytest.param("a,b,c,d", "malformed lock annotation: expected 3 parts, got 4 from a,b,c,d", id="four-parts"),
        pytest.param(
            "lock",
            'parsing time "lock" as "2006-01-02T15:04:05Z07:00": not an RFC3339 timestamp',
            id="legacy-not-a-time",
        ),
        pytest.param(
            "2026-08-21 06:20:39,ns,p",
            'parsing time "2026-08-21 06:20:39" as "2006-01-02T15:04:05Z07:00": not an RFC3339 timestamp',
            id="datetime-layout-is-not-rfc3339",
        ),
    ],
)
def test_decode_rejections(value: str, reason: str) -> None:
    with pytest.raises(AnnotationError) as caught:
        decode_node_lock(value)
    assert (caught.value.field, caught.value.reason) == (keys.NODE_LOCK, reason)


@pytest.mark.parametrize("name", ["utc", "plus_two", "ist", "newfoundland"])
def test_encode_matches_go_rfc3339(name: str) -> None:
    stamp = HAMI["rfc3339"][name]
    lock = decode_node_lock(f"{stamp},kube-system,p")
    assert encode_node_lock(lock) == f"{stamp},kube-system,p"


def test_encode_spec_example_and_legacy() -> None:
    lock = NodeLock(datetime(2026, 8, 21, 8, 20, 39, 999999, tzinfo=PLUS_TWO), "default", "gpu-pod")
    assert encode_node_lock(lock) == SPEC_LOCK
    assert encode_node_lock(NodeLock(datetime(2026, 8, 21, 6, 20, 39, tzinfo=UTC))) == "2026-08-21T06:20:39Z"
    assert encode_node_lock(NodeLock(datetime(2026, 8, 21, 6, 20, 39, tzinfo=timezone(timedelta(0))))) == (
        "2026-08-21T06:20:39Z"
    )


def test_encode_refuses_naive_time_and_commas() -> None:
    with pytest.raises(ValueError, match="aware"):
        encode_node_lock(NodeLock(datetime(2026, 1, 1), "ns", "p"))
    with pytest.raises(InvalidInput):
        encode_node_lock(NodeLock(datetime(2026, 1, 1, tzinfo=UTC), "ns", "a,b"))


@pytest.mark.parametrize(
    ("value", "namespace", "name", "owned"),
    [
        pytest.param(SPEC_LOCK, "default", "gpu-pod", True, id="same-pod"),
        pytest.param(SPEC_LOCK, "default", "pod", False, id="suffix-of-name-is-not-owner"),
        pytest.param("2026-08-21T08:20:39+02:00,my-default,gpu-pod", "default", "gpu-pod", False, id="ns-suffix"),
        pytest.param(SPEC_LOCK, "other", "gpu-pod", False, id="other-namespace"),
        pytest.param("2026-08-21T06:20:39Z", "", "", False, id="legacy-lock-has-no-owner"),
        pytest.param("2026-08-21T06:20:39Z,,", "", "", False, id="empty-owner-is-no-owner"),
    ],
)
def test_ownership_is_exact_equality(value: str, namespace: str, name: str, owned: bool) -> None:
    assert is_owned_by(decode_node_lock(value), namespace, name) is owned


@pytest.mark.parametrize(
    ("age", "expired"),
    [(timedelta(minutes=5), False), (timedelta(minutes=5, microseconds=1), True), (timedelta(0), False)],
)
def test_expiry_is_strictly_older_than_timeout(age: timedelta, expired: bool) -> None:
    lock = decode_node_lock(SPEC_LOCK)
    assert is_expired(lock, lock.timestamp.astimezone(UTC) + age, timedelta(minutes=5)) is expired


def test_contention_texts() -> None:
    assert locked_within_text("node1", timedelta(minutes=5)) == (
        "node node1 has been locked within 5m0s: node lock contention"
    )
    assert locked_text("node1") == "node node1 is locked: node lock contention"


offsets = st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
locks = st.builds(
    NodeLock,
    timestamp=st.datetimes(timezones=offsets).map(lambda d: d.replace(microsecond=0)),
    namespace=text_without(","),
    name=text_without(","),
)


@given(locks)
def test_encode_then_decode_is_identity(lock: NodeLock) -> None:
    decoded = decode_node_lock(encode_node_lock(lock))
    assert decoded == lock
    assert decoded.timestamp.utcoffset() == lock.timestamp.utcoffset()


@given(st.text() | mutated(locks.map(encode_node_lock)))
def test_decoder_raises_only_annotation_error(text: str) -> None:
    decodes_or_rejects(decode_node_lock, text)
