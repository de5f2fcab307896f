from __future__ import annotations

import math

import pytest

from hami.protocol.events import (
    EventReason,
    EventType,
    binding_succeed_text,
    filtering_failed_texts,
    filtering_succeed_text,
    no_available_node_text,
    nodes_failed_text,
)
from hami.protocol.reasons import Reason

from .support import HAMI


def test_per_reason_text_sorts_node_names() -> None:
    assert nodes_failed_text(Reason.CARD_INSUFFICIENT_MEMORY, ["node2", "node1"]) == (
        "2 nodes CardInsufficientMemory(node1,node2)"
    )


def test_per_reason_texts_one_per_reason_ordered_by_key_skipping_empty() -> None:
    texts = filtering_failed_texts(
        {
            Reason.CARD_UUID_MISMATCH: ["n3"],
            Reason.CARD_INSUFFICIENT_CORE: ["n2", "n1"],
            Reason.NUMA_NOT_FIT: [],
        }
    )
    assert texts == ["2 nodes CardInsufficientCore(n1,n2)", "1 nodes CardUuidMismatch(n3)"]


def test_no_available_node_summary() -> None:
    assert no_available_node_text(3) == "no available node, 3 nodes do not meet"


def test_filtering_succeed_lists_fitting_nodes_with_two_decimals() -> None:
    text = filtering_succeed_text("node-b", 5, [("node-a", 8.0), ("node-b", 11.75)])
    assert text == "find fit node(node-b), 3 nodes not fit, 2 nodes fit(node-a:8.00,node-b:11.75)"


@pytest.mark.parametrize("score", sorted(HAMI["fixed2_float32"], key=float))
def test_scores_are_rounded_like_gos_percent_point_two_f_on_float32(score: str) -> None:
    text = filtering_succeed_text("n", 1, [("n", float(score))])
    assert text == f"find fit node(n), 0 nodes not fit, 1 nodes fit(n:{HAMI['fixed2_float32'][score]})"


@pytest.mark.parametrize(("score", "printed"), [(math.nan, "NaN"), (math.inf, "+Inf"), (-math.inf, "-Inf")])
def test_non_finite_scores_print_as_go(score: float, printed: str) -> None:
    assert filtering_succeed_text("n", 1, [("n", score)]).endswith(f"(n:{printed})")


def test_bind_text() -> None:
    assert binding_succeed_text("node1", "default", "gpu-pod") == "Successfully binding node [node1] to default/gpu-pod"


def test_more_fitting_nodes_than_listed_are_counted_not_listed() -> None:
    text = filtering_succeed_text("n1", 30, [("n2", 1.0), ("n1", 2.0)], fitting=12)
    assert text == "find fit node(n1), 18 nodes not fit, 12 nodes fit(… 10 more,n2:1.00,n1:2.00)"


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        (EventReason.FILTERING_FAILED, EventType.WARNING),
        (EventReason.FILTERING_SUCCEED, EventType.NORMAL),
        (EventReason.BINDING_FAILED, EventType.WARNING),
        (EventReason.BINDING_SUCCEED, EventType.NORMAL),
        (EventReason.FILTERED_NODES, EventType.NORMAL),
    ],
)
def test_event_reasons_and_types_are_hamis(reason: EventReason, kind: EventType) -> None:
    assert (str(reason), reason.type) == (reason.value, kind)
