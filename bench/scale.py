"""``make bench-scale``: hami end to end at Kubernetes' scale, beside bare kube-scheduler in the same run.

``python -m bench.scale [--nodes 5000] [--gpus 8] [--pods 50000] [--bursts 1000 5000] [--no-leader-kill]``

One real control plane (etcd, kube-apiserver with an audit log) on this machine. ``--nodes`` API-only Node objects
(no kubelet) registered in HAMi's format with ``--gpus`` GPUs each (``nvidia.com/gpu`` = 10 slots a GPU, created
16 at a time), then ``--pods`` GPU pods already bound, written directly with their allocation (one GPU, 1,024 MiB,
10 cores; round-robin over nodes and GPUs). Then for each burst size, interleaved: the burst through bare
kube-scheduler (pods asking ``nvidia.com/gpu: 1`` as a plain extended resource), through kube-scheduler + hami
under ``spread`` and under ``binpack`` (one-GPU pods as above; :class:`bench.e2e.DevicePluginStandIn` does the
device plugin's part). Every burst stays bound, so the cluster grows by each one. After the first size, a leader
kill: two replicas (hami + kube-scheduler each, the Lease timings of the chart's values), a
burst, the leader's two processes SIGKILLed once a quarter is bound; the time until the follower binds a pod.

Per burst: pods/s (first create → last bound), creation → bound p50/p99, kube-scheduler's failed attempts, API
requests per pod by who sent them (kube-apiserver's audit log: hami, the device plugin stand-in, kube-scheduler,
the load generator), CPU per pod of every process, hami's RSS (now and peak), event-loop stalls (hami logs every
lag of 100 ms or more of its loop-lag watcher; one ``/metrics`` scrape is made mid-burst and the per-minute
self-check and API audit run as they fall), and hami's start → ready with every pod listed. Not in CI: it takes
from minutes to more than half an hour depending on the size and the machine; docs/performance.md shows its last result.
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import functools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler, free_port, start_control_plane

import hami
from bench import breakdown, dra
from bench.dra import PIPELINES as DRA_PIPELINES
from bench.e2e import (
    CPROFILE,
    HAMI_MAIN,
    ONE_GPU,
    DevicePluginStandIn,
    _BoundTimes,
    _cpu_seconds,
    _failed_attempts,
    _quantile,
    _scheduler_config,
    audit_args,
    audited_requests,
    create_retrying,
    node_body,
    scheduler_args,
    spawn_hami,
    stop_process,
    wait_until,
)
from bench.run import machine, table
from hami.protocol import keys

CHART = Path(__file__).resolve().parent.parent / "charts" / "hami"
WRITERS = 16
STANDIN_WORKERS = 16
"""The device plugin stand-in's threads. In a cluster each node's plugin works on its own; 4 threads sharing 5,000
nodes fell behind in a 5,000-pod burst (each pod is three requests), so node locks stayed held for seconds longer
than any node's own plugin would hold them."""
"""Client threads that write the nodes and the bound pods."""
HAMI_LIMITS = ONE_GPU
BARE_LIMITS = {"nvidia.com/gpu": 1}
PIPELINES = ("bare", "spread", "binpack", *DRA_PIPELINES)
DEFAULT_PIPELINES = ("bare", "spread", "binpack", "dra")
STALL = re.compile(r"event loop held for ([0-9.]+) s \(([0-9.]+) s on the CPU(?:, ([0-9.]+) s collecting garbage)?\)")


@dataclass
class Cluster:
    """The control plane and what is in it."""

    cp: ControlPlane
    tmp: Path
    audit_log: Path
    nodes: int
    gpus: int
    pods: int = 0
    bursts: int = 0
    setup: dict[str, Any] = field(default_factory=dict)


