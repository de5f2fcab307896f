"""hami's scheduler extender end to end: ``hami scheduler`` as a subprocess beside a real kube-scheduler.

``HamiScheduler`` runs ``hami scheduler`` exactly as users run it (the console script, a kubeconfig, HAMi's
flags) in its own process group, as the chart's hami ServiceAccount (``tests/e2e/identities.py``) unless given
another kubeconfig, logging to ``<control plane>/logs/hami-scheduler.log``; it can be stopped
(SIGTERM: graceful) and started again on the same ports, so kube-scheduler keeps calling it.
``extender_config`` is the KubeSchedulerConfiguration that makes kube-scheduler call it (as HAMi's chart does),
with kube-scheduler running as the chart's kube-scheduler ServiceAccount.

``FakeDevicePlugin`` plays the one part of HAMi's device plugin the scheduler depends on (spec webhook §6.2):
after the kubelet asks it to Allocate — i.e. once a pod hami bound is on its node — it marks the pod
``hami.io/bind-phase: success`` and releases the node lock ``hami.io/mutex.lock`` as HAMi's plugin does
(owner-checked on a fresh read, with a resourceVersion precondition; a lock already gone — hami releases it itself
once it sees the pod ``success`` — or held by another pod is left alone). Without it a node stays locked after
each bind until the lock expires, so only one pod per node per lock timeout could bind.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from hami.protocol import keys
from hami.protocol.allocation import decode_pod_devices
from hami.protocol.inventory import DeviceInfo, encode_inventory_json
from tests.e2e.cluster import ApiError, ControlPlane, KubeClient, ManagedProcess, free_port, wait_until
from tests.e2e.identities import HAMI_SA, KUBE_SCHEDULER_SA, chart_identities

SCHEDULER_NAME = "hami-scheduler"
HAMI = Path(sys.executable).parent / "hami"
GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUCORES = "nvidia.com/gpucores"
NVIDIA_RESOURCES = (GPU, GPUMEM, "nvidia.com/gpumem-percentage", GPUCORES, "nvidia.com/priority")

Usage = dict[str, tuple[int, int, int]]
"""device UUID → (slots, MiB, cores) in use."""


STARTED: list[HamiScheduler] = []
"""Every ``HamiScheduler`` started in this session, in order (``tests/e2e/conftest.py`` checks none outlives its
test: a leftover one watches every node of the session's control plane and reports on the next tests' nodes)."""


class HamiScheduler:
    """``hami scheduler`` in a subprocess on fixed loopback ports (kept across restarts)."""

    def __init__(
        self,
        plane: ControlPlane,
        args: Iterable[str] = (),
        kubeconfig: Path | None = None,
        *,
        wrapper: Iterable[str] = (),
        log_name: str = "hami-scheduler",
    ) -> None:
        self.plane = plane
        self.kubeconfig = kubeconfig or chart_identities(plane).kubeconfig(HAMI_SA)
        """The identity it runs as: the chart's hami ServiceAccount unless given (``plane.kubeconfig``: admin)."""
        self.port = free_port()  # --http_bind: webhook and health (the Service listener)
        self.extender_port = free_port()  # --extender-bind: /filter, /bind and health, for kube-scheduler
        self.metrics_port = free_port()
        self.args = list(args)
        self.wrapper = list(wrapper)
        """A command that runs hami (``unshare --uts …`` to give a replica a host name of its own)."""
        self.process: ManagedProcess | None = None
        self.exit_codes: list[int] = []
        self.log_file = plane.log_dir / f"{log_name}.log"
        self.log_start = self.log_file.stat().st_size if self.log_file.exists() else 0
        """Where this instance's part of the (session-wide) log starts."""

    @property
    def url(self) -> str:
        """The extender listener, which kube-scheduler calls."""
        return f"http://127.0.0.1:{self.extender_port}"

    @property
    def service_url(self) -> str:
        """The Service listener (``--http_bind``)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start it and wait until ``/readyz`` says its caches are synced."""
        self.process = ManagedProcess(
            "hami-scheduler",
            [
                *self.wrapper,
                str(HAMI),
                "scheduler",
                f"--kubeconfig={self.kubeconfig}",
                f"--http_bind=127.0.0.1:{self.port}",
                f"--extender-bind=127.0.0.1:{self.extender_port}",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                f"--scheduler-name={SCHEDULER_NAME}",
                *self.args,
            ],
            self.log_file,
        )
        self.process.start()
        if self not in STARTED:
            STARTED.append(self)
        process = self.process

        def check() -> None:
            code = process.exited()
            if code is not None:
                raise RuntimeError(f"hami scheduler exited with status {code}:\n{process.log_tail()}")

        wait_until(self._ready, description="hami scheduler /readyz", check=check, interval=0.1)

    def _ready(self) -> bool:
        return httpx.get(f"{self.url}/readyz", timeout=5.0).status_code == 200

    def running(self) -> bool:
        return self.process is not None and self.process.exited() is None

    def stop(self) -> None:
        """SIGTERM (SIGKILL after 10 s); the exit status goes to ``exit_codes`` (0: a graceful shutdown)."""
        if self.process is not None and self.process.exited() is None:
            self.process.stop()
            code = self.process.exited()
            self.exit_codes.append(-1 if code is None else code)

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would end it: nothing in flight is finished."""
        process = self.process
        if process is not None and process.popen is not None and process.exited() is None:
            os.killpg(process.popen.pid, signal.SIGKILL)
            process.popen.wait()
            process.stop()  # reaps and forgets it

    def restart(self, crash: bool = False) -> None:
        """Stop (SIGTERM, or SIGKILL with ``crash``) and start again on the same ports."""
        if crash:
            self.kill()
        else:
            self.stop()
        self.start()

    def log(self) -> str:
        """What this instance (all its starts) logged."""
        with self.log_file.open("rb") as log:
            log.seek(self.log_start)
            return log.read().decode(errors="replace")

    def problems(self) -> list[str]:
        """Log lines at level error or above (hami logs JSON lines), and watch events it could not read."""
        marks = ('"level": "error"', '"level": "critical"', "undecodable watch event")
        return [line for line in self.log().splitlines() if any(mark in line for mark in marks)]

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """``/metrics`` as name → [(labels, value)]."""
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5.0).text
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((sample.labels, sample.value))
        return out

    def ledger(self) -> Usage:
        """Per-device usage as hami's ledger holds it (from its HAMi-named gauges), unused devices left out."""
        samples = self.metrics()

        def by_uuid(name: str) -> dict[str, int]:
            return {labels["device_uuid"]: int(value) for labels, value in samples.get(name, [])}

        slots = by_uuid("hami_gpu_shared_count")
        mem = by_uuid("hami_gpu_memory_allocated_bytes")
        cores = by_uuid("hami_gpu_core_allocated_ratio")
        usage = {uuid: (slots[uuid], mem[uuid] // 1048576, cores[uuid]) for uuid in slots}
        return {uuid: used for uuid, used in usage.items() if used != (0, 0, 0)}


def extender_config(hami: HamiScheduler) -> dict[str, Any]:
    """kube-scheduler calling hami as HAMi's chart configures it (spec webhook §8.4): filter and bind,
    ``nodeCacheCapable``, the NVIDIA resources managed and ignored by kube-scheduler's own fit check."""
    return {
        "clientConnection": {"kubeconfig": str(chart_identities(hami.plane).kubeconfig(KUBE_SCHEDULER_SA))},
        "profiles": [{"schedulerName": SCHEDULER_NAME}],
        "extenders": [
            {
                "urlPrefix": hami.url,
                "filterVerb": "filter",
                "bindVerb": "bind",
                "enableHTTPS": False,
                "nodeCacheCapable": True,
                "weight": 1,
                "httpTimeout": "30s",
                "managedResources": [{"name": name, "ignoredByScheduler": True} for name in NVIDIA_RESOURCES],
            }
        ],
        # kube-scheduler's retry backoff after a failed bind (e.g. node lock contention) is 1 s doubling to
        # 10 s by default; a 2 s cap keeps the contended tests short. It changes when kube-scheduler retries,
        # not what hami decides.
        "podInitialBackoffSeconds": 1,
        "podMaxBackoffSeconds": 2,
    }


def register_annotation(node: str, gpus: int, mem: int, count: int = 10, type: str = "NVIDIA-A100") -> str:
    """``hami.io/node-nvidia-register`` as HAMi's device plugin writes it: ``gpus`` cards ``GPU-<node>-<i>``."""
    devices = [
        DeviceInfo(
            id=f"GPU-{node}-{i}",
            index=i,
            count=count,
            devmem=mem,
            devcore=100,
            type=type,
            mode="hami-core",
            health=True,
        )
        for i in range(gpus)
    ]
    return encode_inventory_json(devices)


def gpu_limits(gpu: int = 1, mem: int = 3000, cores: int = 30) -> dict[str, int]:
    return {GPU: gpu, GPUMEM: mem, GPUCORES: cores}


def usage_from_annotations(pods: Iterable[Mapping[str, Any]]) -> Usage:
    """Per-device usage recounted from every pod's ``hami.io/vgpu-devices-allocated`` (as HAMi would)."""
    out: Usage = {}
    for pod in pods:
        value = (pod["metadata"].get("annotations") or {}).get(keys.NVIDIA_KEYS.allocated)
        if value is None:
            continue
        for container in decode_pod_devices(value):
            for dev in container:
                slots, mem, cores = out.get(dev.uuid, (0, 0, 0))
                out[dev.uuid] = (slots + 1, mem + dev.usedmem, cores + dev.usedcores)
    return out


def pod_events(kube: KubeClient, namespace: str, pod: str) -> list[tuple[str, str, str, str]]:
    """Events about a pod as (source component, type, reason, message), oldest first."""
    items = kube.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector=f"involvedObject.name={pod}")["items"]
    items.sort(key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["name"]))
    return [(e["source"].get("component", ""), e["type"], e["reason"], e["message"]) for e in items]


