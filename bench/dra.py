"""DRA mode in the end-to-end benches (issue 38 item 5, DRAMODE.md): what runs beside the control plane.

Pipelines (``PIPELINES``), each bound by kube-scheduler's own DynamicResources allocator, no /filter, no /bind:

* ``dra``: pods written for HAMi (``nvidia.com/gpu: 1``, ``gpumem``, ``gpucores``) go through hami's webhook
  ``/webhook/dra`` (the chart's ``dra.hami.io`` entry, over TLS; translation, no side effects); hami's claim
  controller creates each pod's ResourceClaim owned by the pod; kube-scheduler with the chart's configuration
  (schedulerName ``hami-scheduler``, hami's extender entry, the client limits of the chart's values) allocates
  from the ResourceSlices and binds; kube-controller-manager runs its garbage collector and resourceclaim
  controller. While hami has no DRA mode (no ``--dra-mode`` flag), :mod:`bench.drastandin` plays the webhook and
  the claim controller with the same API requests, and the row says so.
* ``dra-default``: the same with kube-scheduler's default client limits (50 requests/s, burst 100).
* ``dra-noprio``: the same without the chart's prioritize-only extender entry (``draMode.prioritize=false``).
* ``dra-fewer``: an experiment, not the chart: the same with kube-scheduler's ``percentageOfNodesToScore: 1`` (it
  looks for 100 feasible nodes a pod, the least it takes), as the allocator runs once per candidate node.
* ``dra-templates``: the alternative the design did not choose: pods reference a ResourceClaimTemplate and
  kube-controller-manager's resourceclaim controller creates each claim (its default client: 20/s, burst 30).
* ``dra-claims``: the bare DRA baseline: the claims exist before the pods (created unmeasured), kube-scheduler
  only (the chart's limits).

Stand-ins in every DRA row: no kubelet (nodes are API objects), so no NodePrepareResources; the ResourceSlices
hami's DRA plugin would publish are written once through the API with the plugin's own builder
(:func:`hami.deviceplugin.dra.slices.resource_slice`), one slice per node.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import functools
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import yaml
from tests.e2e.cluster import ControlPlane, KubeClient, ManagedProcess, Scheduler, free_port

from bench.drastandin import AGENT as STANDIN_AGENT
from bench.scenarios import node_devices
from hami.deviceplugin.discovery import GpuInfo
from hami.deviceplugin.dra.slices import DRIVER, NodeFacts, resource_slice, slice_devices
from hami.server.certs import generate, write_files

DRA_API: Final = "/apis/resource.k8s.io/v1"
WEBHOOKS: Final = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
SCHEDULER_NAME: Final = "hami-scheduler"
DEVICE_CLASS: Final = DRIVER
"""The chart's DeviceClass name (``draPlugin.deviceClass.name``) and the driver's."""
KUBE_SCHEDULER_DEFAULT_LIMITS: Final = (50.0, 100)
"""kube-scheduler's own ``clientConnection`` defaults (qps, burst)."""
CHART_LIMITS_ASSUMED: Final = (200.0, 400)
"""The limits DRA mode's kube-scheduler gets when the chart does not set any yet (helper dra-policy's planned
defaults for ``scheduler.kubeScheduler.clientConnection``); the result says which applied."""
KCM_CONTROLLERS: Final = "garbage-collector-controller,resourceclaim-controller"
TEMPLATE_NAME: Final = "hami-gpu-1024mi-10c"
PIPELINES: Final = {
    "dra": "DRA mode (chart's kube-scheduler limits)",
    "dra-default": "DRA mode, kube-scheduler's default limits (50/100)",
    "dra-noprio": "DRA mode without the prioritize entry (draMode.prioritize=false)",
    "dra-fewer": "DRA mode, 100 candidate nodes a pod (percentageOfNodesToScore 1; not the chart's)",
    "dra-templates": "DRA via ResourceClaimTemplates (kube-controller-manager makes claims)",
    "dra-claims": "DRA, claims pre-created, kube-scheduler only",
}
NODE_POLICY: Final = "spread"
"""hami's node policy in DRA mode's pipelines (what its prioritize entry orders nodes by): ``spread``, as the
extender row DRA mode is compared with."""
SCORE_PERCENT: Final = os.environ.get("HAMI_BENCH_DRA_SCORE_PERCENT", "")
"""An experiment, not the chart: kube-scheduler's ``percentageOfNodesToScore`` in DRA mode's pipelines (empty: its
adaptive default, 50% less 1% per 125 nodes, at least 5%, at least 100 nodes)."""
FRONT_DOOR: Final = ("dra", "dra-default", "dra-noprio", "dra-fewer")
"""The pipelines whose pods go through hami's webhook and claim controller."""
KCM_AGENT: Final = "kube-controller-manager/"
SENDERS: Final = (
    (STANDIN_AGENT, "hami stand-in"),
    (KCM_AGENT, "kube-controller-manager"),
)
"""User-Agent prefixes of the senders DRA mode adds to :data:`bench.e2e.WHO`."""


