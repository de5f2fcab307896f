"""DRA mode end to end on the real control plane (docs/dra-mode.md): a pod written for HAMi, in a DRA namespace,
becomes a ResourceClaim owned by the pod, which the real kube-scheduler allocates and binds without calling hami.

Its own control plane (module scope): etcd, kube-apiserver, kube-controller-manager with only the garbage collector
and the resourceclaim controller (so a claim goes with its pod), the chart's identities rendered with
``draMode.enabled=true`` (hami may create claims), and the chart's DeviceClass. ``hami scheduler --dra-mode`` runs
over TLS as the chart's hami ServiceAccount; the chart's MutatingWebhookConfiguration (both entries, their
selectors, matchConditions and ``failurePolicy: Fail``) calls it by URL. kube-scheduler (the chart's identity) has
hami as its extender for the extender path. One fake node publishes two A100s in a ResourceSlice built by
``hami dra-plugin``'s own builder (``hami.deviceplugin.dra.slices``: the stand-in for the plugin, no kubelet);
another registers a GPU for the extender path. Waits poll with bounded deadlines.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import ssl
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from hami.deviceplugin.discovery import GpuInfo
from hami.deviceplugin.dra.slices import NodeFacts, resource_slice, slice_devices
from hami.protocol import keys
from hami.protocol.quantity import parse_quantity
from hami.server.certs import generate, write_files
from tests.e2e.cluster import (
    ApiError,
    ControlPlane,
    ControlPlaneError,
    KubeClient,
    ManagedProcess,
    free_port,
    start_control_plane,
    wait_until,
)
from tests.e2e.hami_stack import api_requests
from tests.e2e.identities import HAMI_SA, KUBE_SCHEDULER_SA, ChartIdentities, chart_identities

pytestmark = pytest.mark.e2e

SCHEDULER = "hami-scheduler"
CLASS = "hami-core-gpu.project-hami.io"
DRA = "/apis/resource.k8s.io/v1"
MIB = 1 << 20
CONTROLLERS = ("garbage-collector-controller", "resourceclaim-controller")
NVIDIA = ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores",
          "nvidia.com/priority")  # fmt: skip
HAMI_POD = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}


@dataclass
class Stack:
    plane: ControlPlane
    kube: KubeClient
    identities: ChartIdentities
    hami: ManagedProcess
    port: int
    metrics_port: int
    dra_node: str
    ext_node: str
    dra_ns: str
    plain_ns: str

    def metric(self, name: str, **labels: str) -> float:
        """One sample of hami's /metrics (0 when absent)."""
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            if line.startswith(f"{name}{{{wanted}}} ") or (not labels and line.startswith(f"{name} ")):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def extender_calls(self) -> tuple[float, float]:
        count = "hami_request_duration_seconds_count"
        return self.metric(count, endpoint="filter"), self.metric(count, endpoint="bind")

    def claim(self, namespace: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.kube.get(f"{DRA}/namespaces/{namespace}/resourceclaims/{name}")
        return found

    def wait_claim(self, namespace: str, name: str) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            try:
                return self.claim(namespace, name)
            except ApiError as err:
                if err.status != 404:
                    raise
                return None

        found: dict[str, Any] = wait_until(probe, description=f"claim {namespace}/{name}")
        return found

    def gone(self, path: str) -> bool:
        try:
            self.kube.get(path)
        except ApiError as err:
            if err.status == 404:
                return True
            raise
        return False


def claim_names(pod: dict[str, Any]) -> list[str]:
    return [c["resourceClaimName"] for c in pod["spec"].get("resourceClaims", [])]


def _publish(kube: KubeClient, node: str) -> None:
    """The node's ResourceSlice as ``hami dra-plugin`` builds it: two 40 GB A100s, minors 0 and 1."""
    uid = kube.get(f"/api/v1/nodes/{node}")["metadata"]["uid"]
    gpus = [
        GpuInfo(uuid=f"GPU-{node}-{i}", index=i, name="NVIDIA A100-SXM4-40GB", memory_mib=40960, minor=i)
        for i in range(2)
    ]
    devices = slice_devices(gpus, details={}, pcie_roots={})
    kube.post(f"{DRA}/resourceslices", resource_slice(node, uid, devices, NodeFacts("580.65.06", (12, 8))))


def _start_hami(plane: ControlPlane, identities: ChartIdentities, tls: Path) -> tuple[ManagedProcess, int, int, int]:
    port, extender_port, metrics_port = free_port(), free_port(), free_port()
    process = ManagedProcess(
        "hami-scheduler",
        [
            str(Path(sys.executable).parent / "hami"),
            "scheduler",
            f"--kubeconfig={identities.kubeconfig(HAMI_SA)}",
            f"--scheduler-name={SCHEDULER}",
            f"--http_bind=127.0.0.1:{port}",
            f"--extender-bind=127.0.0.1:{extender_port}",
            f"--cert_file={tls / 'tls.crt'}",
            f"--key_file={tls / 'tls.key'}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            "--no-leader-elect",
            "--dra-mode",
            f"--dra-device-class={CLASS}",
            "--text-logs",
        ],
        plane.log_dir / "hami-scheduler-dra-mode.log",
    )
    process.start()
    context = ssl.create_default_context(cadata=(tls / "ca.crt").read_text())

    def ready() -> bool:
        code = process.exited()
        if code is not None:
            raise ControlPlaneError(f"hami scheduler exited with status {code}:\n{process.log_tail()}")
        return httpx.get(f"https://127.0.0.1:{port}/readyz", verify=context, timeout=5).status_code == 200

    wait_until(ready, description="hami scheduler /readyz")
    return process, port, extender_port, metrics_port


def _register_webhooks(kube: KubeClient, identities: ChartIdentities, port: int, ca: bytes) -> None:
    """The chart's MutatingWebhookConfiguration, each entry calling hami by URL (its own path) with our CA."""
    config = copy.deepcopy(identities.one("MutatingWebhookConfiguration", "hami-webhook"))
    bundle = base64.b64encode(ca).decode()
    for entry in config["webhooks"]:
        path = entry["clientConfig"]["service"]["path"]
        entry["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
    kube.post("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", config)


def _start_kube_scheduler(plane: ControlPlane, identities: ChartIdentities, extender_port: int, ca: bytes) -> None:
    plane.start_scheduler(
        {
            "clientConnection": {"kubeconfig": str(identities.kubeconfig(KUBE_SCHEDULER_SA))},
            "profiles": [{"schedulerName": SCHEDULER}],
            "extenders": [
                {
                    "urlPrefix": f"https://127.0.0.1:{extender_port}",
                    "filterVerb": "filter",
                    "bindVerb": "bind",
                    "nodeCacheCapable": True,
                    "weight": 1,
                    "httpTimeout": "30s",
                    "enableHTTPS": True,
                    "tlsConfig": {"caData": base64.b64encode(ca).decode()},
                    "managedResources": [{"name": n, "ignoredByScheduler": True} for n in NVIDIA],
                }
            ],
        },
        name="kube-scheduler-dra-mode",
    )


def _wait_for_webhooks(kube: KubeClient, namespace: str) -> None:
    """A configuration reaches the API server's admission chain a moment after it is written: create pods that
    can run nowhere until one comes back translated, and delete each (their claims go with them)."""

    def translated() -> bool:
        name = f"probe-{uuid.uuid4().hex[:8]}"
        try:
            pod = kube.create_pod(namespace, name, limits=HAMI_POD, spec={"nodeSelector": {"hami-e2e/none": "x"}})
        except ApiError:
            return False
        kube.delete_pod(namespace, name)
        return pod["metadata"].get("labels", {}).get("hami.io/dra") == "true"

    wait_until(translated, description="hami's DRA webhook to be in effect")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("dra-mode")
    plane = start_control_plane(workdir / "plane", controllers=CONTROLLERS)
    hami: ManagedProcess | None = None
    kube = plane.client()
    try:
        identities = chart_identities(plane, ("draMode.enabled=true",))
        kube.post(f"{DRA}/deviceclasses", copy.deepcopy(identities.one("DeviceClass", CLASS)))
        suffix = uuid.uuid4().hex[:6]
        dra_node, ext_node = f"dra-{suffix}", f"ext-{suffix}"
        kube.create_node(dra_node)
        _publish(kube, dra_node)
        inventory = [{"id": f"GPU-{ext_node}", "index": 0, "count": 10, "devmem": 16384, "devcore": 100,
                      "type": "NVIDIA-Tesla T4", "health": True}]  # fmt: skip
        kube.create_node(
            ext_node, extended={"nvidia.com/gpu": 10}, annotations={keys.NVIDIA_REGISTER: json.dumps(inventory)}
        )
        bundle = generate(["localhost"], ["127.0.0.1"], now=datetime.now(UTC), ca_name="hami-e2e-dra-mode")
        write_files(bundle, workdir / "tls")
        hami, port, extender_port, metrics_port = _start_hami(plane, identities, workdir / "tls")
        _register_webhooks(kube, identities, port, bundle.ca_cert)
        _start_kube_scheduler(plane, identities, extender_port, bundle.ca_cert)
        dra_ns = kube.create_namespace(f"dra-{suffix}", labels={"hami.io/scheduling-mode": "dra"})
        plain_ns = kube.create_namespace(f"plain-{suffix}")
        _wait_for_webhooks(kube, dra_ns)
        yield Stack(plane, kube, identities, hami, port, metrics_port, dra_node, ext_node, dra_ns, plain_ns)
    finally:
        kube.close()
        if hami is not None:
            hami.stop()
        plane.stop()


def test_a_hami_pod_gets_its_own_claim_and_kube_scheduler_alone_allocates_and_binds_it(stack: Stack) -> None:
    kube, ns = stack.kube, stack.dra_ns
    before = stack.extender_calls()
    created = kube.create_pod(ns, "train", limits=HAMI_POD)
    assert created["spec"]["schedulerName"] == SCHEDULER
    assert created["metadata"]["labels"]["hami.io/dra"] == "true"
    [name] = claim_names(created)
    assert name.startswith("train-main-")
    main = created["spec"]["containers"][0]
    assert main["resources"]["claims"] == [{"name": "hami-main"}]
    assert not [r for r in main["resources"].get("limits", {}) if r.startswith("nvidia.com/")]
    recorded = json.loads(created["metadata"]["annotations"]["hami.io/dra-requests"])
    as_written = {k: parse_quantity(v, k) for k, v in recorded[name]["resources"].items()}
    assert as_written == {k: parse_quantity(v, k) for k, v in HAMI_POD.items()}  # the API writes 3000 as 3k

    bound = kube.wait_for_pod_scheduled(ns, "train")
    assert bound["spec"]["nodeName"] == stack.dra_node
    claim = stack.claim(ns, name)
    assert claim["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "train", "uid": created["metadata"]["uid"], "controller": True,
         "blockOwnerDeletion": True}
    ]  # fmt: skip
    assert claim["metadata"]["labels"] == {"hami.io/dra": "true"}
    assert claim["metadata"]["annotations"] == {"hami.io/dra-pod": "train"}
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == CLASS
    assert result["pool"] == stack.dra_node
    consumed = result["consumedCapacity"]
    assert parse_quantity(consumed["memory"], "memory") == 3000 * MIB
    assert parse_quantity(consumed["cores"], "cores") == 30
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["train"]
    assert stack.extender_calls() == before  # hami's /filter and /bind were not called
    assert stack.metric("hami_dra_claims_created_total", result="created") >= 1


def test_two_pods_of_one_generate_name_get_distinct_claims_with_one_write_each(stack: Stack) -> None:
    kube, ns = stack.kube, stack.dra_ns
    before = api_requests(kube)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "job-"},
        "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": HAMI_POD}}]},
    }
    pods = [kube.post(f"/api/v1/namespaces/{ns}/pods", body) for _ in range(2)]
    names = [claim_names(p)[0] for p in pods]
    assert len(set(names)) == 2
    assert all(n.startswith("job-main-") for n in names)
    for pod, name in zip(pods, names, strict=True):
        claim = stack.wait_claim(ns, name)
        assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
        kube.wait_for_pod_scheduled(ns, pod["metadata"]["name"])
    made = api_requests(kube) - before
    assert made[("POST", "resourceclaims")] == 2  # one create per claim, none repeated on the pods' updates


