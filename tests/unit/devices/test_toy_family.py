"""A vendor is its module and one registry line: a made-up family declared in this test module alone — its config
model, default, switch and chart values in one ``VendorFamily`` — appears, once added to a registry, in the
device config (its section parsed from a ``device-config.yaml``), the scheduler's settings, ``hami scheduler``'s
help and options, the built vendors and the chart check (reported missing from the chart until its values and
template lines are given). Nothing else in hami names it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import typer
import yaml
from pydantic import StrictStr
from typer.testing import CliRunner

from hami.cli import KlogCommand
from hami.config import DeviceConfig, default_device_config, device_config_model, parse_device_config
from hami.config.settings import settings_model
from hami.devices import REGISTRY, vendors_from_config
from hami.devices.configmodel import ConfigModel
from hami.devices.family import ChartValues, Gate, VendorFamily
from hami.scheduler_flags import scheduler_command
from tests.chartcheck import chart_problems, define
from tests.helm import CHART
from tests.toyvendor import TOY, ToyVendor


class ToyConfig(ConfigModel):
    """``toy:`` — the made-up TOY accelerator's section."""

    resource_count_name: StrictStr = "toy.example/tpu"


GATED = VendorFamily[ToyConfig](
    family="toy",
    section="toy",
    model=ToyConfig,
    default=ToyConfig,
    build=lambda c: (ToyVendor(),),
    gate=Gate("enable_toy", "Schedule TOY TPUs"),
    chart=ChartValues({"resourceCountName": "toyResourceName"}, ("resourceCountName",)),
)
"""The registry line: a family off unless ``--enable-toy``."""

ON_BY_DEFAULT = VendorFamily[ToyConfig](
    family="toy",
    section="toy",
    model=ToyConfig,
    default=ToyConfig,
    build=lambda c: (ToyVendor(),),
    chart=ChartValues({"resourceCountName": "toyResourceName"}, ("resourceCountName",)),
)
"""The same family on unless ``--disable-devices`` names it."""

WITH_TOY = (*REGISTRY, GATED)
HELPERS = (CHART / "templates" / "_helpers.tpl").read_text()
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())


def test_the_toy_section_is_read_from_a_device_config_with_its_default_and_unknown_keys() -> None:
    model = device_config_model(WITH_TOY)
    loaded = parse_device_config("toy:\n  resourceCountName: toy.example/npu\n  colour: red\n", "dc.yaml", model)
    assert GATED.section_of(loaded.config).resource_count_name == "toy.example/npu"
    assert loaded.warnings == ("toy.colour: unknown key, ignored",)
    assert GATED.section_of(default_device_config(model)) == ToyConfig()
    assert GATED.section_of(parse_device_config("nvidia: {}\n", "dc.yaml", model).config) == ToyConfig()
    assert "toy" in model.model_fields
    assert "toy" not in DeviceConfig.model_fields  # registered in this test's registry only


def test_a_bad_toy_value_is_refused_naming_its_key() -> None:
    with pytest.raises(Exception, match=r"toy\.resourceCountName: must be a string \(got 3\)"):
        parse_device_config("toy:\n  resourceCountName: 3\n", "dc.yaml", device_config_model(WITH_TOY))


def test_the_toy_switch_is_a_setting_and_decides_whether_its_vendor_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HAMI_ENABLE_TOY", raising=False)
    settings, config = settings_model(WITH_TOY), default_device_config(device_config_model(WITH_TOY))
    off = settings()
    on = settings(enable_toy=True)
    assert "toy" not in off.enabled_families
    assert TOY not in vendors_from_config(config, off.enabled_families, WITH_TOY)
    assert TOY in vendors_from_config(config, on.enabled_families, WITH_TOY)
    monkeypatch.setenv("HAMI_ENABLE_TOY", "true")
    assert "toy" in settings().enabled_families


def test_an_ungated_toy_is_on_unless_disabled() -> None:
    settings = settings_model((*REGISTRY, ON_BY_DEFAULT))
    assert "toy" in settings().enabled_families
    assert "toy" not in settings(disable_devices="toy").enabled_families


def _scheduler_app(registry: Any) -> typer.Typer:
    app = typer.Typer(rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]})
    app.command("scheduler", cls=KlogCommand)(scheduler_command(registry))
    app.command("other")(lambda: None)  # two commands: `scheduler` stays a subcommand
    return app


@pytest.mark.parametrize(
    ("family", "listed"),
    [
        pytest.param(GATED, "--enable-toy / --no-enable-toy Schedule TOY TPUs (HAMi's switch).", id="gated"),
        pytest.param(ON_BY_DEFAULT, "resources left alone: nvidia, hygon, cambricon, metax", id="ungated"),
    ],
)
def test_the_scheduler_help_and_options_carry_the_toy(family: VendorFamily[ToyConfig], listed: str) -> None:
    app = _scheduler_app((*REGISTRY, family))
    result = CliRunner().invoke(app, ["scheduler", "-h"], env={"COLUMNS": "200"}, terminal_width=200)
    text = " ".join(result.stdout.split())
    assert listed in text
    disabled = text.split("resources left alone:", 1)[1].split(".", 1)[0]
    assert ("toy" in {n.strip() for n in disabled.split(",")}) is (family.gate is None)
    params = {p.name for p in typer.main.get_command(app).commands["scheduler"].params}  # type: ignore[attr-defined]
    assert ("enable_toy" in params) is (family.gate is not None)
    assert {"disable_devices", "device_config_file", "kubeconfig"} <= params


def test_the_chart_check_reports_the_toy_missing_from_the_chart() -> None:
    assert chart_problems(WITH_TOY, VALUES, HELPERS) == [
        "toy: values.yaml has no devices.toy.enabled",
        "toy: hami.deviceConfigFromValues renders no toy: section",
        "toy: hami.managedResources has no row for the family",
    ]


def test_the_chart_check_passes_once_the_toys_chart_values_are_given() -> None:
    values = copy.deepcopy(VALUES)
    values["toyResourceName"] = "toy.example/tpu"
    values["devices"]["toy"] = {"enabled": False}
    config = define(HELPERS, "hami.deviceConfigFromValues")
    managed = define(HELPERS, "hami.managedResources")
    args = define(HELPERS, "hami.familyArgs")
    helpers = (
        HELPERS.replace(
            config, config.replace("vnpus:\n", "toy:\n  resourceCountName: {{ .Values.toyResourceName }}\nvnpus:\n")
        )
        .replace(
            managed,
            managed.replace(
                '(list "biren" "biren"', '(list "toy" "toy" (list "resourceCountName"))\n  (list "biren" "biren"'
            ),
        )
        .replace(args, args.replace('list "ascend" "iluvatar"', 'list "ascend" "iluvatar" "toy"'))
    )
    assert chart_problems(WITH_TOY, values, helpers) == []
