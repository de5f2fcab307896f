"""End-to-end scheduling rate: real etcd + kube-apiserver + kube-scheduler + ``hami scheduler`` on loopback.

Pods are created at once (8 client threads); the clock runs from the first create to the moment every pod
has ``spec.nodeName``. There is no kubelet and no device plugin, so a stand-in does the plugin's part of
HAMi's contract that matters here: once a pod is bound, the node lock it holds is released (HAMi's plugin
releases it after kubelet's Allocate). Without it each node would bind one pod per lock timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from tests.e2e.cluster import ApiError, ControlPlane, KubeClient, free_port, start_control_plane
from tests.e2e.identities import HAMI_SA, chart_identities

from bench.scenarios import node_devices, pair_scores
from hami.protocol import keys
from hami.protocol.inventory import encode_inventory_json
from hami.protocol.scores import PairScore, encode_pair_scores

EXTRA = os.environ.get("HAMI_BENCH_ARGS", "").split()
PROFILE = (
    ["-m", "pyinstrument", "-r", "text", "-o", os.environ["HAMI_BENCH_PROFILE"]]
    if os.environ.get("HAMI_BENCH_PROFILE")
    else []
)
NVIDIA_RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/priority",
]


def _release_locks(cp: ControlPlane, namespace: str, stop: threading.Event) -> None:
    """The device plugin's part: release the node lock of every pod as soon as it is bound (watching pods; the
    watch is opened again when it breaks, e.g. across a kube-apiserver restart, and starts with every pod)."""
    while not stop.is_set():
        try:
            _watch_and_release(cp, namespace, stop)
        except (httpx.HTTPError, ApiError):
            time.sleep(0.2)


def _watch_and_release(cp: ControlPlane, namespace: str, stop: threading.Event) -> None:
    headers = {"Authorization": f"Bearer {cp.token}"}
    with (
        cp.client() as kube,
        httpx.Client(base_url=cp.server, verify=str(cp.ca_file), headers=headers, timeout=None) as http,
    ):
        url = f"/api/v1/namespaces/{namespace}/pods"
        with http.stream("GET", url, params={"watch": "1"}) as stream:
            for line in stream.iter_lines():
                if stop.is_set():
                    return
                event = json.loads(line)
                pod = event.get("object") or {}
                node = (pod.get("spec") or {}).get("nodeName")
                name = (pod.get("metadata") or {}).get("name")
                if not node or event.get("type") == "DELETED":
                    continue
                for _ in range(5):
                    current = kube.get(f"/api/v1/nodes/{node}")
                    lock = (current["metadata"].get("annotations") or {}).get(keys.NODE_LOCK, "")
                    if not lock.endswith(f",{namespace},{name}"):
                        break
                    patch = {
                        "metadata": {
                            "annotations": {keys.NODE_LOCK: None},
                            "resourceVersion": current["metadata"]["resourceVersion"],
                        }
                    }
                    try:
                        kube.patch(f"/api/v1/nodes/{node}", patch)
                        break
                    except ApiError:
                        continue  # the node changed meanwhile


def _mean_latencies(metrics: str) -> dict[str, float]:
    """Mean hami-side latency (ms) per endpoint and stage, from its Prometheus histograms."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in metrics.splitlines():
        for family in ("hami_request_duration_seconds", "hami_stage_duration_seconds"):
            for suffix, target in (("_sum{", sums), ("_count{", counts)):
                if line.startswith(family + suffix):
                    label = line.split('"')[1]
                    target[label] = float(line.rsplit(" ", 1)[1])
    return {f"hami_{k}_mean_ms": 1e3 * sums[k] / counts[k] for k in sums if counts.get(k)}


THROTTLED = ("--max-requests-inflight=1", "--max-mutating-requests-inflight=1", "--enable-priority-and-fairness=false")
"""kube-apiserver flags of the 429 storm: one request in flight (one mutating), no priority and fairness, so every
request beyond that is answered ``429 Retry-After: 1``. The admin is exempt; hami then runs as the chart's
ServiceAccount."""


