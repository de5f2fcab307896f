"""DRA mode's translation over random pods written for HAMi (hypothesis).

For any valid pod: the patch applies in order to the pod as it arrived; no NVIDIA resource is left on a translated
container; each translated container gains exactly its own claim, after the ones it had; the pod's claims are the old
ones plus one per translated container; a count above 1 asks for distinct cards; MiB become the exact bytes; the
stored requests are the claim names and translate again to the same specs; names are valid and unique.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hami.config import default_device_config
from hami.devices import vendors_from_config
from hami.devices.dra import DraModeSettings
from hami.protocol.jsonpatch import apply_patch
from hami.protocol.quantity import parse_quantity
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.dra.names import SUFFIX_ALPHABET
from hami.scheduling.dra.translate import DRA_LABEL, REQUESTS_ANNOTATION, DraAdmission, claim_spec
from hami.scheduling.request import SchedulingDefaults

PROPS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NVIDIA = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/priority",
)
GPU, MEM, PCT, CORES, PRIO = NVIDIA
VENDORS = vendors_from_config(default_device_config())
SIZES = DraModeSettings(card_memory_mib=(15360, 81920))
ADMISSION = DraAdmission(Admission(VENDORS, admitters_for(VENDORS), SchedulingDefaults(), AdmissionSettings()), SIZES)
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

_label = st.from_regex(DNS_LABEL, fullmatch=True).filter(lambda s: len(s) <= 63)


@st.composite
def nvidia_resources(draw: st.DrawFn) -> dict[str, str]:
    out: dict[str, str] = {}
    count = draw(st.sampled_from([None, 0, 1, 2, 3]))
    if count is not None:
        out[GPU] = str(count)
    if draw(st.booleans()):
        out[MEM] = str(draw(st.integers(1, 80000)))
    elif draw(st.booleans()):
        out[PCT] = str(draw(st.integers(1, 100)))
    if draw(st.booleans()):
        out[CORES] = str(draw(st.integers(0, 100)))
    if draw(st.booleans()):
        out[PRIO] = str(draw(st.integers(0, 1)))
    return out


@st.composite
def container(draw: st.DrawFn, name: str) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    wanted = draw(nvidia_resources())
    if draw(st.booleans()):
        wanted["cpu"] = "1"
    where = draw(st.sampled_from(["limits", "requests", "both", "none"]))
    resources: dict[str, Any] = {}
    if where in ("limits", "both"):
        resources["limits"] = dict(wanted)
    if where in ("requests", "both"):
        resources["requests"] = dict(wanted)
    if draw(st.booleans()):
        resources["claims"] = [{"name": "mine"}]
    if resources or draw(st.booleans()):
        c["resources"] = resources
    return c


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(_label, min_size=1, max_size=4, unique=True))
    split = draw(st.integers(0, len(names) - 1))
    init, app = names[:split], names[split:]
    metadata: dict[str, Any] = {"namespace": "team"}
    if draw(st.booleans()):
        metadata["name"] = draw(st.from_regex(DNS_SUBDOMAIN, fullmatch=True).filter(lambda s: 0 < len(s) <= 253))
    else:
        metadata["generateName"] = draw(_label) + "-"
    if draw(st.booleans()):
        metadata["labels"] = {"app": "x"}
    if draw(st.booleans()):
        metadata["annotations"] = draw(
            st.dictionaries(
                st.sampled_from(["nvidia.com/use-gputype", "nvidia.com/nouse-gpuuuid", "note"]),
                st.sampled_from(["A100", "T4, v100", "GPU-1,GPU-2", ""]),
            )
        )
    spec: dict[str, Any] = {"containers": [draw(container(n)) for n in app]}
    if init:
        spec["initContainers"] = [draw(container(n)) for n in init]
    if draw(st.booleans()):
        spec["resourceClaims"] = [{"name": "mine", "resourceClaimTemplateName": "t"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _suffixes(draw: st.DrawFn) -> Any:
    values = iter(draw(st.lists(st.text(SUFFIX_ALPHABET, min_size=5, max_size=5), min_size=4, max_size=4)))
    return lambda: next(values)


def _check_container(before: dict[str, Any], after: dict[str, Any], claim: str | None) -> None:
    old, new = before.get("resources", {}), after.get("resources", {})
    if claim is None:  # untouched, apart from the exclusive default admission may add (gpucores: 100)
        for kind in ("limits", "requests"):
            kept = {k: v for k, v in new.get(kind, {}).items() if k != CORES}
            assert kept == {k: v for k, v in old.get(kind, {}).items() if k != CORES}
        assert new.get("claims", []) == old.get("claims", [])
        return
    for kind in ("limits", "requests"):
        assert new.get(kind, {}) == {k: v for k, v in old.get(kind, {}).items() if k not in NVIDIA}
    assert new["claims"] == [*old.get("claims", []), {"name": claim}]


def _check_spec(spec: dict[str, Any], request: dict[str, Any]) -> None:
    [gpu] = spec["devices"]["requests"]
    alternatives = gpu.get("firstAvailable") or [gpu["exactly"]]
    count = alternatives[0]["count"]
    assert all(a["count"] == count and a["allocationMode"] == "ExactCount" for a in alternatives)
    constraints = spec["devices"].get("constraints", [])
    distinct = [{"requests": ["gpu"], "distinctAttribute": "hami-core-gpu.project-hami.io/uuid"}]
    assert constraints == (distinct if count > 1 else [])
    memory = request["resources"].get(MEM)
    if memory is not None:
        assert parse_quantity(alternatives[0]["capacity"]["requests"]["memory"], "m") == int(memory) * 2**20
    cores = alternatives[0]["capacity"]["requests"]["cores"]
    assert ("config" in spec["devices"]) == (cores == "0")


@PROPS
@given(raw=pods(), data=st.data())
def test_any_valid_pod_translates_cleanly(raw: dict[str, Any], data: st.DataObject) -> None:
    verdict = ADMISSION.review(raw, "team", _suffixes(data.draw))
    assert verdict.allowed, verdict.message
    out = apply_patch(raw, verdict.patch)
    plans = {(p.section, p.index): p for p in verdict.claims}
    for section in ("initContainers", "containers"):
        for i, before in enumerate(raw["spec"].get(section, [])):
            plan = plans.get((section, i))
            _check_container(before, out["spec"][section][i], plan.pod_claim_name if plan else None)
    event(f"{len(verdict.claims)} claims")
    if not verdict.claims:
        return
    old = raw["spec"].get("resourceClaims", [])
    added = [{"name": p.pod_claim_name, "resourceClaimName": p.claim_name} for p in verdict.claims]
    assert out["spec"]["resourceClaims"] == [*old, *added]
    assert out["metadata"]["labels"][DRA_LABEL] == "true"
    stored = json.loads(out["metadata"]["annotations"][REQUESTS_ANNOTATION])
    assert stored == {p.claim_name: p.request for p in verdict.claims}
    for plan in verdict.claims:
        assert claim_spec(plan.request, VENDORS, SIZES) == plan.spec
        _check_spec(plan.spec, plan.request)
        assert len(plan.claim_name) <= 63
        assert DNS_SUBDOMAIN.fullmatch(plan.claim_name)
        assert len(plan.pod_claim_name) <= 63
        assert DNS_LABEL.fullmatch(plan.pod_claim_name)
    assert len({p.pod_claim_name for p in verdict.claims} | {c["name"] for c in old}) == len(old) + len(added)
