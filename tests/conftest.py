"""Test-suite wide configuration: tests under tests/e2e are marked ``e2e`` and run last."""

from __future__ import annotations

from pathlib import Path

import pytest

_E2E_DIR = Path(__file__).parent / "e2e"
_CHART_DIR = Path(__file__).parent / "chart"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _E2E_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
        if _CHART_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.helm)
    items.sort(key=lambda item: item.get_closest_marker("e2e") is not None)
