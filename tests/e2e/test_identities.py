"""The chart's ServiceAccounts against the real API server: each may do what its process does and nothing more,
and the device plugin's writes are held to its own node and the pods bound to it by the chart's
ValidatingAdmissionPolicy, keyed on the node name in its pod-bound token (``tests/e2e/identities.py``).

hami and kube-scheduler run under these identities in every extender and webhook test (``HamiScheduler``,
``extender_config``); the real device plugin runs under its identity in ``test_device_plugin.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.cluster import ApiError, ControlPlane, KubeClient
from tests.e2e.identities import (
    CERTS_SA,
    DEVICE_PLUGIN_SA,
    HAMI_SA,
    KUBE_SCHEDULER_SA,
    RELEASE_NAMESPACE,
    ChartIdentities,
    chart_identities,
)

NS = RELEASE_NAMESPACE


@pytest.fixture(scope="module")
def identities(control_plane: ControlPlane) -> ChartIdentities:
    return chart_identities(control_plane)


def can(client: KubeClient, verb: str, resource: str, *, group: str = "", namespace: str = "", name: str = "") -> bool:
    """``kubectl auth can-i`` for the client's own identity (a SelfSubjectAccessReview)."""
    resource, _, subresource = resource.partition("/")
    attributes = {"verb": verb, "group": group, "resource": resource, "subresource": subresource}
    attributes |= {"namespace": namespace, "name": name}
    review = client.post(
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        },
    )
    return bool(review["status"].get("allowed"))


Check = tuple[str, str, dict[str, str]]  # verb, resource[/subresource], {group, namespace, name}
LEASE = {"group": "coordination.k8s.io", "namespace": NS, "name": "hami-scheduler"}
OTHER_LEASE = {"group": "coordination.k8s.io", "namespace": NS, "name": "kube-scheduler"}
DRA = {"group": "resource.k8s.io"}  # read-only: hami counts DRA allocations, never makes or changes one

ALLOWED: dict[str, list[Check]] = {
    HAMI_SA: [
        ("list", "pods", {}), ("watch", "pods", {}), ("get", "pods", {"namespace": "tenant"}),
        ("patch", "pods", {"namespace": "tenant"}), ("create", "pods/binding", {"namespace": "tenant"}),
        ("list", "nodes", {}), ("watch", "nodes", {}), ("get", "nodes", {}), ("patch", "nodes", {}),
        ("create", "events", {"namespace": "tenant"}), ("patch", "events", {"namespace": "tenant"}),
        ("list", "resourcequotas", {}), ("watch", "resourcequotas", {}),
        ("get", "leases", LEASE), ("list", "leases", LEASE), ("watch", "leases", LEASE),
        ("list", "resourceslices", DRA), ("watch", "resourceslices", DRA), ("list", "resourceclaims", DRA),
        ("watch", "resourceclaims", DRA), ("list", "deviceclasses", DRA), ("watch", "deviceclasses", DRA),
        # hami's own preemption, which the chart's scheduler.preemption=auto always picks
        ("create", "pods/eviction", {"namespace": "tenant"}), ("patch", "pods/status", {"namespace": "tenant"}),
        ("list", "poddisruptionbudgets", {"group": "policy"}),
        # gangs: each PodGroup's minimum and scheduling condition (docs/gangs.md)
        ("list", "podgroups", {"group": "scheduling.k8s.io"}), ("watch", "podgroups", {"group": "scheduling.k8s.io"}),
        ("list", "podgroups", {"group": "scheduling.x-k8s.io"}),
        ("watch", "podgroups", {"group": "scheduling.x-k8s.io"}),
    ],
    KUBE_SCHEDULER_SA: [
        ("list", "pods", {}), ("create", "pods/binding", {"namespace": "tenant"}),
        ("patch", "pods/status", {"namespace": "tenant"}), ("list", "nodes", {}),
        ("list", "persistentvolumeclaims", {}), ("create", "leases", {"group": "coordination.k8s.io", "namespace": NS}),
        ("get", "leases", LEASE), ("update", "leases", LEASE),
    ],
    DEVICE_PLUGIN_SA: [
        ("get", "nodes", {}), ("patch", "nodes", {}), ("get", "pods", {"namespace": "tenant"}), ("list", "pods", {}),
        ("patch", "pods", {"namespace": "tenant"}), ("create", "events", {"namespace": "default"}),
    ],
    CERTS_SA: [
        ("create", "secrets", {"namespace": NS}), ("get", "secrets", {"namespace": NS, "name": "hami-scheduler-tls"}),
        ("patch", "secrets", {"namespace": NS, "name": "hami-scheduler-tls"}),
        ("patch", "mutatingwebhookconfigurations", {"group": "admissionregistration.k8s.io", "name": "hami-webhook"}),
    ],
}  # fmt: skip

