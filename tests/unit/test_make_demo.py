"""``make demo`` installs only what the demo needs (issue 36): the Makefile's DEMO_DEPS. The demo runs here with
every other dependency of hami made unimportable, so an import that the list misses fails this test, not a new
user's first command."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).parents[2]

BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not installed by make demo")
        return None
sys.meta_path.insert(0, Block())
sys.argv = ["hami", "simulate", "--demo"]
from hami.cli import main
main()
"""


def _demo_deps() -> set[str]:
    found = re.search(r"^DEMO_DEPS := (.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert found is not None
    return {name.lower() for name in found.group(1).split()}


def _runtime_deps() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {re.split(r"[=<>~!\[; ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}


def test_the_demo_runs_with_only_the_demo_dependencies() -> None:
    deps = _demo_deps()
    assert deps < _runtime_deps()  # a strict part: the gRPC, HTTP server and NVML ones are left out
    left_out = _runtime_deps() - deps
    blocked = sorted(
        module for module, dists in packages_distributions().items() if {d.lower() for d in dists} & left_out
    )
    assert "grpc" in blocked
    script = f"BLOCKED = {set(blocked)!r}\n" + BLOCKER
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("hami simulate --demo: ")


def test_make_demo_says_which_pythons_it_takes() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "SUPPORTED_PYTHONS := python3.11 python3.12 python3.13 python3 " in makefile
    done = subprocess.run(
        ["make", "-s", "demo", "PYTHON=", f"DEMO_STAMP={ROOT / 'no-such-stamp'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "hami needs Python 3.11 to 3.13" in done.stderr
