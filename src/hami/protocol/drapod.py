"""A DRA-mode pod as hami's webhook leaves it (issue 38): its label, its ``hami.io/dra-requests`` annotation, and
the pod as it was written for HAMi.

hami's DRA-mode webhook removes a container's HAMi resources, gives it a ResourceClaim instead, labels the pod
``hami.io/dra: "true"`` and keeps the original request in the annotation ``hami.io/dra-requests``: a JSON object
``{<claim object name>: {"container": <name>, "section": "containers"|"initContainers", "resources": {<resource>:
<quantity>}, "annotations": {<HAMi pod annotation>: <value>}}}``. The tools read it back:

* :func:`request_objects` decodes it to plain JSON objects, the one reading the claim controller
  (``hami.scheduling.dra.podclaims``) and the prioritize policy (``hami.scheduling.dra.policy``) share; each then
  checks the entries as its use needs (``hami.scheduling.dra.translate.read_entry`` for the claim and its quota);
* :func:`dra_requests` decodes it typed, for the tools (``InvalidInput`` naming the field and value when it does not);
* :func:`as_written` is the pod with each entry's resources back in its container's limits and the entries'
  annotations on the pod — the HAMi pod the user wrote, which hami's own request reader (``prefilter``) reads, so
  ``hami explain`` and ``hami simulate --dra`` judge a DRA-mode pod by the same request as an extender-mode one;
* :func:`claim_containers` maps each claim a pod names to the container using it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from hami.errors import InvalidInput
from hami.protocol import keys
from hami.protocol.objects import Container, Pod, QuantityValue

__all__ = [
    "SECTIONS",
    "DraRequest",
    "as_written",
    "claim_containers",
    "dra_requests",
    "is_dra_pod",
    "request_objects",
]

SECTIONS: Final = ("containers", "initContainers")
"""The pod spec sections an entry's ``section`` may name."""


class DraRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """One entry of ``hami.io/dra-requests``: the container a claim serves and what it asked of HAMi."""

    container: str
    section: str = "containers"
    resources: dict[str, QuantityValue] = {}
    annotations: dict[str, str] = {}


_DECODER: Final = msgspec.json.Decoder(dict[str, DraRequest])


def is_dra_pod(pod: Pod) -> bool:
    """Whether the pod carries hami's DRA-mode label and its requests annotation."""
    meta = pod.metadata
    return meta.labels.get(keys.DRA_LABEL) == "true" and keys.DRA_REQUESTS in meta.annotations


def request_objects(text: str, field: str) -> dict[str, dict[str, Any]]:
    """``hami.io/dra-requests`` text decoded: claim object name → its entry as a JSON object. Raises
    ``InvalidInput`` naming ``field`` (``field[claim]`` for an entry) when it is not JSON, not an object, or an
    entry is not an object."""
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


def dra_requests(pod: Pod) -> dict[str, DraRequest]:
    """The pod's ``hami.io/dra-requests`` (empty when it has none); raises ``InvalidInput`` naming the annotation and
    what is wrong when it does not decode, names a section other than the two, or a container the pod lacks."""
    raw = pod.metadata.annotations.get(keys.DRA_REQUESTS)
    if raw is None:
        return {}
    field = f"metadata.annotations[{keys.DRA_REQUESTS}]"
    try:
        entries = _DECODER.decode(raw)
    except msgspec.DecodeError as err:
        raise InvalidInput(field, raw, f"is not the JSON object of claims hami's webhook writes: {err}") from None
    for claim, entry in entries.items():
        if entry.section not in SECTIONS:
            raise InvalidInput(f"{field}[{claim}].section", entry.section, f"must be one of {', '.join(SECTIONS)}")
        if _container(pod, entry) is None:
            where = f"{field}[{claim}].container"
            raise InvalidInput(where, entry.container, f"names no container of spec.{entry.section}")
    return entries


def _container(pod: Pod, entry: DraRequest) -> Container | None:
    every = pod.spec.containers if entry.section == "containers" else pod.spec.init_containers
    return next((c for c in every if c.name == entry.container), None)


def as_written(pod: Pod, entries: Mapping[str, DraRequest] | None = None) -> Pod:
    """The pod as written for HAMi: each entry's resources back in its container's limits, its annotations on the
    pod (an annotation the pod still carries keeps the pod's value). ``entries`` default to :func:`dra_requests`."""
    if entries is None:
        entries = dra_requests(pod)
    annotations = dict(pod.metadata.annotations)
    limits: dict[tuple[str, str], dict[str, QuantityValue]] = {}
    for entry in entries.values():
        limits.setdefault((entry.section, entry.container), {}).update(entry.resources)
        for key, value in entry.annotations.items():
            annotations.setdefault(key, value)

    def restored(section: str, containers: Iterable[Container]) -> list[Container]:
        out = []
        for c in containers:
            extra = limits.get((section, c.name))
            resources = msgspec.structs.replace(c.resources, limits={**c.resources.limits, **extra}) if extra else None
            out.append(msgspec.structs.replace(c, resources=resources) if resources is not None else c)
        return out

    spec = msgspec.structs.replace(
        pod.spec,
        containers=restored("containers", pod.spec.containers),
        init_containers=restored("initContainers", pod.spec.init_containers),
    )
    meta = msgspec.structs.replace(pod.metadata, annotations=annotations)
    return msgspec.structs.replace(pod, metadata=meta, spec=spec)


def claim_containers(pod: Pod) -> dict[str, str]:
    """Claim object name → the container using it: from ``hami.io/dra-requests`` (a DRA-mode pod), else from the
    pod's own ``spec.resourceClaims`` and ``containers[].resources.claims``. An annotation that does not decode is
    passed over (the spec still names the claims)."""
    out: dict[str, str] = {}
    by_ref = {rc.name: rc.resource_claim_name for rc in pod.spec.resource_claims if rc.resource_claim_name}
    for c in [*pod.spec.init_containers, *pod.spec.containers]:
        for ref in c.resources.claims:
            name = by_ref.get(ref.name)
            if name:
                out.setdefault(name, c.name)
    with contextlib.suppress(InvalidInput):
        out.update({claim: entry.container for claim, entry in dra_requests(pod).items()})
    return out
