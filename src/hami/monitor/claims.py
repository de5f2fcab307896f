"""The regions of DRA claims prepared by hami's DRA plugin, mapped to the containers that use them.

hami's DRA plugin (HAMi's layout) gives each claim one HAMi-core cache, ``<hook>/vgpu/claims/<claim UID>/<id>.cache``,
shared by every container the claim is given to: the region holds the claim's usage, not one container's. The
directory names the claim by UID only. The plugin's checkpoint (``checkpoint.json`` in kubelet's plugin directory
of ``hami-core-gpu.project-hami.io``) maps the UID to the claim's namespace and name, and the pods on this node say
which claims they use (``spec.resourceClaims``, with the generated name in ``status.resourceClaimStatuses`` for a
template) and which of their containers use each (``resources.claims``).

* A claim that containers on this node use is reported once per such container (the claim's usage each time).
* A claim tied to no container (no checkpoint, an entry missing from it, or no pod here naming the claim) is
  reported by claim: ``pod=""`` and ``container="claim:<name>"`` (``claim:<uid>`` when even the name is unknown).

Claim directories are never removed here: the DRA plugin removes them when it unprepares the claim. Work is bounded
as for container directories (``max_regions``); what cannot be used is a :class:`~.scan.Skipped`, never raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from hami.monitor.scan import ContainerRegion, ScanResult, directory_mtime, entries, region_in
from hami.protocol.objects import Pod

__all__ = ["ClaimOwner", "claim_users", "scan_claims"]

ClaimOwner = tuple[str, str]
"""(namespace, name) of a claim."""


def _claim_names(pod: Pod) -> dict[str, str]:
    """The pod's claim entries (``spec.resourceClaims[].name``) → the ResourceClaim each resolves to."""
    generated = {s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses if s.resource_claim_name}
    names = {}
    for entry in pod.spec.resource_claims:
        claim = entry.resource_claim_name or generated.get(entry.name, "")
        if claim:
            names[entry.name] = claim
    return names


def claim_users(pods: Iterable[Pod]) -> dict[ClaimOwner, list[tuple[Pod, str]]]:
    """Each claim the ``pods`` use → (pod, container name) of every container given it, in pod and container
    order (init containers first)."""
    users: dict[ClaimOwner, list[tuple[Pod, str]]] = {}
    for pod in sorted(pods, key=lambda p: (p.metadata.namespace, p.metadata.name)):
        names = _claim_names(pod)
        for container in (*pod.spec.init_containers, *pod.spec.containers):
            used = {names[c.name] for c in container.resources.claims if c.name in names}
            for claim in sorted(used):
                users.setdefault((pod.metadata.namespace, claim), []).append((pod, container.name))
    return users


def scan_claims(
    root: Path,
    pods: Iterable[Pod] | None,
    owners: Mapping[str, ClaimOwner] | None,
    *,
    max_regions: int,
    result: ScanResult,
) -> None:
    """Add the regions under ``root`` (``<hook>/vgpu/claims``) to ``result``, each as the containers that use its
    claim (module docstring). ``pods`` None (the pod list is unknown): nothing is read. ``owners``: claim UID →
    (namespace, name) from the DRA plugin's checkpoint, None when it cannot be read."""
    if pods is None:
        return
    users = claim_users(pods)
    for uid in entries(root, max_regions, result):
        directory = root / uid
        if directory_mtime(directory) is None:
            continue
        region = region_in(directory, result)
        if region is None:
            continue
        owner = owners.get(uid) if owners is not None else None
        tied = users.get(owner, []) if owner is not None else []
        for pod, container in tied:
            meta = pod.metadata
            result.regions.append(ContainerRegion(meta.namespace, meta.name, meta.uid, container, region))
        if not tied:
            namespace, label = (owner[0], f"claim:{owner[1]}") if owner is not None else ("", f"claim:{uid}")
            result.regions.append(ContainerRegion(namespace, "", "", label, region))
