from __future__ import annotations

import functools
import logging
from pathlib import Path

import pytest

from hami.deviceplugin.discovery import GpuSource, Links, discover, numa_node, sysfs_bus_id
from hami.deviceplugin.nvml import TopologyLevel
from hami.errors import DiscoveryError

from .conftest import fake_lib


def test_two_t4s_are_discovered_in_index_order() -> None:
    lib = fake_lib("two-t4")
    gpus = discover(lib, numa=lib.numa_of)
    assert [(g.uuid, g.index, g.name, g.memory_mib, g.numa) for g in gpus] == [
        ("GPU-0a1", 0, "Tesla T4", 15360, 0),
        ("GPU-0a2", 1, "Tesla T4", 15360, 1),
    ]
    assert gpus[0].links == {"GPU-0a2": Links(TopologyLevel.SYSTEM, 0)}
    assert not gpus[0].mig_enabled


def test_not_supported_memory_is_unknown_and_a_lost_gpu_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    lib = fake_lib("broken")
    with caplog.at_level(logging.ERROR):
        gpus = discover(lib, numa=lib.numa_of)
    assert [(g.uuid, g.index, g.memory_mib, g.numa) for g in gpus] == [("GPU-x", 0, None, 0), ("GPU-z", 2, 15360, 0)]
    assert "skipping GPU 1: NVML uuid: GPU_IS_LOST" in caplog.text


def test_nvlinks_are_counted_per_peer_and_directions_kept_apart() -> None:
    lib = fake_lib("dgx4")
    gpus = {g.uuid: g for g in discover(lib, numa=lib.numa_of)}
    assert gpus["GPU-c"].links["GPU-d"] == Links(TopologyLevel.NODE, 12)
    assert gpus["GPU-b"].links["GPU-d"] == Links(TopologyLevel.INTERNAL, 0)
    assert gpus["GPU-d"].links["GPU-b"] == Links(TopologyLevel.INTERNAL, 1)


def test_mig_profiles_are_read_only_from_mig_gpus() -> None:
    lib = fake_lib("a100-mig")
    (gpu,) = discover(lib, numa=lib.numa_of)
    assert gpu.mig_enabled
    assert [(p.name, p.memory_mib, p.slice_count, p.instance_count, p.placements) for p in gpu.mig_profiles] == [
        ("1g.5gb", 4864, 1, 7, ((6, 1),)),
        ("3g.20gb", 19968, 3, 2, ((0, 4), (4, 4))),
        ("7g.40gb", 40192, 7, 1, ((0, 8),)),
    ]


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        pytest.param("LIBRARY_NOT_FOUND", "libnvidia-ml.so.1 is not available", id="no-library"),
        pytest.param("DRIVER_NOT_LOADED", "kernel driver is not loaded", id="no-driver"),
        pytest.param("UNKNOWN", "see the NVML error above", id="other"),
    ],
)
def test_nvml_failing_as_a_whole_is_explained(code: str, hint: str) -> None:
    lib = fake_lib("two-t4")
    lib.fail_next("device_count", code)
    with pytest.raises(DiscoveryError, match=hint) as info:
        discover(lib)
    assert f"NVML device_count: {code}" in str(info.value)


def test_no_gpu_is_a_clear_error() -> None:
    lib = fake_lib("two-t4")
    lib.gpus.clear()
    with pytest.raises(DiscoveryError, match="NVML reports no GPU on this node"):
        discover(lib)


def test_source_starts_a_fresh_session_after_a_failure() -> None:
    lib = fake_lib("two-t4")
    source = GpuSource(lib, functools.partial(discover, numa=lib.numa_of))
    lib.fail_next("init", "DRIVER_NOT_LOADED")
    with pytest.raises(DiscoveryError, match="kernel driver is not loaded"):
        source.discover()
    assert not lib.initialised
    assert [g.uuid for g in source.discover()] == ["GPU-0a1", "GPU-0a2"]
    assert lib.initialised
    lib.fail_next("device_count", "UNKNOWN")
    with pytest.raises(DiscoveryError):
        source.discover()
    assert not lib.initialised  # shut down, to be initialised again next time
    source.discover()
    source.close()
    assert not lib.initialised


@pytest.mark.parametrize(
    ("nvml", "sysfs"),
    [
        pytest.param("00000000:3B:00.0", "0000:3b:00.0", id="nvml-8-digit-domain"),
        pytest.param("0000:af:00.0", "0000:af:00.0", id="already-sysfs"),
        pytest.param("00000001:01:00.0", "0001:01:00.0", id="domain-1"),
    ],
)
def test_bus_ids_are_written_as_sysfs_names_them(nvml: str, sysfs: str) -> None:
    assert sysfs_bus_id(nvml) == sysfs


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param("1\n", 1, id="node-1"),
        pytest.param("-1\n", 0, id="negative-is-0"),
        pytest.param("garbage", 0, id="unreadable-is-0"),
        pytest.param(None, 0, id="missing-is-0"),
    ],
)
def test_numa_node_comes_from_sysfs(tmp_path: Path, content: str | None, expected: int) -> None:
    device = tmp_path / "bus" / "pci" / "devices" / "0000:3b:00.0"
    device.mkdir(parents=True)
    if content is not None:
        (device / "numa_node").write_text(content)
    assert numa_node("00000000:3B:00.0", tmp_path) == expected
