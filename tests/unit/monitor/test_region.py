"""The region reader against the C layout (ctypes), a hand-built byte fixture, and broken or hostile files."""

from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path

import pytest

from hami.errors import RegionError
from hami.monitor import region as layout
from hami.monitor.region import read_region, write_int32
from tests.unit.monitor.regionfile import Proc, ProcSlot, SharedRegion, build_region, read_back

GPU0 = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
GPU1 = "GPU-9f8e7d6c-0000-1111-2222-333344445555"


def test_the_documented_offsets_are_the_c_layout() -> None:
    offsets = {
        "OFF_DEVICE_NUM": SharedRegion.device_num.offset,
        "OFF_UUIDS": SharedRegion.uuids.offset,
        "OFF_LIMIT": SharedRegion.limit.offset,
        "OFF_SM_LIMIT": SharedRegion.sm_limit.offset,
        "OFF_PROCS": SharedRegion.procs.offset,
        "OFF_PROC_NUM": SharedRegion.proc_num.offset,
        "OFF_UTILIZATION_SWITCH": SharedRegion.utilization_switch.offset,
        "OFF_RECENT_KERNEL": SharedRegion.recent_kernel.offset,
        "OFF_PRIORITY": SharedRegion.priority.offset,
        "OFF_LAST_KERNEL_TIME": SharedRegion.last_kernel_time.offset,
        "SLOT_SIZE": ctypes.sizeof(ProcSlot),
        "REGION_SIZE": ctypes.sizeof(SharedRegion),
    }
    assert {name: getattr(layout, name) for name in offsets} == offsets
    # and the numbers the module docstring documents
    assert (layout.OFF_PROCS, layout.OFF_PROC_NUM, layout.REGION_SIZE) == (1856, 2008896, 2008952)
    assert (ProcSlot.used.offset, ProcSlot.device_util.offset, ProcSlot.status.offset) == (8, 1160, 1928)


def test_a_hand_built_region_is_read_field_by_field(tmp_path: Path) -> None:
    data = bytearray(2008952)
    struct.pack_into("<iII", data, 0, 19920718, 1, 2)
    struct.pack_into("<Q", data, 56, 2)  # device_num
    data[64 : 64 + 40] = GPU0.encode()
    data[160 : 160 + 40] = GPU1.encode()
    struct.pack_into("<QQ", data, 1600, 4 << 30, 8 << 30)  # limit[0], limit[1]
    struct.pack_into("<QQ", data, 1728, 30, 60)  # sm_limit[0], sm_limit[1]
    # slot 0: device 0 used = context 1000, module 2000, data 3000, offset 0, total 6000; device 1 total 7
    struct.pack_into("<ii", data, 1856, 42, 4242)
    struct.pack_into("<5Q", data, 1856 + 8, 1000, 2000, 3000, 0, 6000)
    struct.pack_into("<5Q", data, 1856 + 8 + 64, 1, 2, 4, 0, 7)
    struct.pack_into("<Q", data, 1856 + 1160 + 16, 25)  # device_util[0].sm_util
    # slot 1: device 0 total 500 (data 500), sm 10
    struct.pack_into("<5Q", data, 1856 + 1960 + 8, 0, 0, 500, 0, 500)
    struct.pack_into("<Q", data, 1856 + 1960 + 1160 + 16, 10)
    # slot 2 holds usage but lies beyond proc_num: never counted
    struct.pack_into("<5Q", data, 1856 + 2 * 1960 + 8, 9, 9, 9, 9, 999999)
    struct.pack_into("<iiiiQ", data, 2008896, 2, 1, 2, 1, 1_700_000_000)
    path = tmp_path / "r.cache"
    path.write_bytes(bytes(data))

    region = read_region(path)

    assert (region.minor_version, region.proc_num) == (2, 2)
    assert (region.utilization_switch, region.recent_kernel, region.priority) == (1, 2, 1)
    assert region.last_kernel_time == 1_700_000_000
    first, second = region.devices
    assert (first.index, first.uuid, first.memory_limit, first.sm_limit) == (0, GPU0, 4 << 30, 30)
    assert (first.memory_used, first.context, first.module, first.buffer, first.sm_util) == (6500, 1000, 2000, 3500, 35)
    assert (second.index, second.uuid, second.memory_limit, second.sm_limit) == (1, GPU1, 8 << 30, 60)
    assert (second.memory_used, second.context, second.module, second.buffer, second.sm_util) == (7, 1, 2, 4, 0)


