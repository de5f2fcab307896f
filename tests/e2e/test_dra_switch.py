"""A node switched to DRA while a pod of hami's device plugin still holds a share of one of its cards
(docs/dra-mode-switching.md), on the real control plane.

The node registers two cards in HAMi's format; hami's extender (kube-scheduler calling it) places a device-plugin
pod on card 0. Then ``hami dra-plugin`` starts for the node under the chart's ServiceAccount, ClusterRole and
admission policy (a token bound to a stand-in pod on the node, as the DaemonSet's is): it publishes both cards, card
0 with the ``NoSchedule`` device taint ``hami.io/device-plugin-pods``. The default kube-scheduler then allocates a
claim asking for a share on card 1, never card 0; once the pod is deleted the taint goes and card 0 takes a claim
too big for what card 1 has left.

No kubelet runs: the plugin is not registered with one, only its slice publishing is exercised.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hami.protocol import keys
from tests.e2e.cluster import ApiError, ControlPlane, KubeClient, Scheduler, _write_kubeconfig, wait_until
from tests.e2e.hami_stack import SCHEDULER_NAME, FakeDevicePlugin, HamiScheduler, extender_config, gpu_limits
from tests.e2e.hami_stack import register_annotation as registration
from tests.e2e.identities import RELEASE_NAMESPACE
from tests.e2e.test_dra import DraStack
from tests.e2e.test_dra_plugin_identity import _alive, dra_identity, plugin_process, sockets_dir, token_on

pytestmark = pytest.mark.e2e

__all__ = ["dra_identity"]  # the chart's identity for the plugin (a module fixture of the identity test)

DRIVER = "hami-core-gpu.project-hami.io"
DRA = "/apis/resource.k8s.io/v1"
CARD_MIB = 24000
HELD = {"key": keys.DEVICE_PLUGIN_PODS_TAINT, "value": "true", "effect": "NoSchedule"}


class Switched(DraStack):
    """The DRA objects of the test, for hami's own driver (the fixtures' class is for NVIDIA's)."""

    def claim_share(self, name: str, memory: str, cores: str) -> None:
        request = {"deviceClassName": self.device_class, "allocationMode": "ExactCount", "count": 1,
                   "capacity": {"requests": {"memory": memory, "cores": cores}}}  # fmt: skip
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}}  # fmt: skip
        self.kube.post(f"{DRA}/namespaces/{self.namespace}/resourceclaims", body)
        self.claims.append(name)

    def hami_class(self) -> None:
        selector = {"cel": {"expression": f'device.driver == "{DRIVER}"'}}
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": self.device_class},
                "spec": {"selectors": [selector]}}  # fmt: skip
        self.kube.post(f"{DRA}/deviceclasses", body)
        self.classes.append(self.device_class)

    def device_of(self, claim: str) -> str:
        (result,) = self.allocated(claim)["status"]["allocation"]["devices"]["results"]
        device: str = result["device"]
        return device

    def taints(self) -> dict[str, list[dict[str, Any]]] | None:
        """The published devices' taints (``timeAdded`` left out), or None before the slice exists."""
        try:
            published = self.kube.get(f"{DRA}/resourceslices/{self.node}-{DRIVER}")
        except ApiError:
            return None
        return {
            d["name"]: [{k: v for k, v in t.items() if k != "timeAdded"} for t in d.get("taints", [])]
            for d in published["spec"]["devices"]
        }


