"""``--config``: HAMi's device-config.yaml through ``hami.config.parse_device_config``, or the defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hami.config import DeviceConfig, default_device_config
from hami.simulate.devconfig import device_config_from_text
from tests.unit.simulate.helpers import DATA, run_cli


def test_no_config_means_the_defaults_without_warnings() -> None:
    assert device_config_from_text(None, "None") == (default_device_config(), [])


@dataclass
class _Loaded:
    config: DeviceConfig
    warnings: list[str] = field(default_factory=list)


def test_the_device_config_text_is_parsed_and_its_warnings_returned() -> None:
    config, warnings = device_config_from_text("nvidia:\n  resourceMemoryName: example.com/vram\n  foo: 1\n", "dc.yaml")
    assert config.nvidia.resource_memory_name == "example.com/vram"
    assert len(warnings) == 1
    assert "nvidia.foo" in warnings[0]


def test_config_resource_names_reach_the_vendors(tmp_path: Path) -> None:
    config = tmp_path / "device-config.yaml"
    config.write_text("nvidia:\n  resourceMemoryName: example.com/vram\n")
    pods = tmp_path / "pods.yaml"
    pods.write_text(
        "kind: Pod\nmetadata: {name: p}\nspec:\n"
        "  containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1, example.com/vram: 4000}}}]\n"
    )
    result = run_cli("-s", DATA / "malformed-node.yaml", "--config", config, pods, "-o", "json")
    assert result.code == 0
    assert result.stdout.count('"memoryMiB": 4000') == 1
