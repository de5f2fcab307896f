"""``hami explain`` and ``hami top`` on DRA-mode pods, on the real control plane (issue 38, docs/dra-mode.md#tools).

A node served only by hami's DRA driver (no device-plugin registration) publishes two 16000-MiB cards in a
ResourceSlice of ``hami-core-gpu.project-hami.io`` (no kubelet: the test publishes the slice as the plugin would).
Two pods in the shape hami's DRA-mode webhook leaves (label ``hami.io/dra``, the original request in
``hami.io/dra-requests``, a claim owned by the pod in ``spec.resourceClaims``) go to the default kube-scheduler, which
allocates claims itself: the first (12000 MiB on one card) is allocated on the first card; the second asks for two
distinct cards of 6000 MiB, which only one card has, so kube-scheduler leaves it pending with its terse message.
``hami explain`` (live, the admin kubeconfig) names the card that lacks memory; ``hami top`` shows the slice's
cards with the first pod's share under its name.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.e2e.cluster import ApiError, ControlPlane, KubeClient, Scheduler, wait_until
from tests.e2e.hami_stack import HAMI

pytestmark = pytest.mark.e2e

DRA = "/apis/resource.k8s.io/v1"
DRIVER = "hami-core-gpu.project-hami.io"
MIB = 1 << 20
CARD_MIB = 16000


@dataclass
class Published:
    """The DRA objects the test made (cluster-scoped ones outlive a namespace: removed afterwards)."""

    kube: KubeClient
    namespace: str
    node: str
    device_class: str
    slices: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)

    def slice(self) -> None:
        """The node's slice as hami's DRA plugin publishes it: ``hami-gpu-<minor>`` by minor, shared by capacity."""
        devices = [
            {
                "name": f"hami-gpu-{minor}",
                "allowMultipleAllocations": True,
                "attributes": {
                    "type": {"string": "hami-gpu"},
                    "uuid": {"string": f"GPU-{self.node}-{minor}"},
                    "minor": {"int": minor},
                    "productName": {"string": "NVIDIA A10"},
                },
                "capacity": {
                    "cores": {
                        "value": "100",
                        "requestPolicy": {"default": "100", "validRange": {"min": "0", "max": "100"}},
                    },
                    "memory": {
                        "value": f"{CARD_MIB}Mi",
                        "requestPolicy": {"default": f"{CARD_MIB}Mi", "validRange": {"min": "1Mi", "step": "1Mi"}},
                    },
                },
            }
            for minor in range(2)
        ]
        name = f"{self.node}-{DRIVER}"
        spec = {
            "driver": DRIVER,
            "nodeName": self.node,
            "pool": {"name": self.node, "generation": 1, "resourceSliceCount": 1},
        }
        self.kube.post(f"{DRA}/resourceslices", {"metadata": {"name": name}, "spec": {**spec, "devices": devices}})
        self.slices.append(name)
        self.kube.post(
            f"{DRA}/deviceclasses",
            {
                "metadata": {"name": self.device_class},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            },
        )

    def dra_pod(self, name: str, gpus: int, mem: int) -> None:
        """A pod as hami's webhook translates it, and its claim as hami's claim controller creates it (owned by
        the pod; count, memory, cores "0", distinct cards)."""
        claim = f"{name}-main-x2b4z"
        entry = {"container": "main", "section": "containers", "annotations": {}}
        entry["resources"] = {"nvidia.com/gpu": str(gpus), "nvidia.com/gpumem": str(mem)}
        pod = self.kube.create_pod(
            self.namespace,
            name,
            labels={"hami.io/dra": "true"},
            annotations={"hami.io/dra-requests": json.dumps({claim: entry})},
            containers=[
                {
                    "name": "main",
                    "image": "registry.invalid/hami-e2e:none",
                    "resources": {"claims": [{"name": "hami-main"}]},
                }
            ],
            spec={
                "resourceClaims": [{"name": "hami-main", "resourceClaimName": claim}],
                "nodeSelector": {"kubernetes.io/hostname": self.node},
            },
        )
        exactly: dict[str, Any] = {
            "deviceClassName": self.device_class,
            "allocationMode": "ExactCount",
            "count": gpus,
            "capacity": {"requests": {"memory": f"{mem}Mi", "cores": "0"}},
        }
        devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": exactly}]}
        if gpus > 1:
            devices["constraints"] = [{"requests": ["gpu"], "distinctAttribute": f"{DRIVER}/uuid"}]
        owner = {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod["metadata"]["uid"], "controller": True}
        meta = {"name": claim, "labels": {"hami.io/dra": "true"}, "annotations": {"hami.io/dra-pod": name}}
        self.kube.post(
            f"{DRA}/namespaces/{self.namespace}/resourceclaims",
            {"metadata": {**meta, "ownerReferences": [owner]}, "spec": {"devices": devices}},
        )
        self.claims.append(claim)

    def remove(self) -> None:
        for name in self.claims:
            path = f"{DRA}/namespaces/{self.namespace}/resourceclaims/{name}"
            try:
                claim = self.kube.get(path)
                if (claim.get("status") or {}).get("allocation"):
                    claim["status"] = {}
                    self.kube.put(f"{path}/status", claim)
                self.kube.patch(path, {"metadata": {"finalizers": None}})
                self.kube.delete(path)
            except ApiError as err:
                if err.status != 404:
                    raise
        for name in self.slices:
            self.kube.delete(f"{DRA}/resourceslices/{name}")
        self.kube.delete(f"{DRA}/deviceclasses/{self.device_class}")


@pytest.fixture
def published(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
) -> Iterator[Published]:
    node = f"{namespace}-dra-only"
    make_node(node)
    p = Published(kube, namespace, node, f"{namespace}-hami-gpu")
    try:
        p.slice()
        start_scheduler(None)  # the default profile: DynamicResources allocates the claims
        yield p
    finally:
        p.remove()


def hami(control_plane: ControlPlane, *args: str) -> dict[str, Any]:
    command = [str(HAMI), *args, "--kubeconfig", str(control_plane.kubeconfig), "-o", "json"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_explain_names_the_card_a_pending_dra_mode_pod_lacks(
    published: Published, kube: KubeClient, namespace: str, control_plane: ControlPlane
) -> None:
    published.dra_pod("first", 1, 12000)
    first = wait_until(
        lambda: kube.get_pod(namespace, "first")["spec"].get("nodeName") or None, description="first pod bound"
    )
    assert first == published.node
    published.dra_pod("second", 2, 6000)

    def unschedulable() -> str | None:
        conditions = kube.get_pod(namespace, "second").get("status", {}).get("conditions") or []
        return next((c.get("message", "") for c in conditions if c.get("reason") == "Unschedulable"), None)

    said = wait_until(unschedulable, description="kube-scheduler's verdict on the second pod")
    assert "claim" in said  # kube-scheduler's own words name no card

    explained = hami(control_plane, "explain", f"{namespace}/second")
    assert explained["status"] == "pending"
    assert explained["message"].startswith("DRA mode: 0/")
    mine = next(v for v in explained["nodes"] if v["node"] == published.node)
    assert mine["reasons"] == {"CardInsufficientMemory": 1}
    assert mine["summary"].startswith("1 of 2 card(s) fit, the claim asks for 2 distinct")
    cards = [(c["index"], c["freeMemoryMiB"], c["needMemoryMiB"], c["verdict"]) for c in mine["cards"]]
    assert cards == [(0, CARD_MIB - 12000, 6000, "CardInsufficientMemory"), (1, CARD_MIB, 6000, "fits")]

    top = hami(control_plane, "top", "--node", published.node)
    (row,) = top["nodes"]
    assert row["draServed"] == ["NVIDIA"]
    holders = [
        (c["index"], c["memoryMiB"], [(p["pod"], p["mode"], p["container"]) for p in c["pods"]]) for c in row["cards"]
    ]
    assert holders == [
        (0, {"used": 12000, "total": CARD_MIB}, [(f"{namespace}/first", "dra", "main")]),
        (1, {"used": 0, "total": CARD_MIB}, []),
    ]
