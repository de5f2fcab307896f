"""HAMi-core's per-container shared region: the ``*.cache`` file ``libvgpu.so`` maps into every process of a
container, read (and two fields written) from the host.

The device plugin mounts ``<hook>/vgpu/containers/<pod uid>_<container>`` at ``<hook>/vgpu`` in the container and
points ``CUDA_DEVICE_MEMORY_SHARED_CACHE`` at ``<hook>/vgpu/<uuid>.cache`` there, so each container's region is
the one ``*.cache`` file in its directory on the host.

Layout: ``shared_region_t`` of ``src/multiprocess/multiprocess_memory_limit.h`` in the HAMi-core revision HAMi
v2.10.0 pins (major version 1), x86-64 / aarch64 LP64 ABI, little-endian, natural alignment. Offsets in bytes:

==========  =========================  ==========================================================================
offset      field                      meaning
==========  =========================  ==========================================================================
0           ``int32 initialized_flag``  ``19920718`` (HAMi-core's magic) once initialised; 0 or 1 while it starts
4           ``uint32 major_version``    1
8           ``uint32 minor_version``    any (the monitor reads 1.x)
12          ``int32 sm_init_flag``
16          ``size_t owner_pid``
24          ``sem_t sem`` (32 bytes)    process-slot lock; never touched by the monitor
56          ``uint64 device_num``       devices in use, ≤ 16
64          ``char uuids[16][96]``      NUL-terminated GPU UUIDs; an empty one is a device not initialised yet
1600        ``uint64 limit[16]``        memory limit per device, bytes
1728        ``uint64 sm_limit[16]``     core limit per device, percent
1856        ``procs[1024]``             per-process slots, 1960 bytes each (below)
2008896     ``int32 proc_num``          slots in use (slots ``0 .. proc_num-1``)
2008900     ``int32 utilization_switch`` 1: the core limit is enforced now (written by the monitor)
2008904     ``int32 recent_kernel``     2 after each kernel launch; -1: launches blocked (written by the monitor)
2008908     ``int32 priority``          ``CUDA_TASK_PRIORITY`` of the container (0 high, 1 low)
2008912     ``uint64 last_kernel_time`` Unix seconds of the last kernel launch
2008920     ``sem_t sem_postinit``      (32 bytes; older revisions: ``uint64 unused[4]``)
2008952                                 end: the file is at least this long
==========  =========================  ==========================================================================

A process slot (``shrreg_proc_slot_t``, 1960 bytes) at ``1856 + 1960 * i``:

====  ===================================================================================================
0     ``int32 pid`` (in the container), 4 ``int32 hostpid``
8     ``used[16]``, 64 bytes per device: +0 ``context_size``, +8 ``module_size``, +16 ``data_size`` (buffers),
      +24 ``offset``, +32 ``total``, +40 three unused ``uint64``
1032  ``uint64 monitorused[16]``
1160  ``device_util[16]``, 48 bytes per device: +0 ``dec_util``, +8 ``enc_util``, +16 ``sm_util``, +24 unused
1928  ``int32 status``, 1936 ``uint64 seqlock`` (older: unused), 1944 two unused ``uint64``
====  ===================================================================================================

A container's usage of device *i* is the sum over slots ``0 .. proc_num-1`` (as HAMi's monitor sums it):
memory ``total``, its ``context``/``module``/``data`` parts and ``sm_util``.

Files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and must be regular: the directory is writable by the workload,
so a symlink or FIFO planted there is refused, never followed. Reads are bounded (the header, the tail and the
used slots: at most one region's 2 MB). Every way a file can be wrong raises :class:`RegionError` with a short
``reason`` (``truncated``, ``uninitialised``, ``magic``, ``version``, ``corrupt``, ``not-a-file``, ``unreadable``,
``unwritable``).
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from hami.errors import RegionError

__all__ = [
    "MAGIC",
    "MAJOR_VERSION",
    "MAX_DEVICES",
    "MAX_PROCS",
    "OFF_DEVICE_NUM",
    "OFF_LAST_KERNEL_TIME",
    "OFF_LIMIT",
    "OFF_PRIORITY",
    "OFF_PROCS",
    "OFF_PROC_NUM",
    "OFF_RECENT_KERNEL",
    "OFF_SM_LIMIT",
    "OFF_UTILIZATION_SWITCH",
    "OFF_UUIDS",
    "REGION_SIZE",
    "SLOT_SIZE",
    "DeviceUsage",
    "Region",
    "read_region",
    "write_int32",
]

MAGIC: Final = 19920718
MAJOR_VERSION: Final = 1
MAX_DEVICES: Final = 16
MAX_PROCS: Final = 1024
UUID_LEN: Final = 96

OFF_MAGIC: Final = 0
OFF_MAJOR: Final = 4
OFF_MINOR: Final = 8
OFF_DEVICE_NUM: Final = 56
OFF_UUIDS: Final = 64
OFF_LIMIT: Final = OFF_UUIDS + MAX_DEVICES * UUID_LEN  # 1600
OFF_SM_LIMIT: Final = OFF_LIMIT + 8 * MAX_DEVICES  # 1728
OFF_PROCS: Final = OFF_SM_LIMIT + 8 * MAX_DEVICES  # 1856

SLOT_SIZE: Final = 1960
SLOT_USED: Final = 8
MEMORY_SIZE: Final = 64  # device_memory_t
SLOT_UTIL: Final = 1160
UTIL_SIZE: Final = 48  # device_util_t

OFF_PROC_NUM: Final = OFF_PROCS + MAX_PROCS * SLOT_SIZE  # 2008896
OFF_UTILIZATION_SWITCH: Final = OFF_PROC_NUM + 4
OFF_RECENT_KERNEL: Final = OFF_PROC_NUM + 8
OFF_PRIORITY: Final = OFF_PROC_NUM + 12
OFF_LAST_KERNEL_TIME: Final = OFF_PROC_NUM + 16
REGION_SIZE: Final = OFF_PROC_NUM + 24 + 32  # 2008952

_TAIL: Final = struct.Struct("<iiiiQ")  # proc_num, utilization_switch, recent_kernel, priority, last_kernel_time


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """One device of a region: limits and the usage summed over the container's processes (bytes, percent)."""

    index: int
    uuid: str
    memory_limit: int
    sm_limit: int
    memory_used: int
    context: int
    module: int
    buffer: int
    sm_util: int


