"""The PodGroup watches (docs/gangs.md): each gang's minimum and its scheduling condition, fed to the extender
(``Extender.on_pod_group``), from whichever version of each PodGroup API the cluster serves.

At start the API discovery says which versions of ``scheduling.k8s.io`` (kube-scheduler's gang scheduling) and of
``scheduling.x-k8s.io`` (the coscheduling plugin's CRD) serve ``podgroups``; the newest one known
(``hami.protocol.podgroup.PREFERRED_VERSIONS``) is watched, and the choice is logged once. A group not served is
not watched (gangs still release on a member that fits nowhere; their minimum is then every member). A watch that
is refused (the ClusterRole lacks it) is logged and retried by the reflector like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from hami.errors import ApiError
from hami.k8s.client import KubeClient
from hami.k8s.resources import Resource
from hami.k8s.tasks import Supervisor
from hami.k8s.watch import Callbacks, Reflector
from hami.protocol.podgroup import GANG_API_GROUP, LABEL_API_GROUP, PREFERRED_VERSIONS, PodGroup, pod_group_state

__all__ = ["served_pod_groups", "start_pod_group_watches"]

log = logging.getLogger("hami.gangs")

OnGroup = Callable[[str, str, int | None, bool, bool], None]
"""``Extender.on_pod_group(namespace, name, minimum, failed, deleted)``."""


async def served_pod_groups(client: KubeClient, group: str) -> Resource | None:
    """The ``podgroups`` resource of ``group`` in the newest version the cluster serves it in, or None."""
    try:
        served = await client.served_resources(group, PREFERRED_VERSIONS)
    except ApiError as err:
        log.warning("gangs: API discovery of %s failed (%s); its PodGroups are not read", group, err)
        return None
    for version in PREFERRED_VERSIONS:
        if "podgroups" in served.get(version, ()):
            return Resource(group, version, "podgroups", namespaced=True)
    return None


async def start_pod_group_watches(client: KubeClient, on_group: OnGroup, supervisor: Supervisor) -> list[str]:
    """Watch the PodGroups of both APIs where served; returns the ``group/version`` of each watch started."""
    started: list[str] = []
    for group in (GANG_API_GROUP, LABEL_API_GROUP):
        resource = await served_pod_groups(client, group)
        if resource is None:
            log.info("gangs: the cluster serves no PodGroups of %s; not watched", group)
            continue
        log.info("gangs: reading PodGroups of %s/%s", group, resource.version)
        reflector = Reflector(client, resource, PodGroup, Callbacks(_handler(on_group)))
        supervisor.start(reflector.run(), name=f"watch-podgroups-{group}")
        started.append(f"{group}/{resource.version}")
    return started


def _handler(on_group: OnGroup) -> Callable[[PodGroup, bool], None]:
    def on_change(obj: PodGroup, deleted: bool) -> None:
        minimum, failed = pod_group_state(obj)
        on_group(obj.metadata.namespace, obj.metadata.name, minimum, failed, deleted)

    return on_change