def bench_e2e(
    nodes: int = 100,
    gpus: int = 8,
    pods: int = 200,
    node_policy: str = "spread",
    *,
    apiserver_args: tuple[str, ...] = (),
    restart_apiserver_at: int = 0,
) -> dict[str, float]:
    """Bind ``pods`` pods and time it. With ``apiserver_args`` (e.g. :data:`THROTTLED`) hami runs under the chart's
    ServiceAccount, which the server's limits apply to (needs ``make helm``). With ``restart_apiserver_at`` > 0,
    kube-apiserver is SIGKILLed once that many pods are bound and started again; the result then also has
    ``apiserver_restart_s`` (until it answered /readyz again), ``recover_s`` (from then until the next pod was
    bound) and ``restart_to_all_s`` (from then until every pod was)."""
    with tempfile.TemporaryDirectory(prefix="hami-bench-") as tmp:
        cp = start_control_plane(Path(tmp), apiserver_args=apiserver_args)
        hami: subprocess.Popen[bytes] | None = None
        stop = threading.Event()
        try:
            kube = cp.client()
            kubeconfig = cp.kubeconfig
            if apiserver_args:  # the chart's ServiceAccount: the server's in-flight limits apply to it
                kubeconfig = chart_identities(cp).kubeconfig(HAMI_SA)
            _create_nodes(kube, nodes, gpus)
            port, metrics_port = free_port(), free_port()
            hami = _start_hami(Path(tmp), kubeconfig, port, metrics_port, node_policy)
            cp.start_scheduler(_scheduler_config(port))
            ns = kube.create_namespace()
            releaser = threading.Thread(target=_release_locks, args=(cp, ns, stop), daemon=True)
            releaser.start()
            t0 = time.perf_counter()
            _create_pods(cp, ns, pods)
            created = time.perf_counter() - t0
            bound, restart = _wait_bound(cp, kube, ns, pods, restart_apiserver_at)
            elapsed = time.perf_counter() - t0
            text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
            result = {
                "pods": pods,
                "bound": bound,
                "seconds": elapsed,
                "pods_per_s": bound / elapsed,
                "create_s": created,
            }
            result |= _mean_latencies(text)
            result |= restart
            return result
        finally:
            stop.set()
            if hami is not None:
                hami.terminate()
                try:
                    hami.wait(15)
                except subprocess.TimeoutExpired:
                    hami.kill()
            cp.stop()


def _create_nodes(kube: KubeClient, nodes: int, gpus: int) -> None:
    for n in range(nodes):
        devs = list(node_devices(n, gpus))
        scores = [PairScore(u, s) for u, s in pair_scores(n, gpus).items()]
        kube.create_node(
            f"node-{n:05d}",
            extended={"nvidia.com/gpu": gpus * 10},
            annotations={
                keys.NVIDIA_REGISTER: encode_inventory_json(devs),
                keys.NVIDIA_SCORE: encode_pair_scores(scores),
            },
        )


def _start_hami(tmp: Path, kubeconfig: Path, port: int, metrics_port: int, node_policy: str) -> subprocess.Popen[bytes]:
    """``hami scheduler`` in its own process, once its extender answers /readyz."""
    log = open(tmp / "hami.log", "wb")  # noqa: SIM115 - closed with the process
    hami = subprocess.Popen(
        [
            sys.executable,
            *PROFILE,
            "-c",
            "from hami.cli import main; main()",
            "scheduler",
            "--kubeconfig",
            str(kubeconfig),
            "--http_bind",
            f"127.0.0.1:{free_port()}",
            "--extender-bind",
            f"127.0.0.1:{port}",
            "--metrics-bind-address",
            f"127.0.0.1:{metrics_port}",
            "--node-scheduler-policy",
            node_policy,
            *EXTRA,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return hami
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or hami.poll() is not None:
            hami.kill()
            raise RuntimeError(f"hami did not become ready; see {tmp}/hami.log")
        time.sleep(0.1)


def _scheduler_config(port: int) -> dict[str, Any]:
    return {
        "profiles": [{"schedulerName": "hami-scheduler"}],
        "extenders": [
            {
                "urlPrefix": f"http://127.0.0.1:{port}",
                "filterVerb": "filter",
                "bindVerb": "bind",
                "nodeCacheCapable": True,
                "weight": 1,
                "httpTimeout": "30s",
                "enableHTTPS": False,
                "managedResources": [{"name": r, "ignoredByScheduler": True} for r in NVIDIA_RESOURCES],
            }
        ],
    }


def _create_pods(cp: ControlPlane, ns: str, pods: int) -> None:
    """``pods`` one-GPU pods created at once by 8 client threads."""
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1024, "nvidia.com/gpucores": 10}
    with ThreadPoolExecutor(8) as pool:
        clients = [cp.client() for _ in range(8)]
        list(
            pool.map(
                lambda i: clients[i % 8].create_pod(ns, f"p{i:04d}", limits=limits, scheduler_name="hami-scheduler"),
                range(pods),
            )
        )


def _wait_bound(
    cp: ControlPlane, kube: KubeClient, ns: str, pods: int, restart_apiserver_at: int
) -> tuple[int, dict[str, float]]:
    """Until every pod is bound (at most 300 s): how many are, and the restart figures (see ``bench_e2e``)."""
    bound = 0
    restart: dict[str, float] = {}
    restarted_at = 0.0
    bound_then = 0
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        bound = sum(1 for p in kube.list_pods(ns) if p["spec"].get("nodeName"))
        if restarted_at and "recover_s" not in restart and bound > bound_then:
            restart["recover_s"] = time.perf_counter() - restarted_at
        if bound == pods:
            break
        if restart_apiserver_at and not restarted_at and bound >= restart_apiserver_at:
            cp.kill_apiserver()
            time.sleep(1.0)
            restart["apiserver_restart_s"] = cp.start_apiserver()
            restarted_at, bound_then = time.perf_counter(), bound
        time.sleep(0.05)
    if restarted_at:
        restart["restart_to_all_s"] = time.perf_counter() - restarted_at
    return bound, restart


if __name__ == "__main__":
    print(bench_e2e(pods=int(sys.argv[1]) if len(sys.argv) > 1 else 200))