@pytest.fixture
def switched(
    dra_identity: ControlPlane,
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
) -> Iterator[Switched]:
    """hami, kube-scheduler calling it, the default kube-scheduler (claims), a fake device plugin releasing the
    node lock, one node registering two cards ``GPU-<node>-<i>`` of 24000 MiB."""
    hami = HamiScheduler(dra_identity, ["--node-lock-timeout=60s"])
    s = Switched(kube, namespace, hami)
    s.node = f"{namespace}-sw"
    annotations = {keys.NVIDIA_REGISTER: registration(s.node, 2, CARD_MIB)}
    make_node(s.node, extended={"nvidia.com/gpu": 20}, labels={"hami-e2e/run": namespace}, annotations=annotations)
    releaser = FakeDevicePlugin(dra_identity, f"hami-e2e/run={namespace}")
    try:
        hami.start()
        start_scheduler(extender_config(hami))
        start_scheduler(None)
        releaser.start()
        yield s
    finally:
        releaser.stop()
        s.remove()
        hami.stop()
    assert releaser.error is None, f"the fake device plugin failed: {releaser.error!r}"
    assert hami.problems() == [], "hami logged errors"


def test_a_card_device_plugin_pods_hold_is_held_back_from_claims_until_they_are_gone(
    switched: Switched, tmp_path: Path
) -> None:
    s = switched
    card0 = s.uuid(0)
    # 1. Extender mode: a device-plugin pod on card 0, placed by hami.
    s.kube.create_pod(s.namespace, "extender-pod", limits=gpu_limits(mem=3000, cores=30), scheduler_name=SCHEDULER_NAME,
                      annotations={keys.NVIDIA_USE_GPUUUID: card0},
                      spec={"nodeSelector": {"kubernetes.io/hostname": s.node}})  # fmt: skip
    s.kube.wait_for_pod_scheduled(s.namespace, "extender-pod")
    assert s.card_of("extender-pod") == card0

    # 2. The node switches: hami's DRA plugin starts under the chart's identity and holds card 0 back.
    run = uuid.uuid4().hex[:8]
    fixture = "".join(
        f"  - {{uuid: {s.uuid(i)}, name: Tesla T4, memory_mib: {CARD_MIB}, minor: {i}}}\n" for i in (0, 1)
    )
    (tmp_path / "fake.yaml").write_text("devices:\n" + fixture)
    token, stand_in = token_on(s.hami.plane, s.kube, s.node)
    config = tmp_path / "plugin.kubeconfig"
    _write_kubeconfig(config, s.hami.plane.server, s.hami.plane.ca_pem, token)
    plugin = plugin_process(s.node, config, tmp_path, run, f"--scheduler-name={SCHEDULER_NAME}")
    s.slices.append(f"{s.node}-{DRIVER}")
    plugin.start()
    try:
        wait_until(lambda: s.taints() == {"hami-gpu-0": [HELD], "hami-gpu-1": []}, timeout=60,
                   description="card 0 published held back", check=lambda: _alive(plugin))  # fmt: skip

        # 3. kube-scheduler allocates a claim for a share: card 1, not card 0 (which has room by capacity).
        s.hami_class()
        s.claim_share("first", memory="3000Mi", cores="30")
        s.claim_pod("first-user", "first")
        s.kube.wait_for_pod_scheduled(s.namespace, "first-user")
        assert s.device_of("first") == "hami-gpu-1"

        # 4. The device-plugin pod goes: card 0 is offered again and takes a share card 1 has no room for.
        s.kube.delete_pod(s.namespace, "extender-pod")
        wait_until(lambda: s.taints() == {"hami-gpu-0": [], "hami-gpu-1": []}, timeout=60,
                   description="card 0 offered to claims again", check=lambda: _alive(plugin))  # fmt: skip
        s.claim_share("second", memory="22000Mi", cores="30")
        s.claim_pod("second-user", "second")
        s.kube.wait_for_pod_scheduled(s.namespace, "second-user")
        assert s.device_of("second") == "hami-gpu-0"
        log = plugin.log_file.read_text()
        assert f"GPU {card0}: held back from claims: used by {s.namespace}/extender-pod" in log
        assert f"GPU {card0}: no pod of the device plugin holds it any more" in log
    finally:
        plugin.stop()
        shutil.rmtree(sockets_dir(run), ignore_errors=True)
        s.kube.delete_pod(RELEASE_NAMESPACE, stand_in)
