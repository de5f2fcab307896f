"""Offline simulation: place pods on a snapshot of a cluster with the extender's own decision core.

``hami simulate`` reads what ``kubectl get nodes,pods,resourcequotas -A -o json|yaml`` prints (or hand-written
manifests, or the live cluster), expands workloads into their pods (``hami.simulate.workloads``), places the given
pods in order — each placement reserved before the next — and prints the
decisions as a table or as one JSON document (``hami.simulate.report`` documents its shape).
"""

from hami.simulate.command import EXIT_INVALID_INPUT, EXIT_OK, SimulateOptions, run_simulate
from hami.simulate.loading import Snapshot, Sourced, load_pods, load_snapshot
from hami.simulate.simulator import Outcome, Simulator

__all__ = [
    "EXIT_INVALID_INPUT",
    "EXIT_OK",
    "Outcome",
    "SimulateOptions",
    "Simulator",
    "Snapshot",
    "Sourced",
    "load_pods",
    "load_snapshot",
    "run_simulate",
]
