"""End-to-end scheduling rate: real etcd + kube-apiserver + kube-scheduler + ``hami scheduler`` on loopback.

Pods are created at once (8 client threads); the clock runs from the first create to the moment every pod
has ``spec.nodeName``. There is no kubelet and no device plugin, so a stand-in (:class:`DevicePluginStandIn`)
sends the requests HAMi's plugin sends once kubelet's Allocate has run: the pod's bind phase set to ``success``,
then the node lock released with a GET and a PATCH of the node. Without it each node would bind one pod per lock
timeout. Its requests carry a User-Agent of their own and are counted apart from hami's.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from tests.e2e.cluster import ApiError, ControlPlane, KubeClient, Scheduler, free_port, start_control_plane
from tests.e2e.identities import HAMI_SA, chart_identities

from bench import breakdown
from bench.drastandin import AGENT as DRA_STANDIN_AGENT
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
CPROFILE = os.environ.get("HAMI_BENCH_CPROFILE", "")
"""A path prefix: ``bench_pipeline`` then runs hami under :mod:`bench.cpuprofile` and profiles its CPU time during
each burst (from the first create to the last pod bound) into ``<prefix>-<pipeline>.pstats``."""
NVIDIA_RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/priority",
]


STANDIN_AGENT = "hami-bench-device-plugin"
"""The User-Agent of the device plugin's stand-in: its requests are counted apart from hami's (audit log)."""
STANDIN_WORKERS = 4


class DevicePluginStandIn:
    """What HAMi's device plugin does once kubelet's Allocate has run for a bound pod (spec, webhook-bind-plugin-
    vendors 6.2 step 7): merge-patch the pod's ``hami.io/bind-phase`` to ``success``, then release the node lock it
    holds (GET the node; if the lock still ends with ``,<ns>,<name>``, merge-patch it away on that resourceVersion;
    a 409 reads again). There is no kubelet, so "Allocate has run" is "the pod watch shows it bound"; the plugin of
    each node works on its own, here ``workers`` threads share the nodes. Its requests carry the User-Agent
    :data:`STANDIN_AGENT` and are also counted here (``requests``, by kind). ``done`` holds the names of the pods
    it has finished (bind phase written, lock released or not theirs any more)."""

    def __init__(self, cp: ControlPlane, namespace: str, stop: threading.Event, workers: int = STANDIN_WORKERS) -> None:
        self.done: set[str] = set()
        self.requests: dict[str, int] = {}
        self._cp, self._ns, self._stop = cp, namespace, stop
        self._queue: queue.Queue[tuple[str, str]] = queue.Queue()
        self._count_lock = threading.Lock()
        self._seen: set[str] = set()
        threading.Thread(target=self._watch, daemon=True).start()
        for _ in range(workers):
            threading.Thread(target=self._work, daemon=True).start()

    def _client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self._cp.token}", "User-Agent": STANDIN_AGENT}
        return httpx.Client(base_url=self._cp.server, verify=str(self._cp.ca_file), headers=headers, timeout=30)

    def _watch(self) -> None:
        """Queue every pod the first time it is seen bound (the watch is opened again when it breaks, e.g. across
        a kube-apiserver restart, and starts with every pod)."""
        while not self._stop.is_set():
            try:
                with (
                    self._client() as http,
                    http.stream(
                        "GET", f"/api/v1/namespaces/{self._ns}/pods", params={"watch": "1"}, timeout=None
                    ) as stream,
                ):
                    for line in stream.iter_lines():
                        if self._stop.is_set():
                            return
                        event = json.loads(line)
                        pod = event.get("object") or {}
                        node = (pod.get("spec") or {}).get("nodeName")
                        name = str((pod.get("metadata") or {}).get("name"))
                        if node and event.get("type") != "DELETED" and name not in self._seen:
                            self._seen.add(name)
                            self._queue.put((name, node))
            except httpx.HTTPError:
                time.sleep(0.2)

    def _work(self) -> None:
        with self._client() as http:
            while not self._stop.is_set():
                try:
                    name, node = self._queue.get(timeout=0.2)
                except queue.Empty:
                    continue
                try:
                    self._allocated(http, name, node)
                except httpx.HTTPError:
                    self._queue.put((name, node))  # e.g. kube-apiserver restarting: again later
                    time.sleep(0.2)
                    continue
                with self._count_lock:
                    self.done.add(name)

    def _call(self, http: httpx.Client, method: str, path: str, body: Any = None) -> httpx.Response:
        kind = f"{method} {'pods' if '/pods/' in path else 'nodes'}"
        headers = {"Content-Type": "application/merge-patch+json"} if body is not None else {}
        response = http.request(method, path, content=None if body is None else json.dumps(body), headers=headers)
        with self._count_lock:
            code = "" if response.is_success else f" {response.status_code}"
            self.requests[kind + code] = self.requests.get(kind + code, 0) + 1
        return response

    def _allocated(self, http: httpx.Client, name: str, node: str) -> None:
        patch = {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}}
        self._call(http, "PATCH", f"/api/v1/namespaces/{self._ns}/pods/{name}", patch)
        for _ in range(5):
            current = self._call(http, "GET", f"/api/v1/nodes/{node}")
            if not current.is_success:
                return
            meta = current.json()["metadata"]
            if not (meta.get("annotations") or {}).get(keys.NODE_LOCK, "").endswith(f",{self._ns},{name}"):
                return
            release = {"metadata": {"annotations": {keys.NODE_LOCK: None}, "resourceVersion": meta["resourceVersion"]}}
            if self._call(http, "PATCH", f"/api/v1/nodes/{node}", release).status_code != 409:
                return


AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
"""
"""Every request once (when it completes; a watch when it ends), with who sent it (User-Agent), at the cheapest
level that names the verb and the object."""


