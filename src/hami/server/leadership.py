"""Leadership with ``--leader-elect``: the Lease kube-scheduler holds says which replica leads (``Leadership``), and
this replica's pod carries its role as the label ``hami.io/scheduler-role`` that the Service selects."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from hami.errors import ApiError
from hami.k8s.cluster import ClusterClient
from hami.k8s.records import Lease
from hami.protocol import keys
from hami.server.metrics import Metrics

__all__ = ["ROLE_CHECK_SECONDS", "Leadership"]

log = logging.getLogger("hami.scheduler")

ROLE_CHECK_SECONDS = 0.5
"""How often leadership is compared with the pod's role label (no API call unless it changed)."""


@dataclass
class Leadership:
    """Whether this replica leads, from the Lease's watch events (``on_lease``)."""

    elect: bool
    """``--leader-elect``; without it this replica always leads."""
    identity: str
    """This replica's host name, as kube-scheduler writes it into the Lease's holder."""
    lease_holder: str = ""
    lease_expiry: float = 0.0
    role_written: str = ""
    """The ``hami.io/scheduler-role`` value last written on this replica's own pod ("" before the first)."""

    def is_leader(self) -> bool:
        """Without leader election, always. With it: the Lease's holder is this host (exact name before the
        ``_`` kube-scheduler appends; HAMi compares a prefix, so ``sched-1`` would match ``sched-10``) and the
        lease has not expired."""
        if not self.elect:
            return True
        holder = self.lease_holder.split("_", 1)[0]
        return holder == self.identity and time.time() < self.lease_expiry

    def on_lease(self, obj: Lease, deleted: bool) -> None:
        if deleted:
            self.lease_holder, self.lease_expiry = "", 0.0
            return
        spec = obj.spec
        self.lease_holder = spec.holder_identity or ""
        renew = _parse_time(spec.renew_time) if spec.renew_time else None
        duration = spec.lease_duration_seconds or 15
        self.lease_expiry = (renew.timestamp() if renew else time.time()) + duration

    async def label_role(self, cluster: ClusterClient, metrics: Metrics, namespace: str, name: str) -> None:
        """Keep this replica's pod labelled ``hami.io/scheduler-role: leader`` or ``follower`` (HAMi's label, which
        its Service selects), checked every ``ROLE_CHECK_SECONDS``: the role changes with Lease events and with
        the time a Lease expires. A failed write is tried again at the next check."""
        uid: str | None = None
        while True:
            role = "leader" if self.is_leader() else "follower"
            if role != self.role_written:
                try:
                    if uid is None:
                        uid = (await cluster.get_pod(namespace, name)).metadata.uid
                    await cluster.patch_pod_metadata(namespace, name, labels={keys.SCHEDULER_ROLE_LABEL: role}, uid=uid)
                    self.role_written = role
                    log.info("this replica is the %s now: pod %s/%s labelled %s", role, namespace, name, role)
                except ApiError as err:
                    metrics.api_errors.labels("patch_pod").inc()
                    log.warning("labelling pod %s/%s as %s failed: %s", namespace, name, role, err)
            await asyncio.sleep(ROLE_CHECK_SECONDS)


def _parse_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None
