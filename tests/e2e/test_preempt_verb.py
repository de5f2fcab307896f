"""The preempt verb against the real kube-scheduler: kube-scheduler (1.36, the version built here) calling ``hami
scheduler``'s ``/preempt`` with the victims its own dry run chose, taking hami's answer, deleting those pods and
placing the preemptor through ``/filter`` on the node it freed; and ``hami explain`` on the live cluster showing
the victim hami's devices need for a pending pod of high priority.

kube-scheduler asks the verb for a node only when its dry run found victims there: before 1.38 only for its own
resources (here CPU); from 1.38 also for nodes where only hami's are short (kubernetes#135486), which the chart's
``auto`` turns the verb on for. The wire format and hami's answer are the same either way; this test needs the
CPU shortage so that kube-scheduler 1.36 calls the verb at all. There is no kubelet: the pods have a termination
grace period of 0, so kube-scheduler's delete removes them at once.
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
    FakeDevicePlugin,
    HamiScheduler,
    extender_config,
    gpu_limits,
    is_bound,
    register_annotation,
)

CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


@pytest.fixture
def priority_classes(kube: KubeClient, namespace: str) -> Iterator[dict[str, str]]:
    """Two PriorityClasses for this test (the Priority admission plugin fills in ``spec.priority`` from them)."""
    names = {"low": f"{namespace}-low", "high": f"{namespace}-high"}
    for value, name in [(1, names["low"]), (100, names["high"])]:
        kube.post(CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                            "metadata": {"name": name}, "value": value})  # fmt: skip
    yield names
    for name in names.values():
        kube.delete(f"{CLASSES}/{name}")


def test_kube_scheduler_takes_hamis_victims_and_the_preemptor_lands_on_the_freed_card(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
    priority_classes: dict[str, str],
) -> None:
    # kube-scheduler evicts (its preemptVerb is set below): hami only answers /preempt, as the chart runs it on 1.38+
    hami = HamiScheduler(control_plane, ["--node-lock-timeout=60s", "--preemption=extender"])
    hami.start()
    plugin = FakeDevicePlugin(control_plane, f"hami-e2e/run={namespace}")
    try:
        config = extender_config(hami)
        config["extenders"][0]["preemptVerb"] = "preempt"
        start_scheduler(config)
        plugin.start()
        node = _preempt_on_one_card(kube, namespace, make_node, priority_classes, control_plane.kubeconfig)
        # kube-scheduler offered cpu-hog alone; hami answered it and gpu-hog
        assert f"/preempt {namespace}/urgent: candidates {node} (2 victims)" in hami.log()
    finally:
        plugin.stop()
        hami.stop()
    assert plugin.error is None
    assert hami.problems() == []


def _preempt_on_one_card(
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    classes: dict[str, str],
    kubeconfig: Path,
) -> str:
    """One node with 2 CPUs and one 8000 MiB card: ``cpu-hog`` (2 CPUs, 3000 MiB) and ``gpu-hog`` (4000 MiB) of
    low priority, then ``urgent`` (1 CPU, 5000 MiB) of high priority. kube-scheduler's dry run picks ``cpu-hog``
    (CPU); hami keeps it and adds ``gpu-hog`` (the card needs 5000 MiB free); both go and ``urgent`` is placed."""
    node = f"{namespace}-n1"
    label = {"hami-e2e/run": namespace}
    annotations = {keys.NVIDIA_REGISTER: register_annotation(node, 1, 8000)}
    make_node(node, cpu="2", extended={GPU: 10}, labels=label, annotations=annotations)

    def pod(name: str, cpu: str, mem: int, priority: str) -> None:
        spec = {"nodeSelector": label, "priorityClassName": classes[priority]}
        limits = {"cpu": cpu, **gpu_limits(mem=mem, cores=0)} if cpu != "0" else gpu_limits(mem=mem, cores=0)
        kube.create_pod(namespace, name, limits=limits, scheduler_name=SCHEDULER_NAME, spec=spec)

    pod("cpu-hog", "2", 3000, "low")
    pod("gpu-hog", "0", 4000, "low")
    for name in ("cpu-hog", "gpu-hog"):
        assert kube.wait_for_pod_scheduled(namespace, name)["spec"]["nodeName"] == node
    victims = {p["metadata"]["uid"] for p in kube.list_pods(namespace)}
    _explained_live(kube, namespace, classes, kubeconfig)

    pod("urgent", "1", 5000, "high")

    def placed() -> dict[str, Any] | None:
        pods = {p["metadata"]["name"]: p for p in kube.list_pods(namespace)}
        urgent = pods.get("urgent")
        return urgent if urgent is not None and is_bound(urgent) and set(pods) == {"urgent"} else None

    urgent = wait_until(placed, interval=0.25, timeout=90, description="urgent bound once both victims are gone")
    assert urgent["spec"]["nodeName"] == node
    assert urgent["spec"]["priority"] == 100
    assert urgent["metadata"]["annotations"][keys.NVIDIA_KEYS.allocated] == f"GPU-{node}-0,NVIDIA,5000,0:;"
    assert victims.isdisjoint(p["metadata"]["uid"] for p in kube.list_pods(namespace))
    return node


def _explained_live(kube: KubeClient, namespace: str, classes: dict[str, str], kubeconfig: Path) -> None:
    """``hami explain`` on the live cluster, for a pod of the high class no scheduler picks up: the Priority
    admission plugin gave it priority 100; hami's own view (devices only, no CPU) takes ``gpu-hog`` alone, the
    smaller ``cpu-hog`` staying because the pod fits with it."""
    spec = {"nodeSelector": {"hami-e2e/run": namespace}, "priorityClassName": classes["high"]}
    kube.create_pod(namespace, "waiting", limits=gpu_limits(mem=5000, cores=0), scheduler_name="nobody", spec=spec)
    try:
        command = [str(Path(sys.executable).parent / "hami"), "explain", f"{namespace}/waiting", "-o", "json"]
        command += ["--kubeconfig", str(kubeconfig)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        preemption = json.loads(result.stdout)["preemption"]
        assert preemption["priority"] == 100
        (best,) = preemption["candidates"]
        assert [v["pod"] for v in best["victims"]] == [f"{namespace}/gpu-hog"]
        assert [(k["pod"], k["why"]) for k in best["kept"]] == [
            (f"{namespace}/cpu-hog", "not needed: the pod fits with it staying")
        ]
    finally:
        kube.delete_pod(namespace, "waiting")
