"""The shell of hami's DRA ledger (issue 18): the ``resource.k8s.io/v1`` watches, and what their problems become.

``hami.scheduling.dra.DraLedger`` (pure, behind the extender's ``on_resource_slice``/``on_resource_claim``/
``on_device_class``) turns ResourceSlices and allocated ResourceClaims of the configured drivers into capacity
held on hami's cards. This module feeds it and makes its findings visible:

* **Watches.** :class:`DraWatches` first asks the API server whether ``resource.k8s.io/v1`` is served and readable
  (a one-item list of each kind). Served: one reflector per kind (slices, claims, classes), feeding the extender; the
  readiness gate waits for their first lists, so ``/filter`` never answers before the claims are counted. Not
  served (404: a cluster before 1.34, or the API group switched off) or not allowed (403: the ClusterRole lacks
  the DRA rules): one clear log line, ``hami_dra_watching`` 0, the readiness gate is released (a watch that
  cannot sync must not keep hami unready forever), and the question is asked again every ``REPROBE_S`` — an
  upgraded API server or a fixed ClusterRole is picked up without a restart.
* **Problems** (``DraProblem``: an allocation on no registered card, on an unpublished device, reserved for no
  live pod, in units that disagree, or unreadable): each newly raised one is logged once and written as a Warning
  Event on its ResourceClaim (or ResourceSlice), folded by the event recorder like every other hami event. The
  extender's handlers return what an event raised; :meth:`DraReports.sweep` (every ``SWEEP_S``) catches problems
  raised by other events (a pod deleted: its claim becomes stale) and forgets the ones that cleared, so a problem
  raised again is reported again.
* **Warnings** (``DraWarning``: the configuration traps) are logged when the watches first sync and whenever a new
  one appears.
* **Metrics** (:class:`DraCollector`): problems and warnings by kind, problems raised (a counter), whether the
  watches run, and the capacity DRA claims hold per card with the labels of the device gauges (``node``,
  ``device_uuid``, ``device_index``, ``device_type``, ``zone``).

HAMi v2.10 has no equivalent: its DRA mode is a separate project that cannot share cards with device-plugin pods.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hami.errors import ApiError, NotFound
from hami.k8s.client import KubeClient
from hami.k8s.events import EventRecorder
from hami.k8s.records import KubeObject, ObjectRef
from hami.k8s.resources import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES, Resource
from hami.k8s.tasks import Supervisor
from hami.k8s.watch import Callbacks, Reflector
from hami.protocol.dra import DeviceClass, ResourceClaim, ResourceSlice
from hami.protocol.events import EventType
from hami.protocol.kubeversion import ServerProfile
from hami.scheduling.dra import DraProblem, DraWarning, ProblemKind, held_by_card
from hami.scheduling.state import ClusterState
from hami.server.extender import Extender
from hami.server.metrics import Metrics

__all__ = [
    "REPROBE_S",
    "SWEEP_S",
    "DraCollector",
    "DraReports",
    "DraWatches",
    "dra_mode",
    "event_reason",
    "start_dra",
]

log = logging.getLogger("hami.dra")

API: Final = "resource.k8s.io/v1"
REPROBE_S = 300.0
"""How often hami asks again whether ``resource.k8s.io/v1`` is served (and readable) when it was not."""
PROBE_RETRY_S = (1.0, 30.0)
"""First and longest pause between probes that failed for a passing reason (API server down, 5xx, 429)."""
SWEEP_S = 10.0
"""How often the current problems are compared with the ones reported (problems raised by pod events)."""

_MIB = 1048576
_ZONE = "vGPU"


def event_reason(kind: str) -> str:
    """The Event reason for a problem kind: ``unknown-uuid`` → ``DRAUnknownUuid``."""
    return "DRA" + "".join(part.capitalize() for part in kind.split("-"))


@dataclass
class DraReports:
    """Logs, Warning Events and counters for DRA problems and warnings; remembers what it reported."""

    events: EventRecorder
    raised: Counter
    """``hami_dra_problems_raised{kind}``."""
    claims: Mapping[str, ResourceClaim] = field(default_factory=dict)
    """The claim watch's store (``namespace/name`` → claim): the object an event is about."""
    slices: Mapping[str, ResourceSlice] = field(default_factory=dict)
    reported: set[DraProblem] = field(default_factory=set)
    warned: set[DraWarning] = field(default_factory=set)
    is_leader: Callable[[], bool] = lambda: True
    """With ``--leader-elect`` only the leader writes the Event (every replica sees the same claims and would write
    it once per replica); followers log and count."""

    def problems(self, raised: Iterable[DraProblem], logged: bool = False) -> None:
        """Report each problem not reported yet: a log line (unless the extender ``logged`` it already), a
        Warning Event, the counter."""
        for problem in raised:
            if problem in self.reported:
                continue
            self.reported.add(problem)
            self.raised.labels(str(problem.kind)).inc()
            if not logged:
                where = f" on node {problem.node}" if problem.node else ""
                log.warning("DRA %s: %s%s: %s", problem.kind, problem.object, where, problem.message)
            involved = self._involved(problem.object)
            if involved is not None and self.is_leader():
                self.events.record(involved, EventType.WARNING, event_reason(str(problem.kind)), problem.message)

    def sweep(self, current: Iterable[DraProblem]) -> None:
        """Forget problems that cleared (so a new occurrence is reported again); write the event of the ones not
        reported yet — raised by pod or node events, which the extender logs itself."""
        now = set(current)
        self.reported &= now
        self.problems(sorted(now - self.reported, key=lambda p: (p.object, str(p.kind), p.message)), logged=True)

    def warnings(self, current: Iterable[DraWarning]) -> None:
        """Log each warning not logged yet (with what it will do); forget the ones gone."""
        now = set(current)
        for warning in sorted(now - self.warned, key=lambda w: (str(w.kind), w.object)):
            log.warning("DRA %s: %s: %s", warning.kind, warning.object, warning.message)
        self.warned = now

    def _involved(self, obj: str) -> ObjectRef | None:
        """The object a problem names (``ResourceClaim ns/name`` or ``ResourceSlice name``), if hami still has it."""
        kind, _, key = obj.partition(" ")
        if kind == "ResourceClaim":
            claim = self.claims.get(key)
            if claim is None:
                return None
            meta = claim.metadata
            return ObjectRef("ResourceClaim", meta.name, meta.namespace, meta.uid, api_version=API)
        if kind == "ResourceSlice":
            sl = self.slices.get(key)
            if sl is None:
                return None
            return ObjectRef("ResourceSlice", sl.metadata.name, "", sl.metadata.uid, api_version=API)
        return None


