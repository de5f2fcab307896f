"""The pace of the nudges to kube-scheduler (``hami.scheduling.requeue``): one write per node per interval, a
trailing one for what freed inside it, and which pods count as waiting."""

from __future__ import annotations

import pytest

from hami.protocol.objects import ObjectMeta, Pod, PodSpec, PodStatus
from hami.scheduling.requeue import RequeuePacer, waits_for_scheduler


def test_the_first_freeing_on_a_node_is_written_at_once() -> None:
    pacer = RequeuePacer(interval=5.0)
    assert pacer.freed("n1", now=100.0) == 0.0
    assert pacer.freed("n2", now=100.0) == 0.0  # each node has its own pace


def test_a_freeing_inside_the_interval_gets_one_trailing_write_at_its_end() -> None:
    pacer = RequeuePacer(interval=5.0)
    pacer.freed("n1", now=100.0)
    pacer.done("n1", now=100.0, written=True)

    assert pacer.freed("n1", now=101.5) == pytest.approx(3.5)
    assert pacer.freed("n1", now=102.0) is None  # the trailing write comes after this one: it covers it
    assert pacer.freed("n1", now=104.9) is None
    pacer.done("n1", now=105.0, written=True)
    assert pacer.freed("n1", now=107.0) == pytest.approx(3.0)


def test_a_freeing_after_the_interval_is_written_at_once() -> None:
    pacer = RequeuePacer(interval=5.0)
    pacer.freed("n1", now=100.0)
    pacer.done("n1", now=100.0, written=True)
    assert pacer.freed("n1", now=105.0) == 0.0


def test_a_dropped_nudge_does_not_hold_the_next_one_back() -> None:
    """Nothing waited when it came due (or this replica stopped leading): no write, so no pace to keep."""
    pacer = RequeuePacer(interval=5.0)
    pacer.freed("n1", now=100.0)
    pacer.done("n1", now=100.0, written=False)
    assert pacer.freed("n1", now=100.1) == 0.0


def test_a_node_gone_is_forgotten_and_old_times_are_pruned() -> None:
    pacer = RequeuePacer(interval=5.0)
    for node in ("n1", "n2"):
        pacer.freed(node, now=100.0)
        pacer.done(node, now=100.0, written=True)
    pacer.freed("n3", now=100.0)
    pacer.forget("n1")
    pacer.forget("n3")
    assert pacer.due == set()
    assert pacer.freed("n1", now=100.1) == 0.0  # gone and back: a new node as far as the pace goes

    pacer.done("n1", now=106.0, written=True)
    assert pacer.last == {"n1": 106.0}  # n2's time no longer holds anything back: dropped
    assert pacer.due == set()


def _pod(scheduler: str = "hami-scheduler", node: str = "", phase: str = "Pending", deleting: bool = False) -> Pod:
    deletion = "2026-01-01T00:00:00Z" if deleting else None
    meta = ObjectMeta(name="p", namespace="ns", uid="u", deletion_timestamp=deletion)
    return Pod(metadata=meta, spec=PodSpec(scheduler_name=scheduler, node_name=node), status=PodStatus(phase=phase))


@pytest.mark.parametrize(
    ("pod", "waits"),
    [
        pytest.param(_pod(), True, id="unbound-for-hami"),
        pytest.param(_pod(scheduler="default-scheduler"), False, id="another-scheduler"),
        pytest.param(_pod(node="n1"), False, id="bound"),
        pytest.param(_pod(deleting=True), False, id="being-deleted"),
        pytest.param(_pod(phase="Failed"), False, id="finished"),
    ],
)
def test_the_pods_that_count_as_waiting(pod: Pod, waits: bool) -> None:
    assert waits_for_scheduler(pod, "hami-scheduler") is waits
