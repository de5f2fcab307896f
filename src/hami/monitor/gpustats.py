"""The NVML queries the monitor adds to the device plugin's (:mod:`hami.deviceplugin.nvml`): usage, temperature,
power and ECC counters of whole GPUs.

:class:`StatsNvml` extends the plugin's ``NvmlLib`` protocol; :class:`PynvmlStats` and :class:`FakeStatsNvml`
extend its two implementations, so the monitor runs the same code on real GPUs and on a fixture. The fixture is the
plugin's (``--fake-nvml``) with an optional ``stats`` mapping per device::

    devices:
      - uuid: GPU-0a1
        stats: {memory_used_bytes: 1073741824, utilization: 37, memory_utilization: 12,
                temperature: 61, power_mw: 70500, ecc_corrected: 0, ecc_uncorrected: 0}

A key left out reads as NVML's ``NOT_SUPPORTED`` (the monitor then skips that metric, as HAMi's does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hami.deviceplugin.fakenvml import FakeNvmlLib, load_fixture
from hami.deviceplugin.nvml import NvmlLib, PynvmlLib
from hami.errors import NvmlError

__all__ = ["FakeStatsNvml", "GpuStats", "PynvmlStats", "StatsNvml", "load_fake_stats", "read_gpu_stats"]


class StatsNvml(NvmlLib, Protocol):
    """``NvmlLib`` plus the per-GPU readings the monitor exports."""

    def memory_used_bytes(self, handle: object) -> int: ...
    def utilization(self, handle: object) -> tuple[int, int]:
        """``(gpu, memory controller)`` utilization, percent."""
        ...

    def temperature_c(self, handle: object) -> int: ...
    def power_mw(self, handle: object) -> int: ...
    def ecc_errors(self, handle: object, corrected: bool) -> int: ...


class PynvmlStats(PynvmlLib):
    """:class:`StatsNvml` over ``pynvml``."""

    def memory_used_bytes(self, handle: object) -> int:
        with self._call("nvmlDeviceGetMemoryInfo"):
            return int(self._nv.nvmlDeviceGetMemoryInfo(handle).used)

    def utilization(self, handle: object) -> tuple[int, int]:
        with self._call("nvmlDeviceGetUtilizationRates"):
            rates = self._nv.nvmlDeviceGetUtilizationRates(handle)
            return int(rates.gpu), int(rates.memory)

    def temperature_c(self, handle: object) -> int:
        with self._call("nvmlDeviceGetTemperature"):
            return int(self._nv.nvmlDeviceGetTemperature(handle, self._nv.NVML_TEMPERATURE_GPU))

    def power_mw(self, handle: object) -> int:
        with self._call("nvmlDeviceGetPowerUsage"):
            return int(self._nv.nvmlDeviceGetPowerUsage(handle))

    def ecc_errors(self, handle: object, corrected: bool) -> int:
        kind = self._nv.NVML_MEMORY_ERROR_TYPE_CORRECTED if corrected else self._nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        with self._call("nvmlDeviceGetTotalEccErrors"):
            return int(self._nv.nvmlDeviceGetTotalEccErrors(handle, kind, self._nv.NVML_AGGREGATE_ECC))


class FakeStatsNvml(FakeNvmlLib):
    """:class:`StatsNvml` over a fixture (format in the module docstring). ``stats`` is mutable for tests."""

    def __init__(self, fixture: Mapping[str, Any]) -> None:
        super().__init__(fixture)
        self.stats: list[dict[str, int]] = [
            {str(k): int(v) for k, v in dict(spec.get("stats", {})).items()} for spec in fixture.get("devices", ())
        ]

    def _stat(self, handle: object, key: str, call: str) -> int:
        self._check(call, self._gpu(handle))
        assert isinstance(handle, int)
        value = self.stats[handle].get(key)
        if value is None:
            raise NvmlError("NOT_SUPPORTED", call, "not in the fixture")
        return value

    def memory_used_bytes(self, handle: object) -> int:
        return self._stat(handle, "memory_used_bytes", "memory_used_bytes")

    def utilization(self, handle: object) -> tuple[int, int]:
        return (
            self._stat(handle, "utilization", "utilization"),
            self._stat(handle, "memory_utilization", "utilization"),
        )

    def temperature_c(self, handle: object) -> int:
        return self._stat(handle, "temperature", "temperature_c")

    def power_mw(self, handle: object) -> int:
        return self._stat(handle, "power_mw", "power_mw")

    def ecc_errors(self, handle: object, corrected: bool) -> int:
        return self._stat(handle, "ecc_corrected" if corrected else "ecc_uncorrected", "ecc_errors")


def load_fake_stats(path: Path) -> FakeStatsNvml:
    """Read a fixture file (the device plugin's format plus ``stats:``). Raises ``ConfigError`` naming the file."""
    return load_fixture(path, FakeStatsNvml)


@dataclass(frozen=True, slots=True)
class GpuStats:
    """One GPU's readings; ``None`` where NVML does not support the query on this GPU."""

    index: int
    uuid: str
    device_type: str
    memory_used: int | None
    utilization: int | None
    memory_utilization: int | None
    temperature: int | None
    power_mw: int | None
    ecc: dict[str, int]


def _optional(read: Callable[..., Any], *args: object) -> Any:
    try:
        return read(*args)
    except NvmlError as exc:
        if exc.code == "NOT_SUPPORTED":
            return None
        raise


def read_gpu_stats(lib: StatsNvml, index: int) -> GpuStats:
    """All readings of GPU ``index``. Raises ``NvmlError`` for failures other than ``NOT_SUPPORTED``."""
    handle = lib.handle(index)
    rates = _optional(lib.utilization, handle)
    ecc: dict[str, int] = {}
    for label, corrected in (("corrected", True), ("uncorrected", False)):
        count = _optional(lib.ecc_errors, handle, corrected)
        if count is not None:
            ecc[label] = int(count)
    return GpuStats(
        index=index,
        uuid=lib.uuid(handle),
        device_type=f"NVIDIA-{lib.name(handle)}",
        memory_used=_optional(lib.memory_used_bytes, handle),
        utilization=rates[0] if rates is not None else None,
        memory_utilization=rates[1] if rates is not None else None,
        temperature=_optional(lib.temperature_c, handle),
        power_mw=_optional(lib.power_mw, handle),
        ecc=ecc,
    )
