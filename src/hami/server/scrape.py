"""``/metrics`` without holding the event loop: the cluster gauges written as text in slices.

At 5,000 nodes × 8 GPUs and 100,000 pods the cluster gauges are about 600,000 samples (88 MB of text). Built with
``prometheus_client``'s metric families and ``generate_latest`` in one go they held the event loop about 4.4 s
(filter and bind waited that long). Here the same text, byte for byte (a test compares them), is written directly
from the state — no sample objects — by a generator that ``scrape_chunks`` resumes in slices of about ``SLICE_S``,
giving the loop back between slices; the route streams each slice's text out as it is written.

What a slice reads is current at that moment: a node or pod that changes during the scrape shows its value from
when its slice ran (as in any scrape of gauges). The lists of nodes and pods are taken once at the start, so a
scrape never iterates a dict that changes under it.

The order of families and samples is ``hami.server.metrics._StateCollector``'s (it stays the reference and serves
``registry.get_sample_value``).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence

from prometheus_client import generate_latest
from prometheus_client.utils import floatToGoString

from hami.devices.base import Vendor, core_counter
from hami.protocol.inventory import DeviceInfo
from hami.scheduling.dra import claim_users
from hami.scheduling.fragmentation import (
    CardFragment,
    Shape,
    card_fragments,
    count_shapes,
    fragmentation_index,
    model_fragments,
    top_shapes,
)
from hami.scheduling.state import ClusterState, NodeState, PodRecord
from hami.server.metrics import Metrics, core_percent, device_cores, with_served

__all__ = ["SLICE_S", "scrape", "scrape_chunks", "state_text"]

SLICE_S = 0.005
"""The event loop gets a turn at least this often (seconds of scrape work between turns)."""

_BATCH = 256
"""Samples (or nodes, pods) written between two checks of the clock."""

_MIB = 1048576
_ZONE = "vGPU"


_go_float: Callable[[float], str] = floatToGoString
"""The value as ``generate_latest`` writes it."""


def _esc(value: str) -> str:
    """A label value as the text format writes it (backslash, newline and double quote escaped)."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


class _Family:
    """One gauge family's header and a formatter for its samples (labels in name order, as ``generate_latest``)."""

    __slots__ = ("head", "line", "order")

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        doc = documentation.replace("\\", r"\\").replace("\n", r"\n")
        self.head = f"# HELP {name} {doc}\n# TYPE {name} gauge\n"
        self.order = sorted(range(len(labels)), key=labels.__getitem__)
        inner = ",".join(f'{labels[j]}="%s"' for j in self.order)
        self.line = f"{name}{{{inner}}} %s\n" if labels else f"{name} %s\n"

    def sample(self, values: Sequence[str], value: float) -> str:
        return self.line % (*[_esc(values[j]) for j in self.order], _go_float(value))


_DEV = ["node", "device_uuid", "device_index", "device_type", "zone"]
_DEV_CORES = ["node", "device_uuid", "device_index", "device_cores", "device_type", "zone"]
_OVERVIEW = ["node", "device_uuid", "device_index", "device_cores", "device_memory_limit", "device_type", "zone"]
_POD = ["namespace", "node", "pod", "container_index", "device_uuid", "zone"]
_FRAG = ["node", "device_uuid", "device_type", "vendor"]
_MODEL = ["vendor", "device_type"]

Labels = Callable[[str, DeviceInfo], list[str]]
Count = Callable[[int], int]
"""A vendor's core value as a number of cores (``hami.devices.base.cores_shown``)."""
Value = Callable[[DeviceInfo, list[int], list[int], list[int], int, Count], float | None]


def _base(node: str, info: DeviceInfo) -> list[str]:
    return [node, info.id, str(info.index), info.type, _ZONE]


def _with_cores(node: str, info: DeviceInfo) -> list[str]:
    return [node, info.id, str(info.index), str(info.devcore), info.type, _ZONE]


def _overview(node: str, info: DeviceInfo) -> list[str]:
    return [node, info.id, str(info.index), str(info.devcore), str(info.devmem * _MIB), info.type, _ZONE]


def _mem_ratio(
    info: DeviceInfo, used: list[int], mem: list[int], cores: list[int], i: int, count: Count
) -> float | None:
    return mem[i] / info.devmem if info.devmem > 0 else None