def _bound_pod(i: int, nodes: int, gpus: int) -> dict[str, Any]:
    """Pod ``i`` of the ones already running: bound round-robin (node, then GPU), with the allocation hami and HAMi
    read, its device plugin done (bind phase ``success``, nothing left to allocate)."""
    node, gpu = i % nodes, (i // nodes) % gpus
    name = f"node-{node:05d}"
    value = f"GPU-{node:05d}-{gpu:02d},NVIDIA,1024,10:;"
    limits = {k: str(v) for k, v in HAMI_LIMITS.items()}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"bound-{i:06d}",
            "labels": {keys.VGPU_NODE: name},
            "annotations": {
                keys.VGPU_NODE: name,
                keys.VGPU_TIME: "1700000000",
                keys.NVIDIA_KEYS.allocated: value,
                keys.NVIDIA_KEYS.to_allocate: ";",
                keys.BIND_PHASE: "success",
            },
        },
        "spec": {
            "nodeName": name,
            "schedulerName": "hami-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": "registry.invalid/hami-bench:none", "resources": {"limits": limits}}
            ],
        },
    }


def _in_parallel(cp: ControlPlane, count: int, work: Callable[[KubeClient, int], object]) -> float:
    """``work(client, i)`` for i < ``count`` on :data:`WRITERS` threads, each with a client of its own; seconds."""
    clients = [cp.client() for _ in range(WRITERS)]
    started = time.perf_counter()
    try:
        with ThreadPoolExecutor(WRITERS) as pool:
            list(pool.map(lambda i: work(clients[i % WRITERS], i), range(count)))
    finally:
        for client in clients:
            client.close()
    return time.perf_counter() - started


def build_cluster(tmp: Path, nodes: int, gpus: int, pods: int, dra_mode: bool = False) -> Cluster:
    """The control plane, the nodes (with DRA mode: their ResourceSlices and the DeviceClass), ``pods`` bound pods."""
    audit, log = audit_args(tmp)
    cp = start_control_plane(tmp, apiserver_args=audit)
    cluster = Cluster(cp, tmp, log, nodes, gpus)
    bodies = [node_body(n, gpus) for n in range(nodes)]
    cluster.setup["nodes_s"] = _in_parallel(cp, nodes, lambda kube, n: kube.create_node(f"node-{n:05d}", **bodies[n]))
    print(f"  {nodes} nodes created in {cluster.setup['nodes_s']:.1f} s", flush=True)
    if dra_mode:
        cluster.setup["slices_s"] = dra.publish(cp, dra.node_uids(cp), gpus, WRITERS)
        print(f"  {nodes} ResourceSlices written in {cluster.setup['slices_s']:.1f} s", flush=True)
    with cp.client() as kube:
        kube.create_namespace("bound")

    def create(kube: KubeClient, i: int) -> None:
        kube.post("/api/v1/namespaces/bound/pods", _bound_pod(i, nodes, gpus))
        if i and i % 10000 == 0:
            print(f"  {i} bound pods written", flush=True)

    cluster.setup["pods_s"] = _in_parallel(cp, pods, create)
    cluster.pods = pods
    print(f"  {pods} bound pods written in {cluster.setup['pods_s']:.1f} s", flush=True)
    return cluster


@dataclass
class Hami:
    process: subprocess.Popen[bytes]
    port: int
    metrics_port: int
    log: Path
    ready_s: float
    ready_cpu_s: float = 0.0


def start_hami(cluster: Cluster, policy: str, extra: tuple[str, ...] = ()) -> Hami:
    """``hami scheduler`` under node policy ``policy``; timed from the start until ``/readyz`` answers 200 (its
    caches hold every node and pod)."""
    port, metrics_port = free_port(), free_port()
    log = cluster.tmp / f"hami-{policy}-{cluster.bursts}.log"
    args = [*scheduler_args(cluster.cp.kubeconfig, port, metrics_port), f"--node-scheduler-policy={policy}", *extra]
    process, ready_s = spawn_hami([sys.executable, *HAMI_MAIN, *args], log, port, 300)
    return Hami(process, port, metrics_port, log, ready_s, _cpu_seconds(process.pid))


