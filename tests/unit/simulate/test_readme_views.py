"""The docs' `hami top`, `hami explain` (with its preemption part), `--defrag` and DRA examples are what the
commands print today (``docs/cli.md``, ``docs/preemption.md``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hami.cli import app

ROOT = Path(__file__).parents[3]
SNAPSHOT = "tests/data/simulate/fragmented.yaml"


@pytest.mark.parametrize(
    ("page", "command"),
    [
        ("docs/cli.md", f"hami top --snapshot {SNAPSHOT}"),
        ("docs/cli.md", f"hami explain ml/big-infer --snapshot {SNAPSHOT}"),
        ("docs/preemption.md", "hami explain ml/infer --snapshot tests/data/simulate/preemption.yaml"),
        ("docs/cli.md", f"hami simulate --snapshot {SNAPSHOT} --defrag"),
        ("docs/cli.md", "hami simulate --snapshot tests/data/simulate/dra.json tests/data/simulate/pods-dra.yaml"),
    ],
    ids=["top", "explain", "explain-preemption", "defrag", "dra"],
)
def test_the_docs_show_the_real_output(page: str, command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    text = (ROOT / page).read_text(encoding="utf-8")
    shown = text.split(f"$ {command}\n", 1)[1].split("\n```", 1)[0]
    result = CliRunner().invoke(app, command.split()[1:])
    assert result.exit_code == 0, result.output
    assert shown == result.stdout.rstrip("\n")
