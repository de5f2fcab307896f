"""The monitor over region files the tests write and a fake NVML: exact metric values, skipped files reported,
dead containers cleaned up, priority feedback written, and the HTTP endpoint scraped for real."""

from __future__ import annotations

import logging
import os
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from hami.monitor.gpustats import FakeStatsNvml
from hami.monitor.monitor import Monitor, MonitorOptions
from hami.protocol.objects import Container, ObjectMeta, Pod, PodSpec
from tests.unit.monitor.regionfile import Proc, build_region, read_back, write_container

NODE = "gpu-1"
GPU0 = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
GPU1 = "GPU-9f8e7d6c-0000-1111-2222-333344445555"
NOW = 1_800_000_000.0
GIB = 1 << 30

FIXTURE = {
    "devices": [
        {
            "uuid": GPU0,
            "name": "Tesla T4",
            "stats": {
                "memory_used_bytes": 3 * GIB,
                "utilization": 37,
                "memory_utilization": 12,
                "temperature": 61,
                "power_mw": 70500,
                "ecc_corrected": 4,
                "ecc_uncorrected": 0,
            },
        },
        {"uuid": GPU1, "name": "Tesla T4", "stats": {"memory_used_bytes": GIB, "utilization": 5}},
    ]
}


def pod(name: str, uid: str, *containers: str, init: tuple[str, ...] = ()) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace="team", uid=uid),
        spec=PodSpec(
            node_name=NODE,
            containers=[Container(name=c) for c in containers],
            init_containers=[Container(name=c) for c in init],
        ),
    )


def monitor(root: Path, pods: list[Pod] | None, **options: float) -> Monitor:
    lib = FakeStatsNvml(FIXTURE)
    lib.init()
    m = Monitor(lib, MonitorOptions(node_name=NODE, containers_dir=root, **options), clock=lambda: NOW)  # type: ignore[arg-type]
    if pods is not None:
        m.set_pods(pods)
    return m


