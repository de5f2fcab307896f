"""Find the regions under ``<hook>/vgpu/containers``, map them to the pods on this node, clean up the dead.

A container directory is named ``<pod uid>_<container name>`` (the device plugin's naming, see
:class:`hami.deviceplugin.response.HostFiles`); its region is the one ``*.cache`` file in it. A directory whose pod
is not on this node is removed once it is older than the grace period (HAMi removes it after its pod-informer
resync period, 5 minutes), and only when the pod list is known: an API failure never deletes anything.

Work is bounded: at most ``max_regions`` directories are read per scan (in name order), and each region read is
bounded (:mod:`.region`). Every directory or file that cannot be used is returned as a :class:`Skipped` with a
reason, never raised.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hami.errors import RegionError
from hami.monitor.region import Region, read_region
from hami.protocol.objects import Pod

__all__ = [
    "ContainerRegion",
    "ScanResult",
    "Skipped",
    "cache_file",
    "directory_mtime",
    "entries",
    "region_in",
    "scan",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ContainerRegion:
    """A region and the container it belongs to."""

    namespace: str
    pod: str
    pod_uid: str
    container: str
    region: Region


@dataclass(frozen=True, slots=True)
class Skipped:
    """A region file (or container directory) that was not used, and why (``reason`` is a metric label)."""

    path: Path
    reason: str
    message: str


@dataclass(slots=True)
class ScanResult:
    regions: list[ContainerRegion] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    truncated: bool = False  # more directories than max_regions


def _containers(pod: Pod) -> set[str]:
    return {c.name for c in (*pod.spec.init_containers, *pod.spec.containers)}


def cache_file(directory: Path) -> Path | Skipped | None:
    """The directory's ``*.cache`` file; ``None`` when the container has not started CUDA yet."""
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        return Skipped(directory, "unreadable", f"cannot list {directory}: {exc.strerror or exc}")
    caches = [n for n in names if n.endswith(".cache")]
    if len(caches) > 1:
        return Skipped(directory, "ambiguous", f"{len(caches)} .cache files in {directory}, one expected")
    return directory / caches[0] if caches else None


def region_in(directory: Path, result: ScanResult) -> Region | None:
    """The region of the directory's cache file; ``None`` when there is none yet, or when it is skipped (the reason
    added to ``result``)."""
    found = cache_file(directory)
    if found is None:
        return None
    if isinstance(found, Skipped):
        result.skipped.append(found)
        return None
    try:
        return read_region(found)
    except RegionError as exc:
        result.skipped.append(Skipped(found, exc.reason, str(exc)))
        return None


def scan(
    root: Path,
    pods: Iterable[Pod] | None,
    *,
    max_regions: int,
    now: float,
    grace_seconds: float,
    clean_up: bool = True,
) -> ScanResult:
    """Read the regions of the containers of ``pods`` (``None``: the pod list is unknown; nothing is mapped or
    removed) under ``root`` (``<hook>/vgpu/containers``)."""
    result = ScanResult()
    by_uid = {p.metadata.uid: p for p in pods} if pods is not None else None
    for name in entries(root, max_regions, result):
        directory = root / name
        mtime = directory_mtime(directory)
        if mtime is None:
            continue
        uid, sep, container = name.partition("_")
        if not sep or not uid or not container:
            result.skipped.append(Skipped(directory, "foreign", f"{name} is not named <pod uid>_<container>"))
            continue
        if by_uid is None:
            continue
        pod = by_uid.get(uid)
        if pod is not None:
            _read_container(directory, pod, container, result)
        elif clean_up and now - mtime >= grace_seconds:
            _remove(directory, result)
    return result


def entries(root: Path, max_regions: int, result: ScanResult) -> list[str]:
    """The names under ``root``, at most ``max_regions`` of them (``truncated`` then set); none if it is missing."""
    try:
        entries = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    except OSError as exc:
        result.skipped.append(Skipped(root, "unreadable", f"cannot list {root}: {exc.strerror or exc}"))
        return []
    if len(entries) > max_regions:
        result.truncated = True
        entries = entries[:max_regions]
    return entries


def directory_mtime(path: Path) -> float | None:
    """The modification time of ``path`` if it is a directory (not a link to one), else ``None``."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_mtime if stat.S_ISDIR(info.st_mode) else None


def _read_container(directory: Path, pod: Pod, container: str, result: ScanResult) -> None:
    """One container's region, or why it is skipped; nothing while it has not started CUDA yet."""
    if container not in _containers(pod):
        result.skipped.append(Skipped(directory, "foreign", f"pod {pod.key} has no container {container!r}"))
        return
    region = region_in(directory, result)
    if region is None:
        return
    uid = pod.metadata.uid
    result.regions.append(ContainerRegion(pod.metadata.namespace, pod.metadata.name, uid, container, region))


def _remove(directory: Path, result: ScanResult) -> None:
    try:
        shutil.rmtree(directory)
    except OSError as exc:
        result.skipped.append(Skipped(directory, "unremovable", f"cannot remove {directory}: {exc.strerror or exc}"))
        return
    log.info("removed %s: its pod is no longer on this node", directory)
    result.removed.append(directory)
