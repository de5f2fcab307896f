"""Allocation annotations count only when they can be trusted (issue 39 item 1, docs/trust.md), against the real
API server under the chart's identities (``tests/e2e/identities.py``):

* the chart's allocation policy refuses a tenant's writes of hami's allocation annotations, on a pod it creates as
  on one it updates, and lets the device plugin write only the bind phase and to-allocate, only on its own node's
  pods, while hami's scheduler writes them all;
* a pod that carries forged annotations anyway (written by an administrator, whom the policy does not hold, as
  while the policy is absent) blocks no card: one of another scheduler, unbound, and one bound to another node
  naming this node's card; the next pod still fits on the empty card, and hami's ledger is what the real pods hold.

The HAMi -> hami switch-over keeping HAMi's allocations is ``test_extender.py::test_a_switch_from_hami_to_hami_and_
back_keeps_every_allocation``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hami.protocol import keys
from tests.e2e.cluster import ApiError, ControlPlane, KubeClient, Scheduler
from tests.e2e.hami_stack import GPU, SCHEDULER_NAME, HamiScheduler, extender_config, gpu_limits, register_annotation
from tests.e2e.identities import DEVICE_PLUGIN_SA, HAMI_SA, ChartIdentities, chart_identities

ALLOCATED = keys.NVIDIA_KEYS.allocated
TO_ALLOCATE = keys.NVIDIA_KEYS.to_allocate or ""


@pytest.fixture(scope="module")
def identities(control_plane: ControlPlane) -> ChartIdentities:
    return chart_identities(control_plane)


def refusal(call: Callable[..., object], *args: object, **kwargs: object) -> str:
    """The message of the API server's refusal of ``call(*args, **kwargs)`` by the allocation policy."""
    with pytest.raises(ApiError) as refused:
        call(*args, **kwargs)
    assert refused.value.status == 422, refused.value  # a ValidatingAdmissionPolicy's Deny: Invalid
    return str(refused.value)


def forged(node: str, card: str, mem: int) -> dict[str, str]:
    """What hami writes on a pod it placed on ``node``'s ``card``, copied by hand."""
    allocation = f"{card},NVIDIA,{mem},100:;"
    return {
        keys.VGPU_NODE: node,
        keys.VGPU_TIME: str(int(time.time())),
        keys.BIND_PHASE: "success",
        ALLOCATED: allocation,
        TO_ALLOCATE: allocation,
    }


def test_a_tenant_may_not_write_hamis_allocation_annotations(
    identities: ChartIdentities, kube: KubeClient, namespace: str, make_node: Callable[..., dict[str, Any]]
) -> None:
    node = f"{namespace}-gpu"
    make_node(node)
    pods = f"/api/v1/namespaces/{namespace}/pods"
    with identities.tenant(namespace) as tenant:
        # creating a pod that already carries them, unbound or bound, of any scheduler
        for name, bound in (("squat", None), ("squat-bound", node)):
            message = refusal(
                tenant.create_pod, namespace, name, scheduler_name="nobody", node_name=bound,
                annotations=forged(node, f"GPU-{node}-0", 16000),
            )  # fmt: skip
            every = f"{ALLOCATED}, {keys.VGPU_NODE}, {keys.VGPU_TIME}, {keys.BIND_PHASE}, {TO_ALLOCATE}"
            assert f"may not write {every} on pod {namespace}/{name}: hami's allocation annotations" in message
        # adding, changing or removing them on its own pod
        tenant.create_pod(namespace, "mine", scheduler_name=SCHEDULER_NAME, annotations={"example.com/note": "x"})
        for change in (
            {keys.VGPU_NODE: node},
            {ALLOCATED: f"GPU-{node}-0,NVIDIA,16000,100:;"},
            {keys.BIND_PHASE: "success"},
            {TO_ALLOCATE: ";"},
            {keys.NVIDIA_MIG_ALLOCATIONS: "[]"},
        ):
            (key,) = change
            assert f"may not write {key} on pod {namespace}/mine" in refusal(
                tenant.patch, f"{pods}/mine", {"metadata": {"annotations": change}}
            )
        tenant.patch(f"{pods}/mine", {"metadata": {"annotations": {"example.com/note": "y"}}})  # its own: allowed

        # what hami wrote stays as hami wrote it: the tenant can neither change nor remove it
        written = forged(node, f"GPU-{node}-0", 4000)
        with identities.client(identities.token(HAMI_SA)) as hami:
            hami.patch(f"{pods}/mine", {"metadata": {"annotations": written}})
        undos: list[dict[str, str | None]] = [{ALLOCATED: None}, {keys.VGPU_NODE: "elsewhere"}, {keys.VGPU_TIME: None}]
        for undo in undos:
            refusal(tenant.patch, f"{pods}/mine", {"metadata": {"annotations": undo}})
        # a full update that leaves them as they are is no write of them
        current = tenant.get(f"{pods}/mine")
        current["metadata"]["labels"] = {"team": "a"}
        tenant.put(f"{pods}/mine", current)
    assert kube.get_pod(namespace, "mine")["metadata"]["annotations"] == {"example.com/note": "y", **written}
    assert [p["metadata"]["name"] for p in kube.list_pods(namespace)] == ["mine"]