def _rss_mb(pid: int) -> dict[str, float]:
    """Resident memory now and at its peak (``VmRSS``, ``VmHWM``), MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return {"rss_mb": out.get("VmRSS", 0.0), "peak_rss_mb": out.get("VmHWM", 0.0)}


def _stalls(log: Path, offset: int) -> list[tuple[float, float, float]]:
    """The event-loop stalls hami logged from byte ``offset`` of its log on: (wall, CPU, garbage collector)
    seconds each."""
    out = []
    with log.open("rb") as f:
        f.seek(offset)
        for raw in f:
            found = STALL.search(raw.decode(errors="replace"))
            if found:
                out.append((float(found[1]), float(found[2]), float(found[3] or 0.0)))
    return out


def wait_synced(scheduler: Scheduler, cp: ControlPlane, nodes: int, timeout: float = 600) -> float:
    """Until kube-scheduler's cache holds every node; seconds."""
    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    while scheduler.cached_nodes(cp.token) != nodes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"kube-scheduler did not cache {nodes} nodes in {timeout:.0f} s")
        time.sleep(0.2)
    return time.perf_counter() - started


def create_burst(
    cp: ControlPlane,
    ns: str,
    pods: int,
    limits: dict[str, int],
    times: _BoundTimes,
    body: Callable[[int], dict[str, Any]] | None = None,
) -> None:
    """``pods`` pods created at once by 16 client threads (``body(i)``, else one-container pods with ``limits``
    sent to hami's scheduler name); each pod's creation time is noted when its create call answers."""

    def create(kube: KubeClient, i: int) -> None:
        if body is None:
            kube.create_pod(ns, f"p{i:05d}", limits=limits, scheduler_name="hami-scheduler")
        else:
            create_retrying(kube, ns, body(i), times)
        with times.lock:
            times.created[f"p{i:05d}"] = time.perf_counter()

    _in_parallel(cp, pods, create)


def _scrape_midway(hami: Hami, times: _BoundTimes, pods: int, out: dict[str, float], stop: threading.Event) -> None:
    """One ``/metrics`` scrape once half the burst is bound (as Prometheus would scrape meanwhile): its seconds."""
    with times.lock:
        while len(times.bound) < pods // 2:
            if stop.is_set():
                return
            times.changed.wait(1.0)
    started = time.perf_counter()
    try:
        size = len(httpx.get(f"http://127.0.0.1:{hami.metrics_port}/metrics", timeout=60).content)
        out["scrape_s"], out["scrape_mb"] = time.perf_counter() - started, size / 2**20
    except httpx.HTTPError:
        out["scrape_s"] = -1.0


@dataclass
class Pipeline:
    """What a burst runs beside the control plane: kube-scheduler, hami (if any), how its pods are written."""

    scheduler: Scheduler
    hami: Hami | None
    pids: dict[str, int]
    body: Callable[[int], dict[str, Any]] | None = None
    plugin: bool = False
    """Whether the device plugin's stand-in does its part (hami's extender pipelines)."""
    extra: dict[str, Any] = field(default_factory=dict)
    controller_manager_port: int = 0


