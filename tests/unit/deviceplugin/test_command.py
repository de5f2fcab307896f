from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hami.cli import app

from .conftest import FIXTURES

runner = CliRunner()


def hook_with_hami_core(tmp_path: Path) -> str:
    """A hook path whose vgpu/ holds a stand-in HAMi-core (an ELF header), so the node advertises shares."""
    (tmp_path / "vgpu").mkdir(parents=True)
    (tmp_path / "vgpu" / "libvgpu.so").write_bytes(b"\x7fELF" + bytes(60))
    return f"--hook-path={tmp_path}"


def test_dry_run_prints_the_annotations_this_node_would_get(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "device-plugin",
            "--dry-run",
            "--fake-nvml",
            str(FIXTURES / "two-t4.yaml"),
            "--topology-score",
            hook_with_hami_core(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"# HAMi-core: {tmp_path}/vgpu/libvgpu.so found"
    assert lines[1] == "# GPU 0 GPU-0a1 Tesla T4, 15360 MiB, bus 00000000:3B:00.0, NUMA 0"
    assert lines[3].startswith('hami.io/node-nvidia-register=[{"id":"GPU-0a1","count":10,"devmem":15360,')
    assert lines[4] == (
        'hami.io/node-nvidia-score=[{"uuid":"GPU-0a1","score":{"GPU-0a2":10}},{"uuid":"GPU-0a2","score":{"GPU-0a1":10}}]'
    )


def test_node_config_and_device_config_shape_the_inventory(tmp_path: Path) -> None:
    device_config = tmp_path / "device-config.yaml"
    device_config.write_text("nvidia:\n  deviceSplitCount: 4\n  deviceMemoryScaling: 2\n")
    node_config = tmp_path / "config.json"
    node_config.write_text(
        '{"nodeconfig": [{"name": "gpu-1", "devicesplitcount": 6, "filterdevices": {"index": [1]}}]}'
    )
    result = runner.invoke(
        app,
        [
            "device-plugin",
            "--dry-run",
            "--node-name=gpu-1",
            f"--fake-nvml={FIXTURES / 'two-t4.yaml'}",
            f"--config-file={device_config}",
            f"--node-config-file={node_config}",
            hook_with_hami_core(tmp_path / "hook"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == (
        'hami.io/node-nvidia-register=[{"id":"GPU-0a1","count":6,"devmem":30720,"devcore":100,'
        '"type":"NVIDIA-Tesla T4","mode":"hami-core","health":true}]'
    )


def test_a_machine_without_nvml_gets_a_sentence_not_a_traceback(tmp_path: Path) -> None:
    fixture = tmp_path / "no-driver.yaml"
    fixture.write_text("devices: []\nerrors: {init: [LIBRARY_NOT_FOUND]}\n")
    result = runner.invoke(app, ["device-plugin", "--dry-run", f"--fake-nvml={fixture}"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert "cannot use NVML (NVML init: LIBRARY_NOT_FOUND (injected)): libnvidia-ml.so.1 is not available" in (
        result.output
    )


def test_no_gpus_is_a_clear_error(tmp_path: Path) -> None:
    fixture = tmp_path / "empty.yaml"
    fixture.write_text("devices: []\n")
    result = runner.invoke(app, ["device-plugin", "--dry-run", f"--fake-nvml={fixture}"])
    assert result.exit_code == 1
    assert "NVML reports no GPU on this node; nothing to register" in result.output


def test_the_node_name_is_required_to_serve() -> None:
    result = runner.invoke(app, ["device-plugin", f"--fake-nvml={FIXTURES / 'two-t4.yaml'}"], env={"NODE_NAME": ""})
    assert result.exit_code == 1
    assert "the node name is required" in result.output


def test_a_fake_nvml_hands_kubelet_no_device_nodes_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    from hami.deviceplugin.launch import _without_device_nodes
    from hami.deviceplugin.settings import NodeSettings

    settings = NodeSettings(pass_device_specs=True)

    changed = _without_device_nodes(settings, Path("fixture.yaml"))

    assert changed.pass_device_specs is False
    assert changed == dataclasses.replace(settings, pass_device_specs=False)  # nothing else changes
    assert "advertising GPUs that do not exist" in caplog.text


def test_the_fake_nvml_option_is_not_advertised_in_help() -> None:
    result = runner.invoke(app, ["device-plugin", "--help"])
    assert result.exit_code == 0
    assert "--fake-nvml" not in result.output