_DEVICE_FAMILIES: tuple[tuple[_Family, Labels, Value], ...] = (
    (
        _Family("hami_gpu_memory_limit_bytes", "Device memory limit", _DEV),
        _base,
        lambda info, used, mem, cores, i, count: info.devmem * _MIB,
    ),
    (
        _Family("hami_gpu_core_limit_ratio", "Device core limit (percent units)", _DEV),
        _base,
        lambda info, used, mem, cores, i, count: core_percent(count(info.devcore), count(cores[i]))[0],
    ),
    (
        _Family("hami_gpu_memory_allocated_bytes", "Device memory allocated", _DEV_CORES),
        _with_cores,
        lambda info, used, mem, cores, i, count: mem[i] * _MIB,
    ),
    (
        _Family("hami_gpu_shared_count", "Number of tasks sharing the device", _DEV),
        _base,
        lambda info, used, mem, cores, i, count: used[i],
    ),
    (
        _Family("hami_gpu_core_allocated_ratio", "Device cores allocated", _DEV),
        _base,
        lambda info, used, mem, cores, i, count: core_percent(count(info.devcore), count(cores[i]))[1],
    ),
    (
        _Family("hami_node_gpu_overview", "GPU overview on a node (allocated memory)", _OVERVIEW),
        _overview,
        lambda info, used, mem, cores, i, count: mem[i] * _MIB,
    ),
    (_Family("hami_node_gpu_memory_allocated_ratio", "Allocated / total device memory", _DEV), _base, _mem_ratio),
)


def _devices(nodes: Sequence[NodeState], vendors: Mapping[str, Vendor]) -> Iterator[str]:
    counters: dict[str, Count] = {name: core_counter(vendor) for name, vendor in vendors.items()}
    for family, labels, value in _DEVICE_FAMILIES:
        out = [family.head]
        for node in nodes:
            for name, table in node.tables.items():
                used, mem, cores = table.used, table.usedmem, table.usedcores
                count = counters.get(name, _as_is)
                for i, info in enumerate(table.infos):
                    v = value(info, used, mem, cores, i, count)
                    if v is not None:
                        out.append(family.sample(labels(node.name, info), v))
            if len(out) >= _BATCH:
                yield "".join(out)
                out = []
        yield "".join(out)


def _as_is(value: int) -> int:
    return value


def _pods(
    records: Sequence[PodRecord],
    devcores: Mapping[str, tuple[int, Count]],
    claims: Sequence[tuple[PodRecord, str]] = (),
) -> Iterator[str]:
    """The pod-level samples: each pod's charges, then each DRA claim's under each pod it serves (``claims``)."""
    vmem = _Family("hami_vgpu_memory_allocated_bytes", "Memory allocated to a pod on a device", _POD)
    vcore = _Family("hami_vgpu_core_allocated_ratio", "Cores allocated to a pod on a device", _POD)
    amounts: tuple[tuple[_Family, Callable[[int, int], int]], ...] = (
        (vmem, lambda mem, cores: mem * _MIB),
        (vcore, lambda mem, cores: cores),  # in percent of the device's cores: see the loop
    )
    for family, amount in amounts:
        out = [family.head]
        for record, pod in itertools.chain(((r, r.name) for r in records), claims):
            for ch in record.charges:
                if ch.uuid:
                    labels = [record.namespace, record.node, pod, "0", ch.uuid, _ZONE]
                    total, count = devcores.get(ch.uuid, (0, _as_is))
                    cores = core_percent(total, count(ch.cores))[1]
                    out.append(family.sample(labels, amount(ch.mem, cores)))
            if len(out) >= _BATCH:
                yield "".join(out)
                out = []
        yield "".join(out)


def _quotas(state: ClusterState) -> Iterator[str]:
    used = _Family("hami_resource_quota_used", "Quota used", ["namespace", "quota_name", "limit", "zone"])
    limit = _Family("hami_resource_quota_limit", "Quota limit", ["namespace", "quota_name", "zone"])
    used_out, limit_out = [used.head], [limit.head]
    for ns in sorted(state.quotas.used):
        for resource, amount in sorted(state.quotas.used.get(ns, {}).items()):
            lim = state.quotas.limit(ns, resource)
            used_out.append(used.sample([ns, resource, "" if lim is None else str(lim), _ZONE], amount))
            if lim is not None:
                limit_out.append(limit.sample([ns, resource, _ZONE], lim))
    yield "".join(used_out) + "".join(limit_out)


def _problems(nodes: Sequence[NodeState], records: Sequence[PodRecord]) -> Iterator[str]:
    quarantined = _Family("hami_quarantined_nodes", "Nodes whose device registration could not be decoded", ["vendor"])
    counts: dict[str, int] = {}
    for node in nodes:
        for vendor in node.problems:
            counts[vendor] = counts.get(vendor, 0) + 1
    yield quarantined.head + "".join(quarantined.sample([v], n) for v, n in sorted(counts.items()))
    undecodable = _Family(
        "hami_pods_undecodable", "Pods whose allocation annotations could not be decoded (charged as far as known)", []
    )
    problems = 0
    for k in range(0, len(records), _BATCH * 4):
        problems += sum(1 for r in records[k : k + _BATCH * 4] if r.problem)
        yield ""
    yield undecodable.head + undecodable.sample([], problems)


