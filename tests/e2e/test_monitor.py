"""End to end: ``hami monitor`` (a real process, fake NVML) against the real API server.

It runs as the chart's device-plugin ServiceAccount with a token bound to a pod on its node (only reads: the pods
on its node). Region files written by the test for two pods on the node become HAMi's metrics on its HTTP
endpoint; a truncated region and a directory of no container are reported (log and metric); the priority feedback
throttles the low-priority container; the directory of a pod that is gone is removed; SIGTERM stops it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.cluster import ControlPlane, KubeClient, free_port
from tests.e2e.identities import chart_identities
from tests.unit.monitor.regionfile import Proc, build_region, read_back, write_container

NODE = "hami-monitor-e2e-1"
WAIT = 30.0
GPU0 = "GPU-e2e-mon-0000-1111-2222-333344445555"
FIXTURE = f"""
devices:
  - uuid: {GPU0}
    name: Tesla T4
    stats: {{memory_used_bytes: 2147483648, utilization: 50}}
"""


@pytest.fixture
def monitor_kubeconfig(control_plane: ControlPlane, make_node: Callable[..., dict[str, Any]]) -> Iterator[Path]:
    make_node(NODE, labels={"gpu": "on"}, extended={"nvidia.com/gpu": 10})
    with chart_identities(control_plane).device_plugin(NODE) as kubeconfig:
        yield kubeconfig


def scrape(port: int) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    return {f.name: f for f in text_string_to_metric_families(text)}


async def until(check: Callable[[], Any], what: str) -> Any:
    async with asyncio.timeout(WAIT):
        while True:
            value = await asyncio.to_thread(check)
            if value:
                return value
            await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")  # pragma: no cover


async def test_monitor_exports_regions_and_feeds_priority_back(
    monitor_kubeconfig: Path, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    fixture = tmp_path / "gpus.yaml"
    fixture.write_text(FIXTURE)
    hook = tmp_path / "hook"
    root = hook / "vgpu" / "containers"
    high = kube.create_pod(namespace, "high", node_name=NODE, limits={"nvidia.com/gpu": 1})
    low = kube.create_pod(namespace, "low", node_name=NODE, limits={"nvidia.com/gpu": 1})
    high_file = write_container(
        root,
        high["metadata"]["uid"],
        "main",
        build_region(
            [GPU0], limits=[1 << 30], procs=[Proc(1, {0: (1, 2, 3, 4096)}, {0: 20})], priority=0, recent_kernel=2
        ),
    )
    low_file = write_container(root, low["metadata"]["uid"], "main", build_region([GPU0], priority=1, recent_kernel=2))
    gone = write_container(root, "0000-gone", "main", build_region([GPU0])).parent
    os.utime(gone, (time.time() - 3600, time.time() - 3600))
    foreign = write_container(root, low["metadata"]["uid"], "sidecar", b"garbage")
    broken = kube.create_pod(namespace, "broken", node_name=NODE, limits={"nvidia.com/gpu": 1})
    truncated = write_container(root, broken["metadata"]["uid"], "main", build_region([GPU0])[:4096])
    port = free_port()
    log = tmp_path / "monitor.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "from hami.cli import main; main()",
            "monitor",
            f"--node-name={NODE}",
            f"--fake-nvml={fixture}",
            f"--kubeconfig={monitor_kubeconfig}",
            f"--hook-path={hook}",
            "--bind-address=127.0.0.1",
            f"--port={port}",
            "--interval=0.5",
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    try:

        def exported() -> dict[str, Any]:
            families = scrape(port)
            if "hami_vgpu_memory_used_bytes" in families and families["hami_vgpu_memory_used_bytes"].samples:
                return families
            return {}

        families = await until(exported, "the container metrics")
        used = {s.labels["pod"]: s.value for s in families["hami_vgpu_memory_used_bytes"].samples}
        assert used == {"high": 4096, "low": 0}
        (util,) = [s for s in families["hami_container_device_utilization_ratio"].samples if s.labels["pod"] == "high"]
        assert (util.value, util.labels["namespace"], util.labels["device_uuid"]) == (20, namespace, GPU0)
        (host,) = families["hami_host_gpu_memory_used_bytes"].samples
        assert (host.value, host.labels["node"]) == (2147483648, NODE)

        await until(lambda: read_back(low_file).recent_kernel == -1, "the low-priority container blocked")
        assert read_back(low_file).utilization_switch == 1
        assert read_back(high_file).utilization_switch == 0
        await until(lambda: not gone.exists(), "the gone pod's directory removed")
        assert high_file.exists()
        assert low_file.exists()
        # the low pod has no container "sidecar": its directory is reported, not read; the truncated region too
        skipped = {
            s.labels["path"]: s.labels["reason"] for s in scrape(port)["hami_vgpu_monitor_region_skipped"].samples
        }
        assert skipped == {str(foreign.parent): "foreign", str(truncated): "truncated"}
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), WAIT)
    output = log.read_text()
    assert code == 0, output
    assert "stopping on signal" in output
    assert f"skipping {truncated} (truncated)" in output
