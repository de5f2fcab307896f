"""DRA mode's translation against the real kube-apiserver: what the API server accepts is what counts.

The pure translation (``hami.scheduling.dra.translate``) is unit-tested; here the API server judges its output with
``dryRun=All`` (nothing is stored): every claim spec — CEL selectors (compiled by the API server), ``firstAvailable``
alternatives, the ``distinctAttribute`` constraint, the opaque configuration, the capacity requests — is a valid
ResourceClaim and comes back unchanged, and the translated pod (its ``resourceClaims``, container ``claims``, label,
annotation, names) is a valid pod, ``generateName`` included.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from hami.config import default_device_config
from hami.devices import vendors_from_config
from hami.devices.dra import DraModeSettings
from hami.protocol.jsonpatch import apply_patch
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.dra.translate import DraAdmission
from hami.scheduling.request import SchedulingDefaults
from tests.e2e.cluster import ApiError, KubeClient

pytestmark = pytest.mark.e2e

DRA = "/apis/resource.k8s.io/v1"
VENDORS = vendors_from_config(default_device_config())
ADMISSION = DraAdmission(
    Admission(VENDORS, admitters_for(VENDORS), SchedulingDefaults(), AdmissionSettings()),
    DraModeSettings(card_memory_mib=(15360, 81920)),
)
DRY_RUN = {"dryRun": "All"}


def _pod(annotations: dict[str, str], *containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> Any:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "train-", "annotations": annotations},
        "spec": spec,
    }


def _ctr(name: str, limits: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "resources": {"limits": limits}, **extra}


PODS = {
    "shared card, type and uuid filters": _pod(
        {
            "nvidia.com/use-gputype": "A100, Tesla V100",
            "nvidia.com/nouse-gputype": "MIG",
            "nvidia.com/use-gpuuuid": 'GPU-1,GPU-"2"\\',
            "nvidia.com/nouse-gpuuuid": "GPU-3",
        },
        _ctr("main", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}),
    ),
    "exclusive cards, distinct, init and sidecar": _pod(
        {"nvidia.com/numa-bind": "false", "nvidia.com/vgpu-mode": "hami-core"},
        _ctr("main", {"nvidia.com/gpu": "2"}),
        init=(
            _ctr("prep", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100"}),
            _ctr("side", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "5"}, restartPolicy="Always"),
        ),
    ),
    "percentage per card size, no cores": _pod(
        {}, _ctr("a" * 63, {"nvidia.com/gpu": "3", "nvidia.com/gpumem-percentage": "25", "nvidia.com/priority": "1"})
    ),
}


@pytest.mark.parametrize("case", list(PODS))
def test_translated_claims_and_pods_are_valid_api_objects(kube: KubeClient, namespace: str, case: str) -> None:
    raw = PODS[case]
    letters = (f"{a}{b}{c}{d}{e}" for a, b, c, d, e in itertools.product("bcdfg", repeat=5))
    verdict = ADMISSION.review(raw, namespace, lambda: next(letters))
    assert verdict.allowed, verdict.message
    assert verdict.claims
    for plan in verdict.claims:
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": plan.claim_name, "namespace": namespace},
            "spec": plan.spec,
        }
        try:
            stored = kube.request("POST", f"{DRA}/namespaces/{namespace}/resourceclaims", claim, params=DRY_RUN)
        except ApiError as err:
            pytest.fail(f"{plan.container}: the API server refused the claim: {err}\n{plan.spec}")
        assert stored["spec"] == plan.spec, f"the API server changed the claim: {stored['spec']}"
    pod = apply_patch(raw, verdict.patch)
    stored = kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod, params=DRY_RUN)
    assert stored["spec"]["resourceClaims"] == pod["spec"]["resourceClaims"]
    for section in ("initContainers", "containers"):
        for got, sent in zip(stored["spec"].get(section, []), pod["spec"].get(section, []), strict=True):
            assert got["resources"].get("claims") == sent["resources"].get("claims")
            assert not {k for k in got["resources"].get("limits", {}) if k.startswith("nvidia.com/")}


def test_a_selector_the_api_server_cannot_compile_is_refused_so_the_check_above_can_fail(
    kube: KubeClient, namespace: str
) -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "broken", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "x",
                            "selectors": [{"cel": {"expression": 'device.attributes["x"].productName.lowerAscii('}}],
                        },
                    }
                ]
            }
        },
    }
    with pytest.raises(ApiError) as err:
        kube.request("POST", f"{DRA}/namespaces/{namespace}/resourceclaims", claim, params=DRY_RUN)
    assert err.value.status == 422
