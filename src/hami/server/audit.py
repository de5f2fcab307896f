"""The periodic re-list of pods that checks the ledger against the API (the comparison is ``hami.scheduling.audit``).

Every ``API_AUDIT_SECONDS`` the runtime's self-check loop runs :meth:`LedgerAudit.run`: list every pod that has not
finished (paginated, one consistent snapshot), turn each pod into a record as the pod watch does (believing what it
believes, ``records.believed_node``: a pod of another scheduler counts only while the ledger holds it as this
process's own reservation), compare with the ledger leaving out hami's pending ``/filter`` reservations, and act on
the differences that the previous re-list found unchanged: each is logged, counted in ``hami_ledger_api_drift{kind}``
and repaired (the ledger set to what the watch would have made of the listed pod; ``hami_ledger_api_repairs{kind}``).
A difference seen once is logged at info level and looked at again next time. Nothing runs before the caches have
synced, and a failed list is logged, counted as an API error and retried at the next period.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Collection, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from hami.devices.base import Vendor
from hami.errors import ApiError, InvalidInput
from hami.k8s.client import ListPage
from hami.protocol.objects import Pod
from hami.scheduling.audit import ApiDrift, DriftKind, compare_with_api, confirmed, repair
from hami.scheduling.records import HAMI_SCHEDULER, RecordReader, holds_devices
from hami.scheduling.state import ClusterState, PodRecord
from hami.server.metrics import Metrics

__all__ = ["API_AUDIT_SECONDS", "LedgerAudit", "PodLister"]

log = logging.getLogger("hami.audit")

API_AUDIT_SECONDS: Final = 300.0
"""How often the ledger is compared with a fresh list of pods. A list of every pod costs the API server about what
one informer relist does; every 5 minutes keeps that small, and a difference is acted on after two lists (5 to 10
minutes after it appeared)."""
PAGE_SIZE: Final = 500
"""Pods per list page, the API server's recommended chunk (as the reflectors use)."""
LOG_LINES: Final = 20
"""At most this many differences are logged per check (the metric has the full count)."""


class PodLister(Protocol):
    """The one API read the audit makes (``KubeCluster`` and ``MemoryCluster`` implement it)."""

    def list_pods(self, page_size: int = ...) -> AsyncIterator[ListPage[Pod]]: ...


@dataclass
class LedgerAudit:
    """Compares ``state``'s pod records with the API's pods; ``pending`` returns the UIDs of hami's own
    reservations whose annotations have not come back through the watch yet, ``ready`` whether the caches are
    synced."""

    state: ClusterState
    vendors: Mapping[str, Vendor]
    lister: PodLister
    metrics: Metrics
    pending: Callable[[], Collection[str]]
    ready: Callable[[], bool] = lambda: True
    page_size: int = PAGE_SIZE
    schedulers: Collection[str] = (HAMI_SCHEDULER,)
    """hami's scheduler names (``--scheduler-name``): the pods believed without a reservation of this process."""
    previous: frozenset[Hashable] = field(default_factory=frozenset)
    """``ApiDrift.key`` of every difference the last check found (confirmed or not)."""

    async def run(self) -> list[ApiDrift] | None:
        """One check. Returns the confirmed differences (all repaired where the ledger had not moved meanwhile),
        or None when no check was made (caches not synced, or the list failed)."""
        if not self.ready():
            return None
        try:
            api, versions = await self._list()
        except (ApiError, InvalidInput) as err:
            self.metrics.api_errors.labels("list_pods").inc()
            log.warning("re-listing pods to check the ledger failed (next try in %.0f s): %s", API_AUDIT_SECONDS, err)
            return None
        pending = self.pending()
        drifts = compare_with_api(self.state.pods, api, versions, pending)
        sure = confirmed(self.previous, drifts)
        self.previous = frozenset(d.key for d in drifts)
        repaired = repair(self.state, sure, pending)
        self._report(drifts, sure, repaired)
        return sure

    async def _list(self) -> tuple[dict[str, PodRecord], dict[str, str]]:
        """Records of the listed pods that hold devices, and the resourceVersion of those and of ledger pods."""
        api: dict[str, PodRecord] = {}
        versions: dict[str, str] = {}
        seen_first = False
        reader = RecordReader(self.vendors, self.schedulers)
        async for page in self.lister.list_pods(self.page_size):
            if page.first and seen_first:  # the listing started over: forget the partial one
                api.clear()
                versions.clear()
            seen_first = True
            for pod in page.items:
                uid = pod.metadata.uid
                # believed as the watch believes it: a record in the ledger under a pod's UID that the pod alone
                # does not justify is this process's own reservation (``Cycle._watch_allocation``)
                record = reader.read(pod, ours=uid in self.state.pods) if holds_devices(pod) else None
                if record is not None:
                    api[uid] = record
                if record is not None or uid in self.state.pods:
                    versions[uid] = pod.metadata.resource_version
        return api, versions

    def _report(self, drifts: list[ApiDrift], sure: list[ApiDrift], repaired: list[ApiDrift]) -> None:
        counts = dict.fromkeys(DriftKind, 0)
        for drift in sure:
            counts[drift.kind] += 1
        for kind, n in counts.items():
            self.metrics.ledger_api_drift.labels(kind.value).set(n)
        for drift in repaired:
            self.metrics.ledger_api_repairs.labels(drift.kind.value).inc()
        done = {d.uid for d in repaired}
        sure_uids = {d.uid for d in sure}
        for drift in sure[:LOG_LINES]:
            action = "repaired" if drift.uid in done else "left alone: the ledger changed meanwhile"
            log.warning("ledger differs from the API (seen by two re-lists): %s; %s", drift.describe(), action)
        fresh = [d for d in drifts if d.uid not in sure_uids]
        for drift in fresh[:LOG_LINES]:
            log.info("ledger differs from the API (checking again at the next re-list): %s", drift.describe())
        hidden = max(len(sure) - LOG_LINES, 0) + max(len(fresh) - LOG_LINES, 0)
        if hidden:
            log.warning("%d more differences between the ledger and the API not logged", hidden)
