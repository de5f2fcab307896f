"""Cluster Autoscaler's simulation against a real ``hami scheduler`` (docs/autoscaler.md): /filter with whole Node
objects, as a non-node-cache extender client sends them, over HTTP to the extender listener of hami running under
the chart's identity on the real API server. A template node is answered, a cold-zero template takes its group's
profile, and nothing is written: the pending pod, the live node and the namespace's events stay as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from hami.protocol import keys
from tests.e2e.cluster import ApiError, ControlPlane, KubeClient
from tests.e2e.hami_stack import GPU, SCHEDULER_NAME, HamiScheduler, gpu_limits, register_annotation

GROUP = "node.kubernetes.io/instance-type"


def template(
    name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Node as Cluster Autoscaler builds a template: never created in the API."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


def simulations(hami: HamiScheduler, result: str) -> float:
    samples = hami.metrics().get("hami_filter_simulations_total", [])
    return sum(value for labels, value in samples if labels.get("result") == result)


def without_handshake(node: dict[str, Any]) -> dict[str, str]:
    """A live node's annotations less hami's handshake stamp (live scheduling writes it, not the simulation)."""
    annotations: dict[str, str] = node["metadata"].get("annotations") or {}
    return {k: v for k, v in annotations.items() if k != keys.NVIDIA_KEYS.handshake}


def absent(kube: KubeClient, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as err:
        return err.status == 404
    return False


def test_a_template_node_call_is_answered_and_nothing_is_written(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "a100x2").write_text(f"{keys.NVIDIA_REGISTER}: '{register_annotation('profile', 2, 24000)}'\n")
    live = f"{namespace}-live"
    make_node(live, extended={GPU: 20}, labels={"hami-e2e/run": namespace},
              annotations={keys.NVIDIA_REGISTER: register_annotation(live, 2, 24000)})  # fmt: skip
    hami = HamiScheduler(control_plane, [f"--device-profiles={profiles}"])
    hami.start()
    try:
        pod = kube.create_pod(
            namespace, "pending", limits=gpu_limits(gpu=1, mem=20000, cores=50), scheduler_name=SCHEDULER_NAME
        )  # fmt: skip  (no kube-scheduler runs: it stays pending)
        node_before = kube.get(f"/api/v1/nodes/{live}")
        warm = template(
            "template-node-for-warm-1", annotations={keys.NVIDIA_REGISTER: register_annotation("w", 1, 8000)}
        )
        cold = template("template-node-for-a100x2-1", labels={GROUP: "a100x2"})
        cpu = template("template-node-for-cpu-1", labels={GROUP: "c5.xlarge"})
        body = {"Pod": pod, "Nodes": {"metadata": {}, "items": [warm, cold, cpu]}, "NodeNames": None}

        answer = httpx.post(f"{hami.url}/filter", json=body, timeout=30).json()

        assert answer["NodeNames"] == ["template-node-for-a100x2-1"]
        assert answer["Nodes"]["items"][0]["metadata"]["name"] == "template-node-for-a100x2-1"
        assert answer["FailedNodes"] == {
            "template-node-for-warm-1": "1/1 CardInsufficientMemory",
            "template-node-for-cpu-1": "node unregistered for NVIDIA",
        }
        after = kube.get_pod(namespace, "pending")
        assert after["metadata"]["resourceVersion"] == pod["metadata"]["resourceVersion"]
        assert keys.VGPU_NODE not in (after["metadata"].get("annotations") or {})
        assert without_handshake(kube.get(f"/api/v1/nodes/{live}")) == without_handshake(node_before)
        assert kube.get(f"/api/v1/namespaces/{namespace}/events")["items"] == []
        assert absent(kube, f"/api/v1/nodes/{cold['metadata']['name']}")
        assert simulations(hami, "fits") == 1
        assert hami.problems() == []
    finally:
        hami.stop()
    assert set(hami.exit_codes) == {0}
