"""Workload controllers expanded into the pods they would create, for ``hami simulate``.

Each kind makes what its controller makes, named the way the controller names its pods (the random parts are
derived from the workload's name, so a run is repeatable):

* **Deployment** — ``spec.replicas`` (default 1) pods ``<name>-<pod-template-hash>-<5 chars>``, labelled
  ``pod-template-hash`` as the ReplicaSet it owns labels them;
* **ReplicaSet**, **ReplicationController** — ``spec.replicas`` (default 1) pods ``<name>-<5 chars>``;
* **StatefulSet** — ``spec.replicas`` (default 1) pods ``<name>-<ordinal>`` from ``spec.ordinals.start`` (0);
* **Job** — the pods running at once: ``spec.parallelism`` (default 1), at most ``spec.completions`` when set,
  none while ``spec.suspend``; ``<name>-<5 chars>``, or ``<name>-<index>-<5 chars>`` with
  ``completionMode: Indexed``;
* **CronJob** — one run of ``spec.jobTemplate`` (as a Job named ``<name>-<minutes since the epoch>``, the time
  being ``now``), none while ``spec.suspend``;
* **DaemonSet** — one pod ``<name>-<5 chars>`` per node whose labels match the template's ``nodeSelector``,
  cordoned nodes included (the controller's pods tolerate ``node.kubernetes.io/unschedulable``). Each pod is
  bound to its node, as the controller's ``matchFields`` node affinity binds it; node affinity in the template and
  taints are not read (nodeSelector is the one placement rule the simulator reads for every pod).

The pod gets the template's labels and annotations, the workload's namespace and the template's spec. Pure.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from hami.errors import InvalidInput
from hami.protocol.objects import Node

__all__ = ["ExpandedPod", "expand_workload"]

_SAFE: Final = "bcdfghjklmnpqrstvwxz2456789"
"""The characters Kubernetes uses for generated name parts (``k8s.io/apimachinery/pkg/util/rand``)."""


@dataclass(frozen=True, slots=True)
class ExpandedPod:
    """One pod a workload makes: the raw Pod, and the node its controller binds it to (DaemonSets), if any."""

    raw: dict[str, Any]
    node: str | None = None


def _suffix(seed: str, n: int = 5) -> str:
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(_SAFE[b % len(_SAFE)] for b in digest[:n])


def _template_hash(template: object) -> str:
    """A ``pod-template-hash`` as the Deployment controller spells it: FNV-32a of the template, its decimal digits
    mapped to the safe characters (the value differs from the controller's, which hashes the Go struct)."""
    h = 0x811C9DC5
    for byte in json.dumps(template, sort_keys=True, default=str).encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE[ord(c) % len(_SAFE)] for c in str(h))


def _count(spec: Mapping[str, Any], key: str, where: str, default: int | None) -> int | None:
    value = spec.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{where}: spec.{key}", value, "expected a whole number, 0 or more")
    return value


