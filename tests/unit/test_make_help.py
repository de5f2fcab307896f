"""``make help`` lists every target the Makefile declares."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_make_help_lists_every_phony_target() -> None:
    make = shutil.which("make")
    assert make, "make is needed to run the project's targets"
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert phony is not None
    targets = phony.group(1).split()
    listed = subprocess.run([make, "-s", "help"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    documented = {line.split()[1] for line in listed.splitlines() if line.startswith("make ")}
    assert len(targets) > 10
    assert sorted(set(targets) - {"help"} - documented) == []
