"""Hostile device registrations are refused as a whole, for every vendor and both formats (issue 11, item 3).

A registration with a repeated or blank device id, a number outside hami's ranges, or too many devices quarantines
the node for that vendor (``NodeState.problems``), exactly like one that does not decode; the message names the
annotation, the device (position, id, host index), the field and the value. The same checks run for NVIDIA's JSON
and colon formats and Hygon's colon format, because they run in ``ClusterState.upsert_node`` for every vendor.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.devices.hygon import HYGON_KEYS
from hami.protocol import keys
from hami.protocol.inventory import (
    MAX_DEVCORE,
    MAX_DEVICES,
    MAX_ID_LENGTH,
    MAX_INDEX,
    MAX_MIG_PLACEMENTS,
    MAX_MIG_PROFILES,
    MAX_MIG_SLICES,
    MAX_NUMA,
    MAX_SLOTS,
)
from hami.protocol.objects import Node, ObjectMeta
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.builders import DCU, NVIDIA, vendors

INT32_MAX = 2**31 - 1
NVIDIA_KEY = keys.NVIDIA_REGISTER
DCU_KEY = HYGON_KEYS.register

Device = dict[str, Any]


def device(id: str = "GPU-0", **fields: Any) -> Device:
    """One device as a JSON object, with the values HAMi's plugin writes for a 24 GB card."""
    return {
        "id": id,
        "index": 0,
        "count": 10,
        "devmem": 24000,
        "devcore": 100,
        "type": "NVIDIA-A100",
        "numa": 0,
        "mode": "hami-core",
        "health": True,
        **fields,
    }


def cards(n: int) -> list[Device]:
    return [device(f"GPU-{i}", index=i % (MAX_INDEX + 1)) for i in range(n)]


def as_json(devices: Sequence[Device]) -> str:
    return json.dumps(list(devices))


def as_colon(devices: Sequence[Device]) -> str:
    """The 9-field colon format (``ID,Count,Devmem,Devcore,Type,Numa,Health,Index,Mode:``)."""
    return "".join(
        f"{d['id']},{d['count']},{d['devmem']},{d['devcore']},{d['type']},{d['numa']},"
        f"{'true' if d['health'] else 'false'},{d['index']},{d['mode']}:"
        for d in devices
    )


FORMATS = {
    "nvidia-json": (NVIDIA, NVIDIA_KEY, as_json),
    "nvidia-colon": (NVIDIA, NVIDIA_KEY, as_colon),
    "hygon-colon": (DCU, DCU_KEY, as_colon),
}


def upsert(annotations: Mapping[str, str]) -> tuple[ClusterState, str]:
    state = ClusterState(vendors())
    state.upsert_node(Node(metadata=ObjectMeta(name="node-1", annotations=dict(annotations))))
    return state, "node-1"


def mig_device(**profile: Any) -> Device:
    base = {"name": "1g.10gb", "memoryMB": 9856, "core": 14, "sliceCount": 1, "placements": [{"start": 0, "size": 1}]}
    return device("GPU-mig", mode="mig", migProfiles=[{**base, **profile}])


