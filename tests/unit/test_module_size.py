"""Readable at once: no module of the scheduling core or the server exceeds 600 lines (issue 26), and no function
anywhere in hami's source 60 (issue 36: the command line and the device plugin too). A module or function that
grows past the limit is split by what it does, not by line count; a function's length counts its signature (the
option declarations of a command belong in module-level types)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hami

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
PACKAGES = ("scheduling", "server")
ROOT = Path(hami.__file__).parent
MODULES = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
SOURCES = [*sorted(p for p in ROOT.rglob("*.py") if "_generated" not in p.parts), ROOT.parent / "hami_build.py"]


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT.parent))


def test_the_packages_are_found() -> None:
    assert len(MODULES) > 20
    assert {p.parent.name for p in MODULES} >= set(PACKAGES)
    assert {ROOT / "cli.py", ROOT / "deviceplugin" / "command.py"} < set(SOURCES)


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_module_is_longer_than_600_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{_name(path)} has {lines} lines"


@pytest.mark.parametrize("path", SOURCES, ids=_name)
def test_no_function_is_longer_than_60_lines(path: Path) -> None:
    too_long = [
        f"{node.name} (line {node.lineno}): {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not too_long, f"{_name(path)}: " + "; ".join(too_long)
