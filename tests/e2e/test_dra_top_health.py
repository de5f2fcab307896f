"""``hami top`` shows a GPU hami's DRA plugin tainted as unhealthy, live, on the real control plane.

A node registers two cards in HAMi's format and publishes them in a ResourceSlice of hami's own DRA driver, built
by the plugin's own code (``hami.deviceplugin.dra.slices``), card 1 with the plugin's health taint. The real
kube-apiserver (DRA device taints on by default) stores the slice; ``hami top`` reads it with the admin
kubeconfig. The slice is then rewritten without the taint, as the plugin does when the GPU recovers.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from hami.deviceplugin.discovery import GpuInfo
from hami.deviceplugin.dra.slices import DRIVER, TAINT_KEY, NodeFacts, SliceDevice, device_name, resource_slice
from hami.protocol import keys
from tests.e2e.cluster import ControlPlane, KubeClient
from tests.e2e.hami_stack import GPU, HAMI, register_annotation

pytestmark = pytest.mark.e2e

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CARD_MIB = 24000


def hami_slice(node: str, node_uid: str, unhealthy: set[int]) -> dict[str, Any]:
    devices = [
        SliceDevice(
            device_name(i),
            GpuInfo(f"GPU-{node}-{i}", i, "A100", CARD_MIB, minor=i),
            CARD_MIB << 20,
            healthy=i not in unhealthy,
        )
        for i in range(2)
    ]
    return resource_slice(node, node_uid, devices, NodeFacts("580.65.06"))


def top(plane: ControlPlane, node: str) -> dict[str, Any]:
    command = [str(HAMI), "top", "--kubeconfig", str(plane.kubeconfig), "--node", node, "-o", "json"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    shown: dict[str, Any] = json.loads(result.stdout)
    return shown


def test_hami_top_shows_a_tainted_dra_gpu_unhealthy_and_healthy_again_when_untainted(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, make_node: Callable[..., dict[str, Any]]
) -> None:
    node = f"{namespace}-top"
    annotations = {keys.NVIDIA_REGISTER: register_annotation(node, 2, CARD_MIB)}
    made = make_node(node, extended={GPU: 20}, labels={"hami-e2e/run": namespace}, annotations=annotations)
    body = hami_slice(node, made["metadata"]["uid"], unhealthy={1})
    name = body["metadata"]["name"]
    stored = kube.post(SLICES, body)
    try:
        assert stored["spec"]["devices"][1]["taints"][0]["key"] == TAINT_KEY  # the API server kept the taint
        shown = top(control_plane, node)
        health = {c["uuid"]: c["health"] for c in shown["nodes"][0]["cards"]}
        assert health == {f"GPU-{node}-0": "healthy", f"GPU-{node}-1": "unhealthy"}
        (tainted,) = shown["dra"]["tainted"]
        assert (tainted["driver"], tainted["device"], tainted["uuid"]) == (DRIVER, "hami-gpu-1", f"GPU-{node}-1")
        assert tainted["taints"] == [f"{TAINT_KEY}=true:NoSchedule"]

        spec = hami_slice(node, made["metadata"]["uid"], unhealthy=set())["spec"]
        kube.patch(f"{SLICES}/{name}", {"metadata": {"resourceVersion": stored["metadata"]["resourceVersion"]},
                                         "spec": {**spec, "pool": {**spec["pool"], "generation": 2}}})  # fmt: skip
        shown = top(control_plane, node)
        assert {c["health"] for c in shown["nodes"][0]["cards"]} == {"healthy"}
        assert shown["dra"]["tainted"] == []
    finally:
        kube.delete(f"{SLICES}/{name}")
