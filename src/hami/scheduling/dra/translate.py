"""DRA mode's front door: a pod written for HAMi becomes ResourceClaims (issue 38, DRAMODE.md; pure).

:class:`DraAdmission` runs today's admission first (``hami.scheduling.admission.Admission``: vendor defaults,
``schedulerName``, environment, ``runtimeClassName``, the quota check) and then translates the admitted pod: every
container that asks for a translatable vendor's devices (``hami.devices.dra.DraTranslation``) gets one claim, and
the whole answer is one RFC 6902 patch, valid in order against the pod as it arrived:

* the vendor's resources leave the container's ``limits`` and ``requests``;
* ``spec.resourceClaims`` gains ``{name: hami-<container>, resourceClaimName: <claim>}`` and the container's
  ``resources.claims`` gains ``{name: hami-<container>}`` (both appended: existing claims stay);
* label ``hami.io/dra: "true"`` and annotation ``hami.io/dra-requests``: claim name → the container's request as
  written (``container``, ``section``, ``resources``, ``annotations``), from which :func:`claim_spec` builds the
  claim again (the claim controller never trusts a claim spec written anywhere else).

Nothing is created here: the webhook has no side effects (the claim controller creates the claims, owned by the pod).

The claim of a container: one request ``gpu`` — ``exactly`` (the DeviceClass, ``ExactCount``, ``count``, CEL
selectors, ``capacity.requests`` ``cores`` and, when asked, ``memory``) or, for a memory percentage, one
``firstAvailable`` alternative per known card size; ``count > 1`` adds a ``distinctAttribute`` constraint on the
device UUID (HAMi gives N *different* GPUs); a vendor's opaque configuration goes to ``spec.devices.config``.

Refused, with a message naming the container, the field and the value: what a vendor cannot express (its
:class:`~hami.devices.dra.DraRefused`), a container asking for two vendors' devices, a pod mixing a translatable
vendor with one that has no DRA translation (such pods stay whole on the extender path), and a pod that already uses
one of the claim names.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import msgspec

from hami.devices.base import Vendor
from hami.devices.dra import DraModeSettings, DraRefused, DraRequest, DraTranslation, cel_string
from hami.errors import InvalidInput
from hami.protocol.jsonpatch import apply_patch
from hami.protocol.objects import Container, Pod, ResourceRequirements
from hami.protocol.podpatch import PatchOp, Section, pointer
from hami.protocol.quantity import format_quantity
from hami.scheduling.admission import Admission
from hami.scheduling.dra.names import claim_name, pod_claim_name

__all__ = [
    "DRA_LABEL",
    "REQUESTS_ANNOTATION",
    "REQUEST_NAME",
    "ClaimPlan",
    "DraAdmission",
    "DraModeSettings",
    "DraVerdict",
    "claim_spec",
]

DRA_LABEL: Final = "hami.io/dra"
REQUESTS_ANNOTATION: Final = "hami.io/dra-requests"
REQUEST_NAME: Final = "gpu"
MIB: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    """One claim the pod will use: its object name, the pod's name for it, the container, the stored request and
    the ResourceClaim ``.spec``."""

    claim_name: str
    pod_claim_name: str
    section: str
    index: int
    container: str
    request: dict[str, Any]
    spec: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DraVerdict:
    """Allowed with ``patch`` (the whole patch for the AdmissionResponse) or refused with ``message``; ``claims``
    is empty when the pod was not translated."""

    allowed: bool
    message: str = ""
    patch: tuple[PatchOp, ...] = ()
    claims: tuple[ClaimPlan, ...] = ()


# --- the claim -----------------------------------------------------------------------------------------------------


def _capacity(dra: DraRequest, memory_mib: int | None) -> dict[str, Any]:
    """Quantities in the API server's canonical spelling (``3000Mi``, ``20Gi``), so a claim read back equals it."""
    requests = {"cores": format_quantity(dra.cores)}
    if memory_mib is not None:
        requests["memory"] = format_quantity(memory_mib * MIB, binary=True)
    return {"requests": requests}