def samples(m: Monitor) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(m)
    out = {}
    for family in registry.collect():
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def ctr(name: str, pod_name: str, container: str, index: int, uuid: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    labels = {
        "namespace": "team",
        "pod": pod_name,
        "container": container,
        "vdevice_index": str(index),
        "device_uuid": uuid,
        "zone": "vGPU",
    }
    return name, tuple(sorted(labels.items()))


def host(name: str, index: int, uuid: str, **extra: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    labels = {"node": NODE, "device_index": str(index), "device_uuid": uuid, "device_type": "NVIDIA-Tesla T4"}
    labels |= {"zone": "vGPU", **extra}
    return name, tuple(sorted(labels.items()))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "vgpu" / "containers"
    path.mkdir(parents=True)
    return path


def three_containers(root: Path) -> list[Pod]:
    # train/main: two processes on GPU0; train/side: GPU0 and GPU1; infer/app: GPU1, an init container of another
    write_container(
        root,
        "uid-train",
        "main",
        build_region(
            [GPU0],
            limits=[4 * GIB],
            sm_limits=[50],
            procs=[Proc(1, {0: (100, 200, 700, 1000)}, {0: 30}), Proc(2, {0: (0, 0, 500, 500)}, {0: 15})],
            last_kernel_time=int(NOW) - 7,
        ),
    )
    write_container(
        root,
        "uid-train",
        "side",
        build_region([GPU0, GPU1], limits=[GIB, 2 * GIB], procs=[Proc(3, {0: (1, 2, 3, 6), 1: (0, 0, 8, 8)}, {1: 9})]),
    )
    write_container(root, "uid-infer", "app", build_region([GPU1], limits=[GIB], procs=[Proc(4, {0: (0, 0, 64, 64)})]))
    return [pod("train", "uid-train", "main", "side"), pod("infer", "uid-infer", "app", init=("warm",))]


def test_regions_of_several_containers_become_exact_metrics(root: Path) -> None:
    got = samples(monitor(root, three_containers(root)))

    assert got[ctr("hami_vgpu_memory_used_bytes", "train", "main", 0, GPU0)] == 1500
    assert got[ctr("hami_container_device_memory_bytes", "train", "main", 0, GPU0)] == 1500
    assert got[ctr("hami_vgpu_memory_limit_bytes", "train", "main", 0, GPU0)] == 4 * GIB
    assert got[ctr("hami_vgpu_memory_context_bytes", "train", "main", 0, GPU0)] == 100
    assert got[ctr("hami_vgpu_memory_module_bytes", "train", "main", 0, GPU0)] == 200
    assert got[ctr("hami_vgpu_memory_buffer_bytes", "train", "main", 0, GPU0)] == 1200
    assert got[ctr("hami_container_device_utilization_ratio", "train", "main", 0, GPU0)] == 45
    assert got[ctr("hami_container_last_kernel_elapsed_seconds", "train", "main", 0, GPU0)] == 7
    assert got[ctr("hami_vgpu_memory_used_bytes", "train", "side", 0, GPU0)] == 6
    assert got[ctr("hami_vgpu_memory_used_bytes", "train", "side", 1, GPU1)] == 8
    assert got[ctr("hami_vgpu_memory_limit_bytes", "train", "side", 1, GPU1)] == 2 * GIB
    assert got[ctr("hami_container_device_utilization_ratio", "train", "side", 1, GPU1)] == 9
    assert got[ctr("hami_vgpu_memory_used_bytes", "infer", "app", 0, GPU1)] == 64
    # no kernel ever ran in side/app: no elapsed-time series for them
    assert ctr("hami_container_last_kernel_elapsed_seconds", "train", "side", 0, GPU0) not in got
    per_container = [k for k in got if k[0] == "hami_vgpu_memory_used_bytes"]
    assert len(per_container) == 4
    assert got[("hami_vgpu_monitor_regions", ())] == 3

    assert got[host("hami_host_gpu_memory_used_bytes", 0, GPU0)] == 3 * GIB
    assert got[host("hami_host_gpu_utilization_ratio", 0, GPU0)] == 37
    assert got[host("hami_host_gpu_temperature_celsius", 0, GPU0)] == 61
    assert got[host("hami_host_gpu_power_usage_watts", 0, GPU0)] == 70.5
    assert got[host("hami_host_gpu_ecc_errors_total", 0, GPU0, error_type="corrected")] == 4
    assert got[host("hami_host_gpu_ecc_errors_total", 0, GPU0, error_type="uncorrected")] == 0
    mc = (("device_index", "0"), ("device_type", "NVIDIA-Tesla T4"), ("device_uuid", GPU0), ("zone", "vGPU"))
    assert got[("hami_host_gpu_memory_controller_utilization_ratio", mc)] == 12
    assert got[host("hami_host_gpu_memory_used_bytes", 1, GPU1)] == GIB
    # GPU1's fixture has no temperature: NOT_SUPPORTED, the series is left out, the rest stays
    assert host("hami_host_gpu_temperature_celsius", 1, GPU1) not in got
    assert got[("hami_vgpu_monitor_nvml_up", ())] == 1


def test_a_corrupt_or_truncated_file_is_skipped_reported_and_the_rest_served(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pods = three_containers(root)
    good = build_region([GPU0], procs=[Proc(1, {0: (0, 0, 1, 1)})])
    truncated = write_container(root, "uid-t", "main", good[:1000])
    foreign = write_container(root, "uid-f", "main", b"\x7fELF" + bytes(len(good)))
    future = write_container(root, "uid-v", "main", build_region([GPU0], major=2))
    pods += [pod("t", "uid-t", "main"), pod("f", "uid-f", "main"), pod("v", "uid-v", "main")]
    m = monitor(root, pods)

    with caplog.at_level(logging.WARNING, logger="hami.monitor"):
        got = samples(m)
    skipped = {dict(k[1])["path"]: dict(k[1])["reason"] for k in got if k[0] == "hami_vgpu_monitor_region_skipped"}
    assert skipped == {str(truncated): "truncated", str(foreign): "magic", str(future): "version"}
    assert got[("hami_vgpu_monitor_regions", ())] == 3
    assert got[ctr("hami_vgpu_memory_used_bytes", "train", "main", 0, GPU0)] == 1500
    for path in (truncated, foreign, future):
        assert any(str(path) in r.getMessage() for r in caplog.records)

    # reported once, not on every scrape; a repaired file drops out of the metric
    caplog.clear()
    truncated.write_bytes(good)
    with caplog.at_level(logging.WARNING, logger="hami.monitor"):
        got = samples(m)
    assert caplog.records == []
    assert got[ctr("hami_vgpu_memory_used_bytes", "t", "main", 0, GPU0)] == 1
    assert {dict(k[1])["path"] for k in got if k[0] == "hami_vgpu_monitor_region_skipped"} == {
        str(foreign),
        str(future),
    }


def test_directories_that_are_not_containers_of_a_pod_here_are_reported(root: Path) -> None:
    pods = three_containers(root)
    (root / "no-underscore").mkdir()
    write_container(root, "uid-train", "ghost", build_region([GPU0]))
    got = samples(monitor(root, pods))
    reasons = {dict(k[1])["path"]: dict(k[1])["reason"] for k in got if k[0] == "hami_vgpu_monitor_region_skipped"}
    assert reasons == {str(root / "no-underscore"): "foreign", str(root / "uid-train_ghost"): "foreign"}


def test_a_container_that_has_not_started_cuda_yet_is_silent(root: Path) -> None:
    (root / "uid-new_main").mkdir()
    got = samples(monitor(root, [pod("new", "uid-new", "main")]))
    assert got[("hami_vgpu_monitor_regions", ())] == 0
    assert not [k for k in got if k[0] == "hami_vgpu_monitor_region_skipped"]


def test_work_per_scrape_is_bounded(root: Path) -> None:
    pods = three_containers(root)
    got = samples(monitor(root, pods, max_regions=2))
    assert got[("hami_vgpu_monitor_regions", ())] == 2
    assert got[("hami_vgpu_monitor_regions_truncated", ())] == 1


def test_dead_containers_are_removed_after_the_grace_period_only_when_the_pod_list_is_known(root: Path) -> None:
    pods = three_containers(root)
    gone_old = write_container(root, "uid-gone", "main", build_region([GPU0])).parent
    gone_new = write_container(root, "uid-new-gone", "main", build_region([GPU0])).parent
    os.utime(gone_old, (NOW - 301, NOW - 301))
    os.utime(gone_new, (NOW - 10, NOW - 10))

    monitor(root, None).feedback_round()
    assert gone_old.exists()  # pods unknown (API down at start): nothing is removed

    m = monitor(root, pods)
    m.feedback_round(clean_up=False)
    assert gone_old.exists()
    m.feedback_round()
    assert not gone_old.exists()
    assert gone_new.exists()  # younger than the grace period
    assert (root / "uid-train_main").exists()
    assert (root / "uid-infer_app").exists()


def test_the_feedback_round_throttles_the_low_priority_container_sharing_a_gpu(root: Path) -> None:
    high = write_container(root, "uid-h", "main", build_region([GPU0], priority=0, recent_kernel=2))
    low = write_container(root, "uid-l", "main", build_region([GPU0], priority=1, recent_kernel=2))
    other = write_container(root, "uid-o", "main", build_region([GPU1], priority=1, recent_kernel=2))
    m = monitor(root, [pod("h", "uid-h", "main"), pod("l", "uid-l", "main"), pod("o", "uid-o", "main")])

    assert m.feedback_round() == 5  # three decrements, low blocked, low's switch on
    h, lo, o = read_back(high), read_back(low), read_back(other)
    assert (h.recent_kernel, h.utilization_switch) == (1, 0)
    assert (lo.recent_kernel, lo.utilization_switch) == (-1, 1)
    assert (o.recent_kernel, o.utilization_switch) == (1, 0)
    assert (h.priority, lo.priority, lo.proc_num) == (0, 1, 0)  # nothing else written

    # the high-priority task goes quiet: next round it ages to 0 and the low one is released
    m.feedback_round()
    h, lo = read_back(high), read_back(low)
    assert (h.recent_kernel, lo.recent_kernel, lo.utilization_switch) == (0, 0, 0)


def test_the_endpoint_serves_the_metrics_over_http(root: Path) -> None:
    m = monitor(root, three_containers(root))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(m)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    used = {
        (s.labels["pod"], s.labels["container"], s.labels["device_uuid"]): s.value
        for s in families["hami_vgpu_memory_used_bytes"].samples
    }
    assert used == {
        ("train", "main", GPU0): 1500,
        ("train", "side", GPU0): 6,
        ("train", "side", GPU1): 8,
        ("infer", "app", GPU1): 64,
    }
    assert {s.labels["zone"] for s in families["hami_container_device_utilization_ratio"].samples} == {"vGPU"}
    assert families["hami_host_gpu_memory_used_bytes"].samples[0].value == 3 * GIB
