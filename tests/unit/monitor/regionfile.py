"""A HAMi-core region writer for the tests, built with ctypes from the C declarations (not from the reader's
offsets): ctypes lays the structs out by the C ABI's alignment rules, so a test comparing its offsets with
:mod:`hami.monitor.region`'s constants checks the documented layout from an independent derivation."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

MAX_DEVICES = 16
MAX_PROCS = 1024
MAGIC = 19920718


class DeviceMemory(ctypes.Structure):
    _fields_ = [
        ("context_size", ctypes.c_uint64),
        ("module_size", ctypes.c_uint64),
        ("data_size", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("total", ctypes.c_uint64),
        ("unused", ctypes.c_uint64 * 3),
    ]


class DeviceUtil(ctypes.Structure):
    _fields_ = [
        ("dec_util", ctypes.c_uint64),
        ("enc_util", ctypes.c_uint64),
        ("sm_util", ctypes.c_uint64),
        ("unused", ctypes.c_uint64 * 3),
    ]


class ProcSlot(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_int32),
        ("hostpid", ctypes.c_int32),
        ("used", DeviceMemory * MAX_DEVICES),
        ("monitorused", ctypes.c_uint64 * MAX_DEVICES),
        ("device_util", DeviceUtil * MAX_DEVICES),
        ("status", ctypes.c_int32),
        ("seqlock", ctypes.c_uint64),
        ("unused", ctypes.c_uint64 * 2),
    ]


class SemT(ctypes.Structure):  # glibc's sem_t on LP64: 32 bytes, 8-aligned
    _fields_ = [("data", ctypes.c_int64 * 4)]


class SharedRegion(ctypes.Structure):
    _fields_ = [
        ("initialized_flag", ctypes.c_int32),
        ("major_version", ctypes.c_uint32),
        ("minor_version", ctypes.c_uint32),
        ("sm_init_flag", ctypes.c_int32),
        ("owner_pid", ctypes.c_size_t),
        ("sem", SemT),
        ("device_num", ctypes.c_uint64),
        ("uuids", (ctypes.c_char * 96) * MAX_DEVICES),
        ("limit", ctypes.c_uint64 * MAX_DEVICES),
        ("sm_limit", ctypes.c_uint64 * MAX_DEVICES),
        ("procs", ProcSlot * MAX_PROCS),
        ("proc_num", ctypes.c_int32),
        ("utilization_switch", ctypes.c_int32),
        ("recent_kernel", ctypes.c_int32),
        ("priority", ctypes.c_int32),
        ("last_kernel_time", ctypes.c_uint64),
        ("sem_postinit", SemT),
    ]


@dataclass
class Proc:
    """One process: per device index, (context, module, data, total) bytes and SM percent."""

    pid: int
    memory: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    sm: dict[int, int] = field(default_factory=dict)


def build_region(
    uuids: Sequence[str],
    *,
    limits: Sequence[int] = (),
    sm_limits: Sequence[int] = (),
    procs: Sequence[Proc] = (),
    priority: int = 1,
    recent_kernel: int = 0,
    utilization_switch: int = 0,
    last_kernel_time: int = 0,
    major: int = 1,
    minor: int = 1,
    magic: int = MAGIC,
) -> bytes:
    region = SharedRegion()
    region.initialized_flag = magic
    region.major_version = major
    region.minor_version = minor
    region.device_num = len(uuids)
    for i, uuid in enumerate(uuids):
        region.uuids[i].value = uuid.encode()
    for i, value in enumerate(limits):
        region.limit[i] = value
    for i, value in enumerate(sm_limits):
        region.sm_limit[i] = value
    for slot, proc in enumerate(procs):
        region.procs[slot].pid = proc.pid
        region.procs[slot].hostpid = proc.pid + 100000
        for dev, (context, module, data, total) in proc.memory.items():
            used = region.procs[slot].used[dev]
            used.context_size, used.module_size, used.data_size, used.total = context, module, data, total
        for dev, sm in proc.sm.items():
            region.procs[slot].device_util[dev].sm_util = sm
    region.proc_num = len(procs)
    region.priority = priority
    region.recent_kernel = recent_kernel
    region.utilization_switch = utilization_switch
    region.last_kernel_time = last_kernel_time
    return bytes(region)


def write_container(root: Path, pod_uid: str, container: str, data: bytes, name: str = "c0ffee.cache") -> Path:
    """Write ``data`` as the region of ``<root>/<pod uid>_<container>/<name>``; returns the file."""
    directory = root / f"{pod_uid}_{container}"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(data)
    return path


def read_back(path: Path) -> SharedRegion:
    return SharedRegion.from_buffer_copy(path.read_bytes()[: ctypes.sizeof(SharedRegion)])
