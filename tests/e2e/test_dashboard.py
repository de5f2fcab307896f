"""The chart's Grafana dashboard, evaluated for real: Prometheus (Debian's ``prometheus`` package, installed by
``make test-deps``) scrapes a real ``hami scheduler`` while kube-scheduler places GPU pods through it, and a real
``hami monitor`` (fake NVML, HAMi-core regions the test writes for the placed pods) on their node; every query of
every panel returns data, with the node and namespace variables at "All" (Grafana's ``.*``) and the variables'
own queries list the node and the namespace; a namespace selection keeps only its pods.

hami runs as the e2e suite runs it, without ``--metrics-secure`` (plain HTTP on loopback), so Prometheus needs
no token. Grafana itself is not run: the panels' queries are what Grafana would send to this data source.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hami.protocol import keys
from hami.protocol.allocation import decode_pod_devices
from tests.e2e.cluster import ControlPlane, KubeClient, ManagedProcess, Scheduler, free_port, wait_until
from tests.e2e.hami_stack import (
    GPU,
    SCHEDULER_NAME,
    FakeDevicePlugin,
    HamiScheduler,
    extender_config,
    gpu_limits,
    register_annotation,
)
from tests.e2e.identities import chart_identities
from tests.helm import CHART
from tests.unit.monitor.regionfile import Proc, build_region, write_container

DASHBOARD = CHART / "dashboards" / "hami-scheduler.json"
SCRAPE_INTERVAL = "1s"


MIB = 1048576


def panel_queries(selected: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """``(panel title, PromQL)`` for every target of every panel of the shipped dashboard, its variables
    replaced as Grafana does: ``selected`` values, else "All" (the variables' ``allValue``)."""
    dashboard = json.loads(DASHBOARD.read_text())
    values = {v["name"]: v["allValue"] for v in dashboard["templating"]["list"] if v["type"] == "query"}
    values.update(selected or {})
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in values.items():
                expr = expr.replace(f"${name}", value)
            out.append((panel["title"], expr))
    return out


def variable_queries() -> dict[str, tuple[str, str]]:
    """``name: (metric, label)`` of each ``label_values(metric, label)`` variable."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            inner = variable["query"]["query"].removeprefix("label_values(").removesuffix(")")
            metric, label = (part.strip() for part in inner.split(","))
            found[variable["name"]] = (metric, label)
    return found


class Prometheus:
    """``prometheus`` scraping one target every second, its data in ``directory``."""

    def __init__(self, directory: Path, target: str, log_file: Path, monitor: str = "") -> None:
        binary = shutil.which("prometheus")
        assert binary, "prometheus is missing: run `make test-deps` (make test does) to install Debian's prometheus"
        self.port = free_port()
        config = directory / "prometheus.yml"
        config.write_text(
            json.dumps(  # JSON is YAML
                {
                    "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
                    "scrape_configs": [
                        {"job_name": "hami-scheduler", "static_configs": [{"targets": [target]}]},
                        *(
                            [{"job_name": "hami-monitor", "static_configs": [{"targets": [monitor]}]}]
                            if monitor
                            else []
                        ),
                    ],
                }
            )
        )
        self.process = ManagedProcess(
            "prometheus",
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            log_file,
        )

    def start(self) -> None:
        self.process.start()

        def check() -> None:
            code = self.process.exited()
            if code is not None:
                raise RuntimeError(f"prometheus exited with status {code}:\n{self.process.log_tail()}")

        # Prometheus opens its port before its storage is ready and answers every request with a plain-text
        # 503 "Service Unavailable" until then (longer on a loaded machine): wait for /-/ready, then for a scrape.
        wait_until(self.ready, description="prometheus /-/ready", check=check)
        wait_until(
            lambda: self.query('up{job="hami-scheduler"}') == [1.0], description="prometheus scraping hami", check=check
        )

    def ready(self) -> bool:
        return httpx.get(f"http://127.0.0.1:{self.port}/-/ready", timeout=10.0).status_code == 200

    def stop(self) -> None:
        self.process.stop()

    def result(self, expr: str) -> list[dict[str, Any]]:
        answer = httpx.get(f"http://127.0.0.1:{self.port}/api/v1/query", params={"query": expr}, timeout=30.0)
        answer.raise_for_status()  # an httpx.HTTPError that names the status (a 503 body is not JSON)
        body = answer.json()
        assert body["status"] == "success", f"{expr}: {body}"
        data: list[dict[str, Any]] = body["data"]["result"]
        return data

    def label_values(self, metric: str, label: str) -> list[str]:
        """What Grafana's ``label_values(metric, label)`` lists: the label's values on the metric's series."""
        answer = httpx.get(
            f"http://127.0.0.1:{self.port}/api/v1/label/{label}/values", params={"match[]": metric}, timeout=30.0
        )
        answer.raise_for_status()
        values: list[str] = answer.json()["data"]
        return values

    def query(self, expr: str) -> list[float]:
        """The values of an instant query (vector results), NaN included. A failed request raises
        ``httpx.HTTPError``: ``wait_until`` polls again after it, an assertion shows it."""
        return [float(series["value"][1]) for series in self.result(expr)]


class Monitor:
    """``hami monitor`` on ``node`` (fake NVML: the node's registered cards, busy), its regions under ``hook``."""

    def __init__(self, control_plane: ControlPlane, hook: Path, port: int) -> None:
        self.plane = control_plane
        self.hook = hook
        self.port = port
        self.process: ManagedProcess | None = None

    @contextlib.contextmanager
    def running(self, node: str, cards: int, tmp_path: Path) -> Iterator[None]:
        fixture = tmp_path / "monitor-gpus.yaml"
        devices = [
            {
                "uuid": f"GPU-{node}-{i}",
                "name": "A100",
                "stats": {"memory_used_bytes": 9000 * MIB, "utilization": 61, "memory_utilization": 20},
            }
            for i in range(cards)
        ]
        fixture.write_text(json.dumps({"devices": devices}))
        (self.hook / "vgpu").mkdir(parents=True, exist_ok=True)
        (self.hook / "vgpu" / "libvgpu.so.v2.10.0").write_bytes(b"\x7fELF" + bytes(60))  # HAMi-core's stand-in
        with chart_identities(self.plane).device_plugin(node) as kubeconfig:
            self.process = ManagedProcess(
                "hami-monitor",
                [
                    sys.executable, "-c", "from hami.cli import main; main()", "monitor", f"--node-name={node}",
                    f"--fake-nvml={fixture}", f"--kubeconfig={kubeconfig}", f"--hook-path={self.hook}",
                    "--bind-address=127.0.0.1", f"--port={self.port}", "--interval=0.5",
                ],
                self.plane.log_dir / "hami-monitor.log",
            )  # fmt: skip
            self.process.start()
            try:
                yield
            finally:
                self.process.stop()

    def write_regions(self, pods: list[dict[str, Any]]) -> None:
        """HAMi-core's region of each pod's container: 4000 MiB in use, 30 % of the SMs, on its allocated card."""
        for pod in pods:
            notes = pod["metadata"]["annotations"]
            card = decode_pod_devices(notes[keys.NVIDIA_KEYS.allocated])[0][0].uuid
            region = build_region(
                [card], limits=[6000 * MIB], procs=[Proc(1, {0: (MIB, MIB, 4000 * MIB - 2 * MIB, 4000 * MIB)}, {0: 30})]
            )
            container = pod["spec"]["containers"][0]["name"]
            write_container(self.hook / "vgpu" / "containers", pod["metadata"]["uid"], container, region)


@pytest.fixture
def prometheus_on_hami(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
    tmp_path: Path,
) -> Iterator[tuple[Prometheus, KubeClient, str, list[str], Monitor]]:
    hami = HamiScheduler(control_plane)
    plugin = FakeDevicePlugin(control_plane, f"hami-e2e/run={namespace}")
    monitor = Monitor(control_plane, tmp_path / "hook", free_port())
    prometheus = Prometheus(
        tmp_path,
        f"127.0.0.1:{hami.metrics_port}",
        control_plane.log_dir / "prometheus.log",
        monitor=f"127.0.0.1:{monitor.port}",
    )
    label = {"hami-e2e/run": namespace}
    nodes = []
    for name, gpus in (("a", 2), ("b", 1)):
        node = f"{namespace}-{name}"
        annotations = {keys.NVIDIA_REGISTER: register_annotation(node, gpus, 24000)}
        make_node(node, extended={GPU: gpus * 10}, labels=label, annotations=annotations)
        nodes.append(node)
    # a node whose registration does not decode: hami quarantines it, and the quarantine panel has a series
    make_node(f"{namespace}-broken", extended={GPU: 10}, labels=label, annotations={keys.NVIDIA_REGISTER: "[{"})
    # Each component is stopped even when a later one fails to start: a hami left running would report the next
    # tests' nodes too (a second RegistrationRefused event on their broken nodes).
    with contextlib.ExitStack() as started:
        started.callback(hami.stop)
        hami.start()
        start_scheduler(extender_config(hami))
        plugin.start()
        started.callback(plugin.stop)
        started.callback(prometheus.stop)
        prometheus.start()
        yield prometheus, kube, namespace, nodes, monitor


DRA = "/apis/resource.k8s.io/v1"
DRIVER = "hami-core-gpu.project-hami.io"


@contextlib.contextmanager
def dra_mode_pod(kube: KubeClient, namespace: str, node: str) -> Iterator[str]:
    """A pod in DRA mode (as hami's webhook and claim controller leave it: label ``hami.io/dra``, a claim owned by
    the pod for 6000 MiB and 10 cores) on ``node``, which only hami's DRA plugin serves: the test publishes its
    slice (two 24000-MiB cards), the default kube-scheduler allocates the claim. Yields the pod's name; the
    cluster-scoped objects are removed afterwards."""
    device_class = f"{namespace}-hami-gpu"
    devices = [
        {
            "name": f"hami-gpu-{minor}",
            "allowMultipleAllocations": True,
            "attributes": {
                "uuid": {"string": f"GPU-{node}-{minor}"},
                "minor": {"int": minor},
                "productName": {"string": "NVIDIA A10"},
            },
            "capacity": {
                "cores": {
                    "value": "100",
                    "requestPolicy": {"default": "100", "validRange": {"min": "0", "max": "100"}},
                },
                "memory": {"value": "24000Mi", "requestPolicy": {"default": "24000Mi", "validRange": {"min": "1Mi"}}},
            },
        }
        for minor in range(2)
    ]
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    kube.post(
        f"{DRA}/resourceslices",
        {"metadata": {"name": node}, "spec": {"driver": DRIVER, "nodeName": node, "pool": pool, "devices": devices}},
    )
    selector = {"cel": {"expression": f'device.driver == "{DRIVER}"'}}
    kube.post(f"{DRA}/deviceclasses", {"metadata": {"name": device_class}, "spec": {"selectors": [selector]}})
    claim = "d0-main-x2b4z"
    entry = {
        "container": "main",
        "section": "containers",
        "resources": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "6000", "nvidia.com/gpucores": "10"},
        "annotations": {},
    }
    pod = kube.create_pod(
        namespace,
        "d0",
        labels={"hami.io/dra": "true"},
        annotations={"hami.io/dra-requests": json.dumps({claim: entry})},
        containers=[
            {
                "name": "main",
                "image": "registry.invalid/hami-e2e:none",
                "resources": {"claims": [{"name": "hami-main"}]},
            }
        ],
        spec={
            "resourceClaims": [{"name": "hami-main", "resourceClaimName": claim}],
            "nodeSelector": {"kubernetes.io/hostname": node},
        },
    )
    request = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1}
    request["capacity"] = {"requests": {"memory": "6000Mi", "cores": "10"}}
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "d0", "uid": pod["metadata"]["uid"], "controller": True}
    kube.post(
        f"{DRA}/namespaces/{namespace}/resourceclaims",
        {
            "metadata": {"name": claim, "annotations": {"hami.io/dra-pod": "d0"}, "ownerReferences": [owner]},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
        },
    )
    path = f"{DRA}/namespaces/{namespace}/resourceclaims/{claim}"
    try:
        yield "d0"
    finally:
        allocated = kube.get(path)
        allocated["status"] = {}
        kube.put(f"{path}/status", allocated)
        kube.patch(path, {"metadata": {"finalizers": None}})
        kube.delete(path)
        kube.delete(f"{DRA}/resourceslices/{node}")
        kube.delete(f"{DRA}/deviceclasses/{device_class}")


