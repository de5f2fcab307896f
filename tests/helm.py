"""Where the tests find helm, and rendering the chart.

helm comes from the control-plane build (``scripts/k8s-testenv helm``, i.e. ``make helm``) in
``<cache>/helm-vX.Y.Z/helm`` (cache: ``$HAMI_TESTENV_CACHE``, else ``$XDG_CACHE_HOME/hami`` or ``~/.cache/hami``),
or from ``$HAMI_HELM``. Without it the tests that need it fail with that instruction; they are never skipped.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

CHART = Path(__file__).resolve().parents[1] / "charts" / "hami"
_BUILD = re.compile(r"^helm-v(\d+)\.(\d+)\.(\d+)$")


def _cache_root() -> Path:
    if os.environ.get("HAMI_TESTENV_CACHE"):
        return Path(os.environ["HAMI_TESTENV_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "hami"


@cache
def helm() -> str:
    """The helm binary: ``$HAMI_HELM``, else the newest complete build in the test-environment cache."""
    explicit = os.environ.get("HAMI_HELM")
    if explicit:
        if not os.access(explicit, os.X_OK):
            pytest.fail(f"HAMI_HELM={explicit} is not an executable helm")
        return explicit
    root = _cache_root()
    builds = []
    if root.is_dir():
        for entry in root.iterdir():
            match = _BUILD.match(entry.name)
            if match and (entry / "manifest.json").is_file() and os.access(entry / "helm", os.X_OK):
                builds.append((tuple(int(g) for g in match.groups()), entry / "helm"))
    if not builds:
        pytest.fail(
            f"helm not found: no complete {root}/helm-vX.Y.Z/ build. Run `make helm` "
            "(scripts/k8s-testenv helm) or point HAMI_HELM at a helm binary."
        )
    return str(max(builds)[1])


def template(namespace: str, kube_version: str, *sets: str, values: Sequence[Path] = ()) -> list[dict[str, Any]]:
    """``helm template`` of the chart as release ``hami`` (values files, then ``--set``s), parsed into objects."""
    result = run_template(namespace, kube_version, *sets, values=values)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def run_template(
    namespace: str, kube_version: str, *sets: str, values: Sequence[Path] = (), release: str = "hami"
) -> subprocess.CompletedProcess[str]:
    """``helm template`` as it ran (a refused value: its return code and message)."""
    args = [helm(), "template", release, str(CHART), "--namespace", namespace, "--kube-version", kube_version]
    for path in values:
        args += ["-f", str(path)]
    for s in sets:
        args += ["--set", s]
    return subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)
