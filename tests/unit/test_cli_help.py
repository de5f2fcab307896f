"""The command line for people: -h and --version, and help that reads at 80 columns."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from hami import __version__
from hami.cli import app


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), prog_name="hami", env={"COLUMNS": "80"}, terminal_width=80)
    return result.exit_code, result.stdout


def test_version_flag_and_command() -> None:
    assert _run("--version") == (0, f"{__version__}\n")
    code, out = _run("version")
    assert code == 0
    assert out.startswith(f"{__version__} (commit ")  # the version first, for scripts; then commit and build date
    assert ", built " in out


@pytest.mark.parametrize("command", [[], ["simulate"], ["scheduler"], ["device-plugin"], ["monitor"], ["certs"]])
def test_dash_h_is_help_everywhere(command: list[str]) -> None:
    code, out = _run(*command, "-h")
    assert code == 0
    assert out.startswith("Usage: hami")
    assert "-h, --help" in out


def _options(help_text: str) -> dict[str, str]:
    """Each option's first line (flags) → its help text, from Click's plain two-column layout."""
    body = help_text.split("\nOptions:\n", 1)[1]
    options: dict[str, str] = {}
    current = ""
    for line in body.splitlines():
        match = re.match(r"^  (-\S.*?)(?:\s{2,}(.*))?$", line)
        if match:
            current = match.group(1).strip()
            options[current] = match.group(2) or ""
        elif current and line.strip():
            options[current] += " " + line.strip()
    return options


def test_scheduler_help_fits_80_columns_explains_every_flag_and_shows_defaults() -> None:
    code, out = _run("scheduler", "--help")
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80
    options = _options(out)
    assert len(options) >= 25
    for flags, text in options.items():
        assert text, f"{flags} has no help text"
        if flags != "-h, --help":
            assert "[default: " in text, f"{flags} shows no default"
    assert "[default: hami-scheduler]" in options["--scheduler-name NAME"]
    assert "[default: 5m]" in options["--node-lock-timeout DURATION"]
    assert "…" not in out  # no flag name cut short
