"""The monitor: HAMi's vGPU-monitor metrics at scrape time, and the priority-feedback round.

Metrics (HAMi's names and labels; every series also carries ``zone="vGPU"``, as HAMi's registry adds):

per GPU (NVML), labels ``node, device_index, device_uuid, device_type`` (``device_type`` = ``NVIDIA-<name>``)
    ``hami_host_gpu_memory_used_bytes``, ``hami_host_gpu_utilization_ratio`` (0-100),
    ``hami_host_gpu_temperature_celsius``, ``hami_host_gpu_power_usage_watts``,
    ``hami_host_gpu_ecc_errors_total`` (+ ``error_type`` corrected|uncorrected),
    ``hami_host_gpu_memory_controller_utilization_ratio`` (0-100; labels without ``node``, as HAMi's)
per container device (region), labels ``namespace, pod, container, vdevice_index, device_uuid``
    ``hami_vgpu_memory_used_bytes`` and ``hami_container_device_memory_bytes`` (both: memory in use),
    ``hami_vgpu_memory_limit_bytes``, ``hami_vgpu_memory_context_bytes``, ``hami_vgpu_memory_module_bytes``,
    ``hami_vgpu_memory_buffer_bytes``, ``hami_container_device_utilization_ratio`` (SM percent),
    ``hami_container_last_kernel_elapsed_seconds`` (only once a kernel ran)
hami's own
    ``hami_vgpu_monitor_region_skipped{path, reason}`` = 1 for each region file or directory not used this
    scrape; ``hami_vgpu_monitor_regions`` regions read; ``hami_vgpu_monitor_regions_truncated`` 1 when more
    container directories exist than ``--max-regions``; ``hami_vgpu_monitor_nvml_up`` 0 when NVML failed;
    ``hami_core_library_present{node}`` 1 when HAMi-core's ``libvgpu.so`` (the file the device plugin mounts into
    GPU containers, ``hami.deviceplugin.hamicore``) is on the node, 0 when no memory or core limit can be enforced
    (the plugin then advertises whole GPUs unless told to share anyway).

A query NVML does not support on a GPU is left out (as HAMi does); a region that cannot be read is skipped and
reported (a log line the first time, and the metric); the monitor always answers.

DRA: with ``claims_dir`` set, the regions of claims hami's DRA plugin prepared (``<hook>/vgpu/claims``) are read
too and reported under the same names, per container that uses the claim or, when none can be found, by claim
(:mod:`.claims`); they get the priority feedback like the others and are never removed by the monitor.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hami.deviceplugin.dra import checkpoint
from hami.deviceplugin.hamicore import library_problem
from hami.deviceplugin.response import HostFiles
from hami.errors import NvmlError, RegionError
from hami.monitor.claims import ClaimOwner, scan_claims
from hami.monitor.feedback import FeedbackInput, observe
from hami.monitor.gpustats import GpuStats, StatsNvml, read_gpu_stats
from hami.monitor.region import OFF_RECENT_KERNEL, OFF_UTILIZATION_SWITCH, write_int32
from hami.monitor.scan import ContainerRegion, ScanResult, Skipped, scan
from hami.protocol.objects import Pod

__all__ = ["Monitor", "MonitorOptions"]

log = logging.getLogger(__name__)

ZONE = "vGPU"
_HOST = ["node", "device_index", "device_uuid", "device_type", "zone"]
_CTR = ["namespace", "pod", "container", "vdevice_index", "device_uuid", "zone"]
_FIELDS = {"recent_kernel": OFF_RECENT_KERNEL, "utilization_switch": OFF_UTILIZATION_SWITCH}


@dataclass(frozen=True, slots=True)
class MonitorOptions:
    node_name: str
    containers_dir: Path  # <hook>/vgpu/containers
    max_regions: int = 1024
    grace_seconds: float = 300.0
    claims_dir: Path | None = None  # <hook>/vgpu/claims (hami's DRA plugin); None: DRA claims are not read
    dra_checkpoint: Path | None = None  # the DRA plugin's checkpoint.json: claim UID -> namespace and name
    hami_core: HostFiles | None = None
    """Where HAMi-core's library is looked for (``hami_core_library_present``); None: the gauge is not served."""