def audit_args(tmp: Path) -> tuple[list[str], Path]:
    """kube-apiserver flags that write the audit log of :data:`AUDIT_POLICY` to a file in ``tmp`` (never rotated),
    and that file."""
    policy, log = tmp / "audit-policy.yaml", tmp / "audit.log"
    policy.write_text(AUDIT_POLICY)
    log.touch()
    return [f"--audit-policy-file={policy}", f"--audit-log-path={log}", "--audit-log-maxsize=0"], log


WHO = (
    (STANDIN_AGENT, "device plugin stand-in"),
    (DRA_STANDIN_AGENT, "hami stand-in"),
    ("hami/", "hami"),
    ("kube-scheduler/", "kube-scheduler"),
    ("kube-controller-manager/", "kube-controller-manager"),
    ("python-httpx/", "bench"),
    ("kube-apiserver/", "kube-apiserver"),
)
"""User-Agent prefixes, and who sends them (``bench``: the load generator's creates and the watch that times
binds; ``kube-apiserver``: its own loopback requests; ``hami stand-in``: :mod:`bench.drastandin`)."""
SENDERS = ("hami", "hami stand-in", "kube-scheduler", "kube-controller-manager", "device plugin stand-in", "bench")
"""The senders whose requests per pod every result names (``<sender>_requests_per_pod``)."""


def audited_requests(log: Path, offset: int) -> dict[str, dict[str, int]]:
    """The requests in the audit log from byte ``offset`` on, by who sent them, then by
    ``"<verb> <resource>[/<subresource>][ <code>]"`` (the code only where it is not 2xx)."""
    out: dict[str, dict[str, int]] = {}
    with log.open("rb") as f:
        f.seek(offset)
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line still being written
            agent = str(entry.get("userAgent", ""))
            who = next((name for prefix, name in WHO if agent.startswith(prefix)), "other")
            ref = entry.get("objectRef") or {}
            sub = ref.get("subresource")
            code = int((entry.get("responseStatus") or {}).get("code", 0))
            resource = ref.get("resource") or entry.get("requestURI", "?").split("?")[0]
            kind = f"{entry.get('verb', '?')} {resource}{'/' + sub if sub else ''}"
            kind += "" if 200 <= code < 300 else f" {code}"
            mine = out.setdefault(who, {})
            mine[kind] = mine.get(kind, 0) + 1
    return out


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