def test_every_dashboard_query_returns_data_from_a_real_prometheus(
    prometheus_on_hami: tuple[Prometheus, KubeClient, str, list[str], Monitor],
    tmp_path: Path,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
) -> None:
    prometheus, kube, namespace, nodes, monitor = prometheus_on_hami
    dra_node = f"{namespace}-dra"
    make_node(dra_node)  # no hami registration: only the DRA plugin serves it
    start_scheduler(None)  # the default profile: it allocates the DRA-mode pod's claim
    with dra_mode_pod(kube, namespace, dra_node) as dra_pod:
        kube.wait_for_pod_scheduled(namespace, dra_pod)
        dashboard_with_pods(prometheus, kube, namespace, nodes, monitor, tmp_path, (dra_node, dra_pod))


def dashboard_with_pods(
    prometheus: Prometheus,
    kube: KubeClient,
    namespace: str,
    nodes: list[str],
    monitor: Monitor,
    tmp_path: Path,
    dra: tuple[str, str],
) -> None:
    """Three device-plugin pods placed through hami, beside the DRA-mode pod ``dra`` (node, pod): every panel
    has data, and the DRA-mode pod is counted under HAMi's names like the others."""
    # One pod at a time, each bind scraped before the next pod: every latency histogram then has a series that
    # grows between two scrapes, so rates and quantiles have something to measure (binds now finish so fast
    # that three at once can all land before the first scrape, and a rate over one sample is 0).
    for i in range(3):
        kube.create_pod(
            namespace,
            f"p{i}",
            limits=gpu_limits(gpu=1, mem=6000, cores=20),
            scheduler_name=SCHEDULER_NAME,
            spec={"nodeSelector": {"hami-e2e/run": namespace}},
        )
        kube.wait_for_pod_scheduled(namespace, f"p{i}")
        wait_until(
            lambda n=i + 1: sum(prometheus.query("sum(hami_bind_results_total)")) >= n,
            description=f"prometheus seeing bind {i + 1}",
        )
    wait_until(
        lambda: sum(prometheus.query("count(hami_vgpu_memory_allocated_bytes)")) >= 4,
        description="prometheus seeing the three allocations and the DRA-mode pod's claim",
    )
    # the vGPU monitor of the node the first pod went to, with the HAMi-core regions of the pods placed there
    pods = [kube.get_pod(namespace, f"p{i}") for i in range(3)]
    node = pods[0]["spec"]["nodeName"]
    there = [pod for pod in pods if pod["spec"]["nodeName"] == node]
    cards = 2 if node == nodes[0] else 1
    with monitor.running(node, cards=cards, tmp_path=tmp_path):
        monitor.write_regions(there)
        wait_until(
            lambda: len(prometheus.query("hami_vgpu_memory_used_bytes")) == len(there),
            description="prometheus seeing the monitor's usage",
        )
        check_every_panel(prometheus)
        check_variables(prometheus, namespace, node, len(there), cards)
        # the usage is the regions': 4000 MiB in use per pod there; HAMi-core is on that node
        assert prometheus.query("sum(hami_vgpu_memory_used_bytes) / 1048576") == [4000.0 * len(there)]
        assert prometheus.query("hami_core_library_present") == [1.0]

    # and the data is the cluster's: three pods, 6000 MiB each, on the 3 cards of the two good nodes, and the
    # DRA-mode pod's 6000 MiB on the first card of the node only the DRA plugin serves (its 2 cards counted)
    assert prometheus.query("count(hami_vgpu_memory_allocated_bytes)") == [4.0]
    assert prometheus.query("sum(hami_vgpu_memory_allocated_bytes) / 1048576") == [24000.0]
    dra_node, dra_pod = dra
    (series,) = prometheus.result(f'hami_vgpu_memory_allocated_bytes{{pod="{dra_pod}"}}')
    assert {k: series["metric"][k] for k in ("namespace", "node", "device_uuid")} == {
        "namespace": namespace,
        "node": dra_node,
        "device_uuid": f"GPU-{dra_node}-0",
    }
    assert prometheus.query(f'count(hami_gpu_memory_limit_bytes{{node="{dra_node}"}})') == [2.0]
    assert prometheus.query(f'sum(hami_gpu_core_allocated_ratio{{node="{dra_node}"}})') == [10.0]
    assert dra_node in prometheus.label_values(*variable_queries()["node"])
    assert prometheus.query("sum(hami_quarantined_nodes)") == [1.0]
    rates = prometheus.query('sum(rate(hami_request_duration_seconds_count{endpoint="filter"}[5m]))')
    assert rates
    assert rates[0] > 0


