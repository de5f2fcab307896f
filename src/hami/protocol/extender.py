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
    "HostPriority",
    "MetaPod",
    "MetaVictims",
    "PreemptionArgs",
    "PreemptionResult",
    "decode_binding_args",
    "decode_filter_args",
    "decode_preemption_args",
    "encode_binding_result",
    "encode_filter_result",
    "encode_host_priorities",
    "encode_preemption_result",
]


class _Args(msgspec.Struct):
    pod: Pod
    nodes: list[Node] | None = None
    nodenames: list[str] | None = None


class FilterArgs:
    """``ExtenderArgs``: the pod and its candidates (``nodenames`` when nodeCacheCapable, else ``nodes``, a
    NodeList: ``{"items": [Node, …]}``).

    Whole ``nodes`` ask for a side-effect-free simulation (Cluster Autoscaler's template nodes, HAMi's contract;
    ``hami.server.simulation``); the raw Node objects are kept so the answer can echo the chosen one unchanged in
    ``ExtenderFilterResult.Nodes``.
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


class HostPriority(msgspec.Struct, rename={"host": "Host", "score": "Score"}):
    """``HostPriority``: one node's score from a prioritize verb, 0 to ``MaxExtenderPriority`` (10). The answer is
    a ``HostPriorityList``, a JSON array of them; the request is ``ExtenderArgs``, as for ``/filter``."""

    host: str
    score: int


class BindingArgs(msgspec.Struct):
    """``ExtenderBindingArgs``."""

    podname: str = ""
    podnamespace: str = ""
    poduid: str = ""
    node: str = ""


class BindingResult(msgspec.Struct, omit_defaults=True, rename={"error": "Error"}):
    error: str = ""


class MetaPod(msgspec.Struct, rename={"uid": "UID"}):
    """``MetaPod``: a victim named by its UID (kube-scheduler finds the pod on the node by it)."""

    uid: str


class MetaVictims(msgspec.Struct, rename={"pods": "Pods", "violations": "NumPDBViolations"}):
    """``MetaVictims``: the pods to preempt on one node and how many PodDisruptionBudgets their eviction breaks."""

    pods: list[MetaPod]
    violations: int = 0


class PreemptionResult(msgspec.Struct, rename={"victims": "NodeNameToMetaVictims"}):
    """``ExtenderPreemptionResult``: kube-scheduler reads only ``NodeNameToMetaVictims`` (whatever its
    nodeCacheCapable); a node left out is one where preemption cannot help. Always present, ``{}`` for none."""

    victims: dict[str, MetaVictims]


class PreemptionArgs:
    """``ExtenderPreemptionArgs``: the pod and, per candidate node, the victims kube-scheduler's own dry run chose
    (UIDs; from ``NodeNameToMetaVictims`` when nodeCacheCapable, else from the pods of ``NodeNameToVictims``) with
    their budget violations. From kube-scheduler 1.38 a node's list may be empty: its in-tree filters pass, only
    the extender's resources are short."""

    __slots__ = ("pod", "victims", "violations")

    def __init__(self, pod: Pod, victims: dict[str, tuple[str, ...]], violations: dict[str, int]) -> None:
        self.pod = pod
        self.victims = victims
        self.violations = violations


def _lower_keys(raw: bytes, what: str) -> dict[str, Any]:
    obj = decode_body(raw, what)
    if not isinstance(obj, dict):
        raise InvalidInput(what, type(obj).__name__, "expected a JSON object")
    return {str(k).lower(): v for k, v in obj.items()}