@dataclass(frozen=True, slots=True)
class Region:
    """What one region file says. ``devices`` omits devices whose UUID is not written yet."""

    path: Path
    minor_version: int
    devices: tuple[DeviceUsage, ...]
    proc_num: int
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int


def _open(path: Path, flags: int) -> int:
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise RegionError(path, "unreadable", f"cannot open: {exc.strerror or exc}") from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise RegionError(path, "not-a-file", "not a regular file")
    return fd


def _pread(fd: int, path: Path, size: int, offset: int) -> bytes:
    try:
        data = os.pread(fd, size, offset)
    except OSError as exc:
        raise RegionError(path, "unreadable", f"cannot read: {exc.strerror or exc}") from exc
    if len(data) != size:
        raise RegionError(path, "truncated", f"{len(data)} bytes at offset {offset}, {size} expected")
    return data


def read_region(path: Path) -> Region:
    """Read and check one region file. Raises :class:`RegionError` for anything but a HAMi-core 1.x region."""
    fd = _open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size < REGION_SIZE:
            raise RegionError(path, "truncated", f"{size} bytes, a HAMi-core 1.x region has {REGION_SIZE}")
        head = _pread(fd, path, OFF_PROCS, 0)
        magic, major, minor = struct.unpack_from("<iII", head, OFF_MAGIC)
        if magic in (0, 1):
            raise RegionError(path, "uninitialised", f"initialized_flag is {magic}: HAMi-core has not finished")
        if magic != MAGIC:
            raise RegionError(path, "magic", f"initialized_flag is {magic}, not HAMi-core's {MAGIC}")
        if major != MAJOR_VERSION:
            raise RegionError(path, "version", f"version {major}.{minor}; this monitor reads {MAJOR_VERSION}.x")
        (device_num,) = struct.unpack_from("<Q", head, OFF_DEVICE_NUM)
        if device_num > MAX_DEVICES:
            raise RegionError(path, "corrupt", f"device_num is {device_num}, at most {MAX_DEVICES}")
        proc_num, switch, recent, priority, last_kernel = _TAIL.unpack(_pread(fd, path, _TAIL.size, OFF_PROC_NUM))
        if not 0 <= proc_num <= MAX_PROCS:
            raise RegionError(path, "corrupt", f"proc_num is {proc_num}, not within 0..{MAX_PROCS}")
        slots = _pread(fd, path, proc_num * SLOT_SIZE, OFF_PROCS) if proc_num else b""
    finally:
        os.close(fd)
    devices = tuple(usage for i in range(device_num) if (usage := _device(path, head, slots, proc_num, i)) is not None)
    return Region(
        path=path,
        minor_version=minor,
        devices=devices,
        proc_num=proc_num,
        utilization_switch=switch,
        recent_kernel=recent,
        priority=priority,
        last_kernel_time=last_kernel,
    )


