"""A node whose kubelet stops reporting the registered devices, against the real control plane (issue 39, item 4).

The device plugin of a node went away (or restarts): kubelet marks its devices unhealthy, ``status.allocatable`` of
``nvidia.com/gpu`` drops to 0, and the registration annotation stays. Here the node is a fake one (no kubelet), so the
test writes what kubelet would: the allocatable through the status subresource. hami, running as the chart's
ServiceAccount behind kube-scheduler, must place nothing there and say why (``NodeDevicesNotAllocatable`` in the
extender's answer, hence kube-scheduler's FailedScheduling, hami's FilteringFailed event and ``hami explain``), and
bind the waiting pod as soon as the allocatable is back. The real node's version (a real kubelet, the real device
plugin restarted) is ``tests/e2e/test_device_plugin.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hami.protocol import keys
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler, wait_until
from tests.e2e.hami_stack import (
    GPU,
    SCHEDULER_NAME,
    HamiScheduler,
    extender_config,
    gpu_limits,
    is_bound,
    pod_events,
    register_annotation,
)

REASON = "NodeDevicesNotAllocatable"


@pytest.fixture
def hami(control_plane: ControlPlane, start_scheduler: Callable[..., Scheduler]) -> Iterator[HamiScheduler]:
    scheduler = HamiScheduler(control_plane, ["--node-lock-timeout=60s"])
    scheduler.start()
    start_scheduler(extender_config(scheduler))
    yield scheduler
    scheduler.stop()
    assert scheduler.problems() == [], "hami logged errors"
    assert set(scheduler.exit_codes) == {0}, "hami did not shut down cleanly on SIGTERM"


def set_allocatable(kube: KubeClient, node: str, gpus: int) -> None:
    """What kubelet writes when its device plugin leaves (0) or registers again: ``status.allocatable``."""
    kube.patch(f"/api/v1/nodes/{node}/status", {"status": {"allocatable": {GPU: str(gpus)}}})


def explain(plane: ControlPlane, pod: str) -> dict[str, Any]:
    command = [str(Path(sys.executable).parent / "hami"), "explain", pod, "--kubeconfig", str(plane.kubeconfig)]
    result = subprocess.run([*command, "-o", "json"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_no_pod_is_placed_while_kubelet_reports_no_devices_and_the_waiting_one_is_bound_once_it_does(
    hami: HamiScheduler,
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
) -> None:
    label = {"hami-e2e/run": namespace}
    node = f"{namespace}-restarting"
    register = {keys.NVIDIA_REGISTER: register_annotation(node, 2, 24000)}  # two cards of split count 10
    make_node(node, extended={GPU: 20}, labels=label, annotations=register)
    set_allocatable(kube, node, 0)  # the plugin is gone: kubelet keeps the capacity, allocatable 0

    kube.create_pod(
        namespace, "waits", limits=gpu_limits(), scheduler_name=SCHEDULER_NAME, spec={"nodeSelector": label}
    )

    def refused() -> list[tuple[str, str, str, str]] | None:
        events = pod_events(kube, namespace, "waits")
        ours = any(e[2] == "FilteringFailed" and f"{REASON}({node})" in e[3] for e in events)
        theirs = any(e[2] == "FailedScheduling" and REASON in e[3] for e in events)
        return events if ours and theirs else None

    events = wait_until(refused, interval=0.25, description=f"waits refused on {node} with {REASON}")
    message = next(e[3] for e in events if e[2] == "FailedScheduling")
    assert "kubelet reports nvidia.com/gpu allocatable 0 where the registration" in message
    pod = kube.get_pod(namespace, "waits")
    assert not is_bound(pod)
    assert keys.VGPU_NODE not in (pod["metadata"].get("annotations") or {})
    assert f"node {node}: no pod is placed on its NVIDIA devices" in hami.log()

    verdict = {v["node"]: v for v in explain(control_plane, f"{namespace}/waits")["nodes"]}[node]
    # a node-level verdict, as NodeQuarantined's: no card was judged, the summary names the reason
    assert (verdict["fits"], verdict["unresolvable"], verdict["reasons"]) == (False, True, {})
    assert verdict["summary"].startswith(f"{REASON}: NVIDIA devices: kubelet reports nvidia.com/gpu allocatable 0")

    set_allocatable(kube, node, 20)  # the plugin registered again

    assert kube.wait_for_pod_scheduled(namespace, "waits")["spec"]["nodeName"] == node
    assert f"node {node}: kubelet reports its NVIDIA devices again" in hami.log()


def test_a_node_reporting_fewer_units_than_its_registration_needs_is_refused_until_it_reports_them(
    hami: HamiScheduler, kube: KubeClient, namespace: str, make_node: Callable[..., dict[str, Any]]
) -> None:
    label = {"hami-e2e/run": namespace}
    node = f"{namespace}-short"
    make_node(
        node, extended={GPU: 20}, labels=label, annotations={keys.NVIDIA_REGISTER: register_annotation(node, 2, 24000)}
    )
    set_allocatable(kube, node, 10)  # one card's fake devices unhealthy in kubelet, both healthy in the registration

    kube.create_pod(namespace, "p", limits=gpu_limits(), scheduler_name=SCHEDULER_NAME, spec={"nodeSelector": label})

    def refused() -> str | None:
        return next(
            (e[3] for e in pod_events(kube, namespace, "p") if e[2] == "FailedScheduling" and REASON in e[3]), None
        )

    message = wait_until(refused, interval=0.25, description=f"p refused with {REASON}")
    assert "allocatable 10 where the registration (hami.io/node-nvidia-register) of 2 healthy device(s) needs 20" in (
        message
    )
    assert not is_bound(kube.get_pod(namespace, "p"))

    set_allocatable(kube, node, 30)  # more than registered is fine

    assert kube.wait_for_pod_scheduled(namespace, "p")["spec"]["nodeName"] == node