class _BoundTimes:
    """Watches the namespace's pods (one watch request) and notes when each is first seen bound."""

    def __init__(self, cp: ControlPlane, namespace: str, stop: threading.Event) -> None:
        self.created: dict[str, float] = {}
        self.refused: dict[str, int] = {}
        """Creates the API server refused and the load generator sent again, by the refusal's message (the
        webhook timed out, …)."""
        self.bound: dict[str, float] = {}
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self._thread = threading.Thread(target=self._run, args=(cp, namespace, stop), daemon=True)
        self._thread.start()

    def _run(self, cp: ControlPlane, namespace: str, stop: threading.Event) -> None:
        headers = {"Authorization": f"Bearer {cp.token}"}
        while not stop.is_set():
            try:
                with (
                    httpx.Client(base_url=cp.server, verify=str(cp.ca_file), headers=headers, timeout=None) as http,
                    http.stream("GET", f"/api/v1/namespaces/{namespace}/pods", params={"watch": "1"}) as stream,
                ):
                    for line in stream.iter_lines():
                        pod = json.loads(line).get("object") or {}
                        name = (pod.get("metadata") or {}).get("name")
                        if (pod.get("spec") or {}).get("nodeName") and name:
                            with self.lock:
                                self.bound.setdefault(name, time.perf_counter())
                                self.changed.notify_all()
                        if stop.is_set():
                            return
            except httpx.HTTPError:
                time.sleep(0.2)

    def wait_all(self, pods: int, timeout: float = 300) -> int:
        deadline = time.monotonic() + timeout
        with self.lock:
            while len(self.bound) < pods and time.monotonic() < deadline:
                self.changed.wait(0.5)
            return len(self.bound)

    def latencies(self) -> list[float]:
        """Creation (the create call answered) → first seen bound, per bound pod, sorted (seconds)."""
        with self.lock:
            return sorted(self.bound[n] - self.created[n] for n in self.bound if n in self.created)


