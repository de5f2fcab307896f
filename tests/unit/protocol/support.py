"""Shared test support for the protocol codecs: Go fixtures, hypothesis strategies, the "only
AnnotationError" check."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from hami.errors import AnnotationError
from hami.protocol.allocation import ContainerDevice, MigAllocation
from hami.protocol.inventory import DeviceInfo, MigPlacement, MigProfile

DATA = Path(__file__).parents[2] / "data"

HAMI: dict[str, dict[str, str]] = json.loads((DATA / "hami_encoder.json").read_text(encoding="utf-8"))
"""Values written by Go's encoders (``tests/data/hami_encoder/gen.go``), by section then case name."""

# The instants of gen.go's ``moments`` table.
GO_MOMENTS: dict[str, datetime] = {
    "utc": datetime(2026, 8, 21, 6, 20, 39, tzinfo=UTC),
    "plus_two": datetime(2026, 8, 21, 8, 20, 39, tzinfo=timezone(timedelta(hours=2))),
    "cst_nanos": datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=timezone(timedelta(hours=8))),
    "ist": datetime(2025, 6, 13, 9, 7, 40, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    "newfoundland": datetime(1999, 12, 31, 23, 59, 59, tzinfo=timezone(-timedelta(hours=3, minutes=30))),
    "year_five": datetime(5, 1, 2, 3, 4, 5, tzinfo=UTC),
    "leap_day": datetime(2024, 2, 29, tzinfo=UTC),
    "negative_unix": datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC),
}


def decodes_or_rejects(decode: Callable[[str], Any], text: str) -> None:
    """``decode(text)`` either returns or raises ``AnnotationError`` — nothing else may escape."""
    try:
        decode(text)
    except AnnotationError as exc:
        error = exc
    else:
        return
    assert error.value == text
    assert error.position is None or 0 <= error.position <= len(text)


# --- strategies ---------------------------------------------------------------------------------

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
UINT32 = st.integers(0, (1 << 32) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
UINT64 = st.integers(0, (1 << 64) - 1)
WIRE_TEXT = st.text(alphabet=st.characters(codec="utf-8"))  # what Kubernetes can store: no lone surrogates


def text_without(separators: str) -> st.SearchStrategy[str]:
    return st.text(alphabet=st.characters(codec="utf-8", exclude_characters=separators))


placements = st.builds(MigPlacement, start=UINT32, size=UINT32)
profiles = st.builds(
    MigProfile,
    name=WIRE_TEXT,
    memory_mb=INT32,
    core=INT32,
    slice_count=UINT32,
    placements=st.lists(placements, max_size=3).map(tuple),
)


def device_infos(legacy: bool = False) -> st.SearchStrategy[DeviceInfo]:
    """Valid devices: every field within its Go range; for the legacy format no separators and no MIG."""
    text = text_without(",:") if legacy else WIRE_TEXT
    return st.builds(
        DeviceInfo,
        id=text,
        index=st.integers(0, (1 << 63) - 1) if legacy else UINT64,
        count=INT32,
        devmem=INT32,
        devcore=INT32,
        type=text,
        numa=INT64,
        mode=text,
        mig_profiles=st.just(()) if legacy else st.lists(profiles, max_size=2).map(tuple),
        health=st.booleans(),
    )


container_devices = st.builds(
    ContainerDevice, uuid=text_without(",:;"), type=text_without(",:;"), usedmem=INT32, usedcores=INT32
)
pod_devices = st.lists(st.lists(container_devices, max_size=3).map(tuple), max_size=4).map(tuple)


@st.composite
def mig_allocation_lists(draw: st.DrawFn) -> list[MigAllocation]:
    keys = draw(st.lists(st.tuples(st.integers(0, 1 << 40), st.integers(0, 1 << 40)), unique=True, max_size=4))
    allocations = []
    for container, device in keys:
        ready = draw(st.booleans())
        allocations.append(
            MigAllocation(
                container_index=container,
                device_index=device,
                gpu_uuid=draw(WIRE_TEXT.filter(bool)),
                profile=draw(WIRE_TEXT.filter(bool)),
                placement=MigPlacement(start=draw(UINT32), size=draw(st.integers(1, (1 << 32) - 1))),
                mig_uuid=draw(WIRE_TEXT.filter(bool)) if ready else None,
                gpu_instance_id=draw(UINT32) if ready else None,
                compute_instance_id=draw(UINT32) if ready else None,
            )
        )
    return allocations


@st.composite
def mutated(draw: st.DrawFn, valid: st.SearchStrategy[str]) -> str:
    """A valid encoding with a few characters inserted, deleted or replaced — near misses for decoders."""
    text = draw(valid)
    interesting = st.sampled_from([*',:;[]{}"-+0123456789_ \n\tTZ.x', "null", "true", "\u2028", "é"])
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = draw(interesting | st.characters(codec="utf-8"))
        if action == "insert":
            text = text[:at] + piece + text[at:]
        elif action == "delete":
            text = text[:at] + text[at + 1 :]
        else:
            text = text[:at] + piece + text[at + 1 :]
    return text
