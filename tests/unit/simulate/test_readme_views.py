"""The README's `hami top`, `hami explain` (with its preemption part) and `--defrag` examples are what the
commands print today."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from hami.cli import app

ROOT = Path(__file__).parents[3]
SNAPSHOT = "tests/data/simulate/fragmented.yaml"


@pytest.mark.parametrize(
    "command",
    [
        f"hami top --snapshot {SNAPSHOT}",
        f"hami explain ml/big-infer --snapshot {SNAPSHOT}",
        "hami explain ml/infer --snapshot tests/data/simulate/preemption.yaml",
        f"hami simulate --snapshot {SNAPSHOT} --defrag",
        "hami simulate --snapshot tests/data/simulate/dra.json tests/data/simulate/pods-dra.yaml",
    ],
    ids=["top", "explain", "explain-preemption", "defrag", "dra"],
)
def test_readme_shows_the_real_output(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = readme.split(f"$ {command}\n", 1)[1].split("\n```", 1)[0]
    result = CliRunner().invoke(app, command.split()[1:])
    assert result.exit_code == 0, result.output
    assert shown == result.stdout.rstrip("\n")
