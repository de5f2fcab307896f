from __future__ import annotations

from pathlib import Path

import pytest

from hami.deviceplugin import kubeletapi as api
from hami.deviceplugin.response import HostFiles, container_response
from hami.deviceplugin.settings import NodeSettings
from hami.protocol.allocation import ContainerDevice
from hami.protocol.objects import Container, EnvVar

TWO = (ContainerDevice("GPU-a", "NVIDIA", 3000, 30), ContainerDevice("GPU-b", "NVIDIA", 5000, 50))


def mounts(response: api.ContainerAllocateResponse) -> list[tuple[str, str, bool]]:
    return [(m.container_path, m.host_path, m.read_only) for m in response.mounts]


def respond(
    host: HostFiles, settings: NodeSettings | None = None, container: Container | None = None
) -> api.ContainerAllocateResponse:
    return container_response(
        TWO,
        pod_uid="uid-1",
        container=container or Container(name="main"),
        settings=settings or NodeSettings(),
        host=host,
        new_cache_id=lambda: "c0ffee",
    )


def test_env_and_mounts_are_hamis(tmp_path: Path) -> None:
    response = respond(HostFiles(root=tmp_path))
    assert dict(response.envs) == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
        "CUDA_DEVICE_MEMORY_LIMIT_1": "5000m",
        "CUDA_DEVICE_SM_LIMIT": "30",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/c0ffee.cache",
    }
    assert mounts(response) == [
        ("/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu/libvgpu.so", True),
        ("/usr/local/vgpu", "/usr/local/vgpu/containers/uid-1_main", False),
        ("/tmp/vgpulock", "/tmp/vgpulock", False),
        ("/etc/ld.so.preload", "/usr/local/vgpu/ld.so.preload", True),
    ]


def test_optional_env_follows_the_settings(tmp_path: Path) -> None:
    settings = NodeSettings(memory_scaling=1.5, lib_cuda_log_level=0, disable_core_limit=True)
    envs = dict(respond(HostFiles(root=tmp_path), settings).envs)
    assert (envs["CUDA_OVERSUBSCRIBE"], envs["LIBCUDA_LOG_LEVEL"], envs["GPU_CORE_UTILIZATION_POLICY"]) == (
        "true",
        "0",
        "disable",
    )


@pytest.mark.parametrize(
    ("value", "preloaded"),
    [
        pytest.param("true", False, id="true"),
        pytest.param("1", False, id="one"),
        pytest.param("T", False, id="T"),
        pytest.param("yes", True, id="yes-is-not-go-true"),
        pytest.param("false", True, id="false"),
    ],
)
def test_cuda_disable_control_drops_the_preload(tmp_path: Path, value: str, preloaded: bool) -> None:
    container = Container(name="main", env=[EnvVar(name="CUDA_DISABLE_CONTROL", value=value)])
    paths = [m[0] for m in mounts(respond(HostFiles(root=tmp_path), container=container))]
    assert ("/etc/ld.so.preload" in paths) is preloaded


def test_versioned_library_and_license_are_used_when_present(tmp_path: Path) -> None:
    vgpu = tmp_path / "opt" / "hami" / "vgpu"
    vgpu.mkdir(parents=True)
    (vgpu / "libvgpu.so.v2.10.0").write_text("")
    (vgpu / "license").write_text("")
    got = mounts(respond(HostFiles(hook_path="/opt/hami", root=tmp_path)))
    assert got[0] == ("/opt/hami/vgpu/libvgpu.so", "/opt/hami/vgpu/libvgpu.so.v2.10.0", True)
    assert got[-2:] == [
        ("/tmp/license", "/opt/hami/vgpu/license", True),
        ("/usr/bin/vgpuvalidator", "/opt/hami/vgpu/vgpuvalidator", True),
    ]


def test_preload_file_is_written_once(tmp_path: Path) -> None:
    host = HostFiles(root=tmp_path)
    host.ensure_preload()
    preload = tmp_path / "usr/local/vgpu/ld.so.preload"
    assert preload.read_text() == "/usr/local/vgpu/libvgpu.so\n"
    preload.write_text("custom\n")
    host.ensure_preload()
    assert preload.read_text() == "custom\n"
