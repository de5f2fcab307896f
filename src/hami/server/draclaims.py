"""DRA mode's claim controller: creates the ResourceClaims ``/webhook/dra`` made pods refer to (docs/dra-mode.md).

The webhook has no side effects; a translated pod names claims that do not exist yet (``spec.resourceClaims[]
.resourceClaimName``), and kube-scheduler waits for them. This controller, in the leader only, creates them:

* **Fed by the watches hami already has.** The pod watch (:meth:`ClaimController.pod_seen`) hands it every pod; it
  serves those ``hami.scheduling.dra.podclaims.served`` accepts (hami's scheduler name, unbound, labelled
  ``hami.io/dra``, carrying ``hami.io/dra-requests``). The ResourceClaim watch (:meth:`ClaimController.claim_seen`,
  when hami counts DRA claims) tells it which claims exist and whose they are, and a claim deleted while its pod
  still waits is created again. A leader that just took over catches up by a sweep of the pod store every
  ``resync_s``.
* **Each claim re-translated** from the pod's recorded HAMi request (``podclaims.plan``), never a tenant's spec;
  created owned by the pod from birth (``ownerReferences`` with ``controller`` and ``blockOwnerDeletion``), so
  kube-controller-manager's garbage collector deletes it with the pod.
* **One write per claim.** A claim created (or found to be the pod's) is remembered until the pod or the claim is
  deleted; the pod's later updates cost nothing. ``409 AlreadyExists``: one GET says whose it is — the pod's (by
  UID) is done, another owner's (or none) is a Warning Event ``DRAClaimConflict`` on the pod, never adopted.
* **Bounded.** At most ``concurrency`` creates in flight; a create refused for a passing reason (5xx, 429, no
  connection) is sent again after a growing pause, ``attempts`` times at most (the client itself already waits out
  a ``Retry-After``). A request that does not translate is a Warning Event ``DRAClaimRefused`` naming the field and
  value; a create the API server refuses for good (403, 422), ``DRAClaimFailed``.
* **Counted.** ``hami_dra_claims_created_total{result}``: ``created``, ``exists`` (already the pod's), ``conflict``,
  ``refused``, ``failed``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry, Counter

from hami.errors import ApiError, Conflict, NotFound, TooManyRequests
from hami.k8s.client import KubeClient
from hami.k8s.events import EventRecorder
from hami.k8s.records import ObjectRef
from hami.k8s.resources import RESOURCE_CLAIMS
from hami.k8s.tasks import Supervisor
from hami.protocol.dra import OwnerReference, ResourceClaim
from hami.protocol.events import EventType
from hami.protocol.objects import Pod
from hami.scheduling.dra.podclaims import (
    DRA_LABEL,
    DRA_POD_ANNOTATION,
    ClaimPlanItem,
    Translate,
    owned_by,
    plan,
    served,
)

__all__ = [
    "CLAIM_CONFLICT",
    "CLAIM_FAILED",
    "CLAIM_REFUSED",
    "RESULTS",
    "ClaimController",
    "ClaimControllerSettings",
]

log = logging.getLogger("hami.dra.claims")

CLAIM_CONFLICT: Final = "DRAClaimConflict"
"""Event reason: a claim the pod names exists with another owner (or none); hami does not adopt it."""
CLAIM_REFUSED: Final = "DRAClaimRefused"
"""Event reason: the pod's recorded request does not translate into a claim (the message names field and value)."""
CLAIM_FAILED: Final = "DRAClaimFailed"
"""Event reason: the API server refused to create the claim (the message is its answer)."""
RESULTS: Final = ("created", "exists", "conflict", "refused", "failed")
"""The values of ``hami_dra_claims_created_total``'s ``result`` label."""


@dataclass(frozen=True, slots=True)
class ClaimControllerSettings:
    """How hard the claim controller pushes the API server."""

    concurrency: int = 16
    """Creates in flight at once: a deployment scaled up by hundreds makes as many claims; kube-scheduler waits
    for each, so they should not queue one by one, yet the API server's other clients keep their share."""
    attempts: int = 6
    """Sends of one create at most, for passing failures (5xx, 429, no connection): with ``backoff`` about 15 s in
    all, long enough for an API server restart behind a load balancer."""
    backoff: float = 0.5
    """First pause before sending again (doubling, up to ``backoff_max``, stretched up to half at random)."""
    backoff_max: float = 8.0
    resync_s: float = 30.0
    """How often the pod store is swept for served pods whose claims are missing (a new leader's catch-up; a pod
    whose claim was deleted while hami did not watch claims)."""