# (case id, devices, formats it can be written in, fragments the message must hold)
REFUSED: list[tuple[str, list[Device], tuple[str, ...], tuple[str, ...]]] = [
    (
        "duplicate-id",
        [device("GPU-a", devmem=10000), device("GPU-a", index=1, devmem=10000)],
        tuple(FORMATS),
        ("devices[1].id", "device id repeated", "index 1", "devices[0] has the same id", "(got 'GPU-a')"),
    ),
    (
        "duplicate-id-among-others",
        [device("GPU-a"), device("GPU-b", index=1), device("GPU-c", index=2), device("GPU-b", index=3)],
        tuple(FORMATS),
        ("devices[3].id", "devices[1] has the same id", "(got 'GPU-b')"),
    ),
    ("empty-id", [device("")], tuple(FORMATS), ("devices[0].id", "blank id", "device at index 0")),
    (
        "blank-id",
        [device("GPU-0"), device("   ", index=1)],
        tuple(FORMATS),
        ("devices[1].id", "blank id", "(got '   ')"),
    ),
    (
        "id-with-comma",
        [device("GPU-0,NVIDIA,1,1")],
        ("nvidia-json",),
        ("devices[0].id", "one of , : ; [ ]", "(got 'GPU-0,NVIDIA,1,1')"),
    ),
    (
        "id-with-legacy-mig-suffix",
        [device("GPU-1[0-1]")],
        tuple(FORMATS),
        (
            "devices[0].id",
            "(got 'GPU-1[0-1]')",
        ),
    ),
    ("id-with-space", [device("GPU 0")], tuple(FORMATS), ("devices[0].id", "printable ASCII", "(got 'GPU 0')")),
    ("id-not-ascii", [device("GPU-é")], ("nvidia-json",), ("devices[0].id", "printable ASCII")),
    ("id-with-newline", [device("GPU-0\n")], ("nvidia-json",), ("devices[0].id", "printable ASCII")),
    (
        "id-too-long",
        [device("G" * (MAX_ID_LENGTH + 1))],
        tuple(FORMATS),
        (
            "devices[0].id",
            f"longer than {MAX_ID_LENGTH} characters",
        ),
    ),
    (
        "negative-count",
        [device(count=-1)],
        tuple(FORMATS),
        (
            "devices[0].count",
            "device 'GPU-0' (index 0)",
            "the number of tasks sharing the device",
            f"must be between 0 and {MAX_SLOTS}",
            "(got -1)",
        ),
    ),
    ("count-over-limit", [device(count=MAX_SLOTS + 1)], tuple(FORMATS), ("devices[0].count", f"(got {MAX_SLOTS + 1})")),
    (
        "negative-memory",
        [device("GPU-0"), device("GPU-1", index=1, devmem=-6000)],
        tuple(FORMATS),
        (
            "devices[1].devmem",
            "device 'GPU-1' (index 1)",
            "the memory in MiB",
            f"must be between 0 and {INT32_MAX}",
            "(got -6000)",
        ),
    ),
    (
        "negative-cores",
        [device(devcore=-100)],
        tuple(FORMATS),
        ("devices[0].devcore", "core units", f"must be between 0 and {MAX_DEVCORE}", "(got -100)"),
    ),
    ("cores-over-limit", [device(devcore=MAX_DEVCORE + 1)], tuple(FORMATS), ("devices[0].devcore", "(got 10001)")),
    ("negative-numa", [device(numa=-1)], tuple(FORMATS), ("devices[0].numa", "NUMA node", "(got -1)")),
    (
        "numa-over-limit",
        [device(numa=MAX_NUMA + 1)],
        tuple(FORMATS),
        ("devices[0].numa", f"must be between 0 and {MAX_NUMA}"),
    ),
    (
        "index-over-limit",
        [device(index=MAX_INDEX + 1)],
        tuple(FORMATS),
        ("devices[0].index", f"device 'GPU-0' (index {MAX_INDEX + 1})", f"must be between 0 and {MAX_INDEX}"),
    ),
    (
        "too-many-devices",
        cards(MAX_DEVICES + 1),
        tuple(FORMATS),
        ("too many devices", f"at most {MAX_DEVICES} per node", f"(got {MAX_DEVICES + 1})"),
    ),
    (
        "mig-negative-memory",
        [mig_device(memoryMB=-1)],
        ("nvidia-json",),
        ("devices[0].migProfiles[0].memoryMB", "device 'GPU-mig'", "(got -1)"),
    ),
    ("mig-negative-core", [mig_device(core=-5)], ("nvidia-json",), ("devices[0].migProfiles[0].core", "(got -5)")),
    (
        "mig-too-many-slices",
        [mig_device(sliceCount=MAX_MIG_SLICES + 1)],
        ("nvidia-json",),
        ("migProfiles[0].sliceCount", f"must be between 0 and {MAX_MIG_SLICES}"),
    ),
    (
        "mig-placement-out-of-range",
        [mig_device(placements=[{"start": 0, "size": 1}, {"start": MAX_MIG_SLICES + 1, "size": 1}])],
        ("nvidia-json",),
        ("migProfiles[0].placements[1].start", f"(got {MAX_MIG_SLICES + 1})"),
    ),
    (
        "mig-too-many-placements",
        [mig_device(placements=[{"start": 0, "size": 1}] * (MAX_MIG_PLACEMENTS + 1))],
        ("nvidia-json",),
        ("migProfiles[0].placements", "the number of MIG placements", f"(got {MAX_MIG_PLACEMENTS + 1})"),
    ),
    (
        "mig-too-many-profiles",
        [device("GPU-mig", mode="mig", migProfiles=[{"name": f"{i}g.x"} for i in range(MAX_MIG_PROFILES + 1)])],
        ("nvidia-json",),
        ("devices[0].migProfiles", "the number of MIG profiles", f"(got {MAX_MIG_PROFILES + 1})"),
    ),
]


@pytest.mark.parametrize(
    ("fmt", "devices", "fragments"),
    [
        pytest.param(fmt, devices, fragments, id=f"{case}-{fmt}")
        for case, devices, formats, fragments in REFUSED
        for fmt in formats
    ],
)
def test_hostile_registration_quarantines_the_vendor_with_a_message_naming_device_field_and_value(
    fmt: str, devices: list[Device], fragments: tuple[str, ...]
) -> None:
    vendor, key, encode = FORMATS[fmt]

    state, name = upsert({key: encode(devices)})

    node = state.nodes[name]
    assert vendor not in node.tables, "a refused registration must not be scheduled at all"
    problem = node.problems[vendor]
    assert problem.startswith(key), problem
    for fragment in fragments:
        assert fragment in problem, f"{fragment!r} missing from {problem!r}"