REFUSED: dict[str, list[Check]] = {
    HAMI_SA: [
        ("create", "pods", {"namespace": "tenant"}), ("delete", "pods", {"namespace": "tenant"}),
        ("update", "pods/status", {"namespace": "tenant"}), ("delete", "pods/eviction", {"namespace": "tenant"}),
        ("get", "poddisruptionbudgets", {"group": "policy", "namespace": "tenant"}),
        ("watch", "poddisruptionbudgets", {"group": "policy"}), ("get", "secrets", {"namespace": NS}),
        ("list", "secrets", {}), ("delete", "nodes", {}),
        ("update", "nodes/status", {}), ("delete", "events", {"namespace": "tenant"}),
        ("get", "resourcequotas", {"namespace": "tenant"}),
        ("list", "leases", {"group": "coordination.k8s.io", "namespace": NS}),
        ("update", "leases", LEASE), ("create", "leases", {"group": "coordination.k8s.io", "namespace": NS}),
        ("create", "serviceaccounts/token", {"namespace": NS, "name": KUBE_SCHEDULER_SA}),
        ("patch", "mutatingwebhookconfigurations", {"group": "admissionregistration.k8s.io", "name": "hami-webhook"}),
        ("get", "resourceclaims", DRA | {"namespace": "tenant"}),
        ("update", "resourceclaims/status", DRA | {"namespace": "tenant"}),
        ("patch", "resourceclaims", DRA | {"namespace": "tenant"}), ("create", "resourceslices", DRA),
        ("delete", "resourceslices", DRA), ("create", "deviceclasses", DRA),
    ],
    KUBE_SCHEDULER_SA: [
        ("patch", "pods", {"namespace": "tenant"}), ("patch", "nodes", {}), ("get", "secrets", {"namespace": NS}),
        ("update", "leases", OTHER_LEASE | {"name": "someone-else"}),
        ("create", "serviceaccounts/token", {"namespace": NS, "name": HAMI_SA}),
    ],
    DEVICE_PLUGIN_SA: [
        ("watch", "pods", {}), ("create", "pods", {"namespace": "tenant"}), ("delete", "pods", {"namespace": "tenant"}),
        ("create", "pods/binding", {"namespace": "tenant"}), ("update", "pods/status", {"namespace": "tenant"}),
        ("update", "nodes/status", {}), ("delete", "nodes", {}), ("get", "secrets", {"namespace": NS}),
    ],
    CERTS_SA: [
        ("get", "secrets", {"namespace": NS, "name": "other"}), ("list", "secrets", {"namespace": NS}),
        ("get", "secrets", {"namespace": "kube-system", "name": "hami-scheduler-tls"}),
        ("patch", "mutatingwebhookconfigurations", {"group": "admissionregistration.k8s.io", "name": "other"}),
    ],
}  # fmt: skip


@pytest.mark.parametrize("account", [HAMI_SA, KUBE_SCHEDULER_SA, DEVICE_PLUGIN_SA, CERTS_SA])
def test_each_service_account_may_do_what_its_process_does_and_no_more(
    identities: ChartIdentities, account: str
) -> None:
    with identities.client(identities.token(account)) as client:
        allowed = [c for c in ALLOWED[account] if not can(client, c[0], c[1], **c[2])]
        refused = [c for c in REFUSED[account] if can(client, c[0], c[1], **c[2])]
    assert allowed == [], f"{account} lacks rights its process uses"
    assert refused == [], f"{account} has rights its process does not use"


def test_hami_is_refused_what_it_does_not_need(identities: ChartIdentities, kube: KubeClient, namespace: str) -> None:
    with identities.client(identities.token(HAMI_SA)) as hami:
        for call in (
            lambda: hami.get(f"/api/v1/namespaces/{NS}/secrets"),
            lambda: hami.create_pod(namespace, "planted"),
            lambda: hami.delete(f"/api/v1/namespaces/{namespace}/pods/absent"),
            lambda: hami.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"),
        ):
            with pytest.raises(ApiError) as refused:
                call()
            assert refused.value.status == 403
        # The one Lease hami follows, listed as hami's reflector lists it (a metadata.name field selector).
        leases = hami.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases", fieldSelector="metadata.name=hami-scheduler"
        )
        assert leases["items"] == []
    assert kube.list_pods(namespace) == []


@pytest.fixture
def two_nodes(kube: KubeClient, make_node: Callable[..., dict[str, Any]], namespace: str) -> tuple[str, str]:
    """Nodes ``mine`` and ``theirs`` with a pod bound to each (``on-mine``, ``on-theirs``) in ``namespace``."""
    run = uuid.uuid4().hex[:8]
    mine, theirs = f"dp-mine-{run}", f"dp-theirs-{run}"
    for node, pod in ((mine, "on-mine"), (theirs, "on-theirs")):
        make_node(node, annotations={"example.com/owner": "ops"})
        kube.create_pod(namespace, pod, node_name=node, annotations={"example.com/owner": "ops"})
    return mine, theirs


