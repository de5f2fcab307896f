"""Typos do not pass silently: did-you-mean names only close, same-vendor, same-role names; a zero count beside
memory is warned; a family this run does not schedule is named with its switch."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami.config import default_device_config
from hami.devices import vendors_from_config
from hami.simulate.hints import resource_hint, resource_roles, role_of, zero_count_problems
from tests.unit.simulate.clusterfix import node, snapshot_text
from tests.unit.simulate.helpers import run_cli

ROLES = resource_roles(vendors_from_config(default_device_config()).values())


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("nvidia.com/gpumemory", "; did you mean nvidia.com/gpumem?"),
        ("nvidia.com/GPU", "; did you mean nvidia.com/gpu?"),
        ("nvidia.com/gpucore", "; did you mean nvidia.com/gpucores?"),
        # a model cut short, or another model number, is another chip: the vendor's names instead
        ("huawei.com/Ascend910", "; hami's count resources under huawei.com/ are huawei.com/Ascend310P, "),
        ("huawei.com/Ascend910B9", "; hami's count resources under huawei.com/ are "),
        ("example.com/gpu", ""),
    ],
)
def test_resource_hint(name: str, hint: str) -> None:
    assert resource_hint(name, ROLES).startswith(hint)
    assert "Ascend910C" not in resource_hint(name, ROLES).partition("are")[0]


def test_a_renamed_count_resource_suggests_the_new_count_name_never_memory() -> None:
    roles = {"nvidia.com/vgpu": "count", "nvidia.com/gpumem": "memory", "nvidia.com/gpucores": "cores"}
    assert resource_hint("nvidia.com/gpu", roles) == "; did you mean nvidia.com/vgpu?"  # type: ignore[arg-type]
    del roles["nvidia.com/vgpu"]
    assert "gpumem" not in resource_hint("nvidia.com/gpu", roles)  # type: ignore[arg-type]


def test_roles() -> None:
    assert [role_of(n) for n in ("nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpu")] == [
        "memory",
        "cores",
        "count",
    ]


def test_the_task_priority_is_no_count_resource() -> None:
    roles = resource_roles(vendors_from_config(default_device_config()).values(), ["nvidia.com/priority"])
    assert roles["nvidia.com/priority"] == "priority"
    assert resource_hint("nvidia.com/gpus-x", roles) == "; hami's count resources under nvidia.com/ are nvidia.com/gpu"
    assert resource_hint("nvidia.com/priorty", roles) == "; did you mean nvidia.com/priority?"


def test_zero_count_beside_memory() -> None:
    vendors = vendors_from_config(default_device_config()).values()
    (problem,) = zero_count_problems({"nvidia.com/gpu": 0, "nvidia.com/gpumem": 3000}, vendors)
    assert problem.startswith("nvidia.com/gpu: 0 asks for no device, so nvidia.com/gpumem: 3000 is ignored")
    assert zero_count_problems({"nvidia.com/gpu": "0", "nvidia.com/gpumem": "0"}, vendors) == []
    assert zero_count_problems({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}, vendors) == []


def _pods(tmp_path: Path, limits: str) -> tuple[Path, Path]:
    snap = tmp_path / "snap.json"
    snap.write_text(snapshot_text(node("a", [(16000, 10)])))
    pods = tmp_path / "p.yaml"
    pods.write_text(
        f"kind: Pod\nmetadata: {{name: p}}\nspec:\n  containers: [{{name: c, resources: {{limits: {limits}}}}}]\n"
    )
    return snap, pods


def test_cli_warns_a_zero_count_and_a_switched_off_family(tmp_path: Path) -> None:
    snap, pods = _pods(tmp_path, "{nvidia.com/gpu: 0, nvidia.com/gpumem: 3000}")
    result = run_cli("-s", snap, pods)
    assert "nvidia.com/gpu: 0 asks for no device, so nvidia.com/gpumem: 3000 is ignored" in result.stderr
    snap, pods = _pods(tmp_path, "{huawei.com/Ascend910B3: 1}")
    off = run_cli("-s", snap, pods)
    assert "the ascend devices are not scheduled in this run" in off.stderr
    assert "--enable-ascend" in off.stderr
    on = run_cli("-s", snap, pods, "--enable-ascend")
    assert "not scheduled in this run" not in on.stderr


def test_cli_renamed_count_resource(tmp_path: Path) -> None:
    config = tmp_path / "device-config.yaml"
    config.write_text("nvidia:\n  resourceCountName: nvidia.com/vgpu\n")
    snap, pods = _pods(tmp_path, "{nvidia.com/gpu: 1}")
    result = run_cli("-s", snap, pods, "--config", config)
    assert "limits[nvidia.com/gpu]: no vendor hami schedules owns this resource" in result.stderr
    assert "did you mean nvidia.com/vgpu?" in result.stderr
    assert "gpumem" not in result.stderr


def test_disable_devices_names_the_flag(tmp_path: Path) -> None:
    snap, pods = _pods(tmp_path, "{nvidia.com/gpu: 1}")
    bad = run_cli("-s", snap, pods, "--disable-devices", "nvidai")
    assert bad.code == 2
    assert "--disable-devices" in bad.stderr
    assert "nvidai" in bad.stderr
    both = run_cli("-s", snap, pods, "--disable-devices", "ascend", "--enable-ascend")
    assert both.code == 2
    off = run_cli("-s", snap, pods, "--disable-devices", "nvidia", "-o", "json")
    assert off.code == 0
    assert '"noDevices": 1' in off.stdout


def test_the_default_families_are_the_chart_s() -> None:
    """simulate's default (a default install) is what the chart's values enable, family by family."""
    import yaml

    from hami.config.settings import DEVICE_FAMILIES
    from hami.simulate.devconfig import Families

    values = yaml.safe_load((Path(__file__).parents[3] / "charts/hami/values.yaml").read_text(encoding="utf-8"))
    chart = {family for family in DEVICE_FAMILIES if values["devices"][family]["enabled"]}
    assert Families().enabled() == chart
    assert {"ascend", "iluvatar"}.isdisjoint(chart)
    assert Families(enable_ascend=True, disable_devices="nvidia").enabled() == (chart | {"ascend"}) - {"nvidia"}
