"""The ``dra:`` section of device-config.yaml: defaults, units, and errors that name the key and the value."""

from __future__ import annotations

import pytest

from hami.config import parse_device_config
from hami.config.dra import DraConfig
from hami.errors import ConfigError


def test_the_default_counts_nvidias_driver_and_hamis_own_in_bytes() -> None:
    dra = parse_device_config("nvidia:\n  deviceSplitCount: 10\n", "f").config.dra
    assert dra.enabled
    assert [d.driver for d in dra.drivers] == ["gpu.nvidia.com", "hami-core-gpu.project-hami.io"]
    for driver in dra.drivers:
        assert (driver.vendor, driver.uuid_attribute) == ("NVIDIA", "uuid")
        assert (driver.memory_capacity, driver.memory_unit, driver.cores_capacity, driver.cores_unit) == (
            "memory",
            "bytes",
            "cores",
            "percent",
        )
    assert set(dra.active()) == {"gpu.nvidia.com", "hami-core-gpu.project-hami.io"}


def test_the_default_knows_the_driver_hamis_dra_plugin_publishes() -> None:
    from hami.deviceplugin.dra.slices import DRIVER

    assert DRIVER in DraConfig().active()


def test_the_charts_default_drivers_equal_the_device_configs() -> None:
    from pathlib import Path

    import yaml

    values = yaml.safe_load((Path(__file__).parents[3] / "charts/hami/values.yaml").read_text())
    rendered = parse_device_config(yaml.safe_dump({"dra": values["dra"]}), "values.yaml").config.dra
    assert rendered == DraConfig()


def test_a_section_lists_drivers_with_explicit_units() -> None:
    text = """
dra:
  drivers:
  - driver: gpu.example.com
    vendor: DCU
    uuidAttribute: example.com/serial
    memoryCapacity: vram
    memoryUnit: MiB
    coresCapacity: ""
    coresUnit: share
"""
    (driver,) = parse_device_config(text, "f").config.dra.drivers
    assert (driver.vendor, driver.uuid_attribute, driver.memory_unit, driver.cores_capacity) == (
        "DCU",
        "example.com/serial",
        "MiB",
        "",
    )


def test_a_disabled_section_counts_no_driver_and_survives_an_otherwise_empty_file() -> None:
    loaded = parse_device_config("dra:\n  enabled: false\n", "f")
    assert loaded.config.dra.active() == {}
    assert any("every vendor section is empty" in w for w in loaded.warnings)


def test_an_empty_section_means_the_default() -> None:
    assert parse_device_config("dra:\nnvidia: {}\n", "f").config.dra == DraConfig()


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("  drivers:\n  - vendor: NVIDIA\n", "dra.drivers[0].driver: is required"),
        ("  drivers:\n  - driver: GPU_Nvidia\n", "dra.drivers[0].driver: must be a DRA driver name"),
        ("  drivers:\n  - driver: a.b\n    memoryUnit: mb\n", "dra.drivers[0].memoryUnit: must be one of"),
        ("  drivers:\n  - driver: a.b\n    coresUnit: sm\n", "dra.drivers[0].coresUnit: must be one of"),
        ("  drivers:\n  - driver: a.b\n    uuidAttribute: ''\n", "dra.drivers[0].uuidAttribute: must be a device"),
        ("  drivers:\n  - driver: a.b\n  - driver: a.b\n", "dra.drivers: driver 'a.b' is listed twice"),
        ("  enabled: 'yes'\n", "dra.enabled: must be true or false"),
    ],
)
def test_bad_values_name_the_key_and_the_value(section: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_device_config("dra:\n" + section, "f")
    assert message in str(err.value)


def test_unknown_keys_are_reported() -> None:
    loaded = parse_device_config("dra:\n  drivers:\n  - driver: a.b\n    memoryUnits: MiB\n", "f")
    assert "dra.drivers[0].memoryUnits: unknown key, ignored" in loaded.warnings
