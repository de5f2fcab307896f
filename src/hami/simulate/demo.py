"""``hami simulate --demo``: a built-in cluster and workload, shipped as package data.

``demo/cluster.yaml`` holds real Node objects with HAMi-format registrations (an 8×A100-80GB node with
NVLink pair scores and two NUMA nodes, two 4×T4 nodes, one A100 in MIG mode, one Hygon DCU node in the
legacy colon format, one Kunlunxin node of 8 whole XPUs from its capacity and one of 4 vXPU devices, an Enflame
DRS node, an Enflame whole-GCU node, an AWS inf2 node, a Cambricon MLU node, a Moore Threads node, an AMD MI300X
node, a Biren node and a Vastai node in die mode) and one running pod whose allocation annotations are charged;
``demo/workload.yaml`` holds the pods to place, in order, each showing one behaviour (its ``hami.io/demo``
annotation says which).
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources

from hami.scheduling.state import ClusterState
from hami.simulate.report import render_summary
from hami.simulate.simulator import Outcome

__all__ = ["DEMO_CLUSTER", "DEMO_WORKLOAD", "demo_sources", "render_demo"]

DEMO_CLUSTER = "demo/cluster.yaml"
DEMO_WORKLOAD = "demo/workload.yaml"


def demo_sources() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``(snapshot, pods)`` as ``(label, text)`` pairs read from the package."""
    root = resources.files("hami.simulate")
    cluster = root.joinpath(DEMO_CLUSTER).read_text(encoding="utf-8")
    workload = root.joinpath(DEMO_WORKLOAD).read_text(encoding="utf-8")
    return [(DEMO_CLUSTER, cluster)], [(DEMO_WORKLOAD, workload)]


def render_demo(state: ClusterState, outcomes: Sequence[Outcome]) -> str:
    """Placements, then every device's utilization after them, then why the pending pods did not fit."""
    return render_summary("hami simulate --demo", state, outcomes)