def _device(path: Path, head: bytes, slots: bytes, proc_num: int, index: int) -> DeviceUsage | None:
    raw = head[OFF_UUIDS + index * UUID_LEN : OFF_UUIDS + (index + 1) * UUID_LEN]
    if raw[0] == 0:
        return None
    text = raw.split(b"\0", 1)[0]
    if not text.isascii() or not all(0x21 <= b <= 0x7E for b in text):
        raise RegionError(path, "corrupt", f"device {index}'s UUID is not printable ASCII")
    context = module = buffer = total = sm = 0
    for slot in range(proc_num):
        base = slot * SLOT_SIZE
        c, m, d, _offset, t = struct.unpack_from("<5Q", slots, base + SLOT_USED + index * MEMORY_SIZE)
        context, module, buffer, total = context + c, module + m, buffer + d, total + t
        sm += struct.unpack_from("<Q", slots, base + SLOT_UTIL + index * UTIL_SIZE + 16)[0]
    (limit,) = struct.unpack_from("<Q", head, OFF_LIMIT + 8 * index)
    (sm_limit,) = struct.unpack_from("<Q", head, OFF_SM_LIMIT + 8 * index)
    return DeviceUsage(
        index=index,
        uuid=text.decode("ascii"),
        memory_limit=limit,
        sm_limit=sm_limit,
        memory_used=total,
        context=context,
        module=module,
        buffer=buffer,
        sm_util=sm,
    )


def write_int32(path: Path, offset: int, value: int) -> None:
    """Write one ``int32`` field in place (the monitor's priority feedback; nothing else is ever written).

    The file must still be a regular HAMi-core 1.x region of full size: a file replaced since it was read is
    checked again before the write, never extended or created."""
    if offset not in (OFF_UTILIZATION_SWITCH, OFF_RECENT_KERNEL):
        raise ValueError(f"the monitor writes only utilization_switch and recent_kernel, not offset {offset}")
    fd = _open(path, os.O_RDWR)
    try:
        if os.fstat(fd).st_size < REGION_SIZE:
            raise RegionError(path, "truncated", "shrank below a region's size")
        magic, major = struct.unpack("<iI", _pread(fd, path, 8, 0))
        if magic != MAGIC or major != MAJOR_VERSION:
            raise RegionError(path, "magic", "no longer a HAMi-core 1.x region")
        try:
            os.pwrite(fd, struct.pack("<i", value), offset)
        except OSError as exc:
            raise RegionError(path, "unwritable", f"cannot write: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
