"""MIG profile and placement choice, HAMi v2.10's dynamic model (scheduler-core.md §6.8)."""

from __future__ import annotations

import pytest

from hami.devices.nvidia.mig import overlaps, plan_instances, select_instance
from hami.protocol.inventory import MigPlacement, MigProfile
from tests.unit.scheduling.builders import A100_PROFILES

P = MigPlacement


@pytest.mark.parametrize(
    ("a", "b", "hit"),
    [
        pytest.param(P(0, 2), P(2, 2), False, id="adjacent-intervals-do-not-overlap"),
        pytest.param(P(0, 4), P(2, 1), True, id="contained"),
        pytest.param(P(4, 4), P(3, 2), True, id="straddling"),
        pytest.param(P(6, 1), P(0, 8), True, id="whole-gpu-overlaps-everything"),
    ],
)
def test_overlaps(a: MigPlacement, b: MigPlacement, hit: bool) -> None:
    assert overlaps(a, b) is hit
    assert overlaps(b, a) is hit


def _chosen(memory: int, occupied: list[MigPlacement]) -> tuple[str, MigPlacement] | None:
    got = select_instance(A100_PROFILES, occupied, memory)
    return None if got is None else (got[0].name, got[1])


def test_a100_sequence_from_empty() -> None:
    """Spec §6.8: 3g.20gb → start 4, then 2g.10gb → 0, then 1g.5gb → 3, then 1g.5gb → 2."""
    occupied: list[MigPlacement] = []
    steps = []
    for memory in (19968, 9984, 4864, 4864):
        got = _chosen(memory, occupied)
        assert got is not None
        steps.append(got)
        occupied.append(got[1])
    assert steps == [("3g.20gb", P(4, 4)), ("2g.10gb", P(0, 2)), ("1g.5gb", P(3, 1)), ("1g.5gb", P(2, 1))]
    # The GPU is now full: nothing else fits, not even the smallest instance.
    assert _chosen(1, occupied) is None


@pytest.mark.parametrize(
    ("memory", "occupied", "expected"),
    [
        pytest.param(1, [], ("1g.5gb", P(6, 1)), id="1g-fills-from-the-top"),
        pytest.param(5000, [], ("2g.10gb", P(0, 2)), id="smallest-profile-with-enough-memory-2g-from-the-bottom"),
        pytest.param(15000, [], ("3g.20gb", P(4, 4)), id="3g-before-4g-at-equal-memory-fewer-slices"),
        pytest.param(15000, [P(4, 1)], ("3g.20gb", P(0, 4)), id="3g-next-placement-when-the-top-is-taken"),
        pytest.param(15000, [P(4, 1), P(0, 1)], None, id="no-3g-no-4g-no-7g"),
        pytest.param(40192, [], ("7g.40gb", P(0, 8)), id="whole-gpu"),
        pytest.param(40193, [], None, id="more-than-any-profile"),
    ],
)
def test_select_instance(memory: int, occupied: list[MigPlacement], expected: tuple[str, MigPlacement] | None) -> None:
    assert _chosen(memory, occupied) == expected


def test_full_profile_falls_through_to_the_next_larger() -> None:
    profiles = (
        MigProfile("1g.5gb", 4864, 14, 1, (P(6, 1),)),
        MigProfile("2g.10gb", 9984, 28, 2, (P(0, 2), P(2, 2))),
    )
    got = select_instance(profiles, [P(6, 1)], 100)
    assert got == (profiles[1], P(0, 2))


def test_profiles_are_ordered_by_memory_not_by_listing() -> None:
    got = select_instance(tuple(reversed(A100_PROFILES)), [], 4000)
    assert got is not None
    assert (got[0].name, got[1]) == ("1g.5gb", P(6, 1))


def test_plan_instances_places_in_order_like_repeated_selection() -> None:
    plan = plan_instances(A100_PROFILES, [], [19968, 9984, 4864, 4864])
    assert plan is not None
    assert [(p.name, pl) for p, pl in plan] == [
        ("3g.20gb", P(4, 4)),
        ("2g.10gb", P(0, 2)),
        ("1g.5gb", P(3, 1)),
        ("1g.5gb", P(2, 1)),
    ]


def test_plan_instances_respects_occupied_and_fails_as_a_whole() -> None:
    plan = plan_instances(A100_PROFILES, [P(4, 4)], [4864])
    assert plan is not None
    assert [(p.name, pl) for p, pl in plan] == [("1g.5gb", P(3, 1))]
    assert plan_instances(A100_PROFILES, [P(4, 4)], [19968, 19968]) is None
    assert plan_instances(A100_PROFILES, [], []) == []