def test_deleting_the_pod_deletes_its_claim(stack: Stack) -> None:
    kube, ns = stack.kube, stack.dra_ns
    created = kube.create_pod(ns, "short", limits=HAMI_POD)
    [name] = claim_names(created)
    stack.wait_claim(ns, name)
    kube.wait_for_pod_scheduled(ns, "short")
    kube.delete_pod(ns, "short")
    wait_until(
        lambda: stack.gone(f"{DRA}/namespaces/{ns}/resourceclaims/{name}"),
        description="the garbage collector to delete the pod's claim",
    )


def test_a_dry_run_creates_nothing(stack: Stack) -> None:
    kube, ns = stack.kube, stack.dra_ns
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "dry"},
        "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": HAMI_POD}}]},
    }
    answer = kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body, params={"dryRun": "All"})
    [name] = claim_names(answer)  # translated as a real create would be
    # a real pod created after it gets its claim: by then the controller has seen every pod before it
    later = kube.create_pod(ns, "after-dry", limits=HAMI_POD)
    stack.wait_claim(ns, claim_names(later)[0])
    assert stack.gone(f"{DRA}/namespaces/{ns}/resourceclaims/{name}")
    assert stack.gone(f"/api/v1/namespaces/{ns}/pods/dry")


def test_a_pod_outside_the_dra_namespaces_keeps_the_extender_path(stack: Stack) -> None:
    kube, ns = stack.kube, stack.plain_ns
    filters, binds = stack.extender_calls()
    created = kube.create_pod(ns, "classic", limits=HAMI_POD)
    assert created["spec"]["schedulerName"] == SCHEDULER
    assert "hami.io/dra" not in created["metadata"].get("labels", {})
    assert "resourceClaims" not in created["spec"]
    assert parse_quantity(created["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"], "mem") == 3000
    bound = kube.wait_for_pod_scheduled(ns, "classic")
    assert bound["spec"]["nodeName"] == stack.ext_node
    assert bound["metadata"]["annotations"][keys.VGPU_NODE] == stack.ext_node
    after = stack.extender_calls()
    assert after[0] > filters
    assert after[1] > binds