def test_a_tenant_may_not_change_dra_modes_marks_on_its_pod(
    identities: ChartIdentities, kube: KubeClient, namespace: str
) -> None:
    """DRA mode's claim controller creates claims from ``hami.io/dra-requests``: edited after admission it would ask
    for what no admission checked. On UPDATE only hami's scheduler may change it or the ``hami.io/dra`` label (on
    CREATE the webhook writes them in the same request: ``/webhook`` refuses a pod carrying them)."""
    pods = f"/api/v1/namespaces/{namespace}/pods"
    marks = {"labels": {keys.DRA_LABEL: "true"}, "annotations": {keys.DRA_REQUESTS: "{}"}}
    with identities.tenant(namespace) as tenant:
        tenant.create_pod(namespace, "dra", scheduler_name="nobody", **marks)  # no webhook here: CREATE passes
        edits: list[tuple[dict[str, Any], str]] = [
            ({"annotations": {keys.DRA_REQUESTS: '{"big-main-x2b4z": {}}'}}, f"annotation {keys.DRA_REQUESTS}"),
            ({"annotations": {keys.DRA_REQUESTS: None}}, f"annotation {keys.DRA_REQUESTS}"),
            ({"labels": {keys.DRA_LABEL: "false"}}, f"label {keys.DRA_LABEL}"),
            ({"labels": {keys.DRA_LABEL: None}}, f"label {keys.DRA_LABEL}"),
        ]
        for edit, named in edits:
            message = refusal(tenant.patch, f"{pods}/dra", {"metadata": edit})
            assert (
                f"may not change {named} on pod {namespace}/dra: DRA mode creates the pod's ResourceClaims" in message
            )
        tenant.create_pod(namespace, "plain", scheduler_name="nobody")
        for edit, named in edits[:1] + edits[2:3]:  # adding them later is a change too
            assert f"may not change {named}" in refusal(tenant.patch, f"{pods}/plain", {"metadata": edit})
        tenant.patch(f"{pods}/dra", {"metadata": {"labels": {"team": "a"}}})  # other labels: the tenant's own
    with identities.client(identities.token(HAMI_SA)) as hami:
        hami.patch(f"{pods}/dra", {"metadata": {"annotations": {keys.DRA_REQUESTS: '{"x": {}}'}}})
    held = kube.get_pod(namespace, "dra")["metadata"]
    assert (held["annotations"][keys.DRA_REQUESTS], held["labels"]) == (
        '{"x": {}}',
        {keys.DRA_LABEL: "true", "team": "a"},
    )


