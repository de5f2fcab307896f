"""Kubernetes event reasons and messages, worded exactly as HAMi's (scheduler-core.md §4.1, §4.3, §4.8, §4.9).

Users' alerts and the HAMi e2e tests match on these texts (``FilteringFailed`` + ``no available node``), so
they are built here, in one place, from data: reason codes and node names, never parsed back.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence

from hami.protocol.reasons import Reason

__all__ = [
    "EventReason",
    "EventType",
    "binding_succeed_text",
    "filtering_failed_texts",
    "filtering_succeed_text",
    "no_available_node_text",
    "nodes_failed_text",
    "preempted_text",
]


class EventType(enum.StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class EventReason(enum.StrEnum):
    """The ``reason`` of an event on the pod; ``type`` says whether it is Normal or Warning."""

    FILTERING_FAILED = "FilteringFailed"
    FILTERING_SUCCEED = "FilteringSucceed"
    BINDING_FAILED = "BindingFailed"
    BINDING_SUCCEED = "BindingSucceed"
    FILTERED_NODES = "FilteredNodes"
    """hami's own: the candidates not chosen and why, when a node was chosen (HAMi has no such event)."""
    PREEMPTED = "Preempted"
    """On a victim of hami's preemption, with kube-scheduler's reason and message (``preemption/executor.go``)."""
    PREEMPTING = "Preempting"
    """hami's own, on the preemptor: which pods it evicts on which node (kube-scheduler's action word)."""

    @property
    def type(self) -> EventType:
        failed = self in (EventReason.FILTERING_FAILED, EventReason.BINDING_FAILED)
        return EventType.WARNING if failed else EventType.NORMAL


def preempted_text(preemptor_uid: str, node: str) -> str:
    """kube-scheduler's ``Preempted`` message on a victim: ``Preempted by pod <uid> on node <node>``."""
    return f"Preempted by pod {preemptor_uid} on node {node}"


def nodes_failed_text(reason: Reason, nodes: Iterable[str]) -> str:
    """One per-reason ``FilteringFailed`` message: ``2 nodes CardInsufficientMemory(node1,node2)``.

    Node names are sorted, as HAMi sorts them.
    """
    names = sorted(nodes)
    return f"{len(names)} nodes {reason.value}({','.join(names)})"


def filtering_failed_texts(nodes_by_reason: Mapping[Reason, Iterable[str]]) -> list[str]:
    """All per-reason ``FilteringFailed`` messages when no node fits, one per reason with at least one node.

    *Difference from HAMi:* HAMi emits them in Go map order (random); hami orders them by reason key. Which
    reasons count is the caller's choice: HAMi emits none for reasons it writes without an ``n/m`` prefix
    (``NodeInsufficientDevice``, ``node unregistered``; §4.8).
    """
    texts = []
    for reason in sorted(nodes_by_reason, key=lambda r: r.value):
        names = list(nodes_by_reason[reason])
        if names:
            texts.append(nodes_failed_text(reason, names))
    return texts


def no_available_node_text(node_count: int) -> str:
    """The summary ``FilteringFailed`` message: ``no available node, <N> nodes do not meet``, where N is the
    number of node names in the extender request."""
    return f"no available node, {node_count} nodes do not meet"


def filtering_succeed_text(
    chosen: str, node_count: int, fits: Sequence[tuple[str, float]], fitting: int | None = None
) -> str:
    """``find fit node(<node>), <N - k> nodes not fit, <k> nodes fit(<n1>:<s1>,<n2>:<s2>)``.

    ``node_count`` is N, the number of node names in the request; ``fits`` are the fitting nodes listed with
    their scores, in final sorted order; ``fitting`` is k when more nodes fit than are listed (the list then
    starts with ``… <k - listed> more,``). Scores are printed as Go's ``%.2f``.
    """
    k = len(fits) if fitting is None else fitting
    listed = ",".join(f"{name}:{_go_fixed2(score)}" for name, score in fits)
    if k > len(fits):
        listed = f"… {k - len(fits)} more,{listed}"
    return f"find fit node({chosen}), {node_count - k} nodes not fit, {k} nodes fit({listed})"


def _go_fixed2(number: float) -> str:
    """Go ``%.2f``: correctly rounded, ties to even on the exact binary value (as Python), Go's NaN/Inf words."""
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    return f"{number:.2f}"


def binding_succeed_text(node: str, namespace: str, name: str) -> str:
    """``Successfully binding node [<node>] to <ns>/<name>`` (Go prints the node list with ``%v``)."""
    return f"Successfully binding node [{node}] to {namespace}/{name}"
