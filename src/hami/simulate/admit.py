"""Admission in the simulator: the webhook's own decision (``hami.scheduling.admission``), applied to the pod.

``hami simulate`` places a pod as the cluster would see it after ``POST /webhook``: the vendors' defaults and
rewrites (limits added, environment variables, ``runtimeClassName``, ``schedulerName``) are applied, and a pod
the webhook would deny is not placed. ``apply_patch`` applies the webhook's JSON patch (RFC 6902 ``add``,
``replace`` and ``remove`` — the operations ``hami.protocol.podpatch`` emits) to the raw pod. Pure.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from hami.errors import InvalidInput
from hami.protocol.objects import Pod
from hami.protocol.podpatch import PatchOp
from hami.scheduling.admission import OTHER_SCHEDULER, Admission

__all__ = ["Admitted", "Denied", "admit_pod", "apply_patch"]


@dataclass(frozen=True, slots=True)
class Admitted:
    """The pod as the webhook leaves it, and the patch that made it so (empty: unchanged)."""

    pod: Pod
    patch: tuple[PatchOp, ...]


@dataclass(frozen=True, slots=True)
class Denied:
    """The webhook's answer for a pod hami would not schedule: a denial, or a pod for another scheduler."""

    message: str


def _tokens(path: str) -> list[str]:
    if not path.startswith("/"):
        raise InvalidInput("patch.path", path, "a JSON pointer starts with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _step(node: Any, token: str, path: str) -> Any:
    if isinstance(node, list) and token.isdigit() and int(token) < len(node):
        return node[int(token)]
    if isinstance(node, dict) and token in node:
        return node[token]
    raise InvalidInput("patch.path", path, f"{token!r} does not exist in the pod")


def _apply_one(doc: Any, op: Mapping[str, Any]) -> None:
    path = str(op.get("path", ""))
    tokens = _tokens(path)
    parent = doc
    for token in tokens[:-1]:
        parent = _step(parent, token, path)
    last, kind = tokens[-1], op.get("op")
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last) if last.isdigit() else -1
        if not 0 <= index <= len(parent) or (kind != "add" and index == len(parent)):
            raise InvalidInput("patch.path", path, "index out of range")
        if kind == "add":
            parent.insert(index, copy.deepcopy(op["value"]))
        elif kind == "replace":
            parent[index] = copy.deepcopy(op["value"])
        elif kind == "remove":
            del parent[index]
        else:
            raise InvalidInput("patch.op", kind, "unsupported operation (add, replace or remove)")
        return
    if not isinstance(parent, dict):
        raise InvalidInput("patch.path", path, "the parent is not an object")
    if kind == "add" or (kind == "replace" and last in parent):
        parent[last] = copy.deepcopy(op["value"])
    elif kind == "remove" and last in parent:
        del parent[last]
    else:
        raise InvalidInput("patch.op", kind, f"cannot apply to {path}")


def apply_patch(raw: Mapping[str, Any], ops: Sequence[PatchOp]) -> dict[str, Any]:
    """``raw`` with ``ops`` applied (a deep copy; ``raw`` is left alone). Raises ``InvalidInput``."""
    doc = copy.deepcopy(dict(raw))
    for op in ops:
        _apply_one(doc, op)
    return doc


def admit_pod(admission: Admission, raw: Mapping[str, Any], namespace: str) -> Admitted | Denied:
    """Run the webhook's decision on ``raw`` (the pod as written) and apply its patch.

    A pod naming another scheduler is ``Denied``: the webhook lets it through unchanged, but hami never sees it.
    Raises ``InvalidInput`` for a pod the webhook could not read.
    """
    verdict = admission.review(raw, namespace)
    if not verdict.allowed:
        return Denied(verdict.message)
    if verdict.message == OTHER_SCHEDULER:
        spec = raw.get("spec")
        scheduler = spec.get("schedulerName") if isinstance(spec, Mapping) else None
        return Denied(f"{OTHER_SCHEDULER} (spec.schedulerName: {scheduler}); hami would not schedule it")
    patched = apply_patch(raw, verdict.patch)
    try:
        pod = msgspec.convert(patched, type=Pod)
    except msgspec.ValidationError as err:  # the patch only adds what the webhook checked: a bug if reached
        raise InvalidInput("admission patch", list(verdict.patch), f"the patched pod does not decode: {err}") from None
    return Admitted(pod, verdict.patch)
