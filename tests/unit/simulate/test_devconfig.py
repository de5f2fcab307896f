"""``--config``: HAMi's device-config.yaml through ``hami.config.parse_device_config``, or the defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

import hami.config
from hami.config import DeviceConfig, default_device_config
from hami.simulate.devconfig import device_config_from_text
from tests.unit.simulate.helpers import DATA, run_cli


def test_no_config_means_the_defaults_without_warnings() -> None:
    assert device_config_from_text(None, "None") == (default_device_config(), [])


@dataclass
class _Loaded:
    config: DeviceConfig
    warnings: list[str] = field(default_factory=list)


def test_parse_device_config_is_used_when_it_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    custom = default_device_config()
    custom.nvidia.resource_memory_name = "example.com/vram"
    seen: list[tuple[str, str]] = []

    def parse(text: str, source: str) -> _Loaded:
        seen.append((text, source))
        return _Loaded(custom, ["unknown key nvidia.foo ignored"])

    monkeypatch.setattr(hami.config, "parse_device_config", parse, raising=False)
    assert device_config_from_text("nvidia: {}\n", "dc.yaml") == (custom, ["unknown key nvidia.foo ignored"])
    assert seen == [("nvidia: {}\n", "dc.yaml")]


def test_without_parse_device_config_the_defaults_are_used_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(hami.config, "parse_device_config", raising=False)
    assert device_config_from_text("nvidia: {}\n", "dc.yaml") == (
        default_device_config(),
        ["dc.yaml: device-config parsing is not available yet; using the defaults"],
    )


def test_config_resource_names_reach_the_vendors(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    custom = default_device_config()
    custom.nvidia.resource_memory_name = "example.com/vram"
    monkeypatch.setattr(hami.config, "parse_device_config", lambda text, source: _Loaded(custom), raising=False)
    config = tmp_path / "device-config.yaml"
    config.write_text("nvidia:\n  resourceMemoryName: example.com/vram\n")
    pods = tmp_path / "pods.yaml"
    pods.write_text(
        "kind: Pod\nmetadata: {name: p}\nspec:\n"
        "  containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1, example.com/vram: 4000}}}]\n"
    )
    result = run_cli("-s", DATA / "malformed-node.yaml", "--config", config, pods, "-o", "json")
    assert result.code == 0
    assert result.stdout.count('"usedmem": 4000') == 1