# --- the objects: slices, class, claims, pods (pure) ------------------------------------------------------------


def node_gpus(n: int, gpus: int) -> list[GpuInfo]:
    """Node ``n``'s GPUs as the plugin's discovery would report them: the same UUIDs, memory and count as the
    node's HAMi registration (``bench.scenarios.node_devices``), minor = index."""
    return [
        GpuInfo(
            uuid=d.id,
            index=d.index,
            name="Tesla T4",
            memory_mib=d.devmem,
            numa=d.numa,
            minor=d.index,
            bus_id=f"00000000:{0x10 + d.index:02X}:00.0",
        )
        for d in node_devices(n, gpus)
    ]


FACTS: Final = NodeFacts(driver_version="580.65.06", cuda_version=(13, 0))


def node_slice(name: str, uid: str, n: int, gpus: int) -> dict[str, Any]:
    """Node ``n``'s ResourceSlice, built by hami's DRA plugin's own builder."""
    devices = slice_devices(node_gpus(n, gpus), details={}, pcie_roots={})
    return resource_slice(name, uid, devices, FACTS)


def claim_request(device_class: str = DEVICE_CLASS) -> dict[str, Any]:
    """The claim spec of the bench's pod (one GPU, 1,024 MiB, 10 cores), as DRAMODE.md translates it."""
    exactly = {
        "deviceClassName": device_class,
        "allocationMode": "ExactCount",
        "count": 1,
        "capacity": {"requests": {"memory": "1024Mi", "cores": "10"}},
    }
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def claim_template(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": TEMPLATE_NAME, "namespace": namespace},
        "spec": {"spec": claim_request()},
    }


def claim(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": claim_request(),
    }


def claim_pod(name: str, source: dict[str, str]) -> dict[str, Any]:
    """A pod that uses one claim (``source``: ``{"resourceClaimName": …}`` or ``{"resourceClaimTemplateName":
    …}``) for its one container, sent to hami's scheduler name."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", **source}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/hami-bench:none",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }


def scheduler_config(
    chart_config: dict[str, Any], extender_port: int | None, limits: tuple[float, int]
) -> dict[str, Any]:
    """kube-scheduler's configuration as the chart writes it (``chart_config``: its ConfigMap's, with every
    extender entry, e.g. hami's filter/bind entry and DRA mode's prioritize entry, calling ``extender_port`` on
    loopback) with the client limits ``limits``; without ``extender_port``, its profiles alone (no extender, as
    for pods that need no hami). No leader election (one replica)."""
    config: dict[str, Any] = {"profiles": copy.deepcopy(chart_config["profiles"])}
    if extender_port is not None:
        config["extenders"] = copy.deepcopy(chart_config.get("extenders") or [])
        for entry in config["extenders"]:
            entry["urlPrefix"] = re.sub(r":\d+$", f":{extender_port}", entry["urlPrefix"])
    qps, burst = limits
    return config | {"clientConnection": {"qps": qps, "burst": burst}}


def senders(agent: str) -> str | None:
    """Who sent a request with User-Agent ``agent`` among DRA mode's own senders (None: another)."""
    return next((name for prefix, name in SENDERS if agent.startswith(prefix)), None)


