"""The vendor registry: every family builds its vendors from the device config; a family switched off is absent."""

from __future__ import annotations

import pytest

from hami.config import default_device_config, load_settings
from hami.config.settings import DEVICE_FAMILIES
from hami.devices import FAMILIES, registered_keys, vendors_from_config


def test_every_family_is_one_hami_knows() -> None:
    assert set(FAMILIES) <= set(DEVICE_FAMILIES)


def test_none_enables_every_family() -> None:
    config = default_device_config()
    everything = vendors_from_config(config)
    built = [v.name for build in FAMILIES.values() for v in build(config)]
    assert list(everything) == built
    assert [k.vendor for k in registered_keys()] == [v.keys.vendor for v in everything.values()]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_family_switched_off_is_not_registered(family: str) -> None:
    config = default_device_config()
    own = {v.name for v in FAMILIES[family](config)}
    others = set(FAMILIES) - {family}
    vendors = vendors_from_config(config, others)
    assert own
    assert not own & set(vendors)
    assert set(vendors) == {v.name for f in others for v in FAMILIES[f](config)}
    owned = {name for v in vendors.values() for name in (v.resources.count, v.resources.memory, v.resources.core)}
    assert not owned & {n for v in FAMILIES[family](config) for n in (v.resources.count, v.resources.core)} - {None}


def test_scheduler_settings_choose_the_families() -> None:
    config = default_device_config()
    settings = load_settings({"disable_devices": "hygon"})
    vendors = vendors_from_config(config, settings.enabled_families)
    assert "NVIDIA" in vendors
    assert "DCU" not in vendors
    assert vendors_from_config(config, frozenset()) == {}
