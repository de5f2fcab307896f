"""A small RFC 6902 applier (``add``, ``remove``, ``replace``, ``test``) over plain JSON values (pure).

The admission webhook builds patches against the pod as it arrived; when a second step (DRA mode's translation)
continues from the pod the first step's patch made, it applies that patch here to see the same object the API server
will. Pointers are RFC 6901 (``~1`` is ``/``, ``~0`` is ``~``). A patch that does not apply raises
``InvalidInput`` naming the operation.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from hami.errors import InvalidInput

__all__ = ["apply_patch"]


def _tokens(path: str) -> list[str]:
    if not path.startswith("/"):
        raise InvalidInput("patch path", path, "a JSON pointer starts with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _index(parent: list[Any], token: str, path: str, *, end: bool) -> int:
    if end and token == "-":
        return len(parent)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise InvalidInput("patch path", path, f"{token!r} is not an array index")
    index = int(token)
    if index > len(parent) or (index == len(parent) and not end):
        raise InvalidInput("patch path", path, f"index {index} is beyond the array's {len(parent)} elements")
    return index


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, list):
            node = node[_index(node, token, path, end=False)]
        elif isinstance(node, dict) and token in node:
            node = node[token]
        else:
            raise InvalidInput("patch path", path, f"{token!r} does not exist")
    if not isinstance(node, list | dict):
        raise InvalidInput("patch path", path, "the parent is neither an object nor an array")
    return node


def _in_list(parent: list[Any], last: str, op: Mapping[str, Any], path: str) -> None:
    kind = op["op"]
    index = _index(parent, last, path, end=kind == "add")
    if kind == "add":
        parent.insert(index, copy.deepcopy(op["value"]))
    elif kind == "remove":
        del parent[index]
    elif kind == "replace":
        parent[index] = copy.deepcopy(op["value"])
    elif parent[index] != op["value"]:
        raise InvalidInput("patch op", dict(op), "test failed")


def _in_object(parent: dict[str, Any], last: str, op: Mapping[str, Any]) -> None:
    kind = op["op"]
    if kind != "add" and last not in parent:
        raise InvalidInput("patch op", dict(op), f"{last!r} does not exist")
    if kind in ("add", "replace"):
        parent[last] = copy.deepcopy(op["value"])
    elif kind == "remove":
        del parent[last]
    elif parent[last] != op["value"]:
        raise InvalidInput("patch op", dict(op), "test failed")


def _apply(doc: Any, op: Mapping[str, Any]) -> Any:
    path = str(op.get("path", ""))
    kind = op.get("op")
    if kind not in ("add", "remove", "replace", "test"):
        raise InvalidInput("patch op", dict(op), "unsupported operation")
    if path == "":
        if kind in ("add", "replace"):
            return copy.deepcopy(op["value"])
        raise InvalidInput("patch op", dict(op), "only add or replace may target the whole document")
    tokens = _tokens(path)
    parent = _parent(doc, tokens, path)
    if isinstance(parent, list):
        _in_list(parent, tokens[-1], op, path)
    else:
        _in_object(parent, tokens[-1], op)
    return doc


def apply_patch(doc: Any, ops: Sequence[Mapping[str, Any]]) -> Any:
    """``ops`` applied in order to a deep copy of ``doc`` (``doc`` itself is left alone)."""
    out = copy.deepcopy(doc)
    for op in ops:
        out = _apply(out, op)
    return out
