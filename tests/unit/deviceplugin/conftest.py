"""Shared helpers for the device plugin tests: fake NVML fixtures and short socket directories."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami.deviceplugin.fakenvml import FakeNvmlLib, load_fake_nvml

FIXTURES = Path(__file__).parent / "fixtures"


def fake_lib(name: str) -> FakeNvmlLib:
    """A fresh fake NVML loaded from ``fixtures/<name>.yaml``."""
    return load_fake_nvml(FIXTURES / f"{name}.yaml")


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="hdp", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
