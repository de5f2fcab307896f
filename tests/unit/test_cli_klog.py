"""klog's flags, as HAMi's chart and users pass them to HAMi's Go binaries, on hami's long-running commands
(docs/coming-from-hami.md): the verbosity maps onto hami's log level, the rest is accepted with a notice."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hami.cli import app
from hami.config.klog import KlogFlagError, translate
from tests.unit.deviceplugin.conftest import FIXTURES


def _params(command: str, *args: str) -> dict[str, Any]:
    """The options ``hami COMMAND ARGS`` is called with: Click's real parser, nothing run."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    ctx = group.commands[command].make_context(command, list(args))
    return dict(ctx.params)


# --- the translation (pure) ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "verbosity"),
    [
        (["-v=4"], 4),
        (["--v=4"], 4),
        (["-v", "5"], 5),
        (["--v", "0"], 0),
        (["-v=2", "-v=6"], 6),  # Go's flag package: the last one wins
        (["--scheduler-name=x"], None),
    ],
)
def test_verbosity_in_every_spelling_go_accepts(args: list[str], verbosity: int | None) -> None:
    assert translate(args).verbosity == verbosity


def test_stderr_flags_are_taken_out_silently_and_other_arguments_kept_in_order() -> None:
    result = translate(["--debug", "--logtostderr", "-alsologtostderr=true", "--scheduler-name", "x", "-v=4"])
    assert result.args == ["--debug", "--scheduler-name", "x"]
    assert result.verbosity == 4
    assert result.notices == []


def test_flags_without_effect_are_named_with_their_value() -> None:
    result = translate(["--log_dir", "/var/log/hami", "--logtostderr=false", "-skip_headers", "--vmodule=x=2", "-a"])
    assert result.args == ["-a"]
    assert result.notices == [
        "--log_dir=/var/log/hami: hami logs to stderr only (klog flag, no effect)",
        "--logtostderr=false: hami logs to stderr only (klog flag, no effect)",
        "-skip_headers: hami writes its own log format (klog flag, no effect)",
        "--vmodule=x=2: hami logs to stderr only (klog flag, no effect)",
    ]


def test_arguments_after_a_double_dash_are_left_alone() -> None:
    assert translate(["--", "-v=4"]).args == ["--", "-v=4"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-v=x"], "-v=x: klog's verbosity is a number 0 or more (e.g. -v=4)"),
        (["-v=-1"], "-v=-1: klog's verbosity is a number 0 or more (e.g. -v=4)"),
        (["-v"], "-v needs a number (klog's verbosity, e.g. -v=4)"),
        (["--logtostderr=maybe"], "-logtostderr=maybe: expected true or false (a klog flag)"),
        (["--log_dir"], "--log_dir needs a value (a klog flag)"),
    ],
)
def test_a_value_hami_cannot_read_is_an_error_naming_the_flag(args: list[str], message: str) -> None:
    with pytest.raises(KlogFlagError) as err:
        translate(args)
    assert str(err.value) == message


# --- on the commands --------------------------------------------------------------------------------------


def test_scheduler_takes_hamis_default_extra_args_as_debug_logging() -> None:
    # HAMi v2.10's chart: scheduler.extender.extraArgs: [--debug, -v=4]
    assert _params("scheduler", "--debug", "-v=4")["debug"] is True
    assert _params("scheduler", "--v=4")["debug"] is True
    assert _params("scheduler", "-v=3")["debug"] is None  # below 4: info, hami's default
    assert _params("scheduler", "-v=5", "--no-debug")["debug"] is False  # hami's own flag wins


def test_device_plugin_and_monitor_map_the_verbosity_onto_log_level() -> None:
    for command in ("device-plugin", "monitor"):
        assert _params(command, "-v=4")["log_level"] == "debug"
        assert _params(command, "-v=1", "--logtostderr")["log_level"] == "info"
        assert _params(command, "-v=4", "--log-level=warning")["log_level"] == "warning"
        assert _params(command)["log_level"] == "info"


def test_boolean_flags_take_gos_flag_equals_value_form() -> None:
    params = _params("scheduler", "--leader-elect=false", "--metrics-secure=true", "--debug=0")
    assert (params["leader_elect"], params["metrics_secure"], params["debug"]) == (False, True, False)
    assert _params("device-plugin", "--dry-run=true")["dry_run"] is True
    assert _params("device-plugin", "--dry-run=false")["dry_run"] is False


def test_a_bad_verbosity_is_a_usage_error_naming_it() -> None:
    result = CliRunner().invoke(app, ["scheduler", "-v=high"], prog_name="hami")
    assert result.exit_code == 2
    assert "-v=high: klog's verbosity is a number 0 or more (e.g. -v=4)" in result.output


def test_the_device_plugin_runs_with_hamis_default_flags_and_names_the_ignored_ones() -> None:
    # HAMi's devicePlugin.extraArgs [-v=4], plus a log directory hami cannot honour
    result = CliRunner().invoke(
        app,
        ["device-plugin", "--dry-run", "--fake-nvml", str(FIXTURES / "two-t4.yaml"), "-v=4", "--log_dir=/var/log"],
    )
    assert result.exit_code == 0, result.output
    assert "hami device-plugin: --log_dir=/var/log: hami logs to stderr only (klog flag, no effect)" in result.output
    assert "hami.io/node-nvidia-register=" in result.output
