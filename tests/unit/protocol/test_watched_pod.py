"""``WatchedPod``, the scheduler's pod watch view: a ``Pod`` in every field but the containers' ``env``."""

from __future__ import annotations

import gc
from typing import Any

import msgspec
import pytest

from hami.protocol.objects import Pod, WatchedPod

ENV = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}, {"name": "FROM", "valueFrom": {"fieldRef": {"x": "y"}}}]

PODS: list[dict[str, Any]] = [
    {"metadata": {"name": "bare"}},
    {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "full",
            "namespace": "team",
            "uid": "u-1",
            "resourceVersion": "42",
            "annotations": {"hami.io/vgpu-node": "n1", "hami.io/vgpu-devices-allocated": "GPU-0,NVIDIA,1000,10:;"},
            "labels": {"app": "x", "scheduling.x-k8s.io/pod-group": "g"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionTimestamp": "2026-01-02T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {
            "nodeName": "n1",
            "schedulerName": "hami-scheduler",
            "nodeSelector": {"gpu": "on"},
            "priority": 100,
            "schedulingGroup": {"podGroupName": "g"},
            "initContainers": [
                {"name": "warm", "env": ENV, "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                {"name": "side", "restartPolicy": "Always", "env": ENV, "securityContext": {"privileged": True}},
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "cuda",
                    "env": ENV * 3,
                    "resources": {
                        "limits": {"nvidia.com/gpu": 2, "nvidia.com/gpumem": "3Gi"},
                        "requests": {"cpu": 1.5},
                    },
                    "securityContext": {"privileged": False},
                },
                {"name": "log", "env": []},
            ],
        },
        "status": {
            "phase": "Running",
            "initContainerStatuses": [{"name": "warm", "state": {"terminated": {"exitCode": 0}}}],
        },
    },
]


def _without_env(pod: Pod) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(pod)
    for section in ("containers", "initContainers"):
        for c in out.get("spec", {}).get(section, []):
            c.pop("env", None)
    return out


@pytest.mark.parametrize("raw", PODS, ids=[p["metadata"]["name"] for p in PODS])
def test_a_watched_pod_is_the_pod_without_the_containers_env(raw: dict[str, Any]) -> None:
    body = msgspec.json.encode(raw)
    pod = msgspec.json.decode(body, type=Pod)
    watched = msgspec.json.decode(body, type=WatchedPod)
    assert isinstance(watched, Pod)
    assert all(c.env == [] for c in [*watched.spec.containers, *watched.spec.init_containers])
    assert _without_env(watched) == _without_env(pod)
    assert watched.key == pod.key


def test_the_full_pod_still_decodes_the_env() -> None:
    pod = msgspec.json.decode(msgspec.json.encode(PODS[1]), type=Pod)
    assert [v.name for v in pod.spec.containers[0].env][:2] == ["CUDA_DISABLE_CONTROL", "FROM"]


def test_views_are_not_tracked_by_the_cyclic_collector() -> None:
    body = msgspec.json.encode(PODS[1])
    for view in (Pod, WatchedPod):
        pod = msgspec.json.decode(body, type=view)
        assert not gc.is_tracked(pod)
        assert not gc.is_tracked(pod.metadata)
        assert not gc.is_tracked(pod.spec.containers[0])


CONDITIONS = [
    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
    {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": "m"},
    {"type": "PodScheduled", "status": "True"},
]


@pytest.mark.parametrize("deleting", [False, True])
def test_a_watched_pod_keeps_only_the_disruption_target_of_a_terminating_pod(deleting: bool) -> None:
    """Preemption reads only that condition of a terminating pod; no other condition is kept (issue 19's size)."""
    meta: dict[str, Any] = {"name": "p", **({"deletionTimestamp": "2026-01-02T00:00:00Z"} if deleting else {})}
    body = msgspec.json.encode({"metadata": meta, "status": {"phase": "Running", "conditions": CONDITIONS}})
    watched = msgspec.json.decode(body, type=WatchedPod)
    assert [c.type for c in watched.status.conditions] == (["DisruptionTarget"] if deleting else [])
    assert not watched.status.raw_conditions  # no view of the message is kept
    assert "conditions" not in msgspec.to_builtins(watched)["status"] or deleting
    full = msgspec.json.decode(body, type=Pod)
    assert [c.type for c in full.status.conditions] == ["Ready", "DisruptionTarget", "PodScheduled"]


def test_unreadable_conditions_are_none_believed() -> None:
    body = b'{"metadata": {"deletionTimestamp": "x"}, "status": {"conditions": {"type": "DisruptionTarget"}}}'
    assert msgspec.json.decode(body, type=WatchedPod).status.conditions == ()
