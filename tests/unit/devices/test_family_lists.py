"""Every list of device families agrees with the registry (``hami.devices.REGISTRY``): the settings' families and
their switches, the device config's sections, the ``hami scheduler`` help, and the chart (``devices.<family>``
values, the rendered device config, the managed-resources table and the family switches in ``_helpers.tpl``,
checked key by key by ``tests/chartcheck.py``). A family added to the registry and forgotten in one of them fails
here, by name."""

from __future__ import annotations

import copy
import re

import pytest
import yaml
from typer.testing import CliRunner

from hami.cli import app
from hami.config import DeviceConfig
from hami.config.settings import DEVICE_FAMILIES, GATED_FAMILIES
from hami.devices import FAMILIES, REGISTRY
from tests.chartcheck import chart_problems
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


def test_the_charts_vendor_blocks_match_the_registry_key_by_key() -> None:
    assert chart_problems(REGISTRY, VALUES, HELPERS) == []


def test_the_families_and_sections_are_the_registrys() -> None:
    assert tuple(f.family for f in REGISTRY) == DEVICE_FAMILIES
    assert {f.family: f.gate.setting for f in REGISTRY if f.gate is not None} == GATED_FAMILIES
    assert list(DeviceConfig.model_fields) == ["dra", *(f.section for f in REGISTRY)]


def _values_with(path: str, value: object) -> dict[str, object]:
    values = copy.deepcopy(VALUES)
    *parents, last = path.split(".")
    node = values
    for part in parents:
        node = node[part]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return values


_DELETE = object()


@pytest.mark.parametrize(
    ("values", "helpers", "problem"),
    [
        pytest.param(
            _values_with("vastaiResourceName", "vastaitech.com/vb"),
            HELPERS,
            "vastai: vastai.resourceCountName: values.yaml vastaiResourceName is 'vastaitech.com/vb', the model's "
            "default is 'vastaitech.com/va'",
            id="a-value-that-is-not-the-default",
        ),
        pytest.param(
            _values_with("devices.hygon.memoryFactor", _DELETE),
            HELPERS,
            "hygon: hygon.memoryFactor: values.yaml has no devices.hygon.memoryFactor",
            id="a-value-missing",
        ),
        pytest.param(
            _values_with("devices.biren", _DELETE),
            HELPERS,
            "biren: values.yaml has no devices.biren.enabled",
            id="a-family-without-values",
        ),
        pytest.param(
            _values_with("devices.ascend.enabled", True),
            HELPERS,
            "ascend: devices.ascend.enabled is True, not False",
            id="a-gated-family-on-by-default",
        ),
        pytest.param(
            VALUES,
            HELPERS.replace("  resourceCountName: {{ .Values.vastaiResourceName }}\n", ""),
            "vastai: the template writes [] under vastai:, the entry declares ['resourceCountName']",
            id="a-key-not-rendered",
        ),
        pytest.param(
            VALUES,
            HELPERS.replace("resourceNameGCU: enflame.com/gcu", "resourceNameGCU: enflame.com/gpu"),
            "enflame: enflame.resourceNameGCU: the template writes enflame.com/gpu, the model's default is "
            "'enflame.com/gcu'",
            id="a-literal-that-is-not-the-default",
        ),
        pytest.param(
            VALUES,
            HELPERS.replace('(list "vastai" "vastai" (list "resourceCountName"))', ""),
            "vastai: hami.managedResources has no row for the family",
            id="a-family-not-managed",
        ),
        pytest.param(
            VALUES,
            HELPERS.replace(' "vastai" "biren"', ' "biren"'),
            "vastai: hami.familyArgs does not list it as ungated",
            id="a-family-without-its-switch",
        ),
    ],
)
def test_a_chart_drifting_from_the_registry_is_reported(values: dict[str, object], helpers: str, problem: str) -> None:
    assert problem in chart_problems(REGISTRY, values, helpers)
