"""Fragmentation over the ledger: stranded memory and cores per card and per model, the largest slice, the index."""

from __future__ import annotations

import pytest

from hami.scheduling.fragmentation import (
    Shape,
    card_fragments,
    fragmentation_index,
    model_fragments,
    shapes_of,
)
from tests.unit.simulate.clusterfix import node, pod, simulator


def test_shapes_come_from_the_ledger_most_frequent_first() -> None:
    sim = simulator(
        node("a", [(16000, 4), (16000, 4)]),
        pod("p1", 6000, 30, on="a"),
        pod("p2", 2000, on="a", cards=(1,)),
        pod("p3", 2000, on="a", cards=(1,)),
    )
    assert shapes_of(sim.state) == {"NVIDIA": (Shape(2000, 0), Shape(6000, 30))}


def test_stranded_is_free_capacity_no_seen_shape_can_take() -> None:
    sim = simulator(node("a", [(16000, 4), (16000, 4), (16000, 4)]), pod("p1", 6000, 30, on="a"))
    used, free1, free2 = card_fragments(sim.state)
    # 10000 MiB, 3 slots, 70 cores free: one more 6000/30 pod fits (cores allow two, memory one)
    assert (used.free_slots, used.free_mem, used.free_cores) == (3, 10000, 70)
    assert (used.stranded_mem, used.stranded_cores) == (4000, 40)
    assert (used.largest_mem, used.largest_cores) == (10000, 70)
    assert not used.whole_free
    # a wholly free card strands nothing: any pod up to a whole card can use it
    assert (free1.stranded_mem, free1.stranded_cores, free1.whole_free) == (0, 0, True)
    assert free2.largest_mem == 16000
    assert fragmentation_index([used, free1, free2]) == pytest.approx(4000 / 42000)


def test_cards_that_cannot_take_work_strand_everything_free() -> None:
    sim = simulator(
        node("a", [(16000, 1), (16000, 4), (16000, 4)], unhealthy=[1], cordon=[2]),
        pod("p1", 1000, on="a"),
    )
    full_slots, unhealthy, cordoned = card_fragments(sim.state)
    assert (full_slots.free_slots, full_slots.stranded_mem, full_slots.largest_mem) == (0, 15000, 0)
    assert (unhealthy.stranded_mem, unhealthy.largest_mem, unhealthy.whole_free) == (16000, 0, False)
    assert (cordoned.stranded_mem, cordoned.stranded_cores) == (16000, 100)


def test_given_shapes_replace_the_ledger_s_and_no_shape_means_nothing_stranded() -> None:
    sim = simulator(node("a", [(16000, 4)]), pod("p1", 6000, on="a"))
    (card,) = card_fragments(sim.state, {"NVIDIA": [Shape(4000, 0)]})
    assert card.stranded_mem == 10000 - 2 * 4000
    (card,) = card_fragments(sim.state, {})
    assert (card.stranded_mem, card.stranded_cores) == (0, 0)
    assert fragmentation_index([]) == 0.0


def test_per_model_totals_and_largest_slice() -> None:
    sim = simulator(
        node("t4", [(15000, 4), (15000, 4)]),
        node("a100", [(80000, 4)], model="NVIDIA A100"),
        pod("p1", 10000, on="t4"),
        pod("p2", 10000, on="a100"),
    )
    models = {m.model: m for m in model_fragments(card_fragments(sim.state))}
    a100, t4 = models["NVIDIA A100"], models["NVIDIA-Tesla T4"]
    # 3 free slots x 10000 MiB: 30000 of the 70000 free MiB are usable by the shape seen
    assert (a100.cards, a100.whole_free_cards, a100.free_mem, a100.stranded_mem) == (1, 0, 70000, 40000)
    assert (t4.cards, t4.whole_free_cards, t4.free_mem, t4.stranded_mem) == (2, 1, 20000, 5000)
    assert (t4.largest_mem, t4.largest_cores) == (15000, 100)
