"""Readable at once: no module of the scheduling core or the server exceeds 600 lines, no function there 60 (issue
26). A module or function that grows past the limit is split by what it does, not by line count."""

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


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT.parent))


def test_the_packages_are_found() -> None:
    assert len(MODULES) > 20
    assert {p.parent.name for p in MODULES} >= set(PACKAGES)


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_module_is_longer_than_600_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{_name(path)} has {lines} lines"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_function_is_longer_than_60_lines(path: Path) -> None:
    too_long = [
        f"{node.name} (line {node.lineno}): {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not too_long, f"{_name(path)}: " + "; ".join(too_long)