def controller_of(agent: str) -> str:
    """kube-controller-manager names each controller's client in its User-Agent (``…/resourceclaim-controller``)."""
    return agent.rsplit("/", 1)[-1] if agent.startswith(KCM_AGENT) else ""


# --- the chart --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chart:
    """What the chart renders for DRA mode: the DeviceClass, the webhook entry, kube-scheduler's client limits."""

    device_class: dict[str, Any]
    webhook_entry: dict[str, Any]
    scheduler_config: dict[str, Any]
    """kube-scheduler's configuration (the scheduler ConfigMap's ``config.yaml``)."""
    limits: tuple[float, int]
    limits_source: str
    dra_mode_values: bool


def _values_have(key: str) -> bool:
    from bench.scale import CHART

    return any(line.startswith(f"{key}:") for line in (CHART / "values.yaml").read_text().splitlines())


@functools.cache
def chart(prioritize: bool = True) -> Chart:
    """``helm template`` with the DRA plugin on (and DRA mode, where the chart has it; ``draMode.prioritize`` as
    given)."""
    from tests.helm import template

    dra_mode = _values_have("draMode")
    modes = ["draMode.enabled=true", "draMode.namespaces=all", f"draMode.prioritize={str(prioritize).lower()}"]
    sets = ["draPlugin.enabled=true", *(modes if dra_mode else [])]
    docs = template("hami-system", "1.37.2", *sets)
    (device_class,) = [d for d in docs if d["kind"] == "DeviceClass"]
    (hooks,) = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    entries = {e["name"]: e for e in hooks["webhooks"]}
    entry = entries.get("dra.hami.io") or entries["vgpu.hami.io"] | {"name": "dra.hami.io"}
    config_maps = [d for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in (d.get("data") or {})]
    config = yaml.safe_load(config_maps[0]["data"]["config.yaml"])
    client = config.get("clientConnection") or {}
    if "qps" in client:
        limits, source = (float(client["qps"]), int(client.get("burst", 0))), "the chart"
    else:
        limits, source = CHART_LIMITS_ASSUMED, "assumed (the chart sets none yet)"
    return Chart(device_class, entry, config, limits, source, dra_mode)


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "labels")}
    return {**obj, "metadata": meta}


def publish(cp: ControlPlane, nodes: dict[str, str], gpus: int, writers: int = 8) -> float:
    """The chart's DeviceClass and one ResourceSlice per node (``nodes``: name ``node-<n>`` → uid), written by
    ``writers`` client threads; seconds the slices took."""
    from concurrent.futures import ThreadPoolExecutor

    with cp.client() as kube:
        kube.post(f"{DRA_API}/deviceclasses", _strip(chart().device_class))
    bodies = [node_slice(name, uid, int(name.rsplit("-", 1)[1]), gpus) for name, uid in nodes.items()]
    clients = [cp.client() for _ in range(writers)]
    started = time.perf_counter()
    try:
        with ThreadPoolExecutor(writers) as pool:
            list(
                pool.map(
                    lambda i: clients[i % writers].post(f"{DRA_API}/resourceslices", bodies[i]), range(len(bodies))
                )
            )
    finally:
        for c in clients:
            c.close()
    return time.perf_counter() - started


# --- the processes ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tls:
    """A serving certificate for 127.0.0.1 and its CA (the chart's certs job makes the same kind)."""

    ca_pem: bytes
    cert: Path
    key: Path

    @classmethod
    def create(cls, directory: Path) -> Tls:
        bundle = generate(["localhost"], ["127.0.0.1"], now=datetime.datetime.now(datetime.UTC))
        paths = write_files(bundle, directory)
        return cls(bundle.ca_cert, paths["tls.crt"], paths["tls.key"])


