"""``--preemption``: who carries out preemption for a pod that fits nowhere, chosen once at start-up.

kube-scheduler's DefaultPreemption runs only its in-tree filters in its dry run, so it never finds a victim for a
pod that lacks GPU shares. hami therefore preempts itself from /filter (``self``: ``hami.scheduling.preempting``),
which works the same on every Kubernetes version while kube-scheduler's configuration declares no
``preemptVerb`` (the chart declares none unless ``extender`` is chosen). From Kubernetes 1.38 (kubernetes#135486)
kube-scheduler can instead call a preemption-capable extender with its candidate nodes and let it name the victims
(``extender``: kube-scheduler evicts, hami evicts nothing); that path has not been run against a released
Kubernetes, so it is used only when chosen. ``auto`` is ``self``: only a verified mechanism; the API server's
version is read for the log line only.
"""

from __future__ import annotations

import re
from typing import Literal

from hami.config.settings import PreemptionMode

__all__ = ["EXTENDER_VERB_SINCE", "Resolved", "parse_version", "resolve_preemption"]

Resolved = Literal["extender", "self", "off"]

EXTENDER_VERB_SINCE = (1, 38)
"""The first Kubernetes version whose kube-scheduler asks a preemption-capable extender for victims."""

_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


def parse_version(git_version: str) -> tuple[int, int] | None:
    """``v1.36.3`` (or ``v1.37.0-eks-1234``) → (1, 36); None when it is not a version."""
    found = _VERSION.match(git_version.strip())
    return (int(found.group(1)), int(found.group(2))) if found else None


def resolve_preemption(mode: PreemptionMode, git_version: str | None) -> tuple[Resolved, str]:
    """The mode to run and why (for the log). ``auto`` is always ``self`` (hami's eviction, verified on every
    tested version); ``git_version`` (the API server's, None when it could not be read) only shapes the reason."""
    if mode != "auto":
        return mode, f"--preemption={mode}"
    version = parse_version(git_version) if git_version is not None else None
    if version is None:
        shown = "could not be read" if git_version is None else f"{git_version!r} is not a version"
        return "self", f"--preemption=auto: the API server's version {shown}; hami preempts itself"
    if version >= EXTENDER_VERB_SINCE:
        return "self", (
            f"--preemption=auto: hami preempts itself on Kubernetes {git_version} too (kube-scheduler's preempt "
            "verb is used only with --preemption=extender)"
        )
    return "self", f"--preemption=auto: Kubernetes {git_version} asks no extender for victims; hami preempts itself"
