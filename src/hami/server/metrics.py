"""Prometheus metrics: HAMi's names and labels (webhook-bind-plugin-vendors.md §5) plus hami's own.

Cluster gauges are computed at scrape time from the live ``ClusterState`` (no copy, no background loop), so
HAMi's Grafana dashboards work unchanged: same metric names, same labels, the constant label ``zone="vGPU"``,
memory in bytes (MiB × 1048576). Pod-level gauges use hami's per-device effective charges, so like HAMi's they
carry ``container_index="0"``. A DRA claim's share (DRA mode, issue 38) is a pod-level sample like a device-plugin
pod's, under each pod the claim serves (``hami.scheduling.dra.claim_users``), with the same labels: HAMi's
dashboards show DRA-mode pods beside the others.

hami adds latency histograms per stage and endpoint, decisions by result (and those that passed over a node whose
node lock a bind held or was about to take), lock hand-over waits, Kubernetes API errors, ledger
drift (differences found by the periodic self-check), ledger drift against the API (pods on which the ledger and a
periodic re-list of pods disagree, and the repairs made), quarantined nodes, and fragmentation (stranded memory and
cores per card and per model, the largest slice per card, the cluster index).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hami import __version__
from hami.devices.base import core_counter
from hami.scheduling.audit import DriftKind
from hami.scheduling.dra import claim_users
from hami.scheduling.fragmentation import card_fragments, fragmentation_index, model_fragments
from hami.scheduling.holds import PreemptionHold
from hami.scheduling.state import ClusterState, NodeState, PodRecord

__all__ = ["Metrics"]

_MIB = 1048576
_ZONE = "vGPU"
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_LOOP_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_LOCK_WAIT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0)


class _StateCollector(Collector):
    def __init__(
        self, state: Callable[[], ClusterState], served: Callable[[], ClusterState | None] = lambda: None
    ) -> None:
        self._state = state
        self._served = served

    def collect(self) -> Iterator[Metric]:
        state = self._state()
        served = self._served()
        yield from _device_metrics(state, served)
        yield from _pod_metrics(state, served)
        yield from _quota_metrics(state)
        yield from _problem_metrics(state)
        yield from _fragmentation(state)


def core_percent(total: int, used: int) -> tuple[int, int]:
    """A device's core limit and allocation in the percent units of HAMi's ``*_core_*_ratio`` metrics: the limit is
    100 (0 for a device that registers no cores), the allocation ``ceil(used / total × 100)``. A card that counts
    its cores in percent (``devcore`` 100) is unchanged; one that counts them in units of its own (compute units)
    reads as the share of them it gives, as HAMi's scheduler exports it."""
    if total <= 0:
        return 0, 0
    return 100, -(-used * 100 // total)  # ceil, in integers


Count = Callable[[int], int]
"""A vendor's core value as a number of cores (``hami.devices.base.core_counter``)."""


def _as_is(value: int) -> int:
    return value


def device_cores(
    state: ClusterState, nodes: Iterable[NodeState] | None = None, into: dict[str, tuple[int, Count]] | None = None
) -> dict[str, tuple[int, Count]]:
    """Per device id: its cores as a number (``cores_shown``) and how to count a charge's cores on it; of ``nodes``
    (default: every node), added to ``into`` when given (the sliced scrape builds it a few nodes at a time)."""
    out: dict[str, tuple[int, Count]] = {} if into is None else into
    counters = {name: core_counter(vendor) for name, vendor in state.vendors.items()}
    for node in state.nodes.values() if nodes is None else nodes:
        for name, table in node.tables.items():
            count = counters.get(name, _as_is)
            for info in table.infos:
                out[info.id] = (count(info.devcore), count)
    return out


def _device_metrics(state: ClusterState, served: ClusterState | None = None) -> Iterator[Metric]:
    """HAMi's device gauges: every registered card, then every card only a DRA driver serves (``served``)."""
    dev_labels = ["node", "device_uuid", "device_index", "device_type", "zone"]
    mem_limit = GaugeMetricFamily("hami_gpu_memory_limit_bytes", "Device memory limit", labels=dev_labels)
    core_limit = GaugeMetricFamily("hami_gpu_core_limit_ratio", "Device core limit (percent units)", labels=dev_labels)
    mem_alloc = GaugeMetricFamily(
        "hami_gpu_memory_allocated_bytes",
        "Device memory allocated",
        labels=["node", "device_uuid", "device_index", "device_cores", "device_type", "zone"],
    )
    shared = GaugeMetricFamily("hami_gpu_shared_count", "Number of tasks sharing the device", labels=dev_labels)
    core_alloc = GaugeMetricFamily("hami_gpu_core_allocated_ratio", "Device cores allocated", labels=dev_labels)
    overview = GaugeMetricFamily(
        "hami_node_gpu_overview",
        "GPU overview on a node (allocated memory)",
        labels=[
            "node",
            "device_uuid",
            "device_index",
            "device_cores",
            "device_memory_limit",
            "device_type",
            "zone",
        ],
    )
    mem_ratio = GaugeMetricFamily(
        "hami_node_gpu_memory_allocated_ratio", "Allocated / total device memory", labels=dev_labels
    )
    for node in with_served(state, served):
        for name, table in node.tables.items():
            count = core_counter(state.vendors.get(name))
            for i, info in enumerate(table.infos):
                base = [node.name, info.id, str(info.index), info.type]
                mem_limit.add_metric([*base, _ZONE], info.devmem * _MIB)
                total, used = count(info.devcore), count(table.usedcores[i])
                limit, allocated = core_percent(total, used)
                core_limit.add_metric([*base, _ZONE], limit)
                mem_alloc.add_metric(
                    [node.name, info.id, str(info.index), str(info.devcore), info.type, _ZONE],
                    table.usedmem[i] * _MIB,
                )
                shared.add_metric([*base, _ZONE], table.used[i])
                core_alloc.add_metric([*base, _ZONE], allocated)
                overview.add_metric(
                    [
                        node.name,
                        info.id,
                        str(info.index),
                        str(info.devcore),
                        str(info.devmem * _MIB),
                        info.type,
                        _ZONE,
                    ],
                    table.usedmem[i] * _MIB,
                )
                if info.devmem > 0:
                    mem_ratio.add_metric([*base, _ZONE], table.usedmem[i] / info.devmem)
    yield from (mem_limit, core_limit, mem_alloc, shared, core_alloc, overview, mem_ratio)


def with_served(state: ClusterState, served: ClusterState | None) -> list[NodeState]:
    """The nodes whose cards the device gauges show: the scheduler's, then those of the cards only a DRA driver
    serves (``hami.scheduling.dra.served.ServedView``)."""
    nodes = list(state.nodes.values())
    return nodes + list(served.nodes.values()) if served is not None else nodes


def pod_shares(state: ClusterState, served: ClusterState | None) -> list[tuple[PodRecord, str]]:
    """The pod-level samples' sources: each pod's record, then each DRA claim's record under each pod it serves,
    on registered cards and on cards only a DRA driver serves."""
    shares: list[tuple[PodRecord, str]] = [(r, r.name) for r in state.pods.values()]
    shares += claim_users(state)
    return shares + list(claim_users(served)) if served is not None else shares


def _pod_metrics(state: ClusterState, served: ClusterState | None = None) -> Iterator[Metric]:
    pod_labels = ["namespace", "node", "pod", "container_index", "device_uuid", "zone"]
    vmem = GaugeMetricFamily(
        "hami_vgpu_memory_allocated_bytes", "Memory allocated to a pod on a device", labels=pod_labels
    )
    vcore = GaugeMetricFamily(
        "hami_vgpu_core_allocated_ratio", "Cores allocated to a pod on a device", labels=pod_labels
    )
    devcores = device_cores(state, with_served(state, served))
    for record, pod in pod_shares(state, served):
        for ch in record.charges:
            if not ch.uuid:
                continue
            labels = [record.namespace, record.node, pod, "0", ch.uuid, _ZONE]
            vmem.add_metric(labels, ch.mem * _MIB)
            total, count = devcores.get(ch.uuid, (0, _as_is))
            vcore.add_metric(labels, core_percent(total, count(ch.cores))[1])
    yield from (vmem, vcore)


def _quota_metrics(state: ClusterState) -> Iterator[Metric]:
    used = GaugeMetricFamily(
        "hami_resource_quota_used", "Quota used", labels=["namespace", "quota_name", "limit", "zone"]
    )
    limit = GaugeMetricFamily("hami_resource_quota_limit", "Quota limit", labels=["namespace", "quota_name", "zone"])
    for ns in sorted(state.quotas.used):
        for resource, amount in sorted(state.quotas.used.get(ns, {}).items()):
            lim = state.quotas.limit(ns, resource)
            used.add_metric([ns, resource, "" if lim is None else str(lim), _ZONE], amount)
            if lim is not None:
                limit.add_metric([ns, resource, _ZONE], lim)
    yield from (used, limit)


def _problem_metrics(state: ClusterState) -> Iterator[Metric]:
    quarantined = GaugeMetricFamily(
        "hami_quarantined_nodes", "Nodes whose device registration could not be decoded", labels=["vendor"]
    )
    counts: dict[str, int] = {}
    for node in state.nodes.values():
        for vendor in node.problems:
            counts[vendor] = counts.get(vendor, 0) + 1
    for vendor, n in sorted(counts.items()):
        quarantined.add_metric([vendor], n)
    yield quarantined
    undecodable = GaugeMetricFamily(
        "hami_pods_undecodable", "Pods whose allocation annotations could not be decoded (charged as far as known)"
    )
    undecodable.add_metric([], sum(1 for r in state.pods.values() if r.problem))
    yield undecodable


def _fragmentation(state: ClusterState) -> Iterator[Metric]:
    """hami's fragmentation gauges (``hami.scheduling.fragmentation``): per card, per model, and the index."""
    cards = card_fragments(state)
    labels = ["node", "device_uuid", "device_type", "vendor"]
    stranded_mem = GaugeMetricFamily(
        "hami_gpu_stranded_memory_bytes", "Free device memory no pod shape seen in the cluster can use", labels=labels
    )
    stranded_cores = GaugeMetricFamily(
        "hami_gpu_stranded_cores_ratio", "Free device cores no pod shape seen in the cluster can use", labels=labels
    )
    largest = GaugeMetricFamily(
        "hami_gpu_largest_slice_memory_bytes", "Memory one more pod could get on the device (0: full)", labels=labels
    )
    for c in cards:
        base = [c.node, c.uuid, c.model, c.vendor]
        stranded_mem.add_metric(base, c.stranded_mem * _MIB)
        stranded_cores.add_metric(base, c.stranded_cores)
        largest.add_metric(base, c.largest_mem * _MIB)
    yield from (stranded_mem, stranded_cores, largest)
    model_labels = ["vendor", "device_type"]
    model_mem = GaugeMetricFamily(
        "hami_model_stranded_memory_bytes", "Stranded device memory per card model", labels=model_labels
    )
    model_free = GaugeMetricFamily("hami_model_free_cards", "Wholly free cards per card model", labels=model_labels)
    for m in model_fragments(cards):
        model_mem.add_metric([m.vendor, m.model], m.stranded_mem * _MIB)
        model_free.add_metric([m.vendor, m.model], m.whole_free_cards)
    yield from (model_mem, model_free)
    index = GaugeMetricFamily(
        "hami_fragmentation_index", "Share of the cluster's free device memory that is stranded (0..1)"
    )
    index.add_metric([], fragmentation_index(cards))
    yield index


class Metrics:
    """All of hami's metrics on one registry (served on ``--metrics-bind-address``)."""

    def __init__(self, state: Callable[[], ClusterState]) -> None:
        self.state = state
        self.own = CollectorRegistry(auto_describe=True)
        """hami's own counters, histograms and gauges: everything but the cluster gauges, which ``/metrics`` writes
        in slices (``hami.server.scrape``)."""
        self.registry = CollectorRegistry(auto_describe=True)
        """Everything (``own`` and the cluster gauges), for ``get_sample_value`` and other in-process readers."""
        self.registry.register(self.own)
        self.served: Callable[[], ClusterState | None] = lambda: None
        """The cards only a DRA driver serves, apart from the scheduler's state (``ServedView.state``; the extender
        sets it): the device and pod gauges show them like registered cards."""
        self.registry.register(_StateCollector(state, lambda: self.served()))  # noqa: PLW0108 (set later)
        Gauge(
            "hami_build_info",
            "hami build information",
            ["version", "revision", "build_date", "go_version", "compiler", "platform"],
            registry=self.own,
        ).labels(__version__, "", "", "", "cpython", "linux").set(1)
        self._request_metrics()
        self._ledger_metrics()
        self._preemption_metrics()

    def _request_metrics(self) -> None:
        """What /filter, /bind and the webhook did, and how long it took."""
        self.latency = Histogram(
            "hami_request_duration_seconds",
            "Extender/webhook request latency by endpoint",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=self.own,
        )
        self.stage_latency = Histogram(
            "hami_stage_duration_seconds",
            "Time spent in each scheduling stage",
            ["stage"],
            buckets=_LATENCY_BUCKETS,
            registry=self.own,
        )
        self.decisions = Counter("hami_filter_decisions", "Filter decisions by result", ["result"], registry=self.own)
        self.binds = Counter("hami_bind_results", "Bind results", ["result"], registry=self.own)
        self.gang_releases = Counter(
            "hami_gang_releases",
            "Unbound allocations of gang members dropped because the gang could not be placed whole (trigger: "
            "member-unschedulable, podgroup-failed)",
            ["trigger"],
            registry=self.own,
        )
        self.simulations = Counter(
            "hami_filter_simulations",
            "Side-effect-free /filter calls on whole Node objects (Cluster Autoscaler's template nodes), by result "
            "(fits, unschedulable, passthrough, invalid, not-ready)",
            ["result"],
            registry=self.own,
        )
        self.lock_wait = Histogram(
            "hami_bind_lock_wait_seconds",
            "How long binds waited for a node lock hand-over (another bind's device plugin to release the lock)",
            buckets=_LOCK_WAIT_BUCKETS,
            registry=self.own,
        )
        self.lock_wait_timeouts = Counter(
            "hami_bind_lock_wait_timeouts",
            "Binds whose wait for a node lock hand-over ran out (--bind-lock-wait, --node-lock-retry-timeout)",
            registry=self.own,
        )
        self.lock_busy_skips = Counter(
            "hami_lock_busy_skips",
            "Pods /filter placed on a free node, passing over better-ranked fitting nodes where a bind in progress "
            "held or was about to take the node lock",
            registry=self.own,
        )
        self.api_errors = Counter(
            "hami_kube_api_errors", "Kubernetes API calls that failed", ["operation"], registry=self.own
        )
        self.loop_lag = Histogram(
            "hami_event_loop_lag_seconds",
            "How much later than asked a 50 ms sleep on the event loop woke (the loop held by other work)",
            buckets=_LOOP_LAG_BUCKETS,
            registry=self.own,
        )

    def _ledger_metrics(self) -> None:
        """The ledger's self-checks: against a recount and against the API's pods."""
        self.ledger_drift = Gauge(
            "hami_ledger_drift", "Differences between the usage ledger and a full recount", registry=self.own
        )
        self.ledger_api_drift = Gauge(
            "hami_ledger_api_drift",
            "Pods on which the ledger and the API disagreed at the last re-list of pods, confirmed by the re-list "
            "before it (kind: leaked, missing, changed)",
            ["kind"],
            registry=self.own,
        )
        self.ledger_api_repairs = Counter(
            "hami_ledger_api_repairs",
            "Ledger records set to what the API holds after a confirmed difference (kind: leaked, missing, changed)",
            ["kind"],
            registry=self.own,
        )
        for kind in DriftKind:
            self.ledger_api_drift.labels(kind.value).set(0)
            self.ledger_api_repairs.labels(kind.value)

    def _preemption_metrics(self) -> None:
        """hami's own preemption (``--preemption=self``): attempts, victims, capacity held, wasted evictions."""
        self.preemption_attempts = Counter(
            "hami_preemption_attempts",
            "Preemptions hami tried for pods that fit nowhere, by result (preempted, no-candidate, budget-refused, "
            "failed)",
            ["result"],
            registry=self.own,
        )
        self.preemption_victims = Counter(
            "hami_preemption_victims_evicted",
            "Pods hami evicted to make room for higher-priority pods",
            registry=self.own,
        )
        self.preemption_wasted = Counter(
            "hami_preemption_wasted_evictions",
            "Evictions that did not lead to their preemptor's placement on that node (why: deleted, elsewhere); "
            "should stay 0",
            ["why"],
            registry=self.own,
        )
        for why in ("deleted", "elsewhere"):
            self.preemption_wasted.labels(why)
        Gauge(
            "hami_preemption_holds", "Preemptors for which hami holds freed capacity", registry=self.own
        ).set_function(lambda: float(len(_holds(self.state()))))
        Gauge(
            "hami_preemption_held_memory_bytes",
            "Device memory held for preemptors while their victims terminate",
            registry=self.own,
        ).set_function(lambda: float(sum(ch.mem for r in _holds(self.state()) for ch in r.charges) * _MIB))


def _holds(state: ClusterState) -> list[PreemptionHold]:
    return [r for r in state.held.values() if isinstance(r, PreemptionHold)]