class Monitor(Collector):
    """Holds the latest pod list; ``collect`` is the scrape, ``feedback_round`` the 5-second round."""

    def __init__(self, lib: StatsNvml | None, options: MonitorOptions, clock: Callable[[], float] = time.time) -> None:
        self._lib = lib
        self._options = options
        self._clock = clock
        self._pods: list[Pod] | None = None
        self._lock = threading.Lock()
        self._reported: set[tuple[str, str]] = set()

    @property
    def node_name(self) -> str:
        return self._options.node_name

    def set_pods(self, pods: Sequence[Pod]) -> None:
        with self._lock:
            self._pods = list(pods)

    def _scan(self, *, clean_up: bool) -> ScanResult:
        with self._lock:
            pods = self._pods
        result = scan(
            self._options.containers_dir,
            pods,
            max_regions=self._options.max_regions,
            now=self._clock(),
            grace_seconds=self._options.grace_seconds,
            clean_up=clean_up,
        )
        if self._options.claims_dir is not None:
            owners = self._claim_owners(result)
            scan_claims(self._options.claims_dir, pods, owners, max_regions=self._options.max_regions, result=result)
        self._report(result.skipped)
        if result.truncated:
            log.warning(
                "more than %d container directories in %s; only the first %d are read",
                self._options.max_regions,
                self._options.containers_dir,
                self._options.max_regions,
            )
        return result

    def _claim_owners(self, result: ScanResult) -> dict[str, ClaimOwner] | None:
        """Claim UID → (namespace, name) from the DRA plugin's checkpoint; None (and a skipped entry) when it
        cannot be read. A missing file is no claim."""
        path = self._options.dra_checkpoint
        if path is None:
            return None
        try:
            claims = checkpoint.load(path)
        except checkpoint.CheckpointError as exc:
            result.skipped.append(Skipped(path, "unreadable", str(exc)))
            return None
        return {uid: (str(c.get("namespace", "")), str(c.get("name", ""))) for uid, c in claims.items()}

    def _report(self, skipped: Sequence[Skipped]) -> None:
        current = {(str(s.path), s.reason) for s in skipped}
        with self._lock:
            new = current - self._reported
            self._reported = current
        for item in skipped:
            if (str(item.path), item.reason) in new:
                log.warning("skipping %s (%s): %s", item.path, item.reason, item.message)

    # --- feedback ------------------------------------------------------------------------------
    def feedback_round(self, *, clean_up: bool = True) -> int:
        """Scan (removing dead containers' directories when ``clean_up``), then write the priority feedback.
        Returns the number of fields written."""
        result = self._scan(clean_up=clean_up)
        by_key = {str(r.region.path): r for r in result.regions}
        inputs = [
            FeedbackInput(
                key=key,
                priority=r.region.priority,
                recent_kernel=r.region.recent_kernel,
                utilization_switch=r.region.utilization_switch,
                uuids=tuple(d.uuid for d in r.region.devices),
            )
            for key, r in by_key.items()
        ]
        written = 0
        for write in observe(inputs):
            try:
                write_int32(Path(write.key), _FIELDS[write.field], write.value)
            except RegionError as exc:
                log.warning("priority feedback not written: %s", exc)
                continue
            written += 1
            if write.value < 0 or write.field == "utilization_switch":
                log.debug("%s: %s=%d", write.key, write.field, write.value)
        return written

    # --- scrape --------------------------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        yield from self._host_metrics()
        result = self._scan(clean_up=False)
        yield from _container_metrics(result.regions, self._clock())
        skipped = GaugeMetricFamily(
            "hami_vgpu_monitor_region_skipped",
            "A HAMi-core region file or container directory the monitor could not use (1 per path and reason)",
            labels=["path", "reason", "zone"],
        )
        for item in result.skipped:
            skipped.add_metric([str(item.path), item.reason, ZONE], 1)
        yield skipped
        yield GaugeMetricFamily(
            "hami_vgpu_monitor_regions", "HAMi-core regions read in this scrape", value=len(result.regions)
        )
        yield GaugeMetricFamily(
            "hami_vgpu_monitor_regions_truncated",
            "1 when more container directories exist than --max-regions (the rest are not read)",
            value=int(result.truncated),
        )
        if self._options.hami_core is not None:
            present = GaugeMetricFamily(
                "hami_core_library_present",
                "1 when HAMi-core's libvgpu.so is on this node; 0: no GPU memory or core limit can be enforced",
                labels=["node", "zone"],
            )
            present.add_metric([self._options.node_name, ZONE], int(library_problem(self._options.hami_core) is None))
            yield present

    def _host_metrics(self) -> Iterator[Metric]:
        stats, up = self._gpu_stats()
        yield GaugeMetricFamily("hami_vgpu_monitor_nvml_up", "1 when NVML answered this scrape", value=up)
        node = self._options.node_name
        families = {
            "memory": GaugeMetricFamily(
                "hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes", labels=_HOST
            ),
            "util": GaugeMetricFamily(
                "hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100)", labels=_HOST
            ),
            "mem_util": GaugeMetricFamily(
                "hami_host_gpu_memory_controller_utilization_ratio",
                "GPU memory controller utilization ratio (0-100)",
                labels=["device_index", "device_uuid", "device_type", "zone"],
            ),
            "temp": GaugeMetricFamily(
                "hami_host_gpu_temperature_celsius", "GPU temperature in degrees Celsius", labels=_HOST
            ),
            "power": GaugeMetricFamily("hami_host_gpu_power_usage_watts", "GPU power draw in watts", labels=_HOST),
            "ecc": GaugeMetricFamily(
                "hami_host_gpu_ecc_errors_total",
                "Lifetime aggregate ECC errors",
                labels=[*_HOST[:4], "error_type", "zone"],
            ),
        }
        for gpu in stats:
            host = [node, str(gpu.index), gpu.uuid, gpu.device_type, ZONE]
            if gpu.memory_used is not None:
                families["memory"].add_metric(host, gpu.memory_used)
            if gpu.utilization is not None:
                families["util"].add_metric(host, gpu.utilization)
            if gpu.memory_utilization is not None:
                families["mem_util"].add_metric(host[1:], gpu.memory_utilization)
            if gpu.temperature is not None:
                families["temp"].add_metric(host, gpu.temperature)
            if gpu.power_mw is not None:
                families["power"].add_metric(host, gpu.power_mw / 1000.0)
            for error_type, count in gpu.ecc.items():
                families["ecc"].add_metric([*host[:4], error_type, ZONE], count)
        yield from families.values()

    def _gpu_stats(self) -> tuple[list[GpuStats], int]:
        if self._lib is None:
            return [], 0
        try:
            count = self._lib.device_count()
        except NvmlError as exc:
            log.error("NVML: %s", exc)
            return [], 0
        stats = []
        for index in range(count):
            try:
                stats.append(read_gpu_stats(self._lib, index))
            except NvmlError as exc:
                log.error("NVML, GPU %d: %s", index, exc)
        return stats, 1