@pytest.mark.parametrize(
    ("devices", "fmt"),
    [
        pytest.param(
            [device(count=MAX_SLOTS, devcore=MAX_DEVCORE, devmem=INT32_MAX, numa=MAX_NUMA, index=MAX_INDEX)],
            fmt,
            id=f"every-number-at-its-limit-{fmt}",
        )
        for fmt in FORMATS
    ]
    + [
        pytest.param(cards(MAX_DEVICES), "nvidia-json", id="as-many-devices-as-allowed"),
        pytest.param([device("G" * MAX_ID_LENGTH)], "hygon-colon", id="longest-id"),
        pytest.param([device(count=0, devmem=0, devcore=0)], "nvidia-json", id="zeros-are-accepted"),
        pytest.param(
            [device("MIG-1f8c2f4e-0d4b-5d47-9a5e-1a2b3c4d5e6f"), device("GPU-x", index=0)],
            "nvidia-colon",
            id="repeated-host-index-is-fine-7-field-writers-give-every-device-0",
        ),
        pytest.param([mig_device()], "nvidia-json", id="a-real-mig-gpu"),
    ],
)
def test_registrations_within_the_limits_are_accepted(devices: list[Device], fmt: str) -> None:
    vendor, key, encode = FORMATS[fmt]

    state, name = upsert({key: encode(devices)})

    node = state.nodes[name]
    assert node.problems == {}
    assert [info.id for info in node.tables[vendor].infos] == [d["id"] for d in devices]


def test_a_refused_vendor_leaves_the_other_vendors_of_the_node_scheduled() -> None:
    hostile = as_json([device("GPU-a"), device("GPU-a", index=1)])
    state, name = upsert({NVIDIA_KEY: hostile, DCU_KEY: as_colon([device("DCU-0", type="DCU-Z100")])})

    node = state.nodes[name]
    assert set(node.problems) == {NVIDIA}
    assert set(node.tables) == {DCU}


def test_a_fixed_registration_is_accepted_again_and_pods_charged_to_it_count_again() -> None:
    state = ClusterState(vendors())
    bad = Node(metadata=ObjectMeta(name="n", annotations={NVIDIA_KEY: as_json([device(devmem=-1)])}))
    good = Node(metadata=ObjectMeta(name="n", annotations={NVIDIA_KEY: as_json([device()])}))

    state.upsert_node(bad)
    assert NVIDIA in state.nodes["n"].problems
    state.upsert_node(good)

    assert state.nodes["n"].problems == {}
    assert state.nodes["n"].tables[NVIDIA].infos[0].devmem == 24000


# --- property: whatever is accepted is sane ----------------------------------------------------------------

IDS = st.sampled_from(["GPU-0", "GPU-1", "GPU-2", "", " ", "GPU-a,b", "GPU-3[1-2]", "DCU-é", "GPU-4"])
NUMBERS = st.one_of(st.integers(-3, 3), st.integers(-(2**31), INT32_MAX), st.sampled_from([1023, 1024, 10000, 10001]))


@st.composite
def registrations(draw: st.DrawFn) -> list[Device]:
    n = draw(st.integers(0, 6))
    return [
        device(
            draw(IDS),
            index=draw(st.integers(0, 2000)),
            count=draw(NUMBERS),
            devmem=draw(NUMBERS),
            devcore=draw(NUMBERS),
            numa=draw(NUMBERS),
        )
        for _ in range(n)
    ]


def _sane(vendor: str, state: ClusterState) -> None:
    node = state.nodes["node-1"]
    table = node.tables.get(vendor)
    if table is None:
        return
    ids = [info.id for info in table.infos]
    assert len(set(ids)) == len(ids)
    for info in table.infos:
        assert info.id.strip()
        assert len(info.id) <= MAX_ID_LENGTH
        assert not set(info.id) & set(",:;[] ")
        assert 0 <= info.index <= MAX_INDEX
        assert 0 <= info.count <= MAX_SLOTS
        assert 0 <= info.devmem <= INT32_MAX
        assert 0 <= info.devcore <= MAX_DEVCORE
        assert 0 <= info.numa <= MAX_NUMA


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(registrations(), st.sampled_from(sorted(FORMATS)))
def test_any_accepted_registration_has_unique_nonblank_ids_and_numbers_in_range(
    devices: list[Device], fmt: str
) -> None:
    vendor, key, encode = FORMATS[fmt]
    if fmt != "nvidia-json":
        devices = [d for d in devices if not set(d["id"]) & set(",:")]  # not representable in the colon format

    state, _ = upsert({key: encode(devices)})

    node = state.nodes["node-1"]
    if vendor in node.problems:
        assert node.problems[vendor].startswith(key)
        assert vendor not in node.tables
    _sane(vendor, state)
    assert (vendor not in node.problems) == _acceptable(devices, fmt), node.problems


def _acceptable(devices: list[Device], fmt: str) -> bool:
    """An independent statement of the rules: does hami have to accept this registration?"""
    if fmt != "nvidia-json" and not devices:
        return False  # the colon format has no way to say "no device": it does not decode
    ids = [d["id"] for d in devices]
    if len(set(ids)) != len(ids):
        return False
    limits = {"index": MAX_INDEX, "count": MAX_SLOTS, "devmem": INT32_MAX, "devcore": MAX_DEVCORE, "numa": MAX_NUMA}
    for d in devices:
        text = d["id"]
        if not text.strip() or not text.isascii() or not text.isprintable() or set(text) & set(",:;[] "):
            return False
        if any(not 0 <= d[name] <= high for name, high in limits.items()):
            return False
    return True