def test_the_writer_and_the_reader_agree(tmp_path: Path) -> None:
    path = tmp_path / "r.cache"
    procs = [Proc(1, memory={0: (10, 20, 30, 60)}, sm={0: 40}), Proc(2, memory={0: (1, 1, 1, 3)}, sm={0: 5})]
    path.write_bytes(build_region([GPU0], limits=[1 << 30], sm_limits=[50], procs=procs, priority=0))
    (device,) = read_region(path).devices
    assert (device.memory_used, device.context, device.module, device.buffer, device.sm_util) == (63, 11, 21, 31, 45)
    assert (device.memory_limit, device.sm_limit) == (1 << 30, 50)


def test_a_device_without_a_uuid_yet_is_left_out(tmp_path: Path) -> None:
    path = tmp_path / "r.cache"
    path.write_bytes(build_region([GPU0, ""]))
    assert [d.uuid for d in read_region(path).devices] == [GPU0]


def _corrupt(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


GOOD = build_region([GPU0], procs=[Proc(1)])


@pytest.mark.parametrize(
    ("data", "reason", "words"),
    [
        (GOOD[:4096], "truncated", "4096 bytes"),
        (b"", "truncated", "0 bytes"),
        (_corrupt(GOOD, 0, "<i", 1), "uninitialised", "initialized_flag is 1"),
        (_corrupt(GOOD, 0, "<i", 0), "uninitialised", "initialized_flag is 0"),
        (_corrupt(GOOD, 0, "<i", 12345), "magic", "initialized_flag is 12345"),
        (b"\x7fELF" + bytes(layout.REGION_SIZE), "magic", "not HAMi-core's"),
        (_corrupt(GOOD, 4, "<I", 2), "version", "version 2.1"),
        (_corrupt(GOOD, 4, "<I", 0), "version", "version 0.1"),
        (_corrupt(GOOD, 56, "<Q", 17), "corrupt", "device_num is 17"),
        (_corrupt(GOOD, layout.OFF_PROC_NUM, "<i", 1025), "corrupt", "proc_num is 1025"),
        (_corrupt(GOOD, layout.OFF_PROC_NUM, "<i", -1), "corrupt", "proc_num is -1"),
        (_corrupt(GOOD, 64, "<B", 0xFF), "corrupt", "not printable ASCII"),
    ],
)
def test_a_bad_file_is_refused_with_a_reason(tmp_path: Path, data: bytes, reason: str, words: str) -> None:
    path = tmp_path / "bad.cache"
    path.write_bytes(data)
    with pytest.raises(RegionError) as caught:
        read_region(path)
    assert caught.value.reason == reason
    assert words in str(caught.value)
    assert str(path) in str(caught.value)


def test_a_symlink_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "host-file"
    target.write_bytes(GOOD)
    link = tmp_path / "r.cache"
    link.symlink_to(target)
    with pytest.raises(RegionError) as caught:
        read_region(link)
    assert caught.value.reason == "unreadable"
    with pytest.raises(RegionError):
        write_int32(link, layout.OFF_RECENT_KERNEL, -1)
    assert target.read_bytes() == GOOD


def test_a_fifo_does_not_block_the_monitor(tmp_path: Path) -> None:
    fifo = tmp_path / "r.cache"
    os.mkfifo(fifo)
    with pytest.raises(RegionError) as caught:
        read_region(fifo)
    assert caught.value.reason == "not-a-file"


def test_feedback_writes_exactly_one_field_in_place(tmp_path: Path) -> None:
    path = tmp_path / "r.cache"
    path.write_bytes(build_region([GPU0], recent_kernel=2, utilization_switch=0, priority=1))
    write_int32(path, layout.OFF_RECENT_KERNEL, -1)
    write_int32(path, layout.OFF_UTILIZATION_SWITCH, 1)
    after = read_back(path)
    assert (after.recent_kernel, after.utilization_switch, after.priority) == (-1, 1, 1)
    expected = bytearray(build_region([GPU0], recent_kernel=-1, utilization_switch=1, priority=1))
    assert path.read_bytes() == bytes(expected)


def test_feedback_refuses_other_fields_and_foreign_files(tmp_path: Path) -> None:
    path = tmp_path / "r.cache"
    path.write_bytes(GOOD)
    with pytest.raises(ValueError, match="offset 2008908"):
        write_int32(path, layout.OFF_PRIORITY, 0)
    path.write_bytes(b"\0" * layout.REGION_SIZE)
    with pytest.raises(RegionError):
        write_int32(path, layout.OFF_RECENT_KERNEL, -1)
    assert path.read_bytes() == b"\0" * layout.REGION_SIZE
    path.write_bytes(GOOD[:100])
    with pytest.raises(RegionError):
        write_int32(path, layout.OFF_RECENT_KERNEL, -1)
    assert path.stat().st_size == 100
