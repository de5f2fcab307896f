"""The core names no vendor: ``hami.scheduling`` and ``hami.server`` reach vendors only through the registry
(``hami.devices.vendors_from_config``) and the ``Vendor`` interface, and hold no MIG logic.

The vendor list is read from the registry, so a vendor added there is checked here without editing this file.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import hami
from hami.config import default_device_config
from hami.devices import vendors_from_config

SRC = Path(hami.__file__).parent
CORE = ("scheduling", "server")


def _core_files() -> list[Path]:
    files = sorted(p for pkg in CORE for p in (SRC / pkg).rglob("*.py"))
    assert len(files) > 10, files  # the walk found the packages
    return files


def _vendor_modules() -> set[str]:
    """The modules (and packages) of every registered vendor: ``hami.devices.nvidia``, ``hami.devices.hygon``."""
    out: set[str] = set()
    for vendor in vendors_from_config(default_device_config()).values():
        parts = type(vendor).__module__.split(".")
        assert parts[:2] == ["hami", "devices"], parts
        out.add(".".join(parts[:3]))
    return out


def _forbidden_words() -> set[str]:
    """Each vendor's key and module name (``NVIDIA``, ``nvidia``, ``DCU``, ``hygon``) and MIG, as whole words."""
    words = {"mig"}
    for vendor in vendors_from_config(default_device_config()).values():
        words.add(vendor.name.lower())
        words.add(type(vendor).__module__.split(".")[2].lower())
    return words


def test_the_registry_has_every_vendor_module() -> None:
    assert _vendor_modules() >= {"hami.devices.nvidia", "hami.devices.hygon"}
    assert _forbidden_words() >= {"nvidia", "dcu", "hygon", "mig"}


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_core_module_imports_no_vendor_module(path: Path) -> None:
    vendor_modules = _vendor_modules()
    imported: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            imported += [a.name for a in node.names]
    bad = [m for m in imported if any(m == v or m.startswith(v + ".") for v in vendor_modules)]
    assert bad == [], f"{path.relative_to(SRC)} imports a vendor module: {bad}"


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_core_module_names_no_vendor_and_no_mig(path: Path) -> None:
    pattern = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(sorted(_forbidden_words())) + r")(?![A-Za-z0-9])", re.I)
    hits = [
        f"{path.relative_to(SRC)}:{n}: {line.strip()}"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert hits == []


def test_the_word_check_would_catch_a_vendor_name() -> None:
    pattern = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(sorted(_forbidden_words())) + r")(?![A-Za-z0-9])", re.I)
    assert pattern.search("keys.NVIDIA_MIG_ALLOCATIONS")
    assert pattern.search("if info.mode == 'mig':")
    assert pattern.search("from hami.devices.hygon import HygonVendor")
    assert not pattern.search("a migration of the ledger; amigo")