@contextmanager
def pipeline_running(
    cluster: Cluster, pipeline: str, ns: str, pods: int, hami_args: tuple[str, ...]
) -> Iterator[Pipeline]:
    """Start ``pipeline``'s processes for ``pods`` pods in ``ns`` (bare, hami's extender under a policy, or DRA
    mode's: ``bench.dra``) and stop them afterwards."""
    cp = cluster.cp
    if pipeline.startswith("dra"):
        with dra.dra_stack(cp, cluster.tmp, pipeline, ns, f"-{cluster.bursts}", hami_timeout=300) as (stack, h):
            hami = None
            if h is not None:
                hami = Hami(h.process, h.port, h.metrics_port, h.log, h.ready_s, _cpu_seconds(h.process.pid))
            stack.prepare(cp, ns, pods, width=5)
            extra = {
                "front": stack.front,
                "kube_scheduler_limits": list(stack.limits),
                "kube_scheduler_limits_source": stack.limits_source,
                "hami_dra_mode": bool(h and h.dra_mode),
            }
            body = functools.partial(stack.pod, width=5)
            yield Pipeline(stack.scheduler, hami, dict(stack.pids), body, False, extra, stack.controller_manager_port)
        return
    hami = start_hami(cluster, pipeline, hami_args) if pipeline != "bare" else None
    config = _scheduler_config(hami.port) if hami else {"profiles": [{"schedulerName": "hami-scheduler"}]}
    scheduler = cp.start_scheduler(config, name=f"kube-scheduler-{pipeline}-{cluster.bursts}")
    try:
        pids = {"kube-scheduler": scheduler.process.pid or 0} | ({"hami": hami.process.pid} if hami else {})
        yield Pipeline(scheduler, hami, pids, plugin=hami is not None)
    finally:
        scheduler.stop()
        cp.schedulers.remove(scheduler)
        if hami:
            stop_process(hami.process)


def run_burst(
    cluster: Cluster, pipeline: str, pods: int, hami_args: tuple[str, ...] = (), timeout: float = 900
) -> dict[str, Any]:
    """One burst of ``pods`` through ``pipeline`` (``bare``, ``spread``, ``binpack``, ``dra``, ``dra-default``);
    its figures."""
    cp = cluster.cp
    cluster.bursts += 1
    stop_event = threading.Event()
    result: dict[str, Any] = {"pipeline": pipeline, "pods": pods, "listed_pods": cluster.pods}
    with cp.client() as kube:
        ns = kube.create_namespace()
    try:
        with pipeline_running(cluster, pipeline, ns, pods, hami_args) as running:
            hami, scheduler = running.hami, running.scheduler
            result |= running.extra
            if hami is not None:
                result["ready_s"], result["ready_cpu_s"] = hami.ready_s, hami.ready_cpu_s
                result |= {f"ready_{k}": v for k, v in _rss_mb(hami.process.pid).items()}
            result["scheduler_sync_s"] = wait_synced(scheduler, cp, cluster.nodes)
            plugin = DevicePluginStandIn(cp, ns, stop_event, STANDIN_WORKERS) if running.plugin else None
            times = _BoundTimes(cp, ns, stop_event)
            time.sleep(1.0)  # the watches are open
            pids = {"kube-apiserver": cp.apiserver.pid or 0, "etcd": cp.etcd.pid or 0, "bench": os.getpid()}
            pids |= running.pids
            cpu0 = {name: _cpu_seconds(pid) for name, pid in pids.items()}
            components = breakdown.probes(
                cp.server, scheduler.port, running.controller_manager_port, hami.metrics_port if hami else 0
            )
            inside0 = breakdown.snapshot(components, cp.token)
            audit0, failed0 = cluster.audit_log.stat().st_size, _failed_attempts(cp, scheduler.port)
            log0 = hami.log.stat().st_size if hami else 0
            scrape: dict[str, float] = {}
            if hami:
                args = (hami, times, pods, scrape, stop_event)
                threading.Thread(target=_scrape_midway, args=args, daemon=True).start()
            t0 = time.perf_counter()
            limits = HAMI_LIMITS if pipeline != "bare" else BARE_LIMITS
            profiled = hami.process if hami is not None and CPROFILE and pipeline.startswith("dra") else None
            if profiled:
                profiled.send_signal(signal.SIGUSR1)
            with breakdown.cpu_profiles(scheduler.port, cp.token, f"kube-scheduler-{pipeline}-{pods}"):
                create_burst(cp, ns, pods, limits, times, running.body)
                bound = times.wait_all(pods, timeout=timeout)
            if profiled:
                profiled.send_signal(signal.SIGUSR2)
            elapsed = max(times.bound.values(), default=t0) - t0
            if plugin is not None:
                wait_until(lambda: len(plugin.done) >= bound, 60)
            cpu = {name: 1e3 * (_cpu_seconds(pid) - cpu0[name]) / max(bound, 1) for name, pid in pids.items()}
            result["inside_ms"] = breakdown.breakdown(inside0, breakdown.snapshot(components, cp.token), bound)
            time.sleep(0.5)  # the audit log has the last requests
            who = audited_requests(cluster.audit_log, audit0)
            result |= _burst_figures(times, bound, elapsed, who, cpu) | {
                "failed_attempts": _failed_attempts(cp, scheduler.port) - failed0,
                "create_refusals": dict(times.refused),
            }
            if scheduler.process.pid is not None:  # kube-scheduler's cache of every node and pod, beside hami's
                result["kube_scheduler_rss_mb"] = _rss_mb(scheduler.process.pid)["rss_mb"]
            if hami:
                result |= _hami_figures(hami, log0) | scrape
            if pipeline.startswith("dra"):
                result["claims_allocated"] = dra.claims_allocated(cp, ns)
                result["over_capacity_events"] = dra.over_capacity_events(cp, ns)
            cluster.pods += bound
            return result
    finally:
        stop_event.set()


