"""What ``hami version`` says about the build: the commit and the build date.

A wheel (and so the image) carries them in ``hami/_build.py``, written by the build backend (``src/hami_build.py``)
from ``HAMI_BUILD_COMMIT`` or git, and ``SOURCE_DATE_EPOCH`` or the time of the build. Run from a source checkout
(``make setup``'s editable install), the commit is read from git when asked and the package was never built:
its date is ``unknown``. Anything that cannot be told is ``unknown``.
"""

from __future__ import annotations

import importlib
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["UNKNOWN", "BuildInfo", "build_info"]

UNKNOWN: Final = "unknown"


@dataclass(frozen=True, slots=True)
class BuildInfo:
    commit: str = UNKNOWN
    date: str = UNKNOWN


def build_info(package: Path | None = None) -> BuildInfo:
    """The commit and build date: git's, for a package that sits in a source checkout, else the record the build
    wrote, else ``unknown``."""
    package = Path(__file__).resolve().parent if package is None else package
    checkout = package.parent.parent  # <checkout>/src/hami
    if (checkout / ".git").exists():
        return BuildInfo(_git_head(checkout) or UNKNOWN, UNKNOWN)
    try:
        record = importlib.import_module("hami._build")
    except ImportError:
        return BuildInfo()
    return BuildInfo(str(getattr(record, "COMMIT", UNKNOWN)), str(getattr(record, "DATE", UNKNOWN)))


def _git_head(checkout: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
