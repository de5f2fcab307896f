"""Identity on every write (issue 11, item 2) against the real control plane: the API server's own answers to
hami's UID and resourceVersion preconditions, and the attacks of the issue sent straight to hami's extender as
forged or stale requests — each must leave the pods, the node lock and hami's ledger as they were.

Set-up per test: one fake node with two 24,000 MiB cards, ``hami scheduler`` (a subprocess, as users run it),
kube-scheduler calling it, and the ``FakeDevicePlugin`` that marks bound pods ``success`` and releases the lock.
There is no kubelet, so a "running" pod is one whose status this test sets to Running, as a kubelet would.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from hami.errors import Conflict
from hami.k8s.client import KubeClient as HamiKubeClient
from hami.k8s.cluster import KubeCluster
from hami.k8s.config import load_kubeconfig
from hami.protocol import keys
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler, wait_until
from tests.e2e.hami_stack import (
    GPU,
    SCHEDULER_NAME,
    FakeDevicePlugin,
    HamiScheduler,
    extender_config,
    gpu_limits,
    register_annotation,
    usage_from_annotations,
)

FORGED_UID = "0badc0de-0000-4000-8000-000000000000"
NOBODY = "no-such-scheduler"  # pods for it stay pending: nothing schedules them but a forged request


@dataclass
class Gpu:
    """One test's node, hami and kube-scheduler."""

    kube: KubeClient
    namespace: str
    hami: HamiScheduler
    node: str

    def pod(self, name: str, mem: int, *, gpu: int = 1, scheduler: str = SCHEDULER_NAME) -> dict[str, Any]:
        created: dict[str, Any] = self.kube.create_pod(
            self.namespace,
            name,
            limits=gpu_limits(gpu=gpu, mem=mem),
            scheduler_name=scheduler,
            spec={"nodeSelector": {"kubernetes.io/hostname": self.node}},
        )
        return created

    def get(self, name: str) -> dict[str, Any]:
        return self.kube.get_pod(self.namespace, name)

    def running(self, name: str, mem: int) -> dict[str, Any]:
        """A pod placed by hami, bound, allocated by the (fake) device plugin and running."""
        self.pod(name, mem)
        self.kube.wait_for_pod(
            self.namespace,
            name,
            lambda p: (p["metadata"].get("annotations") or {}).get(keys.BIND_PHASE) == "success",
            description=f"{name} bound and allocated",
        )
        path = f"/api/v1/namespaces/{self.namespace}/pods/{name}/status"
        self.kube.patch(path, {"status": {"phase": "Running"}})
        return self.get(name)

    def lock(self) -> str | None:
        node = self.kube.get(f"/api/v1/nodes/{self.node}")
        value: str | None = (node["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)
        return value

    def card_memory(self) -> dict[str, int]:
        """MiB in use per card, recounted from every pod's allocation annotation (the API's truth)."""
        usage = usage_from_annotations(self.kube.list_pods(self.namespace))
        return {uuid: mem for uuid, (_, mem, _) in usage.items()}

    def post(self, verb: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST straight to hami's extender, as anyone who can reach it could."""
        answer = httpx.post(f"{self.hami.url}/{verb}", json=body, timeout=30.0)
        assert answer.status_code == 200, answer.text
        result: dict[str, Any] = answer.json()
        return result


@pytest.fixture
def gpu(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
) -> Iterator[Gpu]:
    label = {"hami-e2e/run": namespace}
    node = f"{namespace}-gpu"
    annotations = {keys.NVIDIA_REGISTER: register_annotation(node, 2, 24000)}
    make_node(node, extended={GPU: 20}, labels=label, annotations=annotations)
    hami = HamiScheduler(control_plane, ["--node-lock-timeout=60s"])
    hami.start()
    start_scheduler(extender_config(hami))
    plugin = FakeDevicePlugin(control_plane, f"hami-e2e/run={namespace}")
    plugin.start()
    yield Gpu(kube, namespace, hami, node)
    plugin.stop()
    hami.stop()
    assert plugin.error is None, f"the fake device plugin failed: {plugin.error!r}"
    assert hami.problems() == [], "hami logged errors"
    assert set(hami.exit_codes) == {0}, "hami did not shut down cleanly on SIGTERM"


def pending_body(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` as a stale kube-scheduler cache (or a forger) would send it: unbound, pending, no allocation."""
    body = copy.deepcopy(pod)
    body["spec"].pop("nodeName", None)
    body["metadata"]["annotations"] = {}
    body["metadata"]["labels"] = {}
    body["status"] = {"phase": "Pending"}
    return body


# --- the API server's preconditions, through hami's own client --------------------------------------------


async def test_the_api_server_refuses_pod_writes_and_bindings_for_another_uid_or_a_stale_version(
    control_plane: ControlPlane, kube: KubeClient, namespace: str
) -> None:
    old = kube.create_pod(namespace, "web-0", scheduler_name=NOBODY)
    kube.delete_pod(namespace, "web-0")
    new = kube.create_pod(namespace, "web-0", scheduler_name=NOBODY)  # same name, new UID
    old_uid, new_uid = old["metadata"]["uid"], new["metadata"]["uid"]
    version = new["metadata"]["resourceVersion"]

    async with HamiKubeClient(load_kubeconfig(control_plane.kubeconfig)) as client:
        cluster = KubeCluster(client)
        with pytest.raises(Conflict) as replaced:
            await cluster.patch_pod_metadata(namespace, "web-0", {"a": "old"}, uid=old_uid)
        await cluster.patch_pod_metadata(namespace, "web-0", {"a": "new"}, uid=new_uid, resource_version=version)
        with pytest.raises(Conflict) as stale:
            await cluster.patch_pod_metadata(namespace, "web-0", {"a": "again"}, uid=new_uid, resource_version=version)
        with pytest.raises(Conflict) as binding:
            await cluster.bind(namespace, "web-0", old_uid, "some-node")
        with pytest.raises(Conflict) as late:  # a Binding sent for the version before hami's last write
            await cluster.bind(namespace, "web-0", new_uid, "some-node", resource_version=version)
        current = (await cluster.get_pod(namespace, "web-0")).metadata.resource_version
        await cluster.bind(namespace, "web-0", new_uid, "some-node", resource_version=current)

    # A merge patch naming another UID: 422 (the UID is immutable), not 409; hami reports it as a Conflict.
    assert replaced.value.status == 422
    assert str(replaced.value).startswith(
        f"pod {namespace}/web-0 is no longer the pod with UID {old_uid} (deleted, or deleted and re-created); "
        f'nothing written: Pod "web-0" is invalid: metadata.uid: Invalid value: "{old_uid}": field is immutable'
    )
    assert stale.value.status == 409
    assert "the object has been modified" in str(stale.value)
    assert binding.value.status == 409  # the Binding carries the UID as a precondition
    assert f"UID in precondition: {old_uid}, UID in object meta: {new_uid}" in str(binding.value)
    # The Binding's resourceVersion is a precondition too (hami's guard against a Binding landing late)
    assert late.value.status == 409
    assert f"ResourceVersion in precondition: {version}," in str(late.value)
    pod = kube.get_pod(namespace, "web-0")
    assert pod["metadata"]["annotations"] == {"a": "new"}
    assert pod["spec"].get("nodeName") == "some-node"  # bound on the version it was sent for


# --- the attacks of issue 11 ------------------------------------------------------------------------------


def test_a_forged_filter_for_a_running_pod_changes_nothing(gpu: Gpu) -> None:
    web = gpu.running("web", mem=20000)
    uid = web["metadata"]["uid"]
    before_ledger = gpu.hami.ledger()
    forged = pending_body(web)
    forged["metadata"]["uid"] = FORGED_UID
    genuine = pending_body(web)  # a forger who read the real UID

    made_up = gpu.post("filter", {"Pod": forged, "NodeNames": [gpu.node]})
    real = gpu.post("filter", {"Pod": genuine, "NodeNames": [gpu.node]})

    assert made_up == {
        "Error": (
            f"pod {gpu.namespace}/web: the request is for UID {FORGED_UID}, but the pod of that name is UID {uid} "
            "(deleted and re-created, or a stale or forged request); nothing reserved or written"
        )
    }
    assert real == {
        "Error": (
            f"pod {gpu.namespace}/web (UID {uid}) is already bound to node {gpu.node}; "
            "hami never places a bound pod again"
        )
    }
    after = gpu.get("web")
    assert after["metadata"]["resourceVersion"] == web["metadata"]["resourceVersion"]  # not written at all
    assert gpu.hami.ledger() == before_ledger == {f"GPU-{gpu.node}-0": (1, 20000, 30)}

    gpu.pod("honest", mem=10000)  # goes to the card the running pod does not use
    gpu.kube.wait_for_pod_scheduled(gpu.namespace, "honest")
    assert gpu.card_memory() == {f"GPU-{gpu.node}-0": 20000, f"GPU-{gpu.node}-1": 10000}
    assert gpu.hami.ledger() == usage_from_annotations(gpu.kube.list_pods(gpu.namespace))


@pytest.mark.parametrize("uid", [None, FORGED_UID], ids=["missing-uid", "wrong-uid"])
def test_bind_with_a_missing_or_wrong_uid_changes_nothing(gpu: Gpu, uid: str | None) -> None:
    web = gpu.running("web", mem=3000)
    request: dict[str, Any] = {"PodName": "web", "PodNamespace": gpu.namespace, "Node": gpu.node}
    if uid is not None:
        request["PodUID"] = uid

    answer = gpu.post("bind", request)

    reason = (
        "ExtenderBindingArgs.PodUID is empty; hami binds a pod only by its UID"
        if uid is None
        else (
            f"the request is for UID {uid}, but the pod of that name is UID {web['metadata']['uid']} "
            "(deleted and re-created, or a stale or forged request)"
        )
    )
    assert answer == {"Error": f"binding {gpu.namespace}/web to {gpu.node} refused: {reason}"}
    after = gpu.get("web")
    assert after["metadata"]["resourceVersion"] == web["metadata"]["resourceVersion"]
    assert after["metadata"]["annotations"][keys.BIND_PHASE] == "success"
    assert gpu.lock() is None  # not taken in its name: the node keeps taking GPU binds
    gpu.pod("next", mem=3000)
    assert gpu.kube.wait_for_pod_scheduled(gpu.namespace, "next")["spec"]["nodeName"] == gpu.node


def test_a_stale_filter_after_delete_and_recreate_leaves_no_reservation(gpu: Gpu) -> None:
    # kube-scheduler's cache can still hold web-0 after it was deleted and re-created under the same name.
    old = gpu.pod("web-0", mem=20000, scheduler=NOBODY)
    gpu.kube.delete_pod(gpu.namespace, "web-0")
    new = gpu.pod("web-0", mem=20000, scheduler=NOBODY)
    old_uid, new_uid = old["metadata"]["uid"], new["metadata"]["uid"]
    stale = {"Pod": pending_body(old), "NodeNames": [gpu.node]}

    # The watch delivers the new pod within moments; before that, the annotation PATCH (carrying the old UID)
    # is what refuses, and its reservation is rolled back. Either way nothing may stay behind.
    def refused() -> dict[str, Any] | None:
        answer = gpu.post("filter", stale)
        return answer if "Error" in answer else None

    answer = wait_until(refused, description="hami refusing the stale body")
    bind = gpu.post("bind", {"PodName": "web-0", "PodNamespace": gpu.namespace, "PodUID": old_uid, "Node": gpu.node})

    assert answer == {
        "Error": (
            f"pod {gpu.namespace}/web-0: the request is for UID {old_uid}, but the pod of that name is UID "
            f"{new_uid} (deleted and re-created, or a stale or forged request); nothing reserved or written"
        )
    }
    assert bind["Error"].startswith(f"binding {gpu.namespace}/web-0 to {gpu.node} ")
    pod = gpu.get("web-0")
    assert pod["metadata"]["uid"] == new_uid
    assert (pod["metadata"].get("annotations") or {}) == {}
    assert not pod["spec"].get("nodeName")
    assert gpu.lock() is None
    assert gpu.hami.ledger() == {}

    gpu.kube.delete_pod(gpu.namespace, "web-0")
    gpu.pod("whole", mem=24000, gpu=2)  # both cards, whole: only fits if nothing leaked
    gpu.kube.wait_for_pod_scheduled(gpu.namespace, "whole")
    assert gpu.card_memory() == {f"GPU-{gpu.node}-0": 24000, f"GPU-{gpu.node}-1": 24000}
    assert gpu.hami.ledger() == {f"GPU-{gpu.node}-0": (1, 24000, 30), f"GPU-{gpu.node}-1": (1, 24000, 30)}


def test_a_filter_for_a_pod_deleted_meanwhile_is_rolled_back_and_its_bind_fails(gpu: Gpu) -> None:
    # The watch may not have told hami yet: /filter answers, and the annotation PATCH (404 here; 422 for a pod
    # re-created under the name) is what finds out; the reservation is rolled back and the bind fails.
    old = gpu.pod("gone", mem=20000, scheduler=NOBODY)
    gpu.kube.delete_pod(gpu.namespace, "gone")

    answer = gpu.post("filter", {"Pod": pending_body(old), "NodeNames": [gpu.node]})
    bind = gpu.post(
        "bind", {"PodName": "gone", "PodNamespace": gpu.namespace, "PodUID": old["metadata"]["uid"], "Node": gpu.node}
    )

    assert answer == {"NodeNames": [gpu.node]}  # whether or not the watch had delivered the deletion yet
    assert 'pods "gone" not found' in bind["Error"]
    assert gpu.lock() is None
    assert gpu.hami.ledger() == {}