def _burst_figures(
    times: _BoundTimes, bound: int, elapsed: float, who: dict[str, dict[str, int]], cpu: dict[str, float]
) -> dict[str, Any]:
    lat = times.latencies()
    return {
        "bound": bound,
        "seconds": elapsed,
        "pods_per_s": bound / elapsed if elapsed > 0 else 0.0,
        "p50_s": _quantile(lat, 0.50),
        "p99_s": _quantile(lat, 0.99),
        "cpu_ms_per_pod": cpu,
        "requests_per_pod": {name: sum(kinds.values()) / max(bound, 1) for name, kinds in sorted(who.items())},
        "requests_per_pod_by_kind": {
            name: {k: round(v / max(bound, 1), 3) for k, v in sorted(kinds.items())}
            for name, kinds in sorted(who.items())
        },
        "loadavg": os.getloadavg()[0],
    }


def _hami_figures(hami: Hami, log0: int) -> dict[str, Any]:
    """hami's memory and the event-loop stalls it logged during the burst."""
    stalls = _stalls(hami.log, log0)
    held = [(cpu, collecting) for _, cpu, collecting in stalls if cpu >= 0.1]
    result = {f"burst_{k}": v for k, v in _rss_mb(hami.process.pid).items()}
    result |= {"stalls": len(stalls), "longest_stall_s": max((w for w, _, _ in stalls), default=0.0)}
    result |= {"cpu_stalls": len(held), "longest_cpu_stall_s": max((c for c, _ in held), default=0.0)}
    return result | {"cpu_stalls_gc_s": [g for _, g in held]}


# --- the leader kill ------------------------------------------------------------------------------------------


def _as_host(name: str, namespace: str) -> list[str]:
    """Run a command under its own host name (a UTS namespace), as if in pod ``namespace/name``: kube-scheduler
    campaigns for the Lease as ``<host>_<uuid>`` and hami follows it by that host name."""
    script = f'hostname {name} && exec env POD_NAME={name} POD_NAMESPACE={namespace} "$@"'
    return ["unshare", "--uts", "sh", "-c", script, "sh"]