class DraWatches:
    """The three DRA watches, started once ``resource.k8s.io/v1`` answers (module docstring)."""

    def __init__(
        self,
        client: KubeClient,
        extender: Extender,
        reports: DraReports,
        on_synced: Callable[[], None],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.client = client
        self.extender = extender
        self.reports = reports
        self.on_synced = on_synced
        self._sleep = sleep
        self.watching = False
        """True while the watches run (``hami_dra_watching``)."""
        self.unavailable = ""
        """Why the watches do not run ("" while they run or before the first probe)."""
        self.reflectors: list[Reflector[ResourceSlice] | Reflector[ResourceClaim] | Reflector[DeviceClass]] = []
        self.on_claim: Callable[[ResourceClaim, bool], None] | None = None
        """Also told every claim event (DRA mode's claim controller: which claims exist, and whose)."""

    async def run(self, supervisor: Supervisor) -> None:
        """Probe until the API answers; then start the watches, wait for their first lists, and sweep forever."""
        await self._until_served()
        slices = Reflector(self.client, RESOURCE_SLICES, ResourceSlice, Callbacks(self._slice))
        claims = Reflector(self.client, RESOURCE_CLAIMS, ResourceClaim, Callbacks(self._claim))
        classes = Reflector(self.client, DEVICE_CLASSES, DeviceClass, Callbacks(self._class))
        self.reports.slices, self.reports.claims = slices.store, claims.store
        self.reflectors = [slices, claims, classes]
        supervisor.start(classes.run(), name="watch-deviceclasses")
        supervisor.start(slices.run(), name="watch-resourceslices")
        supervisor.start(claims.run(), name="watch-resourceclaims")
        await asyncio.gather(classes.synced.wait(), slices.synced.wait(), claims.synced.wait())
        self.watching, self.unavailable = True, ""
        log.info(
            "DRA: watching %s (%d slices, %d claims, %d device classes)",
            API, len(slices.store), len(claims.store), len(classes.store),
        )  # fmt: skip
        self.reports.warnings(self.extender.dra_warnings())
        self.on_synced()
        while True:
            await self._sleep(SWEEP_S)
            self.sweep()

    def sweep(self) -> None:
        self.reports.sweep(self.extender.dra_problems())
        self.reports.warnings(self.extender.dra_warnings())

    async def _until_served(self) -> None:
        """Return once a one-item list of each kind succeeds. 404/403: log once, release readiness, ask
        again every ``REPROBE_S``; a passing failure (API down, 5xx, 429): ask again sooner, readiness held."""
        pause = PROBE_RETRY_S[0]
        while True:
            why = await self._probe()
            if why is None:
                return
            if why != self.unavailable:
                self.unavailable = why
                log.warning("DRA: %s; ResourceClaims are NOT counted (asking again every %.0fs)", why, REPROBE_S)
            if why.startswith(("not served", "not allowed")):
                self.on_synced()  # readiness is not held hostage by an API that is not there
                await self._sleep(REPROBE_S)
            else:
                await self._sleep(pause)
                pause = min(pause * 2, PROBE_RETRY_S[1])

    async def _probe(self) -> str | None:
        """None when each of the three kinds answers a one-item list; else why not (the first that did not)."""
        kinds: tuple[tuple[Resource, type[KubeObject]], ...] = (
            (RESOURCE_SLICES, ResourceSlice),
            (RESOURCE_CLAIMS, ResourceClaim),
            (DEVICE_CLASSES, DeviceClass),
        )
        for resource, kind in kinds:
            try:
                async for _page in self.client.list_pages(resource, type=kind, limit=1):
                    break
            except NotFound:
                return f"not served: the API server has no {resource} ({API}, HTTP 404)"
            except ApiError as err:
                if err.status == 403:
                    return (
                        f"not allowed: listing {resource} was refused (HTTP 403); hami's ClusterRole needs list and "
                        f"watch on resourceslices, resourceclaims and deviceclasses of resource.k8s.io ({err})"
                    )
                return f"the probe of {resource} failed: {err}"
        return None

    def _slice(self, obj: ResourceSlice, deleted: bool) -> None:
        self.reports.problems(self.extender.on_resource_slice(obj, deleted=deleted))
        if self.watching:
            self.reports.warnings(self.extender.dra_warnings())

    def _claim(self, obj: ResourceClaim, deleted: bool) -> None:
        self.reports.problems(self.extender.on_resource_claim(obj, deleted=deleted))
        if self.on_claim is not None:
            self.on_claim(obj, deleted)

    def _class(self, obj: DeviceClass, deleted: bool) -> None:
        self.reports.problems(self.extender.on_device_class(obj, deleted=deleted))
        if self.watching:
            self.reports.warnings(self.extender.dra_warnings())


class DraCollector(Collector):
    """``hami_dra_*`` gauges, computed at scrape time (small: only the cards DRA claims hold)."""

    def __init__(
        self,
        state: Callable[[], ClusterState],
        problems: Callable[[], Iterable[DraProblem]],
        warnings: Callable[[], Iterable[DraWarning]],
        watching: Callable[[], bool],
    ) -> None:
        self._state = state
        self._problems = problems
        self._warnings = warnings
        self._watching = watching

    def collect(self) -> Iterator[Metric]:
        watching = GaugeMetricFamily(
            "hami_dra_watching", "1 while hami watches resource.k8s.io/v1 ResourceSlices and ResourceClaims"
        )
        watching.add_metric([], 1 if self._watching() else 0)
        yield watching
        yield from _by_kind(
            "hami_dra_problems",
            "DRA allocations hami cannot count as it should, by kind (see the Warning events on the claims)",
            [str(p.kind) for p in self._problems()],
            [str(k) for k in ProblemKind],
        )
        yield from _by_kind(
            "hami_dra_warnings", "DRA configuration traps found, by kind", [str(w.kind) for w in self._warnings()], []
        )
        yield from _held(self._state())


def _by_kind(name: str, documentation: str, kinds: list[str], always: list[str]) -> Iterator[Metric]:
    family = GaugeMetricFamily(name, documentation, labels=["kind"])
    counts = dict.fromkeys(always, 0)
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    for kind, n in sorted(counts.items()):
        family.add_metric([kind], n)
    yield family


def _held(state: ClusterState) -> Iterator[Metric]:
    labels = ["node", "device_uuid", "device_index", "device_type", "zone"]
    mem = GaugeMetricFamily("hami_dra_memory_held_bytes", "Device memory held by DRA ResourceClaims", labels=labels)
    cores = GaugeMetricFamily("hami_dra_core_held_ratio", "Device cores held by DRA ResourceClaims", labels=labels)
    slots = GaugeMetricFamily("hami_dra_shared_count", "Sharing slots held by DRA ResourceClaims", labels=labels)
    claims = GaugeMetricFamily("hami_dra_claims", "DRA ResourceClaims holding part of the device", labels=labels)
    for (node, vendor, uuid), held in sorted(held_by_card(state).items()):
        index, model = _card(state, node, vendor, uuid)
        values = [node, uuid, index, model, _ZONE]
        mem.add_metric(values, held.mem * _MIB)
        cores.add_metric(values, held.cores)
        slots.add_metric(values, held.slots)
        claims.add_metric(values, held.claims)
    yield from (mem, cores, slots, claims)


def _card(state: ClusterState, node: str, vendor: str, uuid: str) -> tuple[str, str]:
    """The card's index and type as the device gauges label it ("" when the registration no longer has it)."""
    seen = state.nodes.get(node)
    table = seen.tables.get(vendor) if seen is not None else None
    for info in table.infos if table is not None else ():
        if info.id == uuid:
            return str(info.index), info.type
    return "", ""


def dra_mode(configured: bool, server: ServerProfile | None) -> str:
    """``"watch"``, or why not: DRA is not configured, or the server's release has no ``resource.k8s.io/v1``
    (older than 1.34). An unknown release (None) is watched: the probe then tells whether the API is served."""
    if not configured:
        return "off (dra.enabled is false or no driver is listed)"
    if server is not None and not server.dra_api:
        return f"not watched: Kubernetes {server.version} has no {API} (1.34+)"
    return "watch"


def start_dra(
    client: KubeClient,
    extender: Extender,
    events: EventRecorder,
    metrics: Metrics,
    supervisor: Supervisor,
    on_synced: Callable[[], None],
    is_leader: Callable[[], bool] = lambda: True,
) -> DraWatches:
    """Register the ``hami_dra_*`` metrics and start the watches (``on_synced``: their first lists are in, or the
    API is not there)."""
    raised = Counter(
        "hami_dra_problems_raised",
        "DRA problems reported (log line and Warning event), by kind",
        ["kind"],
        registry=metrics.own,
    )
    for kind in ProblemKind:
        raised.labels(str(kind))
    watches = DraWatches(client, extender, DraReports(events, raised, is_leader=is_leader), on_synced)
    metrics.own.register(
        DraCollector(lambda: extender.state, extender.dra_problems, extender.dra_warnings, lambda: watches.watching)
    )
    supervisor.start(watches.run(supervisor), name="watch-dra")
    return watches