def _apiserver_requests_by(kube: KubeClient) -> dict[str, float]:
    """kube-apiserver's own count of the requests it served (``apiserver_request_total``, every code), by
    ``"<verb> <resource>[/<subresource>][ <code>]"`` (the code only where it is not 2xx)."""
    text = kube.request("GET", "/metrics")
    counts: dict[str, float] = {}
    for line in str(text).splitlines():
        if line.startswith("apiserver_request_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
            sub = labels.get("subresource")
            code = labels.get("code", "")
            failed = f" {code}" if not code.startswith("2") else ""
            kind = f"{labels.get('verb', '?')} {labels.get('resource', '?')}{'/' + sub if sub else ''}{failed}"
            counts[kind] = counts.get(kind, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def _component_pids(cp: ControlPlane, scheduler: Scheduler, hami: subprocess.Popen[bytes] | None) -> dict[str, int]:
    """The processes that share the machine's cores during a burst, by name (``bench``: this process, the load
    generator: creates, the watch that times the binds, the device plugin's stand-in)."""
    pids = {"kube-apiserver": cp.apiserver.pid, "etcd": cp.etcd.pid, "kube-scheduler": scheduler.process.pid}
    found = {name: pid for name, pid in pids.items() if pid is not None}
    if hami is not None:
        found["hami"] = hami.pid
    return found | {"bench": os.getpid()}


def _failed_attempts(cp: ControlPlane, port: int) -> float:
    """kube-scheduler's scheduling attempts that did not end bound (``scheduler_schedule_attempts_total`` with result
    unschedulable or error: a refused filter, a failed bind)."""
    headers = {"Authorization": f"Bearer {cp.token}"}
    # kube-scheduler serves its metrics with a self-signed certificate of its own (loopback only)
    text = httpx.get(f"https://127.0.0.1:{port}/metrics", headers=headers, verify=False, timeout=10).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("scheduler_schedule_attempts_total{") and (
            'result="unschedulable"' in line or 'result="error"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until(done: Callable[[], bool], timeout: float) -> None:
    """Poll ``done`` every 50 ms until it holds or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)


def _quantile(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def bench_pipeline(
    pipeline: str, nodes: int = 100, gpus: int = 8, pods: int = 200, hami_args: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One row of the honest end-to-end table (issue 19 item 3): ``pods`` pods created at once and bound by
    ``bare`` kube-scheduler (no extender, pods without devices), or by kube-scheduler with hami as its extender
    under node policy ``spread`` or ``binpack`` (one-GPU pods; :class:`DevicePluginStandIn` does what HAMi's device
    plugin does after Allocate; ``hami_args`` are added to hami's command line), or by one of DRA mode's pipelines
    (``dra…``, :mod:`bench.dra`). Measured: pods/s (first create → last bound), creation → bound p50/p99 (create
    call answered → first seen bound by one watch), API requests per pod (from kube-apiserver's own
    ``apiserver_request_total``: everything, the benchmark's creates and its one watch included, nothing polled;
    and by who sent them, from kube-apiserver's audit log), kube-scheduler's failed attempts, and the CPU time per
    bound pod of every process."""
    with tempfile.TemporaryDirectory(prefix="hami-bench-") as tmp:
        audit, audit_log = audit_args(Path(tmp))
        cp = start_control_plane(Path(tmp), apiserver_args=audit)
        hami: subprocess.Popen[bytes] | None = None
        stop = threading.Event()
        try:
            kube = cp.client()
            _create_nodes(kube, nodes, gpus)
            if pipeline.startswith("dra"):
                return _bench_dra(cp, Path(tmp), audit_log, pipeline, gpus, pods)
            metrics_port = 0
            if pipeline == "bare":
                scheduler = cp.start_scheduler({"profiles": [{"schedulerName": "hami-scheduler"}]})
                limits: dict[str, int] = {}
            else:
                port, metrics_port = free_port(), free_port()
                profile = f"{CPROFILE}-{pipeline}.pstats" if CPROFILE else ""
                hami = _start_hami(Path(tmp), cp.kubeconfig, port, metrics_port, pipeline, profile, hami_args)
                scheduler = cp.start_scheduler(_scheduler_config(port))
                limits = ONE_GPU
            ns = kube.create_namespace()
            plugin = DevicePluginStandIn(cp, ns, stop) if hami is not None else None
            times = _BoundTimes(cp, ns, stop)
            time.sleep(1.0)  # the watches are open and hami's caches have the namespace
            pids = _component_pids(cp, scheduler, hami)
            if hami is not None and CPROFILE:
                hami.send_signal(signal.SIGUSR1)

            def create() -> None:
                _create_pods(cp, ns, pods, limits, times)

            def after() -> None:
                if hami is not None and CPROFILE:
                    hami.send_signal(signal.SIGUSR2)

            result = _measure(
                cp,
                kube,
                audit_log,
                scheduler,
                pids,
                times,
                create,
                pods,
                plugin,
                after,
                label=pipeline,
                hami_metrics_port=metrics_port,
            )
            return result | {"standin_requests": dict(plugin.requests) if plugin is not None else {}}
        finally:
            stop.set()
            if hami is not None:
                stop_process(hami)
            cp.stop()


def _measure(
    cp: ControlPlane,
    kube: KubeClient,
    audit_log: Path,
    scheduler: Scheduler,
    pids: dict[str, int],
    times: _BoundTimes,
    create: Callable[[], None],
    pods: int,
    plugin: DevicePluginStandIn | None = None,
    after: Callable[[], None] = lambda: None,
    controller_manager_port: int = 0,
    label: str = "burst",
    hami_metrics_port: int = 0,
) -> dict[str, Any]:
    """``create()`` the pods, wait until ``pods`` are bound (``times``), and the figures of ``bench_pipeline``:
    CPU of ``pids`` (name → pid), requests from kube-apiserver's count and its audit log, kube-scheduler's failed
    attempts, where the time goes inside the components (:mod:`bench.breakdown`); with ``plugin``, its work for
    the burst is waited for and counted."""
    components = breakdown.probes(cp.server, scheduler.port, controller_manager_port, hami_metrics_port)
    inside0 = breakdown.snapshot(components, cp.token)
    requests0 = _apiserver_requests_by(kube)
    audit0 = audit_log.stat().st_size
    failed0 = _failed_attempts(cp, scheduler.port)
    cpu0 = {name: _cpu_seconds(pid) for name, pid in pids.items()}
    t0 = time.perf_counter()
    with breakdown.cpu_profiles(scheduler.port, cp.token, f"kube-scheduler-{label}-{t0:.0f}"):
        create()
        bound = times.wait_all(pods)
    after()
    elapsed = max(times.bound.values(), default=t0) - t0
    if plugin is not None:  # the device plugin's work for the burst is part of its cost
        wait_until(lambda: len(plugin.done) >= bound, 30)
    cpu = {name: 1e3 * (_cpu_seconds(pid) - cpu0[name]) / max(bound, 1) for name, pid in pids.items()}
    inside = breakdown.breakdown(inside0, breakdown.snapshot(components, cp.token), bound)
    by = _apiserver_requests_by(kube)
    per_kind = {k: (v - requests0.get(k, 0.0)) / max(bound, 1) for k, v in by.items()}
    time.sleep(0.5)  # the audit log has the last requests
    who = audited_requests(audit_log, audit0)
    lat = times.latencies()
    return {
        "pods": pods,
        "bound": bound,
        "seconds": elapsed,
        "pods_per_s": bound / elapsed if elapsed > 0 else 0.0,
        "p50_s": _quantile(lat, 0.50),
        "p99_s": _quantile(lat, 0.99),
        "api_requests_per_pod": sum(per_kind.values()),
        "api_requests_per_pod_by": {k: round(v, 3) for k, v in sorted(per_kind.items()) if v >= 0.005},
        "requests_per_pod_by_who": {
            name: {k: round(v / max(bound, 1), 3) for k, v in sorted(kinds.items())}
            for name, kinds in sorted(who.items())
        },
        **{f"{name}_requests_per_pod": sum(who.get(name, {}).values()) / max(bound, 1) for name in SENDERS},
        "failed_attempts": _failed_attempts(cp, scheduler.port) - failed0,
        "hami_cpu_ms_per_pod": cpu.get("hami", 0.0),
        "cpu_ms_per_pod": cpu,
        "inside_ms": inside,
        "loadavg": os.getloadavg()[0],
    }


def _bench_dra(cp: ControlPlane, tmp: Path, audit_log: Path, pipeline: str, gpus: int, pods: int) -> dict[str, Any]:
    """``bench_pipeline`` for a DRA pipeline (``bench.dra``): slices and class published, its processes started,
    ``pods`` pods created at once (8 client threads)."""
    from bench import dra

    stop = threading.Event()
    slices_s = dra.publish(cp, dra.node_uids(cp), gpus)
    try:
        with cp.client() as kube:
            ns = kube.create_namespace()
        with dra.dra_stack(cp, tmp, pipeline, ns) as (stack, hami):
            stack.prepare(cp, ns, pods)
            times = _BoundTimes(cp, ns, stop)
            time.sleep(1.0)  # the watches are open and hami's caches have the namespace
            pids = {"kube-apiserver": cp.apiserver.pid or 0, "etcd": cp.etcd.pid or 0, "bench": os.getpid()}

            def create() -> None:
                if hami is not None and CPROFILE:
                    hami.process.send_signal(signal.SIGUSR1)
                _create_objects(cp, ns, pods, stack.pod, times)

            def after() -> None:
                if hami is not None and CPROFILE:
                    hami.process.send_signal(signal.SIGUSR2)

            with cp.client() as kube:
                result = _measure(
                    cp,
                    kube,
                    audit_log,
                    stack.scheduler,
                    pids | stack.pids,
                    times,
                    create,
                    pods,
                    after=after,
                    controller_manager_port=stack.controller_manager_port,
                    label=pipeline,
                    hami_metrics_port=hami.metrics_port if hami else 0,
                )
            return result | {
                "create_refusals": dict(times.refused),
                "front": stack.front,
                "kube_scheduler_limits": list(stack.limits),
                "kube_scheduler_limits_source": stack.limits_source,
                "claims_allocated": dra.claims_allocated(cp, ns),
                "slices_s": slices_s,
                "hami_dra_mode": bool(hami and hami.dra_mode),
            }
    finally:
        stop.set()


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
            DevicePluginStandIn(cp, ns, stop)
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
                stop_process(hami)
            cp.stop()


def node_body(n: int, gpus: int) -> dict[str, Any]:
    """``create_node``'s arguments for ``node-<n>``: ``gpus`` GPUs registered in HAMi's format (10 slots each), with
    their pair scores (``bench.scenarios``)."""
    scores = [PairScore(u, s) for u, s in pair_scores(n, gpus).items()]
    return {
        "extended": {"nvidia.com/gpu": gpus * 10},
        "annotations": {
            keys.NVIDIA_REGISTER: encode_inventory_json(list(node_devices(n, gpus))),
            keys.NVIDIA_SCORE: encode_pair_scores(scores),
        },
    }


def _create_nodes(kube: KubeClient, nodes: int, gpus: int) -> None:
    for n in range(nodes):
        kube.create_node(f"node-{n:05d}", **node_body(n, gpus))


HAMI_MAIN = ["-c", "from hami.cli import main; main()"]
"""``python`` arguments that run the ``hami`` command line."""


def scheduler_args(kubeconfig: Path | str, port: int, metrics_port: int, http_port: int = 0) -> list[str]:
    """``hami scheduler``'s arguments: the kubeconfig, its extender on ``port``, metrics on ``metrics_port``, the
    webhook listener on ``http_port`` (0: a free port; all on loopback)."""
    return [
        "scheduler",
        f"--kubeconfig={kubeconfig}",
        f"--http_bind=127.0.0.1:{http_port or free_port()}",
        f"--extender-bind=127.0.0.1:{port}",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
    ]


def ready(port: int, tls: bool = False) -> bool:
    """Whether hami's extender on ``port`` answers ``/readyz`` with 200 (its caches hold every node and pod); with
    ``tls`` over HTTPS (hami's own certificate, not verified: loopback)."""
    try:
        url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/readyz"
        return httpx.get(url, timeout=2, verify=False).status_code == 200
    except httpx.HTTPError:
        return False


def spawn_hami(
    command: list[str], log: Path, port: int, timeout: float, tls: bool = False, **popen: Any
) -> tuple[subprocess.Popen[bytes], float]:
    """Start ``command`` (a ``hami scheduler``), its output to ``log``, and wait until its extender on ``port`` is
    ready (over HTTPS with ``tls``): the process and the seconds that took. Raises ``RuntimeError`` naming the log
    when it is not."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
        **popen,
    )
    wait_until(lambda: process.poll() is not None or ready(port, tls), timeout)
    if process.poll() is not None or not ready(port, tls):
        process.kill()
        raise RuntimeError(f"hami did not become ready; see {log}")
    return process, time.perf_counter() - started


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Terminate, then kill after 15 s."""
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _start_hami(
    tmp: Path,
    kubeconfig: Path,
    port: int,
    metrics_port: int,
    node_policy: str,
    cprofile: str = "",
    extra: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """``hami scheduler`` in its own process, once its extender answers /readyz (with ``cprofile``: under
    :mod:`bench.cpuprofile`, writing there)."""
    launcher = ["-m", "bench.cpuprofile", cprofile] if cprofile else [*PROFILE, *HAMI_MAIN]
    args = [*scheduler_args(kubeconfig, port, metrics_port), f"--node-scheduler-policy={node_policy}", *EXTRA, *extra]
    process, _ = spawn_hami([sys.executable, *launcher, *args], tmp / "hami.log", port, 60)
    return process


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


ONE_GPU = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1024, "nvidia.com/gpucores": 10}


def _create_pods(
    cp: ControlPlane, ns: str, pods: int, limits: dict[str, int] = ONE_GPU, times: _BoundTimes | None = None
) -> None:
    """``pods`` pods (one GPU each by default) created at once by 8 client threads; with ``times``, each pod's
    creation time is noted when its create call answers."""

    def create(i: int) -> None:
        clients[i % 8].create_pod(ns, f"p{i:04d}", limits=limits, scheduler_name="hami-scheduler")
        if times is not None:
            with times.lock:
                times.created[f"p{i:04d}"] = time.perf_counter()

    with ThreadPoolExecutor(8) as pool:
        clients = [cp.client() for _ in range(8)]
        list(pool.map(create, range(pods)))


def create_retrying(kube: KubeClient, ns: str, pod: dict[str, Any], times: _BoundTimes, attempts: int = 5) -> None:
    """Create ``pod``; a create the API server refuses with a 5xx (an admission webhook that did not answer in its
    timeout) is sent again a second later, as a controller would, and counted in ``times.refused``."""
    for attempt in range(attempts):
        try:
            kube.post(f"/api/v1/namespaces/{ns}/pods", pod)
            return
        except ApiError as err:
            if err.status == 409 and attempt > 0:  # the refused answer came after all: it exists
                return
            if err.status < 500 or attempt == attempts - 1:
                raise
            why = str(err).split(": ", 2)[-1][:120]
            with times.lock:
                times.refused[why] = times.refused.get(why, 0) + 1
            time.sleep(1.0)


def _create_objects(
    cp: ControlPlane, ns: str, pods: int, body: Callable[[int], dict[str, Any]], times: _BoundTimes
) -> None:
    """``pods`` pods ``body(i)`` created at once by 8 client threads, each one's creation time noted."""

    def create(i: int) -> None:
        pod = body(i)
        create_retrying(clients[i % 8], ns, pod, times)
        with times.lock:
            times.created[pod["metadata"]["name"]] = time.perf_counter()

    with ThreadPoolExecutor(8) as pool:
        clients = [cp.client() for _ in range(8)]
        list(pool.map(create, range(pods)))


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