def chart_lease_timings() -> dict[str, str]:
    """kube-scheduler's Lease timings as the chart sets them (``scheduler.leaderElection`` in its values)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    return {k: str(v) for k, v in values["scheduler"]["leaderElection"].items()}


@contextmanager
def _replicas(cluster: Cluster, system: str) -> Iterator[dict[str, tuple[subprocess.Popen[bytes], Scheduler, Hami]]]:
    """Two replicas, each a hami and a kube-scheduler sharing a host name as in one pod, both following
    kube-scheduler's Lease in ``system`` with the chart's timings (``scheduler.leaderElection``)."""
    cp = cluster.cp
    replicas: dict[str, tuple[subprocess.Popen[bytes], Scheduler, Hami]] = {}
    try:
        for name in ("hami-a", "hami-b"):
            with cp.client() as kube:
                kube.create_pod(system, name, scheduler_name="nobody")
            hami = _start_wrapped(cluster, name, system)
            config = _scheduler_config(hami.port) | {
                "leaderElection": {
                    "leaderElect": True,
                    "resourceName": "hami-scheduler",
                    "resourceNamespace": system,
                    **chart_lease_timings(),
                }
            }
            scheduler = cp.start_scheduler(config, name=f"kube-scheduler-{name}", wrapper=_as_host(name, system))
            replicas[name] = (hami.process, scheduler, hami)
        yield replicas
    finally:
        for process, scheduler, _ in replicas.values():
            if process.poll() is None:
                stop_process(process)
            scheduler.stop()
            if scheduler in cp.schedulers:
                cp.schedulers.remove(scheduler)


def _start_wrapped(cluster: Cluster, name: str, system: str) -> Hami:
    port, metrics_port = free_port(), free_port()
    log = cluster.tmp / f"{name}.log"
    args = [*scheduler_args(cluster.cp.kubeconfig, port, metrics_port), "--leader-elect"]
    command = [
        *_as_host(name, system),
        sys.executable,
        *HAMI_MAIN,
        *args,
        f"--leader-elect-resource-namespace={system}",
    ]
    process, ready_s = spawn_hami(command, log, port, 300, start_new_session=True)
    return Hami(process, port, metrics_port, log, ready_s)


def _role(kube: KubeClient, system: str, name: str) -> str:
    return str((kube.get_pod(system, name)["metadata"].get("labels") or {}).get("hami.io/scheduler-role", ""))


def leader_kill(cluster: Cluster, pods: int, timeout: float = 900) -> dict[str, Any]:
    """A burst of ``pods`` under two replicas; the leader's hami and kube-scheduler SIGKILLed once a quarter is
    bound. Measured: seconds from the kill until the follower is labelled leader and until the next pod is bound,
    and until every pod is."""
    cp = cluster.cp
    stop_event = threading.Event()
    with cp.client() as kube:
        system, ns = kube.create_namespace(), kube.create_namespace()
        with _replicas(cluster, system) as replicas:
            wait_until(lambda: any(_role(kube, system, n) == "leader" for n in replicas), 120)
            leader = next((n for n in replicas if _role(kube, system, n) == "leader"), None)
            if leader is None:
                return {"error": "no replica became leader in 120 s"}
            follower = next(n for n in replicas if n != leader)
            DevicePluginStandIn(cp, ns, stop_event, STANDIN_WORKERS)
            times = _BoundTimes(cp, ns, stop_event)
            time.sleep(1.0)
            creator = threading.Thread(target=create_burst, args=(cp, ns, pods, HAMI_LIMITS, times), daemon=True)
            creator.start()
            wait_until(lambda: len(times.bound) >= pods // 4, 300)
            # the leader now: a loaded API server may have failed a lease renewal and moved it meanwhile
            leader = next((n for n in replicas if _role(kube, system, n) == "leader"), leader)
            follower = next(n for n in replicas if n != leader)
            process, scheduler, _ = replicas[leader]
            killed = time.perf_counter()
            assert scheduler.process.popen is not None
            for group in (process.pid, scheduler.process.popen.pid):
                with suppress(ProcessLookupError):  # kube-scheduler exits by itself when it loses its lease
                    os.killpg(group, 9)
            with times.lock:
                before = len(times.bound)
            wait_until(lambda: _role(kube, system, follower) == "leader", 120)
            labelled = time.perf_counter() - killed
            wait_until(lambda: any(t >= killed + labelled for t in times.bound.values()), 120)
            with times.lock:
                after = sorted(t - killed for t in times.bound.values() if t > killed)
            creator.join()
            bound = times.wait_all(pods, timeout=timeout)
            all_bound = max(times.bound.values(), default=killed) - killed
            stop_event.set()
            cluster.pods += bound
            return {
                "pods": pods,
                "bound": bound,
                "killed_at_bound": before,
                "follower_leader_s": labelled,
                "in_flight_bound": sum(1 for t in after if t < labelled),
                "follower_first_bound_s": next((t for t in after if t >= labelled), -1.0),
                "all_bound_s": all_bound,
            }


# --- the report -----------------------------------------------------------------------------------------------


SENDERS = ("hami", "hami stand-in", "device plugin stand-in", "kube-scheduler", "kube-controller-manager")
PROCESSES = ("kube-apiserver", "etcd", "kube-scheduler", "hami", "hami stand-in", "kube-controller-manager")


def _f(x: float) -> str:
    return f"{x:.3f}" if abs(x) < 10 else f"{x:.1f}"


def report(results: dict[str, Any]) -> None:
    bursts: list[dict[str, Any]] = results["bursts"]
    bare = {r["pods"]: r["pods_per_s"] for r in bursts if r["pipeline"] == "bare"}
    spread = {r["pods"]: r["pods_per_s"] for r in bursts if r["pipeline"] == "spread"}
    rows = []
    for r in bursts:
        req = r["requests_per_pod"]
        cpu = r["cpu_ms_per_pod"]
        ratio = r["pods_per_s"] / bare[r["pods"]] if bare.get(r["pods"]) else 0.0
        rows.append(
            [
                r["pipeline"],
                f"{r['bound']}/{r['pods']}",
                f"{r['listed_pods']:,}",
                _f(r["pods_per_s"]),
                f"{ratio:.2f}",
                f"{r['pods_per_s'] / spread[r['pods']]:.2f}" if spread.get(r["pods"]) else "-",
                f"{_f(r['p50_s'])} / {_f(r['p99_s'])}",
                f"{r['failed_attempts']:.0f}",
                " / ".join(f"{req.get(w, 0):.2f}" for w in SENDERS) + f" / {sum(req.values()):.2f}",
                " / ".join(_f(cpu.get(p, 0.0)) for p in PROCESSES),
                "-" if "ready_s" not in r else f"{_f(r['ready_s'])} / {_f(r['ready_cpu_s'])}",
                "-" if "burst_peak_rss_mb" not in r else f"{r['burst_rss_mb']:.0f} / {r['burst_peak_rss_mb']:.0f}",
                "-"
                if "stalls" not in r
                else f"{r['stalls']} / {_f(r['longest_stall_s'])}; {r['cpu_stalls']} / {_f(r['longest_cpu_stall_s'])}",
                f"{r['loadavg']:.1f}",
            ]
        )
    table(
        f"Scale, {results['nodes']:,} nodes x {results['gpus']} GPUs (API-only), {results['pods']:,} pods bound "
        "first, bursts created at once; ratio = pods/s x bare kube-scheduler's same-size burst in this run",
        [
            "pipeline",
            "bound",
            "pods listed",
            "pods/s",
            "x bare",
            "x spread",
            "p50 / p99 s",
            "failed",
            "API req/pod: hami / hami stand-in / plugin / kube-sched / kcm / all",
            "CPU ms/pod: apiserver / etcd / kube-sched / hami / hami stand-in / kcm",
            "hami ready s / CPU s",
            "hami RSS / peak MiB",
            "stalls >= 100 ms / longest s: wall; on the CPU",
            "load",
        ],
        rows,
    )
    titles = [title for *_, title in breakdown.BOUNDS]
    table(
        "What bounds it: ms per bound pod inside the processes (their own histograms; PreBind and Bind run "
        "concurrently, off the scheduling cycle; the admission webhooks: ms a call)",
        ["pipeline", "pods", *titles],
        [
            [r["pipeline"], str(r["pods"]), *(_f(breakdown.bound_figures(r.get("inside_ms", {}))[t]) for t in titles)]
            for r in bursts
        ],
    )
    kill = results.get("leader_kill")
    if kill and "error" not in kill:
        print(
            f"\nleader killed at {kill['killed_at_bound']}/{kill['pods']} bound: {kill['in_flight_bound']} binds in "
            f"flight landed, the follower labelled itself leader after {_f(kill['follower_leader_s'])} s and bound "
            f"its first pod after {_f(kill['follower_first_bound_s'])} s; all {kill['bound']} bound after "
            f"{_f(kill['all_bound_s'])} s"
        )
    elif kill:
        print(f"\nleader kill: {kill['error']}")


def compile_hami() -> None:
    """Byte-compile hami's modules first, as the image does (``compileall`` in the Dockerfile): a fresh checkout has
    no ``__pycache__``, and the first hami started would otherwise count compiling them in its start → ready."""
    compileall.compile_dir(Path(hami.__file__).parent, quiet=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000, help="API-only GPU nodes (default 5000)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument("--pods", type=int, default=50000, help="GPU pods bound before the bursts (default 50000)")
    parser.add_argument("--bursts", type=int, nargs="+", default=[1000, 5000], help="burst sizes (default 1000 5000)")
    parser.add_argument("--pipelines", nargs="+", default=list(DEFAULT_PIPELINES), choices=PIPELINES)
    parser.add_argument(
        "--first-only",
        nargs="*",
        default=[],
        choices=PIPELINES,
        help="pipelines run at the first burst size only (slow ones: dra-default, dra-templates)",
    )
    parser.add_argument("--no-leader-kill", action="store_true", help="leave out the leader kill")
    parser.add_argument(
        "--burst-timeout", type=float, default=900, help="seconds a burst may take to bind (default 900)"
    )
    parser.add_argument("--hami-args", default="", help="extra flags for hami, one string (e.g. '--no-success-events')")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {
        "machine": machine(),
        "started": datetime.datetime.now(datetime.UTC).isoformat(),
        "nodes": args.nodes,
        "gpus": args.gpus,
        "pods": args.pods,
        "hami_args": args.hami_args,
        "bursts": [],
    }
    print(f"machine: {results['machine']}", flush=True)
    compile_hami()
    extra = tuple(args.hami_args.split())
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    path = out / f"scale-{datetime.datetime.now(datetime.UTC):%Y%m%dT%H%M%SZ}.json"
    with tempfile.TemporaryDirectory(prefix="hami-scale-") as tmp:
        dra_mode = any(p.startswith("dra") for p in [*args.pipelines, *args.first_only])
        cluster = build_cluster(Path(tmp), args.nodes, args.gpus, args.pods, dra_mode)
        results["setup"] = cluster.setup
        try:
            for i, size in enumerate(args.bursts):
                for pipeline in [*args.pipelines, *(args.first_only if i == 0 else [])]:
                    r = run_burst(cluster, pipeline, size, extra, args.burst_timeout)
                    results["bursts"].append(r)
                    path.write_text(json.dumps(results, indent=2))  # what a stopped run got so far
                    print(
                        f"  {pipeline} {size}: {r['bound']} bound, {r['pods_per_s']:.1f} pods/s, p99 "
                        f"{r['p99_s']:.2f} s, load {r['loadavg']:.1f}",
                        flush=True,
                    )
                if i == 0 and not args.no_leader_kill:  # after the first size: a long run stopped early has it
                    results["leader_kill"] = leader_kill(cluster, size, args.burst_timeout)
                    path.write_text(json.dumps(results, indent=2))
        finally:
            cluster.cp.stop()
    report(results)
    path.write_text(json.dumps(results, indent=2))
    print(f"\nraw results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
