"""The prepared claims on disk, so a restarted plugin neither loses a claim nor prepares one twice.

One JSON file, ``<plugin dir>/checkpoint.json`` (the chart mounts kubelet's plugin directory, which outlives the
plugin's pod), replaced atomically on every change::

    {"version": 1, "checksum": <CRC-32 of the canonical claims JSON>,
     "claims": {"<claim uid>": {"state": "PrepareStarted" | "PrepareCompleted", "namespace": ..., "name": ...,
                                "devices": [...], "spec": {...}}}}

``PrepareStarted`` is written before any file of the claim, ``PrepareCompleted`` after the last, so a crash in
between leaves an entry that the next prepare finishes and the next unprepare cleans. A file whose checksum does
not match is refused with an error naming it (never silently emptied: that would lose prepared claims).
"""

from __future__ import annotations

import json
import os
import tempfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from hami.errors import HamiError

__all__ = ["COMPLETED", "FILE_NAME", "STARTED", "CheckpointError", "load", "save"]

FILE_NAME: Final = "checkpoint.json"
VERSION: Final = 1
STARTED: Final = "PrepareStarted"
COMPLETED: Final = "PrepareCompleted"


class CheckpointError(HamiError):
    """The checkpoint file exists but cannot be used."""


def _checksum(claims: Mapping[str, Any]) -> int:
    return zlib.crc32(json.dumps(claims, sort_keys=True, separators=(",", ":")).encode())


def load(path: Path) -> dict[str, dict[str, Any]]:
    """The claims recorded in ``path``; empty when the file does not exist. Raises :class:`CheckpointError`."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise CheckpointError(f"cannot read the checkpoint {path}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text)
        version, claims, checksum = data["version"], data["claims"], data["checksum"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {path} is not a checkpoint file: {exc}") from exc
    if version != VERSION:
        raise CheckpointError(f"checkpoint {path}: version {version!r}, this plugin reads version {VERSION}")
    if not isinstance(claims, dict) or checksum != _checksum(claims):
        raise CheckpointError(
            f"checkpoint {path}: checksum mismatch (the file is corrupt; move it away to start empty)"
        )
    return claims


def save(path: Path, claims: Mapping[str, Any]) -> None:
    """Write ``claims`` to ``path`` atomically (fsynced before the rename). Raises ``OSError``."""
    text = json.dumps({"version": VERSION, "checksum": _checksum(claims), "claims": claims}, indent=1, sort_keys=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
