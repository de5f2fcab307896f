"""DRA mode's translation of a pod written for HAMi into ResourceClaims (issue 38, DRAMODE.md).

Every case applies the verdict's patch to the pod as it arrived (so the patch is valid in order) and checks the pod
that results, the claim specs and the stored requests; :func:`claim_spec` on a stored request must give the plan's
spec again.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hami.config import default_device_config
from hami.devices import vendors_from_config
from hami.devices.base import Vendor
from hami.devices.dra import DraModeSettings
from hami.devices.nvidia import NvidiaConfig, NvidiaVendor
from hami.errors import InvalidInput
from hami.protocol.jsonpatch import apply_patch
from hami.protocol.objects import ObjectMeta, ResourceQuota, ResourceQuotaSpec
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.dra.translate import (
    DRA_LABEL,
    REQUESTS_ANNOTATION,
    DraAdmission,
    DraVerdict,
    claim_spec,
)
from hami.scheduling.quota import QuotaBook
from hami.scheduling.request import SchedulingDefaults

GPU = "nvidia.com/gpu"
MEM = "nvidia.com/gpumem"
PCT = "nvidia.com/gpumem-percentage"
CORES = "nvidia.com/gpucores"
PRIO = "nvidia.com/priority"
DCU = "hygon.com/dcunum"
DRIVER = "hami-core-gpu.project-hami.io"
ATTR = f'device.attributes["{DRIVER}"]'
NO_SM_LIMIT = {
    "requests": ["gpu"],
    "opaque": {
        "driver": DRIVER,
        "parameters": {"apiVersion": "hami.io/v1alpha1", "kind": "HAMiCoreConfig", "smLimit": "none"},
    },
}
VENDORS: dict[str, Vendor] = vendors_from_config(default_device_config())


def admission(settings: DraModeSettings | None = None, quotas: QuotaBook | None = None) -> DraAdmission:
    inner = Admission(VENDORS, admitters_for(VENDORS), SchedulingDefaults(), AdmissionSettings(), quotas=quotas)
    return DraAdmission(inner, settings or DraModeSettings())


def ctr(name: str = "main", limits: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox", **extra}
    if limits is not None:
        c.setdefault("resources", {})["limits"] = limits
    return c


def pod(
    *containers: dict[str, Any],
    init: tuple[dict[str, Any], ...] = (),
    annotations: dict[str, str] | None = None,
    name: str = "p",
    generate_name: str = "",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"namespace": "team"}
    if name:
        metadata["name"] = name
    if generate_name:
        metadata["generateName"] = generate_name
    if annotations is not None:
        metadata["annotations"] = annotations
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def suffixes(*values: str) -> Any:
    it = iter(values or ("bcdfg", "hjklm", "npqrs", "tvwxz"))
    return lambda: next(it)


def review(raw: dict[str, Any], adm: DraAdmission | None = None) -> tuple[DraVerdict, dict[str, Any]]:
    adm = adm or admission()
    verdict = adm.review(raw, "team", suffixes())
    out = apply_patch(raw, verdict.patch)
    for plan in verdict.claims:
        assert claim_spec(plan.request, adm.vendors, adm.settings) == plan.spec
    return verdict, out


def gpu_request(
    count: int = 1,
    cores: str = "0",
    memory: str | None = None,
    selectors: tuple[str, ...] = (),
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    exactly["capacity"] = {"requests": {"cores": cores, **({"memory": memory} if memory else {})}}
    return {"name": "gpu", "exactly": exactly}


# --- the basic route --------------------------------------------------------------------------------------------------


def test_a_shared_gpu_becomes_one_claim_and_the_pod_references_it() -> None:
    raw = pod(ctr(limits={GPU: "1", MEM: "3000", CORES: "30"}))
    raw["spec"]["containers"][0]["resources"]["requests"] = {GPU: "1", MEM: "3000", CORES: "30", "cpu": "1"}
    verdict, out = review(raw)
    assert verdict.allowed
    assert verdict.message == ""
    [plan] = verdict.claims
    assert (plan.claim_name, plan.pod_claim_name, plan.section, plan.index) == (
        "p-main-bcdfg",
        "hami-main",
        "containers",
        0,
    )
    assert plan.spec == {"devices": {"requests": [gpu_request(cores="30", memory="3000Mi")]}}
    assert plan.request == {
        "container": "main",
        "section": "containers",
        "resources": {GPU: "1", MEM: "3000", CORES: "30"},
        "annotations": {},
    }
    main = out["spec"]["containers"][0]
    assert main["resources"] == {"limits": {}, "requests": {"cpu": "1"}, "claims": [{"name": "hami-main"}]}
    assert out["spec"]["resourceClaims"] == [{"name": "hami-main", "resourceClaimName": "p-main-bcdfg"}]
    assert out["spec"]["schedulerName"] == "hami-scheduler"
    assert out["metadata"]["labels"] == {DRA_LABEL: "true"}
    assert json.loads(out["metadata"]["annotations"][REQUESTS_ANNOTATION]) == {"p-main-bcdfg": plan.request}


def test_a_count_alone_is_an_exclusive_whole_card() -> None:
    verdict, _ = review(pod(ctr(limits={GPU: "1"})))
    [plan] = verdict.claims
    assert plan.spec == {"devices": {"requests": [gpu_request(cores="100")]}}
    assert plan.request["resources"] == {GPU: "1", CORES: "100"}  # the admission default is stored


def test_no_cores_books_zero_and_tells_the_driver_to_set_no_sm_limit() -> None:
    verdict, _ = review(pod(ctr(limits={GPU: "1", MEM: "1024"})))
    [plan] = verdict.claims
    assert plan.spec == {"devices": {"requests": [gpu_request(memory="1Gi")], "config": [NO_SM_LIMIT]}}


def test_several_gpus_must_be_distinct_cards() -> None:
    verdict, _ = review(pod(ctr(limits={GPU: "3", MEM: "2000", CORES: "10"})))
    [plan] = verdict.claims
    assert plan.spec["devices"]["constraints"] == [{"requests": ["gpu"], "distinctAttribute": f"{DRIVER}/uuid"}]
    assert plan.spec["devices"]["requests"][0]["exactly"]["count"] == 3


def test_a_pod_without_devices_is_not_translated() -> None:
    raw = pod(ctr(limits={"cpu": "1"}))
    verdict, out = review(raw)
    assert verdict == DraVerdict(True)
    assert out == raw


def test_priority_leaves_the_limits_and_stays_as_env() -> None:
    verdict, out = review(pod(ctr(limits={GPU: "1", MEM: "100", CORES: "5", PRIO: "1"})))
    assert verdict.allowed
    main = out["spec"]["containers"][0]
    assert main["env"] == [{"name": "CUDA_TASK_PRIORITY", "value": "1"}]
    assert main["resources"]["limits"] == {}
    assert verdict.claims[0].request["resources"][PRIO] == "1"


# --- refusals ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param(
            pod(ctr(limits={GPU: "1"}), annotations={"nvidia.com/vgpu-mode": "mig"}),
            "containers[0](main): annotation nvidia.com/vgpu-mode: DRA mode offers hami-core shares only",
            id="mig mode",
        ),
        pytest.param(
            pod(ctr(limits={GPU: "2"}), annotations={"nvidia.com/numa-bind": "true"}),
            "containers[0](main): annotation nvidia.com/numa-bind: binding 2 GPUs to one NUMA node cannot be expressed",
            id="numa-bind of two GPUs",
        ),
        pytest.param(
            pod(ctr(limits={GPU: "1", PCT: "50"})),
            "containers[0](main).limits[nvidia.com/gpumem-percentage]: is a share of each card's memory",
            id="percentage without card sizes",
        ),
        pytest.param(
            pod(ctr(limits={GPU: "1"}), ctr("dcu", limits={DCU: "1"})),
            "containers[1](dcu): has no DRA translation, and containers[0](main) asks for devices DRA mode translates",
            id="mixed with an untranslatable vendor",
        ),
    ],
)
def test_what_a_claim_cannot_express_is_refused_with_the_reason(raw: dict[str, Any], message: str) -> None:
    verdict = admission().review(raw, "team", suffixes())
    assert not verdict.allowed
    assert verdict.message.startswith(message), verdict.message
    assert verdict.patch == ()
    assert verdict.claims == ()


def test_a_pod_of_an_untranslatable_vendor_alone_stays_on_the_extender_path() -> None:
    raw = pod(ctr("dcu", limits={DCU: "1"}))
    verdict = admission().review(raw, "team", suffixes())
    plain = admission().admission.review(raw, "team")
    assert verdict == DraVerdict(True, patch=plain.patch)


def test_the_quota_check_still_refuses() -> None:
    book = QuotaBook([MEM, CORES])
    book.upsert(
        ResourceQuota(ObjectMeta(name="q", namespace="team"), ResourceQuotaSpec(hard={f"limits.{MEM}": "1000"}))
    )
    verdict = admission(quotas=book).review(pod(ctr(limits={GPU: "1", MEM: "3000"})), "team", suffixes())
    assert not verdict.allowed
    assert verdict.message.startswith("exceeding resource quota")


def test_a_stored_request_that_is_not_one_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match=r"entry\.resources"):
        claim_spec(
            {"container": "c", "section": "containers", "resources": [], "annotations": {}}, VENDORS, DraModeSettings()
        )


# --- containers, names and what the pod already has -----------------------------------------------------------------


def test_init_and_sidecar_containers_get_their_own_claims() -> None:
    raw = pod(
        ctr(limits={GPU: "1", MEM: "500", CORES: "10"}),
        init=(ctr("prep", limits={GPU: "1", MEM: "100", CORES: "5"}), ctr("side", restartPolicy="Always")),
    )
    raw["spec"]["initContainers"][1]["resources"] = {"requests": {GPU: "1", MEM: "200", CORES: "1"}}
    verdict, out = review(raw)
    assert [(p.section, p.index, p.container, p.claim_name) for p in verdict.claims] == [
        ("initContainers", 0, "prep", "p-prep-bcdfg"),
        ("initContainers", 1, "side", "p-side-hjklm"),
        ("containers", 0, "main", "p-main-npqrs"),
    ]
    assert out["spec"]["initContainers"][0]["resources"]["claims"] == [{"name": "hami-prep"}]
    assert out["spec"]["initContainers"][1]["resources"] == {"requests": {}, "claims": [{"name": "hami-side"}]}
    assert [c["name"] for c in out["spec"]["resourceClaims"]] == ["hami-prep", "hami-side", "hami-main"]


def test_a_container_without_devices_is_left_alone_beside_a_translated_one() -> None:
    raw = pod(ctr(limits={GPU: "1", CORES: "10"}), ctr("log", limits={"cpu": "1"}))
    verdict, out = review(raw)
    assert [p.container for p in verdict.claims] == ["main"]
    assert out["spec"]["containers"][1] == raw["spec"]["containers"][1]


def test_a_generate_name_pod_names_its_claims_from_the_prefix_and_the_random_suffix() -> None:
    verdict, _ = review(pod(ctr(limits={GPU: "1"}), name="", generate_name="train-job-"))
    assert verdict.claims[0].claim_name == "train-job-main-bcdfg"


def test_long_names_are_cut_with_a_hash_and_fit_63_characters() -> None:
    long_container = "c" * 63
    verdict, out = review(pod(ctr(long_container, limits={GPU: "1"}), name="p" * 100))
    [plan] = verdict.claims
    assert len(plan.claim_name) == 63
    assert plan.claim_name.startswith("p" * 40)
    assert plan.claim_name.endswith("-bcdfg")
    assert len(plan.pod_claim_name) == 63
    assert plan.pod_claim_name.startswith("hami-ccc")
    assert out["spec"]["containers"][0]["resources"]["claims"] == [{"name": plan.pod_claim_name}]


def test_existing_claims_labels_and_annotations_are_kept_and_appended_to() -> None:
    raw = pod(ctr(limits={GPU: "1", CORES: "10"}), annotations={"a": "b", REQUESTS_ANNOTATION: "forged"})
    raw["metadata"]["labels"] = {"app": "x", DRA_LABEL: "false"}
    raw["spec"]["resourceClaims"] = [{"name": "mine", "resourceClaimTemplateName": "t"}]
    raw["spec"]["containers"][0]["resources"]["claims"] = [{"name": "mine"}]
    verdict, out = review(raw)
    [plan] = verdict.claims
    assert out["spec"]["resourceClaims"] == [
        {"name": "mine", "resourceClaimTemplateName": "t"},
        {"name": "hami-main", "resourceClaimName": plan.claim_name},
    ]
    assert out["spec"]["containers"][0]["resources"]["claims"] == [{"name": "mine"}, {"name": "hami-main"}]
    assert out["metadata"]["labels"] == {"app": "x", DRA_LABEL: "true"}
    assert out["metadata"]["annotations"]["a"] == "b"
    assert json.loads(out["metadata"]["annotations"][REQUESTS_ANNOTATION]) == {plan.claim_name: plan.request}


def test_a_pod_that_already_uses_the_claim_name_is_refused() -> None:
    raw = pod(ctr(limits={GPU: "1"}))
    raw["spec"]["resourceClaims"] = [{"name": "hami-main", "resourceClaimName": "x"}]
    verdict = admission().review(raw, "team", suffixes())
    assert not verdict.allowed
    assert verdict.message == (
        "spec.resourceClaims[0].name: is the name DRA mode gives the claim of containers[0](main); rename the pod's "
        "own claim (got 'hami-main')"
    )


def test_a_pod_of_another_scheduler_is_left_as_it_is() -> None:
    raw = pod(ctr(limits={GPU: "1"}))
    raw["spec"]["schedulerName"] = "volcano"
    verdict = admission().review(raw, "team", suffixes())
    assert verdict == DraVerdict(True, "pod already has different scheduler assigned")


def test_a_pod_the_admission_refuses_is_refused() -> None:
    raw = pod(ctr(limits={GPU: "1"}))
    raw["spec"]["nodeName"] = "n1"
    verdict = admission().review(raw, "team", suffixes())
    assert not verdict.allowed
    assert verdict.message.startswith("pod has node assigned")


def test_a_pod_that_cannot_be_read_raises_for_the_webhook_to_answer_400() -> None:
    with pytest.raises(InvalidInput):
        admission().review({"spec": {"containers": "no"}}, "team", suffixes())


# --- gpumem-percentage with known card sizes ------------------------------------------------------------------------


def test_a_percentage_becomes_one_alternative_per_known_card_size() -> None:
    sizes = DraModeSettings(card_memory_mib=(81920, 15360, 15360))
    verdict, _ = review(pod(ctr(limits={GPU: "2", PCT: "25", CORES: "10"})), admission(sizes))
    [plan] = verdict.claims
    [request] = plan.spec["devices"]["requests"]
    memory = f'device.capacity["{DRIVER}"].memory'

    def alternative(card: int, take: int, taken: str = "", size: str = "") -> dict[str, Any]:
        return {
            "name": f"mem-{card}",
            "deviceClassName": DRIVER,
            "allocationMode": "ExactCount",
            "count": 2,
            "selectors": [{"cel": {"expression": f'{memory}.compareTo(quantity("{size or f"{card}Mi"}")) == 0'}}],
            "capacity": {"requests": {"cores": "10", "memory": taken or f"{take}Mi"}},
        }

    assert request == {
        "name": "gpu",
        "firstAvailable": [alternative(15360, 3840, "3840Mi", "15Gi"), alternative(81920, 20480, "20Gi", "80Gi")],
    }
    assert plan.spec["devices"]["constraints"] == [{"requests": ["gpu"], "distinctAttribute": f"{DRIVER}/uuid"}]


def test_card_sizes_are_checked_when_configured() -> None:
    with pytest.raises(InvalidInput, match="at most 8 sizes"):
        DraModeSettings(card_memory_mib=tuple(range(1000, 10000, 1000)))
    with pytest.raises(InvalidInput, match="each above 0"):
        DraModeSettings(card_memory_mib=(0,))


# --- the core names no vendor -----------------------------------------------------------------------------------------

OTHER = NvidiaConfig(
    resource_count_name="example.com/gpu",
    resource_memory_name="example.com/mem",
    resource_memory_percentage_name="",
    resource_core_name="example.com/cores",
    resource_priority_name="",
)


def two_vendors() -> DraAdmission:
    vendors: dict[str, Vendor] = {**VENDORS, "OTHER": NvidiaVendor(OTHER)}
    inner = Admission(vendors, admitters_for(vendors), SchedulingDefaults(), AdmissionSettings())
    return DraAdmission(inner)


def test_any_vendor_with_the_translation_hook_is_translated() -> None:
    adm = two_vendors()
    verdict, out = review(
        pod(ctr(limits={"example.com/gpu": "1", "example.com/mem": "10", "example.com/cores": "5"})), adm
    )
    [plan] = verdict.claims
    assert plan.spec == {"devices": {"requests": [gpu_request(cores="5", memory="10Mi")]}}
    assert out["spec"]["containers"][0]["resources"]["limits"] == {}


def test_a_container_asking_for_two_vendors_is_refused() -> None:
    raw = pod(ctr(limits={GPU: "1", "example.com/gpu": "1"}))
    verdict = two_vendors().review(raw, "team", suffixes())
    assert not verdict.allowed
    assert verdict.message.startswith(
        "containers[0](main): asks for devices of two vendors; DRA mode gives a container one claim"
    )


def test_a_stored_request_of_an_untranslatable_vendor_is_invalid_input() -> None:
    entry = {"container": "c", "section": "containers", "resources": {DCU: "1"}, "annotations": {}}
    with pytest.raises(InvalidInput, match=r"asks for hygon\.com/dcunum, which DRA mode does not translate"):
        claim_spec(entry, VENDORS, DraModeSettings())
    entry = {"container": "c", "section": "containers", "resources": {"cpu": "1"}, "annotations": {}}
    with pytest.raises(InvalidInput, match="asks for no device DRA mode translates"):
        claim_spec(entry, VENDORS, DraModeSettings())
    with pytest.raises(InvalidInput, match="must be containers or initContainers"):
        claim_spec({**entry, "section": "spec"}, VENDORS, DraModeSettings())
