"""What hami expects of the API server it talks to, decided from the server's version (``GET /version``).

hami is tested on Kubernetes 1.36 and 1.37 (``make test-matrix`` ran v1.36.3 and v1.37.2; 1.38 is not yet tested:
its pre-release cannot be built from the Go module proxy). From 1.36 to 1.38 the API surface hami uses is the same
(``resource.k8s.io/v1``, ``spec.schedulingGroup``, the extender's wire format, ``kubescheduler.config.k8s.io/v1``);
what moves between releases is recorded here, once, as a :class:`ServerProfile`, so the shell logs one line saying
what it chose and the code that acts on a difference reads the profile instead of comparing version numbers itself:

* **DRA** (``dra_api``): ``resource.k8s.io/v1`` is served from 1.34; before that hami does not watch DRA at all.
  Sharing a device by capacity (``DRAConsumableCapacity``) is on by default from 1.36 (beta) and GA in 1.38; hami
  counts whatever capacity an allocation names, so nothing else changes.
* **Gang scheduling** (``gang``): pods name their PodGroup in ``spec.schedulingGroup.podGroupName`` from 1.36 (1.35
  had ``spec.workloadRef``); kube-scheduler reads the PodGroup API ``scheduling.k8s.io/v1alpha2`` in 1.36 and
  ``v1beta1`` from 1.37 (``GenericWorkload``: beta in 1.37, off by default; ``v1beta1`` served with
  ``--runtime-config=scheduling.k8s.io/v1beta1=true``, ``v1alpha3`` has the same kinds). hami reads the pod field
  and the PodGroups in the version the cluster serves (API discovery, ``hami.server.podgroups``, logged at start).
* **Extender preemption** (``preemption_empty_victims``): from 1.38 kube-scheduler also sends a preemption-capable
  extender the nodes where its own filters already fit, each with an empty victim list (kubernetes#135486); before,
  only nodes with victims.
* **KubeSchedulerConfiguration** (``scheduler_config_api``): ``kubescheduler.config.k8s.io/v1`` from 1.25 (the chart
  writes it and refuses clusters older than 1.26).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "TESTED",
    "TESTED_WINDOW",
    "KubeVersion",
    "ServerProfile",
    "parse_kube_version",
    "server_profile",
]

TESTED = ("v1.36.3", "v1.37.2")
"""The releases ``make test-matrix`` runs the end-to-end suite on."""
TESTED_WINDOW = ((1, 36), (1, 37))
"""The oldest and newest minor release hami is tested on."""

_GIT_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-((?:alpha|beta|rc)\.\d+))?")


@dataclass(frozen=True, order=True)
class KubeVersion:
    """A Kubernetes release: ``v1.38.0-beta.0`` is (1, 38, 0, "beta.0"); a vendor's suffix (``-eks-4``,
    ``+k3s1``) is dropped."""

    major: int
    minor: int
    patch: int
    pre: str = ""

    def __str__(self) -> str:
        return f"v{self.major}.{self.minor}.{self.patch}" + (f"-{self.pre}" if self.pre else "")

    @property
    def line(self) -> tuple[int, int]:
        return (self.major, self.minor)


def parse_kube_version(git_version: str) -> KubeVersion:
    """``gitVersion`` of ``/version`` -> KubeVersion; ValueError naming the text when it is no release."""
    match = _GIT_VERSION.match(git_version.strip())
    if not match:
        raise ValueError(f"gitVersion {git_version!r} is not a Kubernetes release like v1.37.2")
    return KubeVersion(int(match[1]), int(match[2]), int(match[3]), match[4] or "")


@dataclass(frozen=True)
class ServerProfile:
    """What hami chose for one API server (module docstring)."""

    version: KubeVersion
    tested: bool
    """within TESTED_WINDOW"""
    dra_api: str
    """the DRA API hami watches; "" when the server has none it reads (older than 1.34)"""
    consumable_capacity: str
    gang: str
    """where pods name their PodGroup, and the Workload/PodGroup API of that release"""
    preemption_empty_victims: bool
    scheduler_config_api: str

    def describe(self) -> str:
        """One log line: the version, whether it is tested, and each choice."""
        window = "tested" if self.tested else f"NOT tested (hami is tested on {', '.join(TESTED)})"
        preemption = (
            "nodes with empty victim lists too (1.38+)" if self.preemption_empty_victims else "nodes with victims only"
        )
        return (
            f"Kubernetes {self.version} ({window}): DRA {self.dra_api or 'not watched (resource.k8s.io/v1 is 1.34+)'}"
            f", consumable capacity {self.consumable_capacity}; gang: {self.gang}; extender preemption calls carry "
            f"{preemption}; scheduler configuration {self.scheduler_config_api}"
        )


def server_profile(version: KubeVersion) -> ServerProfile:
    line = version.line
    return ServerProfile(
        version=version,
        tested=TESTED_WINDOW[0] <= line <= TESTED_WINDOW[1],
        dra_api="resource.k8s.io/v1" if line >= (1, 34) else "",
        consumable_capacity=_consumable_capacity(line),
        gang=_gang(line),
        preemption_empty_victims=line >= (1, 38),
        scheduler_config_api="kubescheduler.config.k8s.io/v1" if line >= (1, 25) else "older than v1 (unsupported)",
    )


def _consumable_capacity(line: tuple[int, int]) -> str:
    if line >= (1, 38):
        return "GA"
    if line >= (1, 36):
        return "beta, on by default"
    return "alpha, off by default" if line >= (1, 34) else "absent"


def _gang(line: tuple[int, int]) -> str:
    if line >= (1, 37):
        return "spec.schedulingGroup.podGroupName (PodGroup API scheduling.k8s.io/v1beta1 where served)"
    if line == (1, 36):
        return "spec.schedulingGroup.podGroupName (PodGroup API scheduling.k8s.io/v1alpha2)"
    if line == (1, 35):
        return "spec.workloadRef, which hami does not read (Workload API scheduling.k8s.io/v1alpha1)"
    return "the pod-group label only"
