from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from hami.cli import app

runner = CliRunner()


def test_the_monitor_is_a_hami_subcommand_with_hamis_port() -> None:
    result = runner.invoke(app, ["monitor", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "--port" in result.output
    assert "9394" in result.output
    assert "--fake-nvml" in result.output


def test_a_missing_node_name_is_one_clear_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["monitor", f"--hook-path={tmp_path}"], env={"NODE_NAME": ""})
    assert result.exit_code == 1
    assert "hami monitor: the node name is required" in result.output


def test_bad_bounds_are_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, ["monitor", "--node-name=n", "--max-regions=0"])
    assert result.exit_code == 1
    assert "--max-regions must be ≥ 1" in result.output
    assert "not 0" in result.output


def test_an_unreadable_fake_nvml_fixture_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "none.yaml"
    result = runner.invoke(app, ["monitor", "--node-name=n", f"--fake-nvml={missing}"])
    assert result.exit_code == 1
    assert str(missing) in result.output
