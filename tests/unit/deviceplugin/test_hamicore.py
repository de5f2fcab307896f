"""HAMi-core on the node (``hami.deviceplugin.hamicore``): the library the plugin mounts is checked before it
registers; missing, the node advertises whole GPUs (or, by choice, shares without isolation) and says so in its
log, its ``--dry-run`` and a Warning event on its Node."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hami.cli import app
from hami.deviceplugin import hamicore
from hami.deviceplugin.response import HostFiles
from hami.deviceplugin.settings import NodeSettings
from hami.k8s.memory import MemoryCluster
from hami.protocol.objects import Node, ObjectMeta

from .builders import NODE
from .conftest import FIXTURES

ELF = b"\x7fELF\x02\x01\x01" + bytes(57)
runner = CliRunner()


def host_with(tmp_path: Path, name: str | None, content: bytes = ELF) -> HostFiles:
    host = HostFiles(hook_path="/usr/local", libvgpu_version="v2.10.0", root=tmp_path)
    vgpu = tmp_path / "usr/local/vgpu"
    vgpu.mkdir(parents=True)
    if name is not None:
        (vgpu / name).write_bytes(content)
    return host


@pytest.mark.parametrize("name", ["libvgpu.so.v2.10.0", "libvgpu.so"])
def test_the_library_the_plugin_mounts_is_found(tmp_path: Path, name: str) -> None:
    host = host_with(tmp_path, name)
    assert hamicore.library_problem(host) is None
    assert host.library() == f"/usr/local/vgpu/{name}"


def test_a_missing_library_names_both_files_looked_for(tmp_path: Path) -> None:
    assert hamicore.library_problem(host_with(tmp_path, None)) == (
        "HAMi-core is not installed on this node: neither /usr/local/vgpu/libvgpu.so.v2.10.0 nor "
        "/usr/local/vgpu/libvgpu.so exists"
    )


def test_a_file_that_is_not_a_shared_library_is_refused(tmp_path: Path) -> None:
    assert hamicore.library_problem(host_with(tmp_path, "libvgpu.so", b"<html>404</html>")) == (
        "HAMi-core's library /usr/local/vgpu/libvgpu.so is not a shared library (no ELF header)"
    )


def test_a_directory_in_its_place_cannot_be_read(tmp_path: Path) -> None:
    host = host_with(tmp_path, None)
    (tmp_path / "usr/local/vgpu/libvgpu.so").mkdir()
    assert (hamicore.library_problem(host) or "").startswith("HAMi-core's library /usr/local/vgpu/libvgpu.so cannot")


def test_without_the_library_gpus_are_advertised_whole_unless_sharing_is_chosen() -> None:
    settings = NodeSettings(split_count=10)
    assert hamicore.adjust(settings, None, "whole-gpus") is settings
    assert hamicore.adjust(settings, "missing", "whole-gpus").split_count == 1
    assert hamicore.adjust(settings, "missing", "share") is settings
    mig = NodeSettings(split_count=10, operating_mode="mig")
    assert hamicore.adjust(mig, "missing", "whole-gpus") is mig  # MIG isolates in hardware


def registered_counts(output: str) -> list[int]:
    line = next(x for x in output.splitlines() if x.startswith("hami.io/node-nvidia-register="))
    return [device["count"] for device in json.loads(line.partition("=")[2])]


def dry_run(hook: Path, *extra: str) -> str:
    result = runner.invoke(
        app,
        ["device-plugin", "--dry-run", f"--fake-nvml={FIXTURES / 'two-t4.yaml'}", f"--hook-path={hook}", *extra],
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_dry_run_reports_the_library_and_shares_the_gpus(tmp_path: Path) -> None:
    (tmp_path / "vgpu").mkdir()
    (tmp_path / "vgpu" / "libvgpu.so.v2.10.0").write_bytes(ELF)
    output = dry_run(tmp_path)
    assert output.splitlines()[0] == f"# HAMi-core: {tmp_path}/vgpu/libvgpu.so.v2.10.0 found"
    assert registered_counts(output) == [10, 10]


def test_dry_run_without_the_library_says_so_and_advertises_whole_gpus(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = dry_run(tmp_path)
    assert output.splitlines()[0] == (
        f"# HAMi-core: HAMi-core is not installed on this node: neither {tmp_path}/vgpu/libvgpu.so.v2.10.0 nor "
        f"{tmp_path}/vgpu/libvgpu.so exists: GPUs are advertised whole (one pod per GPU instead of 10 shares) "
        "because no memory or core limit could be enforced; install HAMi-core (chart: devicePlugin.hamiCore.image) "
        "and restart the device plugin"
    )
    assert registered_counts(output) == [1, 1]
    assert [r.levelno for r in caplog.records if "HAMi-core is not installed" in r.getMessage()] == [logging.ERROR]


def test_sharing_without_the_library_is_a_choice_said_loudly(tmp_path: Path) -> None:
    output = dry_run(tmp_path, "--if-hami-core-missing=share")
    assert "GPUs are shared WITHOUT isolation (--if-hami-core-missing=share)" in output.splitlines()[0]
    assert registered_counts(output) == [10, 10]


def test_an_unknown_choice_is_refused_naming_the_option(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["device-plugin", "--dry-run", f"--fake-nvml={FIXTURES / 'two-t4.yaml'}", "--if-hami-core-missing=maybe"]
    )
    assert result.exit_code == 2
    assert "'maybe' is not one of whole-gpus, share" in result.output


async def test_a_missing_library_is_a_warning_event_on_the_node() -> None:
    cluster = MemoryCluster(nodes=[Node(metadata=ObjectMeta(name=NODE, uid="uid-of-gpu-1"))])
    await hamicore.record_event(cluster, NODE, "HAMi-core is not installed on this node: …")
    assert [(e.involved.kind, e.involved.name, e.type, e.reason, e.message) for e in cluster.events] == [
        ("Node", NODE, "Warning", "HAMiCoreMissing", "HAMi-core is not installed on this node: …")
    ]
    assert cluster.events[0].involved.uid == "uid-of-gpu-1"


async def test_an_event_that_cannot_be_recorded_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    cluster = MemoryCluster(nodes=[])  # the node cannot be read; the event is still attempted by name
    await hamicore.record_event(cluster, NODE, "missing")
    assert [(e.involved.name, e.involved.uid, e.reason) for e in cluster.events] == [(NODE, NODE, "HAMiCoreMissing")]
    assert "cannot read the node for its event" in caplog.text
