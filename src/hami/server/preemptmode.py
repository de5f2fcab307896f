"""``--preemption``: who carries out preemption for a pod that fits nowhere, chosen once at start-up.

kube-scheduler's DefaultPreemption runs only its in-tree filters in its dry run, so it never finds a victim for a
pod that lacks GPU shares. From Kubernetes 1.38 (kubernetes#135486) it calls a preemption-capable extender with its
candidate nodes and lets it name the victims; kube-scheduler then evicts them (``extender``: hami evicts nothing
itself). Before 1.38 nothing asks hami, so hami preempts itself from /filter (``self``:
``hami.scheduling.preempting``). ``auto`` reads the API server's version (``GET /version``; kube-scheduler runs
beside the API server of the same minor version in every supported skew that matters here).
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
    """The mode to run and why (for the log). ``git_version`` is the API server's (None: it could not be read,
    then ``auto`` preempts itself: hami's eviction is correct on every version, merely not needed from 1.38)."""
    if mode != "auto":
        return mode, f"--preemption={mode}"
    version = parse_version(git_version) if git_version is not None else None
    if version is None:
        shown = "could not be read" if git_version is None else f"{git_version!r} is not a version"
        return "self", f"--preemption=auto: the API server's version {shown}; hami preempts itself"
    if version >= EXTENDER_VERB_SINCE:
        return "extender", (
            f"--preemption=auto: Kubernetes {git_version} calls hami's /preempt; kube-scheduler evicts, hami does not"
        )
    return "self", f"--preemption=auto: Kubernetes {git_version} asks no extender for victims; hami preempts itself"
