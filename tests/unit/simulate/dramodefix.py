"""DRA-mode objects for the tools' tests, built by hand in the shapes hami's webhook, claim controller, DRA plugin
and kube-scheduler give them (DRAMODE.md, docs/dra-driver.md): a node's ResourceSlice of hami's driver, a pod the
webhook translated (label ``hami.io/dra``, annotation ``hami.io/dra-requests``, ``spec.resourceClaims``), and its
ResourceClaim as kube-scheduler allocates it (``consumedCapacity``, ``shareID``, ``reservedFor``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

DRIVER = "hami-core-gpu.project-hami.io"
MIB = 1048576


def uuid(node: str, minor: int) -> str:
    return f"GPU-{node}-{minor}"


def hami_slice(
    node: str, cards: Sequence[int], *, model: str = "NVIDIA A10", tainted: Sequence[int] = ()
) -> dict[str, Any]:
    """``node``'s slice of hami's driver: one device ``hami-gpu-<minor>`` per card of ``cards`` (MiB), by minor."""
    devices = []
    for minor, mem in enumerate(cards):
        device: dict[str, Any] = {
            "name": f"hami-gpu-{minor}",
            "attributes": {
                "type": {"string": "hami-gpu"},
                "uuid": {"string": uuid(node, minor)},
                "minor": {"int": minor},
                "productName": {"string": model},
            },
            "capacity": {
                "cores": {
                    "value": "100",
                    "requestPolicy": {"default": "100", "validRange": {"min": "0", "max": "100"}},
                },
                "memory": {
                    "value": str(mem * MIB),
                    "requestPolicy": {"default": str(mem * MIB), "validRange": {"min": "1Mi", "step": "1Mi"}},
                },
            },
            "allowMultipleAllocations": True,
        }
        if minor in tainted:
            device["taints"] = [{"key": f"{DRIVER}/unhealthy", "value": "true", "effect": "NoSchedule"}]
        devices.append(device)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {"driver": DRIVER, "pool": {"name": node, "generation": 1}, "nodeName": node, "devices": devices},
    }


def dra_pod(
    name: str,
    mem: int | None,
    cores: int = 0,
    *,
    gpus: int = 1,
    namespace: str = "team",
    on: str | None = None,
    annotations: dict[str, str] | None = None,
    container: str = "main",
) -> dict[str, Any]:
    """A pod hami's webhook translated: its HAMi request (``gpus`` × ``mem`` MiB, ``cores``%) only in the
    annotation, a claim ``<name>-<container>-x2b4z`` in its spec; ``on``: bound there."""
    claim = claim_name(name, container)
    resources: dict[str, str] = {"nvidia.com/gpu": str(gpus)}
    if mem is not None:
        resources["nvidia.com/gpumem"] = str(mem)
    if cores:
        resources["nvidia.com/gpucores"] = str(cores)
    entry = {"container": container, "section": "containers", "resources": resources, "annotations": annotations or {}}
    spec: dict[str, Any] = {
        "schedulerName": "hami-scheduler",
        "containers": [{"name": container, "image": "x", "resources": {"claims": [{"name": f"hami-{container}"}]}}],
        "resourceClaims": [{"name": f"hami-{container}", "resourceClaimName": claim}],
    }
    if on is not None:
        spec["nodeName"] = on
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": {"hami.io/dra": "true"},
            "annotations": {"hami.io/dra-requests": json.dumps({claim: entry})},
        },
        "spec": spec,
        "status": {"phase": "Running" if on else "Pending"},
    }


def claim_name(pod: str, container: str = "main") -> str:
    return f"{pod}-{container}-x2b4z"


def dra_claim(
    pod: str,
    node: str | None,
    shares: Sequence[tuple[int, int, int]] = (),
    *,
    namespace: str = "team",
    container: str = "main",
    reserved: bool = True,
) -> dict[str, Any]:
    """``pod``'s claim; with ``node``, allocated there: one share per (minor, MiB, cores) of ``shares``."""
    name = claim_name(pod, container)
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-claim-{namespace}-{name}",
            "labels": {"hami.io/dra": "true"},
            "annotations": {"hami.io/dra-pod": pod},
        },
        "status": {},
    }
    if node is not None:
        results = [
            {
                "request": "gpu",
                "driver": DRIVER,
                "pool": node,
                "device": f"hami-gpu-{minor}",
                "shareID": f"share-{name}-{i}",
                "consumedCapacity": {"memory": f"{mem}Mi", "cores": str(cores)},
            }
            for i, (minor, mem, cores) in enumerate(shares)
        ]
        selector = {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        }
        claim["status"]["allocation"] = {"devices": {"results": results}, "nodeSelector": selector}
        if reserved:
            claim["status"]["reservedFor"] = [{"resource": "pods", "name": pod, "uid": f"uid-{namespace}-{pod}"}]
    return claim