def test_what_dra_mode_cannot_express_is_refused_with_the_reason(stack: Stack) -> None:
    with pytest.raises(ApiError) as caught:
        stack.kube.create_pod(stack.dra_ns, "mig", limits=HAMI_POD, annotations={"nvidia.com/vgpu-mode": "mig"})
    assert caught.value.status == 403
    message = caught.value.body["message"]
    assert 'admission webhook "dra.hami.io" denied the request' in message
    assert "nvidia.com/vgpu-mode" in message
    assert "mig" in message


def test_a_forged_request_annotation_still_gets_only_a_re_translated_claim(stack: Stack) -> None:
    ns = stack.dra_ns
    claim = f"forged-main-{uuid.uuid4().hex[:5]}"
    forged = {
        claim: {
            "container": "main",
            "section": "containers",
            "resources": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"},
            "annotations": {},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": 2}}]}},
        }
    }
    with stack.identities.tenant(ns) as tenant:
        created = tenant.create_pod(
            ns,
            "forged",
            scheduler_name=SCHEDULER,
            labels={"hami.io/dra": "true"},
            annotations={"hami.io/dra-requests": json.dumps(forged)},
            containers=[{"name": "main", "image": "x", "resources": {"claims": [{"name": "hami-main"}]}}],
            spec={"resourceClaims": [{"name": "hami-main", "resourceClaimName": claim}]},
        )
    assert claim_names(created) == [claim]
    made = stack.wait_claim(ns, claim)
    [request] = made["spec"]["devices"]["requests"]
    assert request["exactly"]["count"] == 1
    assert parse_quantity(request["exactly"]["capacity"]["requests"]["memory"], "memory") == 1000 * MIB
    assert made["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]


def test_a_dra_pod_over_its_namespaces_gpu_memory_quota_is_refused_at_admission(stack: Stack) -> None:
    kube = stack.kube
    ns = kube.create_namespace(f"quota-{uuid.uuid4().hex[:6]}", labels={"hami.io/scheduling-mode": "dra"})
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu"},
             "spec": {"hard": {"limits.nvidia.com/gpumem": "2000"}}}  # fmt: skip
    kube.post(f"/api/v1/namespaces/{ns}/resourcequotas", quota)

    def refused() -> str | None:
        name = f"big-{uuid.uuid4().hex[:6]}"
        try:
            kube.create_pod(ns, name, limits=HAMI_POD, spec={"nodeSelector": {"hami-e2e/none": "x"}})
        except ApiError as err:
            message: str = err.body["message"]
            return message
        kube.delete_pod(ns, name)  # hami has not seen the quota yet
        return None

    message = wait_until(refused, description="hami's quota watch to see the namespace's quota")
    assert 'admission webhook "dra.hami.io" denied the request: exceeding resource quota' in message
    assert "nvidia.com/gpumem" in message
    small = kube.create_pod(ns, "small", limits={**HAMI_POD, "nvidia.com/gpumem": "1000"})
    assert claim_names(small)
    with contextlib.suppress(ApiError):
        kube.delete_pod(ns, "small")


def test_a_memory_percentage_becomes_that_share_of_the_published_card(stack: Stack) -> None:
    kube, ns = stack.kube, stack.dra_ns
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "10"}
    created = kube.create_pod(ns, "half", limits=limits)
    [name] = claim_names(created)
    kube.wait_for_pod_scheduled(ns, "half")
    claim = stack.claim(ns, name)
    [request] = claim["spec"]["devices"]["requests"]
    assert [a["name"] for a in request["firstAvailable"]] == ["mem-40960"]  # the one card size published
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert parse_quantity(result["consumedCapacity"]["memory"], "memory") == 20480 * MIB