def _passing(err: ApiError) -> bool:
    """A failure worth sending the create again for: no answer, load shedding, a server error."""
    return err.status == 0 or isinstance(err, TooManyRequests) or err.status >= 500


class ClaimController:
    """Creates the claims of DRA-mode pods (module docstring). Call :meth:`pod_seen` and :meth:`claim_seen` from
    the watches, and run :meth:`run` under a supervisor."""

    def __init__(
        self,
        client: KubeClient,
        events: EventRecorder,
        translate: Translate,
        scheduler_name: str,
        registry: CollectorRegistry,
        *,
        pods: Callable[[], Mapping[str, Pod]] = dict,
        is_leader: Callable[[], bool] = lambda: True,
        settings: ClaimControllerSettings = ClaimControllerSettings(),  # frozen, shared on purpose
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.client = client
        self.events = events
        self.translate = translate
        self.scheduler_name = scheduler_name
        self.pods = pods
        self.is_leader = is_leader
        self.settings = settings
        self._sleep = sleep
        self._slots = asyncio.Semaphore(settings.concurrency)
        self._random = random.Random()
        self.results = Counter(
            "hami_dra_claims_created",
            "ResourceClaims of DRA-mode pods the claim controller handled, by result",
            ["result"],
            registry=registry,
        )
        for result in RESULTS:
            self.results.labels(result)
        self.owners: dict[str, tuple[OwnerReference, ...]] = {}
        """``namespace/name`` → owners of the claims known to exist (the claim watch's and this controller's)."""
        self._busy: dict[str, Pod] = {}
        """Pods (by UID) being served now → the newest version seen meanwhile (served again once done)."""
        self._reported: set[tuple[str, str, str]] = set()
        """(pod UID, claim, reason) of the Warning Events written, so that a pod's updates do not repeat them."""
        self._failed: set[tuple[str, str]] = set()
        """(pod UID, claim) whose create the API server refused for good: not sent again for that pod."""
        self._tasks: Supervisor | None = None

    # --- feeds ------------------------------------------------------------------------------------------
    def pod_seen(self, pod: Pod, deleted: bool) -> None:
        """The pod watch's handler: serve the pod if it needs claims (leader only)."""
        uid = pod.metadata.uid
        if deleted:
            self._reported = {r for r in self._reported if r[0] != uid}
            self._failed = {f for f in self._failed if f[0] != uid}
            return
        if self._tasks is None or not self.is_leader() or not served(pod, self.scheduler_name):
            return
        if uid in self._busy:
            self._busy[uid] = pod
            return
        if self._todo(pod):
            self._busy[uid] = pod
            self._tasks.once(self._serve(pod), name=f"dra-claims-{pod.metadata.namespace}-{pod.metadata.name}")

    def claim_seen(self, claim: ResourceClaim, deleted: bool) -> None:
        """The claim watch's handler: remember who owns each claim; a claim of a waiting pod deleted is made
        again."""
        meta = claim.metadata
        key = f"{meta.namespace}/{meta.name}"
        if not deleted:
            self.owners[key] = tuple(meta.owner_references)
            return
        self.owners.pop(key, None)
        pod_name = meta.annotations.get(DRA_POD_ANNOTATION)
        if meta.labels.get(DRA_LABEL) == "true" and pod_name:
            pod = self.pods().get(f"{meta.namespace}/{pod_name}")
            if pod is not None:
                self.pod_seen(pod, deleted=False)

    # --- work -------------------------------------------------------------------------------------------
    async def run(self, tasks: Supervisor) -> None:
        """Accept work from the feeds; sweep the pod store every ``resync_s`` (leader only)."""
        self._tasks = tasks
        while True:
            if self.is_leader():
                for pod in list(self.pods().values()):
                    self.pod_seen(pod, deleted=False)
            await self._sleep(self.settings.resync_s)

    def _existing(self, namespace: str) -> Mapping[str, Sequence[OwnerReference]]:
        prefix = f"{namespace}/"
        return {key[len(prefix) :]: owners for key, owners in self.owners.items() if key.startswith(prefix)}

    def _todo(self, pod: Pod) -> bool:
        """Whether the pod names a claim not known to exist (and not given up), or one of another owner not
        reported yet."""
        ns, uid = pod.metadata.namespace, pod.metadata.uid
        for name in (c.resource_claim_name for c in pod.spec.resource_claims if c.resource_claim_name):
            owners = self.owners.get(f"{ns}/{name}")
            if owners is None and (uid, name) not in self._failed:
                return True
            if owners is not None and not owned_by(owners, uid) and (uid, name, CLAIM_CONFLICT) not in self._reported:
                return True
        return False

    async def _serve(self, pod: Pod) -> None:
        """Create the pod's missing claims (each under a slot), report what cannot be; then serve the version
        seen meanwhile, if any."""
        uid = pod.metadata.uid
        try:
            while True:
                await self._serve_once(pod)
                newer = self._busy.get(uid)
                if newer is None or newer is pod or not served(newer, self.scheduler_name) or not self._todo(newer):
                    return
                pod = newer
        finally:
            self._busy.pop(uid, None)

    async def _serve_once(self, pod: Pod) -> None:
        ns = pod.metadata.namespace
        work = plan(pod, self._existing(ns), self.translate)
        for refusal in work.refused:
            self.results.labels("refused").inc()
            self._warn(pod, refusal.name, CLAIM_REFUSED, refusal.message)
        for name in work.foreign:
            self._conflict(pod, name, self.owners.get(f"{ns}/{name}", ()))
        uid = pod.metadata.uid
        await asyncio.gather(*(self._create(pod, item) for item in work.create if (uid, item.name) not in self._failed))

    async def _create(self, pod: Pod, item: ClaimPlanItem) -> None:
        """Send one create until it is answered for good (``attempts`` at most); record the result."""
        ns, key = pod.metadata.namespace, f"{pod.metadata.namespace}/{item.name}"
        pause = self.settings.backoff
        for attempt in range(1, self.settings.attempts + 1):
            if not self._current(pod):
                return  # deleted or replaced meanwhile: its claim would be collected at once
            try:
                async with self._slots:
                    created = await self.client.create(RESOURCE_CLAIMS, item.body, type=ResourceClaim, namespace=ns)
            except Conflict:
                await self._exists(pod, item.name)
                return
            except ApiError as err:
                if _passing(err) and attempt < self.settings.attempts:
                    log.info("DRA claim %s for pod %s: %s; sending again in %.1fs", key, pod.key, err, pause)
                    await self._sleep(pause * (1 + 0.5 * self._random.random()))
                    pause = min(pause * 2, self.settings.backoff_max)
                    continue
                self.results.labels("failed").inc()
                self._failed.add((pod.metadata.uid, item.name))
                log.warning("DRA claim %s for pod %s could not be created: %s", key, pod.key, err)
                self._warn(pod, item.name, CLAIM_FAILED, f"claim {item.name} could not be created: {err}")
                return
            self.owners.setdefault(key, tuple(created.metadata.owner_references))
            self.results.labels("created").inc()
            log.debug("DRA claim %s created for pod %s", key, pod.key)
            return

    async def _exists(self, pod: Pod, name: str) -> None:
        """After ``409 AlreadyExists``: whose is it? The pod's: done. Another's: reported, never adopted."""
        ns = pod.metadata.namespace
        try:
            claim = await self.client.get(RESOURCE_CLAIMS, name, type=ResourceClaim, namespace=ns)
        except NotFound:
            return  # deleted meanwhile: the claim watch's DELETED (or the next sweep) serves the pod again
        except ApiError as err:
            log.warning("DRA claim %s/%s exists; reading its owner failed: %s", ns, name, err)
            return
        owners = tuple(claim.metadata.owner_references)
        self.owners[f"{ns}/{name}"] = owners
        if owned_by(owners, pod.metadata.uid):
            self.results.labels("exists").inc()
            return
        self._conflict(pod, name, owners)

    def _conflict(self, pod: Pod, name: str, owners: Sequence[OwnerReference]) -> None:
        holder = next((f"{o.kind} {o.name} (uid {o.uid})" for o in owners if o.controller), "no owner")
        self.results.labels("conflict").inc()
        message = (
            f"claim {name} already exists, owned by {holder}, not by this pod: hami does not adopt it; "
            f"delete the claim or recreate the pod"
        )
        self._warn(pod, name, CLAIM_CONFLICT, message)

    def _current(self, pod: Pod) -> bool:
        """Whether the pod store still holds this pod (same UID). An empty store (tests) believes it."""
        store = self.pods()
        if not store:
            return True
        now = store.get(pod.key)
        return now is not None and now.metadata.uid == pod.metadata.uid

    def _warn(self, pod: Pod, claim: str, reason: str, message: str) -> None:
        key = (pod.metadata.uid, claim, reason)
        if key in self._reported:
            return
        self._reported.add(key)
        log.warning("DRA pod %s: %s: %s", pod.key, reason, message)
        self.events.record(ObjectRef.for_pod(pod), EventType.WARNING, reason, message)