def _mapping(value: object, field: str, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{where}: {field}", value, "expected an object")
    return value


def _pod(template: Mapping[str, Any], namespace: str, name: str, labels: Mapping[str, str]) -> dict[str, Any]:
    meta = _mapping(template.get("metadata"), "template.metadata", name)
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    all_labels = {**dict(meta.get("labels") or {}), **labels}
    if all_labels:
        metadata["labels"] = all_labels
    if meta.get("annotations"):
        metadata["annotations"] = copy.deepcopy(dict(meta["annotations"]))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": copy.deepcopy(template.get("spec") or {})}


def _template(spec: Mapping[str, Any], field: str, where: str) -> Mapping[str, Any]:
    template = spec.get("template")
    if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
        raise InvalidInput(f"{where}: {field}.template", template, "a workload needs a pod template with a spec")
    return template


def _job_pods(name: str, namespace: str, spec: Mapping[str, Any], where: str, field: str = "spec") -> list[ExpandedPod]:
    template = _template(spec, field, where)
    if spec.get("suspend") is True:
        return []
    running = _count(spec, "parallelism", where, 1) or 0
    completions = _count(spec, "completions", where, None)
    if completions is not None:
        running = min(running, completions)
    indexed = spec.get("completionMode") == "Indexed"
    out = []
    for i in range(running):
        labels = {"batch.kubernetes.io/job-name": name, "job-name": name}
        pod_name = f"{name}-{i}-{_suffix(f'{name}/{i}')}" if indexed else f"{name}-{_suffix(f'{name}/{i}')}"
        raw = _pod(template, namespace, pod_name, labels)
        if indexed:
            raw["metadata"].setdefault("annotations", {})["batch.kubernetes.io/job-completion-index"] = str(i)
        out.append(ExpandedPod(raw))
    return out


def _daemon_pods(
    name: str, namespace: str, spec: Mapping[str, Any], where: str, nodes: Sequence[Node]
) -> list[ExpandedPod]:
    template = _template(spec, "spec", where)
    selector = _mapping(template["spec"].get("nodeSelector"), "spec.template.spec.nodeSelector", where)
    out = []
    for node in sorted(nodes, key=lambda n: n.metadata.name):
        labels = node.metadata.labels
        if not node.metadata.name or any(labels.get(k) != v for k, v in selector.items()):
            continue
        pod_name = f"{name}-{_suffix(f'{name}/{node.metadata.name}')}"
        out.append(ExpandedPod(_pod(template, namespace, pod_name, {}), node.metadata.name))
    return out


def _cron_pods(name: str, namespace: str, spec: Mapping[str, Any], where: str, now: int) -> list[ExpandedPod]:
    job = _mapping(spec.get("jobTemplate"), "spec.jobTemplate", where)
    if spec.get("suspend") is True:
        return []
    job_spec = _mapping(job.get("spec"), "spec.jobTemplate.spec", where)
    return _job_pods(f"{name}-{now // 60}", namespace, job_spec, where, "spec.jobTemplate.spec")


def _replica_pods(kind: str, name: str, namespace: str, spec: Mapping[str, Any], where: str) -> list[ExpandedPod]:
    """Deployment, StatefulSet, ReplicaSet, ReplicationController: ``spec.replicas`` copies of the template."""
    template = _template(spec, "spec", where)
    replicas = _count(spec, "replicas", where, 1) or 0
    if kind == "StatefulSet":
        start = _count(_mapping(spec.get("ordinals"), "spec.ordinals", where), "start", where, 0) or 0
        ordinals = [str(start + i) for i in range(replicas)]
        labels = [
            {"statefulset.kubernetes.io/pod-name": f"{name}-{o}", "apps.kubernetes.io/pod-index": o} for o in ordinals
        ]
        return [
            ExpandedPod(_pod(template, namespace, f"{name}-{o}", lab)) for o, lab in zip(ordinals, labels, strict=True)
        ]
    if kind == "Deployment":
        h = _template_hash(template)
        names = [f"{name}-{h}-{_suffix(f'{name}/{i}')}" for i in range(replicas)]
        return [ExpandedPod(_pod(template, namespace, n, {"pod-template-hash": h})) for n in names]
    return [ExpandedPod(_pod(template, namespace, f"{name}-{_suffix(f'{name}/{i}')}", {})) for i in range(replicas)]


def expand_workload(raw: Mapping[str, Any], where: str, nodes: Sequence[Node], now: int) -> list[ExpandedPod]:
    """The pods ``raw`` (one of ``hami.simulate.fields.WORKLOAD_KINDS``) makes; ``nodes`` are the snapshot's (for
    DaemonSets), ``now`` (Unix seconds) names a CronJob's run. Raises ``InvalidInput`` naming ``where``."""
    kind = str(raw.get("kind"))
    meta = _mapping(raw.get("metadata"), "metadata", where)
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    if not name:
        raise InvalidInput(f"{where}: metadata.name", None, f"a {kind} needs a name (its pods are named after it)")
    spec = _mapping(raw.get("spec"), "spec", where)
    if kind == "Job":
        return _job_pods(name, namespace, spec, where)
    if kind == "CronJob":
        return _cron_pods(name, namespace, spec, where, now)
    if kind == "DaemonSet":
        return _daemon_pods(name, namespace, spec, where, nodes)
    return _replica_pods(kind, name, namespace, spec, where)
