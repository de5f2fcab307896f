"""The ledger against the API: what a fresh list of pods says each pod holds, compared with the ledger.

``ClusterState.verify`` recounts the ledger from its own records, so it cannot see a record that should not be
there (a pod deleted while the watch was not looking) or one that is missing. This module compares the records
with what the API holds: the shell lists every pod, turns each one into a record exactly as the pod watch does
(``records.record_from_pod``) and hands the records here. Three kinds of difference:

* ``leaked`` — the ledger charges a pod that the API does not show holding devices (deleted, finished, or its
  allocation annotations gone);
* ``missing`` — the API shows a pod holding devices that the ledger does not charge;
* ``changed`` — both have the pod, with other devices, amounts or node.

A list is a snapshot and the watch keeps moving meanwhile, so a difference can be a mere race: a pod created or
deleted between the list and the comparison, a watch event not delivered yet, a reservation of hami's own
``/filter`` whose annotations have not come back (*pending*). Pending pods are never compared, and a difference
counts only when it is **confirmed**: the very same difference (same kind, same pod version in the API, same
ledger record) was found by the previous check too. Checks are minutes apart; a race lasts milliseconds.

``repair`` then makes the ledger hold, for each confirmed difference, what the watch handler would have made of
the listed pod: drop a leaked record, charge a missing one, replace a changed one. It re-checks that the pod is
still not pending and that the ledger still holds the record that was compared, so it only ever acts on state it
has seen twice. The ledger is, by definition, the API's pods plus pending reservations; that is the only
direction a repair can move it.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass

from hami.scheduling.state import ClusterState, PodRecord

__all__ = ["ApiDrift", "DriftKind", "compare_with_api", "confirmed", "repair"]


class DriftKind(enum.StrEnum):
    LEAKED = "leaked"
    MISSING = "missing"
    CHANGED = "changed"


@dataclass(frozen=True, slots=True)
class ApiDrift:
    """One pod on which the ledger and the API disagree.

    ``ledger`` is the ledger's record (None for ``missing``), ``api`` the record made from the listed pod (None
    for ``leaked``), ``version`` the listed pod's resourceVersion ("" when the list does not hold the pod).
    """

    kind: DriftKind
    uid: str
    ledger: PodRecord | None
    api: PodRecord | None
    version: str = ""

    @property
    def pod(self) -> str:
        record = self.ledger or self.api
        assert record is not None
        return record.key

    @property
    def key(self) -> Hashable:
        """Identity of the difference across checks: equal only when nothing about it moved."""
        return (self.kind, self.uid, self.version, _content(self.ledger), _content(self.api))

    def describe(self) -> str:
        """A line for a person: which pod, what the ledger holds, what the API holds."""
        ledger = _summary(self.ledger) if self.ledger else "nothing"
        api = _summary(self.api) if self.api else "no devices (pod gone, finished, or without an allocation)"
        return f"{self.kind} pod {self.pod} (uid {self.uid}): ledger charges {ledger}; the API holds {api}"


def compare_with_api(
    ledger: Mapping[str, PodRecord],
    api: Mapping[str, PodRecord],
    versions: Mapping[str, str],
    pending: Collection[str],
) -> list[ApiDrift]:
    """Every pod (by UID) whose ledger record differs from its API record, pending reservations left out.

    ``api`` holds a record for each listed pod that holds devices; ``versions`` the resourceVersion of listed pods
    by UID (at least those in ``api`` or ``ledger``). Sorted by pod for stable logs. Pure; O(records).
    """
    drifts: list[ApiDrift] = []
    for uid, mine in ledger.items():
        if uid in pending:
            continue
        theirs = api.get(uid)
        if theirs is None:
            drifts.append(ApiDrift(DriftKind.LEAKED, uid, mine, None, versions.get(uid, "")))
        elif _content(mine) != _content(theirs):
            drifts.append(ApiDrift(DriftKind.CHANGED, uid, mine, theirs, versions.get(uid, "")))
    for uid, theirs in api.items():
        if uid not in ledger and uid not in pending:
            drifts.append(ApiDrift(DriftKind.MISSING, uid, None, theirs, versions.get(uid, "")))
    drifts.sort(key=lambda d: (d.pod, d.uid))
    return drifts


def confirmed(previous: Collection[Hashable], drifts: list[ApiDrift]) -> list[ApiDrift]:
    """The differences that the previous check (``previous``: its ``ApiDrift.key`` values) found unchanged."""
    return [d for d in drifts if d.key in previous]


def repair(state: ClusterState, drifts: list[ApiDrift], pending: Collection[str]) -> list[ApiDrift]:
    """Apply confirmed differences to the ledger as the pod watch would have; returns those applied.

    A difference is skipped when its pod became pending or the ledger no longer holds exactly the record that was
    compared (the watch moved on: the next check looks again).
    """
    applied: list[ApiDrift] = []
    for drift in drifts:
        current = state.pods.get(drift.uid)
        if drift.uid in pending or _content(current) != _content(drift.ledger):
            continue
        if current is not None:
            state.remove_pod(drift.uid)
        if drift.api is not None:
            state.apply(drift.api, add=True)
        applied.append(drift)
    return applied


def _content(record: PodRecord | None) -> Hashable:
    """What a record charges (the watch handler's notion of "the same record")."""
    if record is None:
        return None
    return (record.node, record.charges, record.slices)


def _summary(record: PodRecord) -> str:
    devices = ", ".join(f"{c.uuid} ({c.mem} MiB, {c.cores} cores)" for c in record.charges) or "no device"
    return f"{devices} on {record.node}"
