"""Every list of device families agrees with the registry (``hami.devices.FAMILIES``): the settings' families and
their switches, the device config's sections, the ``hami scheduler`` help, and the chart (``devices.<family>``
values, the managed-resources table and the family switches in ``_helpers.tpl``). A family added to the registry
and forgotten in one of them fails here, by name."""

from __future__ import annotations

import re

import pytest
import yaml
from typer.testing import CliRunner

from hami.cli import app
from hami.config import DeviceConfig
from hami.config.settings import DEVICE_FAMILIES, GATED_FAMILIES
from hami.devices import FAMILIES
from tests.helm import CHART

HELPERS = (CHART / "templates" / "_helpers.tpl").read_text()
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())


def _define(name: str) -> str:
    """The body of one ``{{- define "<name>" -}}`` block of ``_helpers.tpl``."""
    start = HELPERS.index(f'{{{{- define "{name}" -}}}}')
    return HELPERS[start : HELPERS.index("{{- end -}}\n\n", start)]


def _chart_sections() -> dict[str, str]:
    """Family → device-config section, from the chart's managed-resources table."""
    return dict(re.findall(r"\(list \"(\w+)\" \"(\w+)\" (?:\(list|\$counts)", _define("hami.managedResources")))


def test_the_settings_know_exactly_the_registered_families() -> None:
    assert set(DEVICE_FAMILIES) == set(FAMILIES)
    assert set(GATED_FAMILIES) <= set(FAMILIES)


def test_every_family_has_a_device_config_section() -> None:
    sections = _chart_sections()
    assert set(sections) == set(FAMILIES)
    assert set(sections.values()) == set(DeviceConfig.model_fields) - {"dra"}


def test_the_chart_has_values_for_every_family() -> None:
    assert set(VALUES["devices"]) == set(FAMILIES)
    for family in FAMILIES:
        assert VALUES["devices"][family]["enabled"] is (family not in GATED_FAMILIES), family


def test_the_charts_family_switches_name_every_family() -> None:
    lists = re.findall(r"range \$family := list ((?:\"\w+\" ?)+)", _define("hami.familyArgs"))
    ungated, gated = (re.findall(r'"(\w+)"', found) for found in lists)
    assert set(gated) == set(GATED_FAMILIES)
    assert set(ungated) == set(FAMILIES) - set(GATED_FAMILIES)


@pytest.mark.parametrize("family", sorted(set(FAMILIES) - set(GATED_FAMILIES)))
def test_the_scheduler_help_lists_each_family_that_can_be_disabled(family: str) -> None:
    result = CliRunner().invoke(app, ["scheduler", "-h"], env={"COLUMNS": "200"}, terminal_width=200)
    text = " ".join(result.stdout.split())
    listed = text.split("Device families not to schedule, their resources left alone:", 1)[1].split(".", 1)[0]
    assert family in {name.strip() for name in listed.split(",")}
