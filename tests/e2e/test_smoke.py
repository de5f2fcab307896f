"""Smoke test: the real kube-scheduler binds a plain pod to a fake node made through the API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler


def test_control_plane_serves_the_built_version(control_plane: ControlPlane, kube: KubeClient) -> None:
    version = kube.get("/version")
    assert version["gitVersion"] == control_plane.binaries.kubernetes_version
    assert kube.get("/readyz", verbose="true")  # served to the admin as well as to anonymous callers


def test_fake_node_keeps_status(make_node: Callable[..., dict[str, Any]], kube: KubeClient) -> None:
    make_node(
        "smoke-gpu-node",
        extended={"nvidia.com/gpu": 4},
        labels={"gpu": "on"},
        annotations={"hami.io/node-handshake": "Requesting_2026-01-01 00:00:00"},
    )
    node = kube.get("/api/v1/nodes/smoke-gpu-node")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert node["status"]["capacity"]["cpu"] == "16"
    assert node["metadata"]["labels"]["gpu"] == "on"
    assert node["metadata"]["annotations"]["hami.io/node-handshake"].startswith("Requesting_")
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    assert not node["spec"].get("taints")  # admission's not-ready taint is lifted, as a controller would


def test_default_scheduler_binds_pod_to_fake_node(
    start_scheduler: Callable[..., Scheduler],
    make_node: Callable[..., dict[str, Any]],
    kube: KubeClient,
    namespace: str,
) -> None:
    make_node("smoke-node", cpu="4", memory="8Gi")
    start_scheduler()
    kube.create_pod(namespace, "plain", requests={"cpu": "100m", "memory": "64Mi"})

    pod = kube.wait_for_pod_scheduled(namespace, "plain")

    assert pod["spec"]["nodeName"] == "smoke-node"
    assert pod["status"]["phase"] == "Pending"  # no kubelet runs the pod
