"""``hami.scheduling.gangs``: which members' allocations a gang drops (hypothesis), and the book of gangs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hami.protocol import keys
from hami.protocol.objects import ObjectMeta, Pod, PodSpec, SchedulingGroup
from hami.scheduling.gangs import Gang, GangBook, Member, to_release

members = st.lists(
    st.builds(
        Member,
        uid=st.uuids().map(str),
        name=st.just("m"),
        bound=st.booleans(),
        binding=st.booleans(),
        holds=st.booleans(),
    ),
    max_size=8,
    unique_by=lambda m: m.uid,
)


@given(members, st.none() | st.integers(1, 8))
def test_a_release_drops_only_unbound_idle_holders_and_never_a_gang_at_its_minimum(
    others: list[Member], minimum: int | None
) -> None:
    dropped = to_release(Gang(min_count=minimum), "failing", others)

    assert all(m.holds and not m.bound and not m.binding for m in dropped)
    placed = sum(1 for m in others if m.bound or m.holds)
    if minimum is not None and placed >= minimum:
        assert dropped == []
    else:
        assert {m.uid for m in dropped} == {m.uid for m in others if m.holds and not m.bound and not m.binding}


def pod(name: str, uid: str, *, label: str = "", group: str = "", namespace: str = "ns") -> Pod:
    labels = {keys.POD_GROUP_LABEL: label} if label else {}
    spec = PodSpec(scheduling_group=SchedulingGroup(pod_group_name=group) if group else None)
    return Pod(metadata=ObjectMeta(name=name, namespace=namespace, uid=uid, labels=labels), spec=spec)


def test_the_book_follows_pods_joining_moving_and_leaving_gangs() -> None:
    book = GangBook()
    book.pod_event(pod("a", "1", label="g"))
    book.pod_event(pod("b", "2", group="g"))
    book.pod_event(pod("c", "3", label="g", namespace="other"))
    assert book.gangs[("ns", "g")].members == {"1": "a", "2": "b"}

    book.pod_event(pod("a", "1", label="h"))
    book.pod_event(pod("b", "2", group="g"), gone=True)

    assert ("ns", "g") not in book.gangs
    assert book.gangs[("ns", "h")].members == {"1": "a"}
    assert book.group_event("ns", "h", 2, failed=True) is True
    assert book.group_event("ns", "h", 2, failed=True) is False  # the same condition again