def _lowered(obj: object, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise InvalidInput(where, _kind(obj), "expected a JSON object")
    return {str(k).lower(): v for k, v in obj.items()}


def _kind(obj: object) -> str:
    return "null" if obj is None else type(obj).__name__


def _victim_uid(item: object, where: str, meta: bool) -> str:
    """The UID of one victim: ``{"UID": …}`` (MetaPod) or a Pod's ``metadata.uid``."""
    fields = _lowered(item, where)
    if meta:
        uid, field = fields.get("uid"), f"{where}.UID"
    else:
        uid, field = _lowered(fields.get("metadata"), f"{where}.metadata").get("uid"), f"{where}.metadata.uid"
    if not isinstance(uid, str) or not uid:
        raise InvalidInput(field, uid, "expected the victim pod's UID, a non-empty string")
    return uid


def _node_victims(obj: object, name: str, meta: bool) -> tuple[tuple[str, ...], int]:
    where = f"ExtenderPreemptionArgs.{name}"
    fields = _lowered(obj, where) if obj is not None else {}
    pods = fields.get("pods")
    if pods is None:
        pods = []  # Go encodes a nil slice as null: a placeholder node without victims
    if not isinstance(pods, list):
        raise InvalidInput(f"{where}.Pods", _kind(pods), "expected a list of pods")
    violations = fields.get("numpdbviolations", 0)
    if violations is None:
        violations = 0
    if not isinstance(violations, int) or isinstance(violations, bool) or violations < 0:
        raise InvalidInput(f"{where}.NumPDBViolations", violations, "expected a count, a whole number ≥ 0")
    return tuple(_victim_uid(p, f"{where}.Pods[{i}]", meta) for i, p in enumerate(pods)), violations


def decode_preemption_args(raw: bytes) -> PreemptionArgs:
    """Decode ``ExtenderPreemptionArgs``; raises ``InvalidInput`` naming the field that is wrong."""
    obj = _lower_keys(raw, "ExtenderPreemptionArgs")
    if obj.get("pod") is None:
        raise InvalidInput("ExtenderPreemptionArgs.Pod", None, "the pod to place is missing")
    pod = convert_body(obj["pod"], Pod, "ExtenderPreemptionArgs.Pod")
    full, meta = obj.get("nodenametovictims"), obj.get("nodenametometavictims")
    if full and meta:
        raise InvalidInput(
            "ExtenderPreemptionArgs", "both", "NodeNameToVictims and NodeNameToMetaVictims both given; send one"
        )
    is_meta = bool(meta) or not full
    name, nodes = ("NodeNameToMetaVictims", meta) if is_meta else ("NodeNameToVictims", full)
    if nodes is None:
        nodes = {}
    if not isinstance(nodes, dict):
        raise InvalidInput(f"ExtenderPreemptionArgs.{name}", _kind(nodes), "expected an object of node names")
    victims: dict[str, tuple[str, ...]] = {}
    violations: dict[str, int] = {}
    for node, entry in nodes.items():
        if not node:
            raise InvalidInput(f"ExtenderPreemptionArgs.{name}", node, "a node name is empty")
        victims[node], violations[node] = _node_victims(entry, f"{name}[{node}]", is_meta)
    return PreemptionArgs(pod, victims, violations)


def decode_filter_args(raw: bytes) -> FilterArgs:
    """Decode ``ExtenderArgs``; raises ``InvalidInput`` naming what is wrong (missing pod, bad field type)."""
    obj = _lower_keys(raw, "ExtenderArgs")
    if obj.get("pod") is None:
        raise InvalidInput("ExtenderArgs.Pod", None, "extender args missing pod")
    nodes = obj.get("nodes")
    raw_nodes: list[dict[str, Any]] = []
    if nodes is not None and obj.get("nodenames") is not None:
        raise InvalidInput("ExtenderArgs", "Nodes and NodeNames", "both given; send one (Nodes asks for a simulation)")
    if isinstance(nodes, dict):
        items = nodes.get("items") or []
        raw_nodes = [n for n in items if isinstance(n, dict)]
        obj["nodes"] = items
    args = convert_body(obj, _Args, "ExtenderArgs")
    for i, node in enumerate(args.nodes or ()):
        if not node.metadata.name:
            raise InvalidInput(f"ExtenderArgs.Nodes.items[{i}].metadata.name", "", "a node without a name")
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


def encode_host_priorities(result: list[HostPriority]) -> bytes:
    return _ENCODER.encode(result)


def encode_binding_result(result: BindingResult) -> bytes:
    return _ENCODER.encode(result)


def encode_preemption_result(result: PreemptionResult) -> bytes:
    return _ENCODER.encode(result)