@functools.cache
def hami_dra_flags() -> tuple[str, ...] | None:
    """``hami scheduler``'s DRA-mode flags when hami has them (``--dra-mode``, ``--dra-device-class``); None when
    it has not, or ``HAMI_BENCH_DRA_STANDIN=1`` asks for the stand-in (which then plays its part)."""
    from bench.e2e import HAMI_MAIN

    if os.environ.get("HAMI_BENCH_DRA_STANDIN") == "1":
        return None
    help_text = subprocess.run(
        [sys.executable, *HAMI_MAIN, "scheduler", "--help"],
        capture_output=True,
        text=True,
        check=False,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    ).stdout
    if "--dra-mode" not in help_text:
        return None
    return ("--dra-mode", f"--dra-device-class={DEVICE_CLASS}")


def locate_controller_manager(cp: ControlPlane) -> Path:
    """kube-controller-manager of the control plane's build (``~/.cache/hami/k8s-node-v…``)."""
    from tests.e2e.realnode import locate_node_binaries

    return locate_node_binaries(cp.binaries) / "kube-controller-manager"


def start_controller_manager(cp: ControlPlane, name: str = "kube-controller-manager") -> tuple[ManagedProcess, int]:
    """kube-controller-manager with its garbage collector and resourceclaim controller only, its default client
    limits (20/s, burst 30 per controller), as the admin; once ``/healthz`` answers and the garbage collector says
    its monitors synced (at most 120 s); the process and its secure port (``/metrics``)."""
    port = free_port()
    process = ManagedProcess(
        name,
        [
            str(locate_controller_manager(cp)),
            f"--kubeconfig={cp.kubeconfig}",
            f"--authentication-kubeconfig={cp.kubeconfig}",
            f"--authorization-kubeconfig={cp.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--leader-elect=false",
            f"--controllers={KCM_CONTROLLERS}",
            "--v=2",
        ],
        cp.log_dir / f"{name}.log",
    )
    process.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.exited() is None:
        if "synced garbage collector" in process.log_tail(400).lower() or "all resource monitors have synced" in (
            process.log_tail(400).lower()
        ):
            break
        time.sleep(0.25)
    if process.exited() is not None:
        raise RuntimeError(f"kube-controller-manager exited:\n{process.log_tail()}")
    return process, port


def start_standin(cp: ControlPlane, tmp: Path, tls: Tls) -> tuple[subprocess.Popen[bytes], int]:
    """:mod:`bench.drastandin` serving ``/webhook/dra`` on a free port; once it answers."""
    port = free_port()
    token = tmp / "standin-token"
    token.write_text(cp.token)
    token.chmod(0o600)
    command = [
        sys.executable,
        "-m",
        "bench.drastandin",
        f"--server={cp.server}",
        f"--token-file={token}",
        f"--ca-file={cp.ca_file}",
        f"--port={port}",
        f"--cert={tls.cert}",
        f"--key={tls.key}",
    ]
    process = subprocess.Popen(command, stdout=(tmp / "standin.log").open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=2).status_code == 200:
                return process, port
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"the DRA stand-in did not answer; see {tmp / 'standin.log'}")


def register_webhook(kube: KubeClient, url: str, ca_pem: bytes, namespace: str) -> None:
    """The chart's ``dra.hami.io`` entry calling ``url`` (``…/webhook/dra``), for ``namespace`` only (a label), as
    a configuration of its own; returns once kube-apiserver's admission chain uses it (a dry-run create is
    translated)."""
    kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {"hami-bench/dra": namespace}}})
    entry = chart().webhook_entry
    selector = dict(entry.get("namespaceSelector") or {}) | {"matchLabels": {"hami-bench/dra": namespace}}
    entry = entry | {
        "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
        "namespaceSelector": selector,
    }
    body = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": f"hami-bench-{namespace}"},
        "webhooks": [entry],
    }
    kube.post(WEBHOOKS, body)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pod = hami_pod("probe")
        answer = kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod, params={"dryRun": "All"})
        if (answer.get("spec") or {}).get("resourceClaims"):
            return
        time.sleep(0.2)
    raise RuntimeError("the DRA webhook did not translate a dry-run pod in 60 s")


