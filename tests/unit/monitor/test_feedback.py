"""The priority-feedback round as data: which fields HAMi's monitor would write, and to what."""

from __future__ import annotations

from hami.monitor.feedback import FeedbackInput, Write, observe

A, B = "GPU-a", "GPU-b"


def region(key: str, priority: int, recent: int, switch: int = 0, uuids: tuple[str, ...] = (A,)) -> FeedbackInput:
    return FeedbackInput(key=key, priority=priority, recent_kernel=recent, utilization_switch=switch, uuids=uuids)


def final(writes: list[Write]) -> dict[tuple[str, str], int]:
    """The value each field ends with (writes are applied in order)."""
    return {(w.key, w.field): w.value for w in writes}


def test_an_idle_lone_task_is_left_alone() -> None:
    assert observe([region("low", 1, 0)]) == []


def test_a_lone_active_task_is_aged_but_not_throttled() -> None:
    writes = observe([region("low", 1, 2, switch=1)])
    assert writes == [Write("low", "recent_kernel", 1), Write("low", "utilization_switch", 0)]


def test_an_active_high_priority_task_blocks_and_throttles_the_low_one_on_its_gpu() -> None:
    writes = observe([region("high", 0, 2), region("low", 1, 2)])
    assert final(writes) == {
        ("high", "recent_kernel"): 1,
        ("low", "recent_kernel"): -1,
        ("low", "utilization_switch"): 1,
    }


def test_a_low_priority_task_on_another_gpu_is_not_blocked() -> None:
    writes = observe([region("high", 0, 2), region("low", 1, 2, uuids=(B,))])
    assert final(writes) == {("high", "recent_kernel"): 1, ("low", "recent_kernel"): 1}


def test_a_blocked_task_is_released_once_the_high_priority_task_goes_idle() -> None:
    # the high-priority task launched nothing since the last round: 1 → 0, no longer active
    writes = observe([region("high", 0, 1), region("low", 1, -1, switch=1)])
    assert final(writes) == {
        ("high", "recent_kernel"): 0,
        ("low", "recent_kernel"): 0,
        ("low", "utilization_switch"): 0,
    }


def test_two_active_tasks_of_one_priority_both_get_the_core_limit_but_neither_is_blocked() -> None:
    writes = observe([region("x", 1, 2), region("y", 1, 2)])
    assert final(writes) == {
        ("x", "recent_kernel"): 1,
        ("y", "recent_kernel"): 1,
        ("x", "utilization_switch"): 1,
        ("y", "utilization_switch"): 1,
    }


def test_a_high_priority_task_is_never_blocked_by_a_low_one() -> None:
    writes = observe([region("high", 0, 2, switch=1), region("low", 1, 2)])
    assert ("high", "recent_kernel") in final(writes)
    assert final(writes)[("high", "recent_kernel")] == 1
    assert final(writes)[("high", "utilization_switch")] == 0


def test_a_round_on_settled_values_writes_nothing_new() -> None:
    # after the block: low is -1 with the switch on, high keeps launching (HAMi-core sets it back to 2)
    writes = observe([region("high", 0, 2), region("low", 1, -1, switch=1)])
    assert writes == [Write("high", "recent_kernel", 1)]