def check_every_panel(prometheus: Prometheus) -> None:
    queries = panel_queries()
    assert len(queries) >= 20

    def without_data() -> dict[str, str]:
        return {
            title: expr
            for title, expr in queries
            if not [v for v in prometheus.query(expr) if not math.isnan(v)]  # NaN: a quantile of nothing
        }

    with contextlib.suppress(TimeoutError):  # the assertion below names the panels still without data
        wait_until(lambda: without_data() == {}, timeout=30, description="data for every panel")
    assert without_data() == {}


def check_variables(prometheus: Prometheus, namespace: str, node: str, pods_there: int, cards: int) -> None:
    """The node and namespace variables list the cluster's, and selecting them filters the panels."""
    variables = variable_queries()
    assert set(variables) == {"node", "namespace"}
    assert node in prometheus.label_values(*variables["node"])
    assert namespace in prometheus.label_values(*variables["namespace"])
    mine = dict(panel_queries({"namespace": namespace}))
    assert len(prometheus.query(mine["Memory used per pod"])) == pods_there
    elsewhere = dict(panel_queries({"namespace": "no-such-namespace"}))
    assert prometheus.query(elsewhere["Memory used per pod"]) == []
    assert prometheus.query(elsewhere["Memory allocated per pod"]) == []
    assert len(prometheus.query(dict(panel_queries({"node": node}))["GPU utilisation per card"])) == cards
    assert prometheus.query(dict(panel_queries({"node": "no-such-node"}))["GPU utilisation per card"]) == []