def hami_pod(name: str) -> dict[str, Any]:
    """A pod written for HAMi: one GPU, 1,024 MiB, 10 cores; no scheduler name (the webhook sets it)."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "10"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": "registry.invalid/hami-bench:none", "resources": {"limits": limits}}
            ],
        },
    }


@dataclass
class DraStack:
    """A DRA pipeline's processes beside the control plane, and how its pods are written."""

    pipeline: str
    scheduler: Scheduler
    pids: dict[str, int] = field(default_factory=dict)
    """name → pid of the processes it added (CPU per pod)."""
    front: str = ""
    """Who plays the webhook and the claim controller: ``hami``, ``hami stand-in`` or nothing."""
    limits: tuple[float, int] = KUBE_SCHEDULER_DEFAULT_LIMITS
    limits_source: str = ""
    controller_manager_port: int = 0
    """kube-controller-manager's secure port (0: none runs)."""

    def pod(self, i: int, width: int = 4) -> dict[str, Any]:
        name = f"p{i:0{width}d}"
        if self.pipeline == "dra-templates":
            return claim_pod(name, {"resourceClaimTemplateName": TEMPLATE_NAME})
        if self.pipeline == "dra-claims":
            return claim_pod(name, {"resourceClaimName": f"c{i:0{width}d}"})
        return hami_pod(name)

    def prepare(self, cp: ControlPlane, namespace: str, pods: int, width: int = 4) -> None:
        """What exists before the clock starts: the template, or every claim of ``dra-claims``."""
        with cp.client() as kube:
            if self.pipeline == "dra-templates":
                kube.post(f"{DRA_API}/namespaces/{namespace}/resourceclaimtemplates", claim_template(namespace))
            if self.pipeline == "dra-claims":
                for i in range(pods):
                    kube.post(f"{DRA_API}/namespaces/{namespace}/resourceclaims", claim(namespace, f"c{i:0{width}d}"))


@dataclass
class HamiDra:
    """A ``hami scheduler`` as DRA mode's chart runs it (TLS on its listeners; DRA mode on where hami has it)."""

    process: subprocess.Popen[bytes]
    port: int
    """The extender listener (HTTPS)."""
    service_port: int
    """The Service listener: the webhook (HTTPS)."""
    metrics_port: int
    log: Path
    ready_s: float
    dra_mode: bool


def start_hami(kubeconfig: Path, tmp: Path, tls: Tls, name: str = "hami", timeout: float = 120) -> HamiDra:
    """``hami scheduler`` with the chart's TLS, ``--dra-mode`` when hami has it; once its extender is ready (with
    ``HAMI_BENCH_CPROFILE``: under :mod:`bench.cpuprofile`, profiled from SIGUSR1 to SIGUSR2)."""
    from bench.e2e import CPROFILE, EXTRA, HAMI_MAIN, PROFILE, scheduler_args, spawn_hami

    port, service_port, metrics_port = free_port(), free_port(), free_port()
    flags = hami_dra_flags()
    args = [
        *scheduler_args(kubeconfig, port, metrics_port, service_port),
        f"--cert_file={tls.cert}",
        f"--key_file={tls.key}",
        f"--node-scheduler-policy={NODE_POLICY}",
        *(flags or ()),
        *EXTRA,
    ]
    log = tmp / f"{name}.log"
    launcher = ["-m", "bench.cpuprofile", f"{CPROFILE}-{name}.pstats"] if CPROFILE else [*PROFILE, *HAMI_MAIN]
    process, ready_s = spawn_hami([sys.executable, *launcher, *args], log, port, timeout, tls=True)
    return HamiDra(process, port, service_port, metrics_port, log, ready_s, flags is not None)


