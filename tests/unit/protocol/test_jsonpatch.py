"""The small RFC 6902 applier: the operations the webhook emits, in order, and a clear error for a patch that does
not apply (RFC 6902 appendix A's cases that hami's patches use)."""

from __future__ import annotations

from typing import Any

import pytest

from hami.errors import InvalidInput
from hami.protocol.jsonpatch import apply_patch

DOC: dict[str, Any] = {"a": {"b/c": 1, "~d": [1, 2]}, "list": [{"x": 1}]}


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        pytest.param([{"op": "add", "path": "/n", "value": {"k": 1}}], {**DOC, "n": {"k": 1}}, id="add a key"),
        pytest.param(
            [{"op": "remove", "path": "/a/b~1c"}], {**DOC, "a": {"~d": [1, 2]}}, id="remove a key with a slash"
        ),
        pytest.param(
            [{"op": "add", "path": "/a/~0d/-", "value": 3}],
            {**DOC, "a": {"b/c": 1, "~d": [1, 2, 3]}},
            id="append under a key with a tilde",
        ),
        pytest.param(
            [{"op": "add", "path": "/list/0", "value": 0}, {"op": "remove", "path": "/list/1"}],
            {**DOC, "list": [0]},
            id="insert then remove, in order",
        ),
        pytest.param(
            [{"op": "replace", "path": "/list/0/x", "value": 2}, {"op": "test", "path": "/list/0/x", "value": 2}],
            {**DOC, "list": [{"x": 2}]},
            id="replace and test",
        ),
        pytest.param([{"op": "replace", "path": "", "value": [1]}], [1], id="the whole document"),
    ],
)
def test_operations_apply_in_order_to_a_copy(ops: list[dict[str, Any]], expected: Any) -> None:
    before = repr(DOC)
    assert apply_patch(DOC, ops) == expected
    assert repr(DOC) == before


@pytest.mark.parametrize(
    ("op", "message"),
    [
        pytest.param({"op": "add", "path": "/missing/k", "value": 1}, "'missing' does not exist", id="no parent"),
        pytest.param({"op": "remove", "path": "/a/zz"}, "'zz' does not exist", id="remove a missing key"),
        pytest.param({"op": "replace", "path": "/a/zz", "value": 1}, "'zz' does not exist", id="replace a missing key"),
        pytest.param({"op": "add", "path": "/list/5", "value": 1}, "beyond the array", id="index past the end"),
        pytest.param({"op": "remove", "path": "/list/-"}, "not an array index", id="remove the end"),
        pytest.param({"op": "remove", "path": "/list/01"}, "not an array index", id="leading zero"),
        pytest.param({"op": "add", "path": "/a/b~1c/k", "value": 1}, "neither an object nor an array", id="scalar"),
        pytest.param({"op": "test", "path": "/list/0/x", "value": 9}, "test failed", id="test fails"),
        pytest.param({"op": "move", "from": "/a", "path": "/b"}, "unsupported operation", id="move"),
        pytest.param({"op": "add", "path": "a", "value": 1}, "starts with '/'", id="not a pointer"),
    ],
)
def test_a_patch_that_does_not_apply_names_the_operation(op: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        apply_patch(DOC, [op])