def _fragmentation(state: ClusterState, records: Sequence[PodRecord]) -> Iterator[str]:
    counts: dict[str, dict[Shape, int]] = {}
    for k in range(0, len(records), _BATCH * 2):
        count_shapes(records[k : k + _BATCH * 2], counts)
        yield ""
    shapes = top_shapes(counts)
    names = sorted(state.nodes)
    cards: list[CardFragment] = []
    for k in range(0, len(names), _BATCH // 8):
        cards += card_fragments(state, shapes, names[k : k + _BATCH // 8])
        yield ""
    yield from _card_families(cards)
    model_mem = _Family("hami_model_stranded_memory_bytes", "Stranded device memory per card model", _MODEL)
    model_free = _Family("hami_model_free_cards", "Wholly free cards per card model", _MODEL)
    models = model_fragments(cards)
    yield model_mem.head + "".join(model_mem.sample([m.vendor, m.model], m.stranded_mem * _MIB) for m in models)
    yield model_free.head + "".join(model_free.sample([m.vendor, m.model], m.whole_free_cards) for m in models)
    index = _Family("hami_fragmentation_index", "Share of the cluster's free device memory that is stranded (0..1)", [])
    yield index.head + index.sample([], fragmentation_index(cards))


def _card_families(cards: Sequence[CardFragment]) -> Iterator[str]:
    families: list[tuple[_Family, Callable[[CardFragment], float]]] = [
        (
            _Family(
                "hami_gpu_stranded_memory_bytes", "Free device memory no pod shape seen in the cluster can use", _FRAG
            ),
            lambda c: c.stranded_mem * _MIB,
        ),
        (
            _Family(
                "hami_gpu_stranded_cores_ratio", "Free device cores no pod shape seen in the cluster can use", _FRAG
            ),
            lambda c: c.stranded_cores,
        ),
        (
            _Family(
                "hami_gpu_largest_slice_memory_bytes", "Memory one more pod could get on the device (0: full)", _FRAG
            ),
            lambda c: c.largest_mem * _MIB,
        ),
    ]
    for family, value in families:
        out = [family.head]
        for c in cards:
            out.append(family.sample([c.node, c.uuid, c.model, c.vendor], value(c)))
            if len(out) >= _BATCH:
                yield "".join(out)
                out = []
        yield "".join(out)


def state_text(state: ClusterState, served: ClusterState | None = None) -> Iterator[str]:
    """The cluster gauges as Prometheus text, in pieces; resumable between pieces while the state changes.
    ``served``: the cards only a DRA driver serves (``Metrics.served``), in the device and pod gauges."""
    nodes = list(state.nodes.values())
    records = list(state.pods.values())
    shown = with_served(state, served)
    yield from _devices(shown, state.vendors)
    devcores: dict[str, tuple[int, Count]] = {}
    for k in range(0, len(shown), _BATCH // 4):  # 40,000 devices took 0.3 s in one go
        device_cores(state, shown[k : k + _BATCH // 4], devcores)
        yield ""
    claims = claim_users(state) + (claim_users(served) if served is not None else [])
    yield from _pods(records, devcores, claims)
    yield from _quotas(state)
    yield from _problems(nodes, records)
    yield from _fragmentation(state, records)


async def scrape_chunks(metrics: Metrics, state: ClusterState, slice_s: float = SLICE_S) -> AsyncIterator[bytes]:
    """The whole ``/metrics`` text in chunks: hami's counters and histograms, then the cluster gauges, one chunk per
    slice of about ``slice_s`` of work, with the event loop's turn after each (the HTTP layer streams them out)."""
    yield generate_latest(metrics.own)
    parts: list[str] = []
    start = time.perf_counter()
    for piece in state_text(state, metrics.served()):
        parts.append(piece)
        if time.perf_counter() - start >= slice_s:
            yield "".join(parts).encode()
            parts = []
            await asyncio.sleep(0)
            start = time.perf_counter()
    yield "".join(parts).encode()


async def scrape(metrics: Metrics, state: ClusterState, slice_s: float = SLICE_S) -> bytes:
    """``scrape_chunks`` joined."""
    return b"".join([chunk async for chunk in scrape_chunks(metrics, state, slice_s)])