@contextlib.contextmanager
def dra_stack(
    cp: ControlPlane, tmp: Path, pipeline: str, namespace: str, suffix: str = "", hami_timeout: float = 120
) -> Iterator[tuple[DraStack, HamiDra | None]]:
    """Everything ``pipeline`` runs beside the control plane (see the module docstring), for pods in
    ``namespace``; stopped again on the way out. Yields the stack and hami (None for ``dra-claims``)."""
    from bench.e2e import stop_process

    stoppers: list[Callable[[], None]] = []
    hami: HamiDra | None = None
    try:
        pids: dict[str, int] = {}
        front = ""
        kcm_port = 0
        if pipeline != "dra-claims":
            kcm, kcm_port = start_controller_manager(cp, f"kube-controller-manager{suffix}")
            stoppers.append(kcm.stop)
            pids["kube-controller-manager"] = kcm.pid or 0
            tls = Tls.create(tmp / f"tls{suffix}")
            hami = start_hami(cp.kubeconfig, tmp, tls, f"hami-{pipeline}{suffix}", hami_timeout)
            stoppers.append(functools.partial(stop_process, hami.process))
            pids["hami"] = hami.process.pid
            if pipeline in FRONT_DOOR:
                url = f"https://127.0.0.1:{hami.service_port}/webhook/dra"
                front = "hami"
                if not hami.dra_mode:
                    standin, port = start_standin(cp, tmp, tls)
                    stoppers.append(functools.partial(stop_process, standin))
                    pids["hami stand-in"] = standin.pid
                    url, front = f"https://127.0.0.1:{port}/webhook/dra", "hami stand-in"
                with cp.client() as kube:
                    register_webhook(kube, url, tls.ca_pem, namespace)
                    stoppers.append(functools.partial(_unregister, cp, namespace))
        rendered = chart(prioritize=pipeline != "dra-noprio")
        limits, source = (
            (KUBE_SCHEDULER_DEFAULT_LIMITS, "kube-scheduler's default")
            if pipeline == "dra-default"
            else (rendered.limits, rendered.limits_source)
        )
        config = scheduler_config(rendered.scheduler_config, hami.port if hami else None, limits)
        if pipeline == "dra-fewer" or SCORE_PERCENT:  # an experiment: fewer candidate nodes a pod for the allocator
            config["percentageOfNodesToScore"] = int(SCORE_PERCENT or 1)
        scheduler = cp.start_scheduler(config, name=f"kube-scheduler-{pipeline}{suffix}")
        stoppers.append(functools.partial(_stop_scheduler, cp, scheduler))
        pids["kube-scheduler"] = scheduler.process.pid or 0
        yield DraStack(pipeline, scheduler, pids, front, limits, source, kcm_port), hami
    finally:
        for stop in reversed(stoppers):
            with contextlib.suppress(Exception):
                stop()


def _unregister(cp: ControlPlane, namespace: str) -> None:
    with cp.client() as kube:
        kube.delete(f"{WEBHOOKS}/hami-bench-{namespace}")


def _stop_scheduler(cp: ControlPlane, scheduler: Scheduler) -> None:
    scheduler.stop()
    if scheduler in cp.schedulers:
        cp.schedulers.remove(scheduler)


def node_uids(cp: ControlPlane) -> dict[str, str]:
    """Every node's name → uid (the slices' owner)."""
    with cp.client() as kube:
        return {n["metadata"]["name"]: n["metadata"]["uid"] for n in kube.get("/api/v1/nodes")["items"]}


def over_capacity_events(cp: ControlPlane, namespace: str) -> int:
    """hami's ``DRAOverCapacity`` Warning Events in ``namespace``: a card kube-scheduler's allocator filled beyond
    what hami's ledger (claims and device-plugin pods together) allows. The 5,000-node run publishes slices for the
    cards its pre-bound device-plugin pods use (a shortcut: in a cluster a node is served by one or the other), so
    it checks none was raised."""
    with cp.client() as kube:
        items = kube.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector="reason=DRAOverCapacity")["items"]
    return sum(int(e.get("count") or 1) for e in items)


def claims_allocated(cp: ControlPlane, namespace: str) -> int:
    """How many claims in ``namespace`` kube-scheduler allocated."""
    with cp.client() as kube:
        items = kube.get(f"{DRA_API}/namespaces/{namespace}/resourceclaims")["items"]
    return sum(1 for c in items if (c.get("status") or {}).get("allocation"))