def refusal(call: Callable[..., object], *args: object) -> str:
    """The message of the API server's refusal of ``call(*args)``."""
    with pytest.raises(ApiError) as refused:
        call(*args)
    assert refused.value.status in (403, 422), refused.value  # RBAC: 403; the admission policy: 422 (Invalid)
    return str(refused.value)


def node_event(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "hami-e2e-", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node},
        "type": "Warning",
        "reason": "AsymmetricGPUP2PLink",
        "message": "e2e",
    }


def test_the_device_plugin_may_write_only_hami_annotations_of_its_own_node_and_its_pods(
    identities: ChartIdentities, kube: KubeClient, namespace: str, two_nodes: tuple[str, str]
) -> None:
    mine, theirs = two_nodes
    pods = f"/api/v1/namespaces/{namespace}/pods"
    # not one of the allocation keys, so only the node restriction judges it (the allocation policy, judged in no
    # fixed order beside it, refuses the bind phase on another node's pod too: tests/e2e/test_trust.py)
    hami_note = {"metadata": {"annotations": {"hami.io/e2e-note": "seen"}}}
    with (
        identities.device_plugin_pod(mine) as pod,
        identities.client(identities.token(DEVICE_PLUGIN_SA, pod)) as plugin,
    ):
        me = plugin.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )["status"]["userInfo"]
        assert me["username"] == f"system:serviceaccount:{NS}:{DEVICE_PLUGIN_SA}"
        assert me["extra"]["authentication.kubernetes.io/node-name"] == [mine]

        # Allowed: hami.io/ annotations of its own node and of the pods bound to it, events about its node.
        plugin.patch(f"/api/v1/nodes/{mine}", {"metadata": {"annotations": {"hami.io/node-nvidia-register": "[]"}}})
        plugin.patch(f"/api/v1/nodes/{mine}", {"metadata": {"annotations": {"hami.io/node-nvidia-register": None}}})
        plugin.patch(f"{pods}/on-mine", hami_note)
        plugin.post("/api/v1/namespaces/default/events", node_event(mine))

        # Refused: another node, a pod on another node, anything but hami.io/ annotations, other events.
        assert f"may not change node {theirs}" in refusal(plugin.patch, f"/api/v1/nodes/{theirs}", hami_note)
        assert f"may not change pod {namespace}/on-theirs" in refusal(plugin.patch, f"{pods}/on-theirs", hami_note)
        for path in (f"/api/v1/nodes/{mine}", f"{pods}/on-mine"):
            assert "only annotations" in refusal(plugin.patch, path, {"metadata": {"labels": {"x": "y"}}})
            for change in ({"example.com/owner": "plugin"}, {"example.com/owner": None}, {"example.com/new": "x"}):
                body = {"metadata": {"annotations": change}}
                assert "only hami.io/ annotations" in refusal(plugin.patch, path, body)
        assert "only annotations" in refusal(plugin.patch, f"/api/v1/nodes/{mine}", {"spec": {"unschedulable": True}})
        assert "events only about that node" in refusal(
            plugin.post, "/api/v1/namespaces/default/events", node_event(theirs)
        )
        assert "cannot delete" in refusal(plugin.delete, f"/api/v1/nodes/{theirs}")

    theirs_now = kube.get(f"/api/v1/nodes/{theirs}")["metadata"]
    assert theirs_now["annotations"] == {"example.com/owner": "ops"}
    assert "hami.io/e2e-note" not in kube.get_pod(namespace, "on-theirs")["metadata"]["annotations"]
    on_mine = kube.get_pod(namespace, "on-mine")["metadata"]
    assert on_mine["annotations"] == {"example.com/owner": "ops", "hami.io/e2e-note": "seen"}
    assert not on_mine.get("labels")


def test_a_device_plugin_token_without_a_node_name_may_write_nothing(
    identities: ChartIdentities, namespace: str, two_nodes: tuple[str, str]
) -> None:
    mine, _ = two_nodes
    note = {"metadata": {"annotations": {"hami.io/e2e-note": "seen"}}}  # only the node restriction judges it
    with identities.client(identities.token(DEVICE_PLUGIN_SA)) as unbound:  # not bound to a pod: no node name
        for call, path, body in (
            (unbound.patch, f"/api/v1/nodes/{mine}", note),
            (unbound.patch, f"/api/v1/namespaces/{namespace}/pods/on-mine", note),
            (unbound.post, "/api/v1/namespaces/default/events", node_event(mine)),
        ):
            assert "carries no node name" in refusal(call, path, body)