def _container_metrics(regions: Sequence[ContainerRegion], now: float) -> Iterator[Metric]:
    def family(name: str, help_text: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, help_text, labels=_CTR)

    used = family("hami_vgpu_memory_used_bytes", "vGPU device memory usage in bytes")
    limit = family("hami_vgpu_memory_limit_bytes", "vGPU device memory limit in bytes")
    memory = family("hami_container_device_memory_bytes", "Container device memory usage in bytes")
    util = family("hami_container_device_utilization_ratio", "Container device SM utilization ratio")
    last = family("hami_container_last_kernel_elapsed_seconds", "Seconds since last kernel execution in container")
    context = family("hami_vgpu_memory_context_bytes", "Container device memory context size in bytes")
    module = family("hami_vgpu_memory_module_bytes", "Container device memory module size in bytes")
    buffer = family("hami_vgpu_memory_buffer_bytes", "Container device memory buffer size in bytes")
    for item in regions:
        for device in item.region.devices:
            labels = [item.namespace, item.pod, item.container, str(device.index), device.uuid, ZONE]
            used.add_metric(labels, device.memory_used)
            limit.add_metric(labels, device.memory_limit)
            memory.add_metric(labels, device.memory_used)
            util.add_metric(labels, device.sm_util)
            context.add_metric(labels, device.context)
            module.add_metric(labels, device.module)
            buffer.add_metric(labels, device.buffer)
            if item.region.last_kernel_time > 0:
                last.add_metric(labels, max(int(now) - item.region.last_kernel_time, 0))
    yield from (used, limit, memory, util, last, context, module, buffer)