def test_the_device_plugin_writes_only_the_bind_phase_and_to_allocate_of_its_own_nodes_pods(
    identities: ChartIdentities, kube: KubeClient, namespace: str, make_node: Callable[..., dict[str, Any]]
) -> None:
    run = uuid.uuid4().hex[:8]
    mine, theirs = f"trust-mine-{run}", f"trust-theirs-{run}"
    pods = f"/api/v1/namespaces/{namespace}/pods"
    for node in (mine, theirs):
        make_node(node)
        kube.create_pod(
            namespace, f"on-{node}", scheduler_name=SCHEDULER_NAME, node_name=node,
            annotations=forged(node, f"GPU-{node}-0", 4000),
        )  # fmt: skip
    with (
        identities.device_plugin_pod(mine) as pod,
        identities.client(identities.token(DEVICE_PLUGIN_SA, pod)) as plugin,
    ):
        plugin.patch(f"{pods}/on-{mine}", {"metadata": {"annotations": {TO_ALLOCATE: ";", keys.BIND_PHASE: "success"}}})
        for change in ({ALLOCATED: f"GPU-{theirs}-0,NVIDIA,24000,100:;"}, {keys.VGPU_NODE: theirs}):
            (key,) = change
            message = refusal(plugin.patch, f"{pods}/on-{mine}", {"metadata": {"annotations": change}})
            assert f"may not write {key}" in message
        # another node's pod: both policies refuse it; the API server names whichever it judged first
        refused = refusal(
            plugin.patch, f"{pods}/on-{theirs}", {"metadata": {"annotations": {keys.BIND_PHASE: "failed"}}}
        )
        assert "which is not bound to that node" in refused or f"may not write {keys.BIND_PHASE}" in refused
    held = kube.get_pod(namespace, f"on-{mine}")["metadata"]["annotations"]
    assert (held[TO_ALLOCATE], held[keys.BIND_PHASE], held[keys.VGPU_NODE]) == (";", "success", mine)
    assert kube.get_pod(namespace, f"on-{theirs}")["metadata"]["annotations"][keys.BIND_PHASE] == "success"


@pytest.fixture
def hami_and_scheduler(
    control_plane: ControlPlane, start_scheduler: Callable[..., Scheduler]
) -> Iterator[Callable[[], HamiScheduler]]:
    """Factory: start hami (under the chart's identity) and kube-scheduler calling it; hami stopped afterwards."""
    started: list[HamiScheduler] = []

    def start() -> HamiScheduler:
        hami = HamiScheduler(control_plane, [])
        started.append(hami)
        hami.start()
        start_scheduler(extender_config(hami))
        return hami

    yield start
    for hami in started:
        hami.stop()
    for hami in started:
        assert hami.problems() == [], "hami logged errors"


def test_a_forged_allocation_blocks_no_card(
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    hami_and_scheduler: Callable[[], HamiScheduler],
) -> None:
    """An administrator (whom the policy does not hold, as while it is absent) writes what a tenant could not: a
    pod of a scheduler nobody serves, and a pod bound to another node, each naming the only card of ``target`` as
    full. Neither is charged there: a 12,000 MiB pod lands on that 16,000 MiB card."""
    target, other = f"{namespace}-target", f"{namespace}-other"
    card = f"GPU-{target}-0"
    label = {"hami-e2e/run": namespace}
    for node in (target, other):
        make_node(
            node,
            extended={GPU: 10},
            labels=label,
            annotations={keys.NVIDIA_REGISTER: register_annotation(node, 1, 16000)},
        )
    kube.create_pod(
        namespace, "squatter", scheduler_name="nobody", limits=gpu_limits(), annotations=forged(target, card, 16000)
    )
    kube.create_pod(
        namespace, "bound-elsewhere", scheduler_name=SCHEDULER_NAME, node_name=other, limits=gpu_limits(),
        annotations=forged(target, card, 16000),
    )  # fmt: skip
    hami = hami_and_scheduler()

    kube.create_pod(
        namespace, "fits", scheduler_name=SCHEDULER_NAME, limits=gpu_limits(mem=12000, cores=50),
        spec={"nodeSelector": {"kubernetes.io/hostname": target}},
    )  # fmt: skip

    bound = kube.wait_for_pod_scheduled(namespace, "fits")
    assert bound["spec"]["nodeName"] == target
    assert bound["metadata"]["annotations"][ALLOCATED] == f"{card},NVIDIA,12000,50:;"
    assert hami.ledger() == {card: (1, 12000, 50)}, "only the pod hami placed is charged"
    assert "squatter" not in kube.get_pod(namespace, "squatter")["spec"].get("nodeName", "")
