"""What the ledger believes of a pod's allocation annotations (``records.believed_node``, docs/trust.md): a bound
pod is charged to ``spec.nodeName``; a pod is charged only when hami's scheduler serves it or this process reserved
it itself; the annotations alone never decide the node of a bound pod."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.protocol import keys
from hami.protocol.objects import Pod
from hami.scheduling.records import HAMI_SCHEDULER, RecordReader, believed_node, record_from_pod
from tests.unit.scheduling.builders import container, pod, vendors

GPU = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000}
ALLOCATED = "hami.io/vgpu-devices-allocated"


def placed(
    on: str = "victim-node",
    *,
    scheduler: str = HAMI_SCHEDULER,
    bound: str = "",
    phase: str = "",
    card: str = "GPU-victim-0",
) -> Pod:
    """A pod that carries an allocation of ``card`` on node ``on`` (none with ``on=""``)."""
    annotations = {keys.VGPU_NODE: on, ALLOCATED: f"{card},NVIDIA,4000,0:;"} if on else {}
    return pod([container(GPU)], annotations=annotations, scheduler_name=scheduler, node_name=bound, phase=phase)


def test_a_bound_pod_is_charged_to_the_node_it_is_bound_to_not_the_one_its_annotation_names() -> None:
    record = record_from_pod(placed("victim-node", bound="own-node"), vendors())
    assert record is not None
    assert record.node == "own-node"


def test_an_unbound_pod_of_hamis_scheduler_is_charged_to_the_node_hami_chose() -> None:
    record = record_from_pod(placed("chosen"), vendors())
    assert record is not None
    assert (record.node, record.charges[0].uuid) == ("chosen", "GPU-victim-0")


@pytest.mark.parametrize("bound", ["", "own-node"], ids=["unbound", "bound"])
@pytest.mark.parametrize("scheduler", ["nobody", "default-scheduler", ""])
def test_a_pod_of_another_scheduler_charges_nothing_whatever_it_carries(scheduler: str, bound: str) -> None:
    forged = placed(scheduler=scheduler, bound=bound)
    assert record_from_pod(forged, vendors()) is None


def test_a_pod_of_another_scheduler_counts_while_this_process_reserved_it() -> None:
    mine = placed("chosen", scheduler="second-profile")
    record = record_from_pod(mine, vendors(), ours=True)
    assert record is not None
    assert record.node == "chosen"


def test_the_scheduler_names_believed_are_the_ones_given() -> None:
    theirs = placed(scheduler="my-hami")
    assert RecordReader(vendors()).read(theirs) is None
    record = RecordReader(vendors(), ("my-hami",)).read(theirs)
    assert record is not None
    assert RecordReader(vendors(), ("my-hami",)).read(placed()) is None


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_charges_nothing_even_when_ours(phase: str) -> None:
    done = placed(phase=phase, bound="n")
    assert record_from_pod(done, vendors(), ours=True) is None


names = st.sampled_from(["", "hami-scheduler", "my-hami", "default-scheduler", "nobody"])
nodes = st.sampled_from(["", "a", "b"])


@given(
    scheduler=names,
    believed=st.frozensets(names.filter(bool), max_size=2),
    annotated=nodes,
    bound=nodes,
    phase=st.sampled_from(["", "Pending", "Running", "Succeeded", "Failed"]),
    ours=st.booleans(),
)
def test_the_rule(scheduler: str, believed: frozenset[str], annotated: str, bound: str, phase: str, ours: bool) -> None:
    """For any pod: it is charged iff it carries hami.io/vgpu-node, has not finished, and is served by one of the
    scheduler names given or reserved by this process; then on its bound node, else on the annotated one. So a pod
    that is neither hami's nor ours never charges a card, and a bound pod never charges another node's."""
    p = placed(annotated, scheduler=scheduler, bound=bound, phase=phase)
    record = RecordReader(vendors(), believed).read(p, ours=ours)
    trusted = bool(annotated) and phase not in ("Succeeded", "Failed") and (ours or scheduler in believed)
    assert (record is not None) == trusted
    assert believed_node(p, believed, ours=ours) == (record.node if record is not None else None)
    if record is not None:
        assert record.node == (bound or annotated)
        assert not bound or record.node == bound
