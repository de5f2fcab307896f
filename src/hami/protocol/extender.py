"""kube-scheduler extender wire types (k8s.io/kube-scheduler/extender/v1; spec scheduler-core.md §2.9).

kube-scheduler (Go) encodes these structs with their Go field names and decodes answers case-insensitively.
hami decodes requests case-insensitively too (top-level keys), and answers with the Go field names, as HAMi
does. Only the fields hami reads are decoded; the pod is decoded into the compact ``Pod`` view.
"""

from __future__ import annotations

from typing import Any

import msgspec

from hami.errors import InvalidInput
from hami.protocol.jsonbody import convert_body, decode_body
from hami.protocol.objects import Node, Pod

__all__ = [
    "BindingArgs",
    "BindingResult",
    "FilterArgs",
    "FilterResult",
    "decode_binding_args",
    "decode_filter_args",
    "encode_binding_result",
    "encode_filter_result",
]


class _Args(msgspec.Struct):
    pod: Pod
    nodes: list[Node] | None = None
    nodenames: list[str] | None = None


class FilterArgs:
    """``ExtenderArgs``: the pod and its candidates (``nodenames`` when nodeCacheCapable, else ``nodes``).

    With full ``nodes`` (a caller that is not node-cache capable) the raw Node objects are kept so the answer
    can echo the chosen ones unchanged.
    """

    __slots__ = ("nodenames", "nodes", "pod", "raw_nodes")

    def __init__(
        self,
        pod: Pod,
        nodenames: list[str] | None = None,
        nodes: list[Node] | None = None,
        raw_nodes: list[dict[str, Any]] | None = None,
    ) -> None:
        self.pod = pod
        self.nodenames = nodenames
        self.nodes = nodes
        self.raw_nodes = raw_nodes or []

    def candidate_names(self) -> list[str]:
        if self.nodenames is not None:
            return list(self.nodenames)
        return [n.metadata.name for n in self.nodes or []]

    def nodes_raw(self, names: list[str]) -> dict[str, Any]:
        """A NodeList holding the raw objects of ``names`` (in that order)."""
        by_name = {str((raw.get("metadata") or {}).get("name", "")): raw for raw in self.raw_nodes}
        return {"items": [by_name[n] for n in names if n in by_name]}


class FilterResult(
    msgspec.Struct,
    omit_defaults=True,
    rename={
        "nodes": "Nodes",
        "node_names": "NodeNames",
        "failed_nodes": "FailedNodes",
        "failed_and_unresolvable_nodes": "FailedAndUnresolvableNodes",
        "error": "Error",
    },
):
    """``ExtenderFilterResult``. ``nodes`` echoes full Node objects (raw) for non-node-cache callers."""

    nodes: dict[str, Any] | None = None
    node_names: list[str] | None = None
    failed_nodes: dict[str, str] | None = None
    failed_and_unresolvable_nodes: dict[str, str] | None = None
    error: str = ""


class BindingArgs(msgspec.Struct):
    """``ExtenderBindingArgs``."""

    podname: str = ""
    podnamespace: str = ""
    poduid: str = ""
    node: str = ""


class BindingResult(msgspec.Struct, omit_defaults=True, rename={"error": "Error"}):
    error: str = ""


def _lower_keys(raw: bytes, what: str) -> dict[str, Any]:
    obj = decode_body(raw, what)
    if not isinstance(obj, dict):
        raise InvalidInput(what, type(obj).__name__, "expected a JSON object")
    return {str(k).lower(): v for k, v in obj.items()}


def decode_filter_args(raw: bytes) -> FilterArgs:
    """Decode ``ExtenderArgs``; raises ``InvalidInput`` naming what is wrong (missing pod, bad field type)."""
    obj = _lower_keys(raw, "ExtenderArgs")
    if obj.get("pod") is None:
        raise InvalidInput("ExtenderArgs.Pod", None, "extender args missing pod")
    nodes = obj.get("nodes")
    raw_nodes: list[dict[str, Any]] = []
    if isinstance(nodes, dict):
        items = nodes.get("items") or []
        raw_nodes = [n for n in items if isinstance(n, dict)]
        obj["nodes"] = items
    args = convert_body(obj, _Args, "ExtenderArgs")
    return FilterArgs(args.pod, args.nodenames, args.nodes, raw_nodes)


def decode_binding_args(raw: bytes) -> BindingArgs:
    obj = _lower_keys(raw, "ExtenderBindingArgs")
    args = convert_body(obj, BindingArgs, "ExtenderBindingArgs")
    for name in ("podname", "podnamespace", "node"):
        if not getattr(args, name):
            raise InvalidInput(f"ExtenderBindingArgs.{name}", "", "required field is empty")
    return args


_ENCODER = msgspec.json.Encoder()


def encode_filter_result(result: FilterResult) -> bytes:
    return _ENCODER.encode(result)


def encode_binding_result(result: BindingResult) -> bytes:
    return _ENCODER.encode(result)