def api_requests(kube: KubeClient) -> Counter[tuple[str, str]]:
    """Requests kube-apiserver has served since it started, by (verb, resource): ``apiserver_request_total`` on its
    /metrics (a ``Counter``: subtract two readings)."""
    out: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(kube.get("/metrics")):
        if family.name == "apiserver_request":
            for sample in family.samples:
                if sample.name == "apiserver_request_total":
                    out[(sample.labels["verb"], sample.labels["resource"])] += int(sample.value)
    return out


def is_bound(pod: Mapping[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName"))


class FakeDevicePlugin:
    """Releases node locks as HAMi's device plugin does after Allocate (see the module docstring).

    Watches the nodes matching ``label_selector`` by polling (every ``interval`` seconds); ``released``
    lists (node, namespace/pod) for every pod it marked ``success`` once that pod holds none of its node's locks
    any more (released by the stand-in, or already by hami, which frees a ``success`` holder's lock). ``lock_keys``
    are the node lock annotations it releases (HAMi's ``hami.io/mutex.lock`` unless given: a vendor's own lock is
    its ``VendorKeys.lock``).
    """

    def __init__(
        self, plane: ControlPlane, label_selector: str, interval: float = 0.1, lock_keys: Iterable[str] = ()
    ) -> None:
        self.plane = plane
        self.selector = label_selector
        self.interval = interval
        self.lock_keys = tuple(lock_keys) or (keys.NODE_LOCK,)
        self.released: list[tuple[str, str]] = []
        self._served: set[tuple[str, str]] = set()  # marked success; locks possibly not released yet
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-device-plugin", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        with self.plane.client() as kube:
            while not self._stop.wait(self.interval):
                try:
                    for node in kube.get("/api/v1/nodes", labelSelector=self.selector)["items"]:
                        self._allocate(kube, node)
                except (ApiError, httpx.HTTPError):
                    continue  # the pod or node changed or went away meanwhile: look again next round
                except Exception as err:  # a bug in this helper: keep it for the test to report
                    self.error = err
                    raise

    def _holders(self, node: Mapping[str, Any]) -> list[tuple[str, str]]:
        """The (namespace, name) of the pods holding one of ``lock_keys`` on ``node``, in key order."""
        annotations = node["metadata"].get("annotations") or {}
        found: list[tuple[str, str]] = []
        for lock_key in self.lock_keys:
            lock = annotations.get(lock_key)
            if lock and lock.count(",") == 2:
                _, namespace, name = lock.split(",")
                if (namespace, name) not in found:
                    found.append((namespace, name))
        return found

    def _allocate(self, kube: KubeClient, node: Mapping[str, Any]) -> None:
        """Serve each lock holder the kubelet would hand to this node's plugins: mark it ``success``, then release
        every lock of ``lock_keys`` it still holds (each vendor's plugin releases its own lock). A pod marked but not
        yet released (a write failed) is released next round, even once hami has freed its lock."""
        node_name = node["metadata"]["name"]
        for namespace, name in self._holders(node):
            if self._allocating_here(kube, node_name, namespace, name):
                kube.patch(
                    f"/api/v1/namespaces/{namespace}/pods/{name}",
                    {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}},
                )
                self._served.add((node_name, f"{namespace}/{name}"))
        for served in sorted(self._served):
            if served[0] == node_name:
                namespace, name = served[1].split("/")
                for lock_key in self.lock_keys:
                    self._release(kube, node_name, lock_key, namespace, name)
                self._served.discard(served)
                self.released.append(served)

    @staticmethod
    def _allocating_here(kube: KubeClient, node: str, namespace: str, name: str) -> bool:
        """Whether the pod is one the kubelet would hand to ``node``'s plugin: bound there, bind phase allocating."""
        try:
            pod = kube.get_pod(namespace, name)
        except ApiError:
            return False
        phase = (pod["metadata"].get("annotations") or {}).get(keys.BIND_PHASE)
        return bool(pod["spec"].get("nodeName") == node and phase == "allocating")

    def _release(self, kube: KubeClient, node: str, lock_key: str, namespace: str, name: str) -> None:
        """HAMi's owner-checked release (spec webhook §2.7 ``ReleaseNodeLock``): read the node again; a lock that is
        gone or no longer ends with ``,<namespace>,<name>`` is left alone (hami may already have released it once it
        saw the pod ``success``, or taken it over); else remove it under the node's resourceVersion, again on 409."""
        for _ in range(5):
            meta = kube.get(f"/api/v1/nodes/{node}")["metadata"]
            lock = (meta.get("annotations") or {}).get(lock_key)
            if not lock or not lock.endswith(f",{namespace},{name}"):
                return
            release = {"metadata": {"annotations": {lock_key: None}, "resourceVersion": meta["resourceVersion"]}}
            try:
                kube.patch(f"/api/v1/nodes/{node}", release)
                return
            except ApiError as err:
                if err.status != 409:
                    raise
        raise RuntimeError(f"releasing {lock_key} on {node} for {namespace}/{name}: the node kept changing")
