"""DRA mode's translation against the real kube-apiserver: what the API server accepts is what counts.

The pure translation (``hami.scheduling.dra.translate``) is unit-tested; here the API server judges its output with
``dryRun=All`` (nothing is stored): every claim spec — CEL selectors (compiled by the API server), ``firstAvailable``
alternatives, the ``distinctAttribute`` constraint, the opaque configuration, the capacity requests — is a valid
ResourceClaim and comes back unchanged, and the translated pod (its ``resourceClaims``, container ``claims``, label,
annotation, names) is a valid pod, ``generateName`` included.

Then the selectors are judged where they matter: kube-scheduler allocates translated claims from the ResourceSlice
hami's DRA plugin publishes for an A100, an A10 and two T4s, on the cards the extender's filters would allow, with the
memory and cores HAMi would book; and kube-controller-manager releases and deletes them once their pods are gone.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import msgspec
import pytest

from hami.config import default_device_config
from hami.deviceplugin.discovery import GpuInfo
from hami.deviceplugin.dra.slices import NodeFacts, resource_slice, slice_devices
from hami.devices import vendors_from_config
from hami.devices.dra import DraModeSettings
from hami.protocol.jsonpatch import apply_patch
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.dra.names import SUFFIX_ALPHABET
from hami.scheduling.dra.translate import ClaimPlan, DraAdmission
from hami.scheduling.request import SchedulingDefaults
from tests.e2e.cluster import (
    ApiError,
    ControlPlane,
    KubeClient,
    ManagedProcess,
    Scheduler,
    free_port,
    wait_until,
)
from tests.e2e.realnode import locate_node_binaries

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


# --- kube-scheduler allocates the translated claims as HAMi would choose the cards -------------------------------

CARDS = (  # name, MiB: the slice hami's DRA plugin publishes for them (hami.deviceplugin.dra.slices)
    ("NVIDIA A100-SXM4-80GB", 81920),
    ("NVIDIA A10", 24576),
    ("Tesla T4", 15360),
    ("Tesla T4", 15360),
)

ALLOCATION_CASES = (  # pod annotations, limits → the cards kube-scheduler may choose, and what each share takes
    (  # use-gputype A10 never selects the A100
        {"nvidia.com/use-gputype": "a10"},
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"},
        [{"GPU-1"}],
        ("1000Mi", "10"),
    ),
    (  # nouse-gputype and a count of 2: two distinct T4s; no cores: the driver's configuration
        {"nvidia.com/nouse-gputype": "NVIDIA A100, a10"},
        {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "100"},
        [{"GPU-2", "GPU-3"}, {"GPU-2", "GPU-3"}],
        ("100Mi", "0"),
    ),
    (  # use-gpuuuid picks that card
        {"nvidia.com/use-gpuuuid": "GPU-3"},
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10", "nvidia.com/gpucores": "1"},
        [{"GPU-3"}],
        ("10Mi", "1"),
    ),
    (  # a percentage takes its share of the chosen card's size
        {"nvidia.com/use-gputype": "nvidia a10"},
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "5"},
        [{"GPU-1"}],
        ("12Gi", "5"),
    ),
)


def _slice(node: str, node_uid: str) -> dict[str, Any]:
    gpus = [
        GpuInfo(uuid=f"GPU-{i}", index=i, name=name, memory_mib=mib, bus_id=f"00000000:{i + 1:02X}:00.0", minor=i)
        for i, (name, mib) in enumerate(CARDS)
    ]
    devices = slice_devices(gpus, details={}, pcie_roots={})
    return resource_slice(node, node_uid, devices, NodeFacts(driver_version="550.54.15", cuda_version=(12, 4)))


@pytest.fixture
def controller_manager(control_plane: ControlPlane) -> Iterator[ManagedProcess]:
    """kube-controller-manager with the two controllers that end a claim: the resourceclaim controller (releases and
    deallocates a claim whose pods are gone, then drops kube-scheduler's finalizer) and the garbage collector
    (deletes a claim whose owner pod is gone)."""
    binary = locate_node_binaries(control_plane.binaries) / "kube-controller-manager"
    kubeconfig = control_plane.kubeconfig
    process = ManagedProcess(
        "kube-controller-manager",
        [
            str(binary),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--leader-elect=false",
            "--controllers=resourceclaim-controller,garbage-collector-controller",
        ],
        control_plane.log_dir / "kube-controller-manager.log",
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _create_claim(kube: KubeClient, namespace: str, plan: ClaimPlan, pod: dict[str, Any]) -> None:
    """The claim as hami's claim controller creates it: owned by its pod, sent as compact JSON (msgspec). The API
    server keeps an opaque configuration's parameters as the bytes it was sent: sent with blanks (Python's
    ``json.dumps`` default), every later patch of the claim (a label) is refused as a change of its immutable spec."""
    owner = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
    metadata = {"name": plan.claim_name, "ownerReferences": [{**owner, "controller": True, "blockOwnerDeletion": True}]}
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": metadata, "spec": plan.spec}
    sent = kube._http.post(  # KubeClient.post re-encodes with blanks
        f"{DRA}/namespaces/{namespace}/resourceclaims",
        content=msgspec.json.encode(body),
        headers={"Content-Type": "application/json"},
    )
    assert sent.status_code == 201, sent.text


def _claim(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        claim: dict[str, Any] = kube.get(f"{DRA}/namespaces/{namespace}/resourceclaims/{name}")
    except ApiError as err:
        if err.status == 404:
            return None
        raise
    return claim


def _allocation(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    allocation = ((_claim(kube, namespace, name) or {}).get("status") or {}).get("allocation")
    return allocation if isinstance(allocation, dict) else None


def _check_allocation(allocation: dict[str, Any], cards: list[set[str]], share: tuple[str, str]) -> None:
    results = allocation["devices"]["results"]
    uuids = [f"GPU-{r['device'].rsplit('-', 1)[1]}" for r in results]
    assert len(set(uuids)) == len(uuids) == len(cards), uuids
    assert all(uuid in allowed for uuid, allowed in zip(uuids, cards, strict=True)), uuids
    for result in results:
        consumed = result["consumedCapacity"]
        assert (consumed["memory"], consumed["cores"]) == share, consumed


def _admit(
    namespace: str, node: str, i: int, annotations: dict[str, str], limits: dict[str, str], admission: DraAdmission
) -> tuple[dict[str, Any], ClaimPlan]:
    raw = _pod(annotations, _ctr("main", limits))
    raw["metadata"] = {"name": f"p{i}", "annotations": annotations}
    raw["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    verdict = admission.review(raw, namespace, lambda: f"bcdf{SUFFIX_ALPHABET[i]}")
    assert verdict.allowed, verdict.message
    [plan] = verdict.claims
    return apply_patch(raw, verdict.patch), plan


def test_kube_scheduler_allocates_the_cards_hami_would_choose_and_the_claims_go_with_their_pods(
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
    controller_manager: ManagedProcess,
) -> None:
    """One fake node publishes hami's slice for an A100, an A10 and two T4s; the default kube-scheduler allocates
    each translated pod's claim, on cards the extender's filters would allow, with the shares HAMi would book.
    Once the pods are deleted, kube-controller-manager releases the claims and the garbage collector deletes them,
    the one with the driver's configuration too."""
    node = f"{namespace}-dra"
    created = make_node(node)
    settings = DraModeSettings(device_class=f"{namespace}-hami", card_memory_mib=tuple(mib for _, mib in CARDS))
    inner = Admission(VENDORS, admitters_for(VENDORS), SchedulingDefaults(), AdmissionSettings(scheduler_name=""))
    admission = DraAdmission(inner, settings)
    selector = {"cel": {"expression": f'device.driver == "{settings.driver}"'}}
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": settings.device_class},
    }
    kube.post(f"{DRA}/deviceclasses", {**device_class, "spec": {"selectors": [selector]}})
    the_slice = _slice(node, created["metadata"]["uid"])
    kube.post(f"{DRA}/resourceslices", the_slice)
    try:
        start_scheduler(None)
        expected: dict[str, tuple[list[set[str]], tuple[str, str]]] = {}
        for i, (annotations, limits, cards, share) in enumerate(ALLOCATION_CASES):
            pod, plan = _admit(namespace, node, i, annotations, limits, admission)
            made = kube.post(f"/api/v1/namespaces/{namespace}/pods", pod)
            _create_claim(kube, namespace, plan, made)
            expected[plan.claim_name] = (cards, share)
        for name, (cards, share) in expected.items():
            allocation = wait_until(partial(_allocation, kube, namespace, name), description=f"claim {name} allocated")
            _check_allocation(allocation, cards, share)
            kube.patch(f"{DRA}/namespaces/{namespace}/resourceclaims/{name}", {"metadata": {"labels": {"seen": "1"}}})
        for i in range(len(ALLOCATION_CASES)):
            kube.delete_pod(namespace, f"p{i}")
        for name in expected:
            wait_until(lambda name=name: _claim(kube, namespace, name) is None, description=f"claim {name} deleted")
    finally:
        kube.delete(f"{DRA}/resourceslices/{the_slice['metadata']['name']}")
        kube.delete(f"{DRA}/deviceclasses/{settings.device_class}")
