"""A tiny RFC 6902 applier for tests: add, replace, remove and test on plain JSON values (RFC 6901 pointers)."""

from __future__ import annotations

import copy
from typing import Any


def _tokens(path: str) -> list[str]:
    assert path.startswith("/"), f"a JSON pointer starts with '/': {path!r}"
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for t in tokens[:-1]:
        node = node[int(t)] if isinstance(node, list) else node[t]
    return node


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """Apply ``ops`` to a deep copy of ``doc``; raises AssertionError/KeyError/IndexError on a bad patch."""
    doc = copy.deepcopy(doc)
    for op in ops:
        tokens = _tokens(op["path"])
        parent, last = _parent(doc, tokens), tokens[-1]
        kind = op["op"]
        if kind == "add":
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                assert 0 <= index <= len(parent), f"add: index {index} out of range in {op}"
                parent.insert(index, copy.deepcopy(op["value"]))
            else:
                assert isinstance(parent, dict), f"add: parent is not an object in {op}"
                parent[last] = copy.deepcopy(op["value"])
        elif kind == "replace":
            if isinstance(parent, list):
                parent[int(last)] = copy.deepcopy(op["value"])
            else:
                assert last in parent, f"replace: {op['path']} does not exist"
                parent[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif kind == "test":
            value = parent[int(last)] if isinstance(parent, list) else parent[last]
            assert value == op["value"], f"test failed: {op}"
        else:
            raise AssertionError(f"unsupported op {kind!r}")
    return doc
