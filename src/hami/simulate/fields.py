"""Strict decoding of the objects ``hami simulate`` and ``hami explain -f`` place: ``unknown field`` warnings.

hami's views of a pod (``hami.protocol.objects``) read only the fields the scheduler needs and skip the rest, so a
misspelt ``resource:`` (for ``resources:``) or ``limit:`` (for ``limits:``) would be skipped too and the pod would
ask for nothing. kubectl refuses such an object (``--validate=strict``, its default): ``strict decoding error:
unknown field "spec.containers[0].resource"``. ``unknown_fields`` finds the same paths, in kubectl's spelling.

The schema below is Kubernetes' (v1.36) for the levels where a typo changes what hami sees: the object, its
``metadata``, a workload's ``spec`` and pod template, the ``PodSpec``, every container and its ``resources``.
Deeper objects (probes, volumes, affinity, security contexts) are not checked: hami does not read them, and the
API server checks them anyway. Pure.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Final

__all__ = ["WORKLOAD_KINDS", "unknown_fields"]

_TOP: Final = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
_META: Final = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
_POD_SPEC: Final = frozenset(
    {
        "activeDeadlineSeconds",
        "affinity",
        "automountServiceAccountToken",
        "containers",
        "dnsConfig",
        "dnsPolicy",
        "enableServiceLinks",
        "ephemeralContainers",
        "hostAliases",
        "hostIPC",
        "hostNetwork",
        "hostPID",
        "hostUsers",
        "hostname",
        "hostnameOverride",
        "imagePullSecrets",
        "initContainers",
        "nodeName",
        "nodeSelector",
        "os",
        "overhead",
        "preemptionPolicy",
        "priority",
        "priorityClassName",
        "readinessGates",
        "resourceClaims",
        "resources",
        "restartPolicy",
        "runtimeClassName",
        "schedulerName",
        "schedulingGates",
        "schedulingGroup",
        "securityContext",
        "serviceAccount",
        "serviceAccountName",
        "setHostnameAsFQDN",
        "shareProcessNamespace",
        "subdomain",
        "terminationGracePeriodSeconds",
        "tolerations",
        "topologySpreadConstraints",
        "volumes",
        "workloadRef",
    }
)
_CONTAINER: Final = frozenset(
    {
        "args",
        "command",
        "env",
        "envFrom",
        "image",
        "imagePullPolicy",
        "lifecycle",
        "livenessProbe",
        "name",
        "ports",
        "readinessProbe",
        "resizePolicy",
        "resources",
        "restartPolicy",
        "restartPolicyRules",
        "securityContext",
        "startupProbe",
        "stdin",
        "stdinOnce",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "tty",
        "volumeDevices",
        "volumeMounts",
        "workingDir",
    }
)
_EPHEMERAL: Final = _CONTAINER | {"targetContainerName"}
_RESOURCES: Final = frozenset({"limits", "requests", "claims"})
_TEMPLATE: Final = frozenset({"metadata", "spec"})

WORKLOAD_KINDS: Final[Mapping[str, frozenset[str]]] = {
    "Deployment": frozenset(
        {
            "replicas",
            "selector",
            "template",
            "strategy",
            "minReadySeconds",
            "revisionHistoryLimit",
            "paused",
            "progressDeadlineSeconds",
        }
    ),
    "StatefulSet": frozenset(
        {
            "replicas",
            "selector",
            "template",
            "volumeClaimTemplates",
            "serviceName",
            "podManagementPolicy",
            "updateStrategy",
            "revisionHistoryLimit",
            "minReadySeconds",
            "persistentVolumeClaimRetentionPolicy",
            "ordinals",
        }
    ),
    "ReplicaSet": frozenset({"replicas", "minReadySeconds", "selector", "template"}),
    "ReplicationController": frozenset({"replicas", "minReadySeconds", "selector", "template"}),
    "DaemonSet": frozenset({"selector", "template", "updateStrategy", "minReadySeconds", "revisionHistoryLimit"}),
    "Job": frozenset(
        {
            "parallelism",
            "completions",
            "activeDeadlineSeconds",
            "podFailurePolicy",
            "successPolicy",
            "backoffLimit",
            "backoffLimitPerIndex",
            "maxFailedIndexes",
            "selector",
            "manualSelector",
            "template",
            "ttlSecondsAfterFinished",
            "completionMode",
            "suspend",
            "podReplacementPolicy",
            "managedBy",
        }
    ),
    "CronJob": frozenset(
        {
            "schedule",
            "timeZone",
            "startingDeadlineSeconds",
            "concurrencyPolicy",
            "suspend",
            "jobTemplate",
            "successfulJobsHistoryLimit",
            "failedJobsHistoryLimit",
        }
    ),
}
"""The workload kinds ``hami simulate`` expands into pods, and the fields of each one's ``spec``."""


def _extra(value: object, known: frozenset[str], path: str) -> Iterator[str]:
    """``unknown field "<path>.<key>"`` for each key of ``value`` not in ``known``, with the closest known key."""
    if isinstance(value, Mapping):
        for key in value:
            if key not in known:
                where = f"{path}.{key}" if path else str(key)
                close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.75)
                yield f'unknown field "{where}"' + (f' (did you mean "{close[0]}"?)' if close else "")


def _mapping(value: object, key: str) -> object:
    return value.get(key) if isinstance(value, Mapping) else None


def _pod_spec(spec: object, path: str) -> Iterator[str]:
    yield from _extra(spec, _POD_SPEC, path)
    for section, known in (
        ("initContainers", _CONTAINER),
        ("containers", _CONTAINER),
        ("ephemeralContainers", _EPHEMERAL),
    ):
        containers = _mapping(spec, section)
        if not isinstance(containers, list):
            continue
        for i, container in enumerate(containers):
            where = f"{path}.{section}[{i}]"
            yield from _extra(container, known, where)
            yield from _extra(_mapping(container, "resources"), _RESOURCES, f"{where}.resources")
    yield from _extra(_mapping(spec, "resources"), _RESOURCES, f"{path}.resources")


def _template(template: object, path: str) -> Iterator[str]:
    yield from _extra(template, _TEMPLATE, path)
    yield from _extra(_mapping(template, "metadata"), _META, f"{path}.metadata")
    yield from _pod_spec(_mapping(template, "spec"), f"{path}.spec")


def unknown_fields(raw: Mapping[str, object]) -> list[str]:
    """``unknown field "spec.containers[0].resource" (did you mean "resources"?)`` for each field of ``raw`` that
    Kubernetes does not define (paths as kubectl writes them), for a Pod or one of ``WORKLOAD_KINDS``; in
    document order."""
    kind = raw.get("kind")
    out = list(_extra(raw, _TOP, ""))
    out += _extra(raw.get("metadata"), _META, "metadata")
    spec = raw.get("spec")
    if kind == "Pod":
        out += _pod_spec(spec, "spec")
        return out
    known = WORKLOAD_KINDS.get(str(kind))
    if known is None:
        return out
    out += _extra(spec, known, "spec")
    if kind == "CronJob":
        job = _mapping(spec, "jobTemplate")
        out += _extra(job, _TEMPLATE, "spec.jobTemplate")
        out += _extra(_mapping(job, "metadata"), _META, "spec.jobTemplate.metadata")
        job_spec = _mapping(job, "spec")
        out += _extra(job_spec, WORKLOAD_KINDS["Job"], "spec.jobTemplate.spec")
        out += _template(_mapping(job_spec, "template"), "spec.jobTemplate.spec.template")
        return out
    out += _template(_mapping(spec, "template"), "spec.template")
    return out