def _exactly(dra: DraRequest, settings: DraModeSettings, memory_mib: int | None, extra: str = "") -> dict[str, Any]:
    exactly: dict[str, Any] = {
        "deviceClassName": settings.device_class,
        "allocationMode": "ExactCount",
        "count": dra.count,
    }
    selectors = [*dra.selectors, extra] if extra else list(dra.selectors)
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": expression}} for expression in selectors]
    exactly["capacity"] = _capacity(dra, memory_mib)
    return exactly


def _size_selector(settings: DraModeSettings, card_mib: int) -> str:
    memory = f"device.capacity[{cel_string(settings.driver)}].memory"
    return f'{memory}.compareTo(quantity("{format_quantity(card_mib * MIB, binary=True)}")) == 0'


def _request(dra: DraRequest, settings: DraModeSettings) -> dict[str, Any]:
    if dra.memory_percent is None:
        return {"name": REQUEST_NAME, "exactly": _exactly(dra, settings, dra.memory_mib)}
    sizes = sorted(set(settings.card_memory_mib))  # the vendor refuses a percentage when there are none
    alternatives = [
        {
            "name": f"mem-{size}",
            **_exactly(dra, settings, max(size * dra.memory_percent // 100, 1), _size_selector(settings, size)),
        }
        for size in sizes
    ]
    return {"name": REQUEST_NAME, "firstAvailable": alternatives}


def build_spec(dra: DraRequest, settings: DraModeSettings) -> dict[str, Any]:
    """The ResourceClaim ``.spec`` for one container's request (module docstring)."""
    devices: dict[str, Any] = {"requests": [_request(dra, settings)]}
    if dra.count > 1:
        devices["constraints"] = [
            {"requests": [REQUEST_NAME], "distinctAttribute": f"{settings.driver}/{dra.distinct}"}
        ]
    if dra.parameters is not None:
        opaque = {"driver": settings.driver, "parameters": dict(dra.parameters)}
        devices["config"] = [{"requests": [REQUEST_NAME], "opaque": opaque}]
    return {"devices": devices}


def _translations(
    container: Container,
    field: str,
    annotations: Mapping[str, str],
    vendors: Mapping[str, Vendor],
    settings: DraModeSettings,
) -> tuple[list[tuple[DraRequest, tuple[str, ...]]], list[str]]:
    """The container's translated requests (each with every resource name of its vendor, which the container must no
    longer ask for), and the resources it asks for of vendors without a translation."""
    translated: list[tuple[DraRequest, tuple[str, ...]]] = []
    others: list[str] = []
    for vendor in vendors.values():
        if isinstance(vendor, DraTranslation):
            dra = vendor.dra_request(container, field, annotations, settings)
            if dra is not None:
                translated.append((dra, vendor.dra_resources()))
            continue
        wanted = vendor.parse_request(container, field)
        if wanted is not None and wanted.nums > 0:
            others.append(vendor.resources.count)
    if len(translated) > 1:
        names = sorted(name for dra, _ in translated for name in dra.resources)
        raise DraRefused(field, names, "asks for devices of two vendors; DRA mode gives a container one claim")
    return translated, others


def _entry_field(request: Mapping[str, Any], key: str, kind: type) -> Any:
    value = request.get(key)
    if not isinstance(value, kind):
        raise InvalidInput(f"{REQUESTS_ANNOTATION} entry.{key}", value, f"must be a {kind.__name__}")
    return value


def _read_entry(request: Mapping[str, Any]) -> tuple[Container, str, dict[str, str]]:
    name = _entry_field(request, "container", str)
    section = _entry_field(request, "section", str)
    if section not in ("containers", "initContainers"):
        raise InvalidInput(f"{REQUESTS_ANNOTATION} entry.section", section, "must be containers or initContainers")
    resources = _entry_field(request, "resources", dict)
    annotations = _entry_field(request, "annotations", dict)
    for key, value in (*resources.items(), *annotations.items()):
        if not isinstance(value, str):
            raise InvalidInput(f"{REQUESTS_ANNOTATION} entry[{key}]", value, "must be a string")
    container = Container(name=name, resources=ResourceRequirements(limits=dict(resources)))
    return container, f"{section}({name})", dict(annotations)


def claim_spec(request: Mapping[str, Any], vendors: Mapping[str, Vendor], settings: DraModeSettings) -> dict[str, Any]:
    """The claim ``.spec`` for one stored ``hami.io/dra-requests`` entry, translated again as at admission.

    Raises ``InvalidInput`` (``DraRefused`` among them) naming the field and the value for an entry that is not
    one, asks for no translatable device, or cannot be expressed."""
    container, field, annotations = _read_entry(request)
    translated, others = _translations(container, field, annotations, vendors, settings)
    where = f"{REQUESTS_ANNOTATION} entry.resources"
    if others:
        raise InvalidInput(
            where, request.get("resources"), f"asks for {', '.join(others)}, which DRA mode does not translate"
        )
    if not translated:
        raise InvalidInput(where, request.get("resources"), "asks for no device DRA mode translates")
    return build_spec(translated[0][0], settings)


# --- the pod ---------------------------------------------------------------------------------------------------------

_Found = tuple[Section, int, Container, DraRequest, tuple[str, ...]]
"""A translated container: where it is, its request, and its vendor's resource names (removed from it)."""


def _containers(pod: Pod) -> Iterator[tuple[Section, int, Container]]:
    for i, c in enumerate(pod.spec.init_containers):
        yield "initContainers", i, c
    for i, c in enumerate(pod.spec.containers):
        yield "containers", i, c


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _set_metadata(doc: Mapping[str, Any], kind: Literal["labels", "annotations"], key: str, value: str) -> PatchOp:
    """``metadata.<kind>[key] = value``, creating the parent map when it is missing."""
    metadata = doc.get("metadata")
    if not isinstance(metadata, Mapping):
        return {"op": "add", "path": pointer("metadata"), "value": {kind: {key: value}}}
    current = metadata.get(kind)
    if not isinstance(current, Mapping):
        return {"op": "add", "path": pointer("metadata", kind), "value": {key: value}}
    op = "replace" if key in current else "add"
    return {"op": op, "path": pointer("metadata", kind, key), "value": value}


def _container_ops(doc: Mapping[str, Any], plan: ClaimPlan, removed: Sequence[str]) -> list[PatchOp]:
    """Remove the vendor's resources from one container and append its claim reference."""
    section: Section = "initContainers" if plan.section == "initContainers" else "containers"
    base = ("spec", section, plan.index)
    container = _mapping(_mapping(doc.get("spec")).get(section, [])[plan.index])
    resources = container.get("resources")
    ops: list[PatchOp] = []
    for kind in ("limits", "requests"):
        values = _mapping(_mapping(resources).get(kind))
        ops += [{"op": "remove", "path": pointer(*base, "resources", kind, n)} for n in removed if n in values]
    reference = {"name": plan.pod_claim_name}
    if not isinstance(resources, Mapping):
        ops.append({"op": "add", "path": pointer(*base, "resources"), "value": {"claims": [reference]}})
    elif isinstance(resources.get("claims"), list):
        ops.append({"op": "add", "path": pointer(*base, "resources", "claims", "-"), "value": reference})
    else:
        ops.append({"op": "add", "path": pointer(*base, "resources", "claims"), "value": [reference]})
    return ops


def _pod_ops(doc: Mapping[str, Any], plans: Sequence[ClaimPlan]) -> list[PatchOp]:
    claims = [{"name": p.pod_claim_name, "resourceClaimName": p.claim_name} for p in plans]
    current = _mapping(doc.get("spec")).get("resourceClaims")
    if isinstance(current, list):
        ops: list[PatchOp] = [{"op": "add", "path": pointer("spec", "resourceClaims", "-"), "value": c} for c in claims]
    else:
        ops = [{"op": "add", "path": pointer("spec", "resourceClaims"), "value": claims}]
    entries = {p.claim_name: p.request for p in plans}
    ops.append(_set_metadata(doc, "labels", DRA_LABEL, "true"))
    ops.append(_set_metadata(doc, "annotations", REQUESTS_ANNOTATION, json.dumps(entries, sort_keys=True)))
    return ops


def _check_names(doc: Mapping[str, Any], plans: Sequence[ClaimPlan]) -> None:
    """Refuse a pod that already uses one of the pod claim names this translation adds."""
    taken = {
        str(_mapping(c).get("name")): i
        for i, c in enumerate(_mapping(doc.get("spec")).get("resourceClaims") or [])
        if isinstance(c, Mapping)
    }
    for plan in plans:
        if plan.pod_claim_name in taken:
            raise DraRefused(
                f"spec.resourceClaims[{taken[plan.pod_claim_name]}].name",
                plan.pod_claim_name,
                f"is the name DRA mode gives the claim of {plan.section}[{plan.index}]({plan.container}); "
                "rename the pod's own claim",
            )


@dataclass(frozen=True, slots=True)
class DraAdmission:
    """Admission in DRA mode: today's :class:`Admission`, then the translation (module docstring)."""

    admission: Admission
    settings: DraModeSettings = field(default_factory=DraModeSettings)

    @property
    def vendors(self) -> Mapping[str, Vendor]:
        return self.admission.vendors

    def review(self, raw_pod: Mapping[str, Any], namespace: str, suffix: Callable[[], str]) -> DraVerdict:
        """Decide on one pod; ``suffix()`` gives the 5 random characters of each claim name. Raises
        ``InvalidInput`` only for a pod that cannot be read (the webhook answers 400)."""
        verdict = self.admission.review(raw_pod, namespace)
        if not verdict.allowed or verdict.message:  # refused, or another scheduler's pod: left as it is
            return DraVerdict(verdict.allowed, verdict.message, verdict.patch)
        admitted = apply_patch(raw_pod, verdict.patch)
        pod = msgspec.convert(admitted, type=Pod)
        try:
            found = self._found(pod)
            if not found:
                return DraVerdict(True, patch=verdict.patch)
            plans = [self._plan(admitted, pod, item, suffix) for item in found]
            _check_names(admitted, plans)
        except InvalidInput as err:
            return DraVerdict(False, str(err))
        ops = [op for plan, item in zip(plans, found, strict=True) for op in _container_ops(admitted, plan, item[4])]
        ops += _pod_ops(admitted, plans)
        return DraVerdict(True, patch=(*verdict.patch, *ops), claims=tuple(plans))

    def _found(self, pod: Pod) -> list[_Found]:
        """Every translated container; raises ``DraRefused`` for a pod that cannot be translated whole."""
        found: list[_Found] = []
        others: list[tuple[str, str]] = []
        annotations = pod.metadata.annotations
        for section, index, container in _containers(pod):
            field = f"{section}[{index}]({container.name})"
            translated, untranslated = _translations(container, field, annotations, self.vendors, self.settings)
            found += [(section, index, container, dra, names) for dra, names in translated]
            others += [(field, name) for name in untranslated]
        if found and others:
            field, resource = others[0]
            section, index, container, _, _ = found[0]
            raise DraRefused(
                field,
                resource,
                f"has no DRA translation, and {section}[{index}]({container.name}) asks for devices DRA mode "
                "translates; a pod is translated whole or not at all: run it in a namespace that uses the extender",
            )
        return found

    def _plan(self, admitted: Mapping[str, Any], pod: Pod, item: _Found, suffix: Callable[[], str]) -> ClaimPlan:
        section, index, container, dra, _ = item
        request = {
            "container": container.name,
            "section": section,
            "resources": dict(dra.resources),
            "annotations": dict(dra.annotations),
        }
        generate_name = str(_mapping(admitted.get("metadata")).get("generateName") or "")
        return ClaimPlan(
            claim_name=claim_name(pod.metadata.name, generate_name, container.name, suffix()),
            pod_claim_name=pod_claim_name(container.name),
            section=section,
            index=index,
            container=container.name,
            request=request,
            spec=build_spec(dra, self.settings),
        )
