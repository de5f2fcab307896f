"""The claims a DRA-mode pod needs created (DRA mode, docs/dra-mode.md): which, and each one's body. Pure.

In DRA mode hami's webhook (``/webhook/dra``) rewrites a pod written for HAMi so that each translated container
uses a ResourceClaim by name (``spec.resourceClaims[].resourceClaimName``), and records each container's original
HAMi request in the annotation ``hami.io/dra-requests`` (claim object name → request). Nothing is created at
admission; the claim controller (``hami.server.draclaims``) creates the claims once the pod exists, from the plan
this module makes:

* :func:`served` — the pods the controller serves: of hami's scheduler name, not bound, not terminating, labelled
  ``hami.io/dra: "true"``, carrying ``hami.io/dra-requests``;
* :func:`plan` — for each claim the pod references by name *and* the annotation describes, not known to exist:
  the claim's body; one that exists with another owner (or none) is reported, never adopted. Its spec is
  **re-translated** from the recorded request (``translate``: the same pure function the webhook used), never taken
  from anything the pod's author could have written as a spec. A request that does not translate becomes a
  :class:`Refusal` naming the claim and the field and value;
* :func:`claim_body` — the ResourceClaim: owned by the pod from birth (``ownerReferences``: ``v1`` ``Pod``, name,
  UID, ``controller`` and ``blockOwnerDeletion`` true), so kube-controller-manager's garbage collector deletes it
  with the pod; label ``hami.io/dra: "true"``; annotation ``hami.io/dra-pod: <pod name>``;
* :func:`owned_by` — whether a claim found to exist already is this pod's (then the work is done) or another's
  (never adopted: the controller reports it on the pod).

HAMi-DRA's webhook differs (spec §2): it creates the claims during admission (left behind by a dry run or a later
refusal), names them from the pod name (empty under ``generateName``: collisions), sets no owner and deletes them
from a pod-DELETE webhook that may never run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from hami.errors import InvalidInput
from hami.protocol.dra import OwnerReference
from hami.protocol.objects import Pod
from hami.scheduling.dra.translate import DRA_LABEL
from hami.scheduling.dra.translate import REQUESTS_ANNOTATION as DRA_REQUESTS_ANNOTATION

__all__ = [
    "DRA_LABEL",
    "DRA_POD_ANNOTATION",
    "DRA_REQUESTS_ANNOTATION",
    "ClaimPlanItem",
    "PodClaims",
    "Refusal",
    "claim_body",
    "owned_by",
    "plan",
    "requests_of",
    "served",
]

DRA_POD_ANNOTATION: Final = "hami.io/dra-pod"
"""On a claim: the name of the pod it was created for."""
RESOURCE_API: Final = "resource.k8s.io/v1"

Translate = Callable[[Mapping[str, Any]], Mapping[str, Any]]
"""One recorded request (an entry of ``hami.io/dra-requests``) → the claim's ``spec``; raises ``InvalidInput``."""


@dataclass(frozen=True, slots=True)
class ClaimPlanItem:
    """One claim to create: its name and the whole object (``apiVersion``, ``kind``, ``metadata``, ``spec``)."""

    name: str
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A claim the controller will not create: ``message`` names the claim and the field and value at fault."""

    name: str
    message: str


@dataclass(frozen=True, slots=True)
class PodClaims:
    """What one pod needs: claims to create, claims refused, claims held by another (all empty: nothing to do)."""

    create: tuple[ClaimPlanItem, ...] = ()
    refused: tuple[Refusal, ...] = ()
    foreign: tuple[str, ...] = ()
    """Claims the pod names that exist with another owner (or none)."""


def served(pod: Pod, scheduler_name: str) -> bool:
    """Whether the claim controller serves this pod (module docstring)."""
    meta, spec = pod.metadata, pod.spec
    return (
        spec.scheduler_name == scheduler_name
        and not spec.node_name
        and meta.deletion_timestamp is None
        and meta.labels.get(DRA_LABEL) == "true"
        and DRA_REQUESTS_ANNOTATION in meta.annotations
    )


def requests_of(pod: Pod) -> dict[str, Mapping[str, Any]]:
    """``hami.io/dra-requests`` decoded: claim object name → recorded request. Raises ``InvalidInput`` naming the
    annotation when it is not a JSON object of objects."""
    field = f"metadata.annotations[{DRA_REQUESTS_ANNOTATION}]"
    text = pod.metadata.annotations.get(DRA_REQUESTS_ANNOTATION, "")
    try:
        decoded = json.loads(text)
    except ValueError as err:
        raise InvalidInput(field, text, f"not JSON: {err}") from None
    if not isinstance(decoded, dict):
        raise InvalidInput(field, text, "must be a JSON object: claim name → request")
    for name, entry in decoded.items():
        if not isinstance(entry, dict):
            raise InvalidInput(f"{field}[{name}]", entry, "must be a JSON object (container, section, resources)")
    return decoded


def referenced(pod: Pod) -> list[str]:
    """The claim object names the pod uses by name (``spec.resourceClaims[].resourceClaimName``), in order."""
    return [c.resource_claim_name for c in pod.spec.resource_claims if c.resource_claim_name]


def plan(pod: Pod, existing: Mapping[str, Sequence[OwnerReference]], translate: Translate) -> PodClaims:
    """The claims to create for ``pod`` (``served``): each one the pod references by name and the annotation
    describes, not in ``existing`` (claims known to exist in the pod's namespace, by name → their owners). One that
    exists owned by another (or by nobody) is ``foreign``: never adopted. A claim only one of the pod's references
    and the annotation names is not hami's to create (a claim of the user's own, or a stale annotation entry)."""
    try:
        requests = requests_of(pod)
    except InvalidInput as err:
        return PodClaims(refused=(Refusal("", str(err)),))
    create: list[ClaimPlanItem] = []
    refused: list[Refusal] = []
    foreign: list[str] = []
    for name in referenced(pod):
        if name not in requests:
            continue
        owners = existing.get(name)
        if owners is not None:
            if not owned_by(owners, pod.metadata.uid):
                foreign.append(name)
            continue
        try:
            spec = translate(requests[name])
        except InvalidInput as err:
            refused.append(Refusal(name, f"claim {name}: {err}"))
            continue
        create.append(ClaimPlanItem(name, claim_body(pod, name, spec)))
    return PodClaims(tuple(create), tuple(refused), tuple(foreign))


def claim_body(pod: Pod, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The ResourceClaim ``name`` for ``pod``, owned by it from birth (module docstring)."""
    meta = pod.metadata
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": meta.name,
        "uid": meta.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": meta.namespace,
            "labels": {DRA_LABEL: "true"},
            "annotations": {DRA_POD_ANNOTATION: meta.name},
            "ownerReferences": [owner],
        },
        "spec": dict(spec),
    }


def owned_by(owners: Iterable[OwnerReference], pod_uid: str) -> bool:
    """Whether a claim with these owners is the pod's: its controller owner is that pod (by UID)."""
    return any(o.controller and o.kind == "Pod" and o.api_version == "v1" and o.uid == pod_uid for o in owners)
