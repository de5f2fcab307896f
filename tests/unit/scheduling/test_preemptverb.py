"""The preempt verb's answer (``hami.scheduling.preemptverb``) over random clusters and priorities, each node's
victims checked with the real ``decide`` on a what-if copy; and the verb's wire format read back as Go writes it."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from hami.protocol.extender import (
    MetaPod,
    MetaVictims,
    PreemptionResult,
    decode_preemption_args,
    encode_preemption_result,
)
from hami.scheduling.preemption import Budget
from hami.scheduling.preemptverb import NEVER, NO_VICTIMS, answer_preempt_verb
from hami.scheduling.request import PodRequest
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.test_preemption import _fits_by_decide, _within_capacity, scenarios
from tests.unit.scheduling.test_properties import PROPS

Scenario = tuple[ClusterState, PodRequest, Sequence[Budget]]


@st.composite
def offers(draw: st.DrawFn, scenario: Scenario) -> dict[str, list[str]]:
    """What kube-scheduler offers: some of the nodes (and a node hami does not know), mostly with no victims
    (1.38's placeholders), sometimes with lower-priority pods of the node its own dry run chose."""
    s, pending, _ = scenario
    names = draw(st.lists(st.sampled_from([*sorted(s.nodes), "unknown-node"]), min_size=1, unique=True))
    out: dict[str, list[str]] = {}
    for name in names:
        lower = sorted(u for u in s.pods_by_node.get(name, ()) if s.pods[u].priority < pending.priority)
        chosen = bool(lower) and draw(st.booleans())
        out[name] = draw(st.lists(st.sampled_from(lower), max_size=2, unique=True)) if chosen else []
    return out


@PROPS
@given(st.data())
def test_each_answered_node_fits_after_minimal_lower_priority_victims_leave(data: st.DataObject) -> None:
    s, pending, budgets = scenario = data.draw(scenarios())
    offered = data.draw(offers(scenario))
    answer = answer_preempt_verb(s, pending, offered, dict.fromkeys(offered, 0), budgets)
    assert set(answer.victims) | set(answer.refused) == set(offered)
    assert not set(answer.victims) & set(answer.refused)
    if not pending.preempts:  # preemptionPolicy: Never
        assert answer.victims == {}
        assert set(answer.refused.values()) == {NEVER}
        return
    for node, uids in answer.victims.items():
        given_here = offered[node]
        assert list(uids[: len(given_here)]) == given_here  # kube-scheduler's own victims stay, first
        ours = frozenset(uids[len(given_here) :])
        assert uids, "a node is answered only with victims"
        for uid in ours:
            record = s.pods[uid]
            assert record.node == node
            assert record.priority < pending.priority
            assert not record.preempted
        leaving = frozenset(u for u in s.pods_by_node.get(node, ()) if s.pods[u].preempted) | frozenset(given_here)
        after = _fits_by_decide(s, pending, node, leaving | ours)
        assert after is not None, f"{pending.key} does not fit on {node} without {sorted(ours)}"
        assert _within_capacity(after)
        for uid in ours:  # minimal: any one of hami's victims back and the pod no longer fits
            assert _fits_by_decide(s, pending, node, leaving | (ours - {uid})) is None
    for node, why in answer.refused.items():
        if why == NO_VICTIMS:
            leaving = frozenset(u for u in s.pods_by_node.get(node, ()) if s.pods[u].preempted)
            assert _fits_by_decide(s, pending, node, leaving) is not None
            assert offered[node] == []


# --- the wire format ---------------------------------------------------------------------------------------------

uids = st.text("abcdef0123456789-", min_size=1, max_size=12)
nodes = st.dictionaries(
    st.text("abcxyz-0123456789", min_size=1, max_size=8),
    st.tuples(st.lists(uids, max_size=4), st.integers(0, 5)),
    max_size=4,
)


@PROPS
@given(nodes, st.booleans(), st.booleans())
def test_the_args_go_writes_are_read_back(by_node: dict[str, tuple[list[str], int]], meta: bool, nil: bool) -> None:
    """Both forms kube-scheduler writes: UIDs when nodeCacheCapable, whole pods otherwise; Go's nil slice is
    ``null``, and the form not used is ``null``."""

    def victims(pods: list[str], count: int) -> dict[str, object]:
        listed: object = [{"UID": u} if meta else {"metadata": {"uid": u, "name": "x"}} for u in pods]
        return {"Pods": None if nil and not pods else listed, "NumPDBViolations": count}

    form = {n: victims(p, c) for n, (p, c) in by_node.items()}
    body = {
        "Pod": {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}},
        "NodeNameToVictims": None if meta else form,
        "NodeNameToMetaVictims": form if meta else None,
    }
    args = decode_preemption_args(msgspec.json.encode(body))
    assert args.pod.metadata.uid == "u"
    assert args.victims == {n: tuple(p) for n, (p, _) in by_node.items()}
    assert args.violations == {n: c for n, (_, c) in by_node.items()}


def test_the_result_carries_go_field_names_and_an_empty_map_for_no_candidate() -> None:
    result = PreemptionResult({"n1": MetaVictims([MetaPod("uid-a"), MetaPod("uid-b")], 1)})
    assert msgspec.json.decode(encode_preemption_result(result)) == {
        "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-a"}, {"UID": "uid-b"}], "NumPDBViolations": 1}}
    }
    assert encode_preemption_result(PreemptionResult({})) == b'{"NodeNameToMetaVictims":{}}'
