"""The chart's Grafana dashboard, evaluated for real: Prometheus (Debian's ``prometheus`` package, installed by
``make test-deps``) scrapes a real ``hami scheduler`` while kube-scheduler places GPU pods through it, and every
query of every panel returns data.

hami runs as the e2e suite runs it, without ``--metrics-secure`` (plain HTTP on loopback), so Prometheus needs
no token. Grafana itself is not run: the panels' queries are what Grafana would send to this data source.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hami.protocol import keys
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
from tests.helm import CHART

DASHBOARD = CHART / "dashboards" / "hami-scheduler.json"
SCRAPE_INTERVAL = "1s"


def panel_queries() -> list[tuple[str, str]]:
    """``(panel title, PromQL)`` for every target of every panel of the shipped dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]


class Prometheus:
    """``prometheus`` scraping one target every second, its data in ``directory``."""

    def __init__(self, directory: Path, target: str, log_file: Path) -> None:
        binary = shutil.which("prometheus")
        assert binary, "prometheus is missing: run `make test-deps` (make test does) to install Debian's prometheus"
        self.port = free_port()
        config = directory / "prometheus.yml"
        config.write_text(
            json.dumps(  # JSON is YAML
                {
                    "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
                    "scrape_configs": [{"job_name": "hami-scheduler", "static_configs": [{"targets": [target]}]}],
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
        wait_until(lambda: self.query("up") == [1.0], description="prometheus scraping hami", check=check)

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

    def query(self, expr: str) -> list[float]:
        """The values of an instant query (vector results), NaN included. A failed request raises
        ``httpx.HTTPError``: ``wait_until`` polls again after it, an assertion shows it."""
        return [float(series["value"][1]) for series in self.result(expr)]


@pytest.fixture
def prometheus_on_hami(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
    tmp_path: Path,
) -> Iterator[tuple[Prometheus, KubeClient, str, list[str]]]:
    hami = HamiScheduler(control_plane)
    plugin = FakeDevicePlugin(control_plane, f"hami-e2e/run={namespace}")
    prometheus = Prometheus(tmp_path, f"127.0.0.1:{hami.metrics_port}", control_plane.log_dir / "prometheus.log")
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
        yield prometheus, kube, namespace, nodes


def test_every_dashboard_query_returns_data_from_a_real_prometheus(
    prometheus_on_hami: tuple[Prometheus, KubeClient, str, list[str]],
) -> None:
    prometheus, kube, namespace, _ = prometheus_on_hami
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
        lambda: sum(prometheus.query("count(hami_vgpu_memory_allocated_bytes)")) >= 3,
        description="prometheus seeing the three allocations",
    )

    queries = panel_queries()
    assert len(queries) >= 15

    def without_data() -> dict[str, str]:
        return {
            title: expr
            for title, expr in queries
            if not [v for v in prometheus.query(expr) if not math.isnan(v)]  # NaN: a quantile of nothing
        }

    with contextlib.suppress(TimeoutError):  # the assertion below names the panels still without data
        wait_until(lambda: without_data() == {}, timeout=30, description="data for every panel")
    assert without_data() == {}

    # and the data is the cluster's: three pods, 6000 MiB each, on the 3 cards of the two good nodes
    assert prometheus.query("count(hami_vgpu_memory_allocated_bytes)") == [3.0]
    assert prometheus.query("sum(hami_vgpu_memory_allocated_bytes) / 1048576") == [18000.0]
    assert prometheus.query("sum(hami_quarantined_nodes)") == [1.0]
    rates = prometheus.query('sum(rate(hami_request_duration_seconds_count{endpoint="filter"}[5m]))')
    assert rates
    assert rates[0] > 0
