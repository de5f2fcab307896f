"""``/filter`` on whole Node objects: the side-effect-free simulation Cluster Autoscaler asks for (docs/autoscaler.md).

When ``ExtenderArgs`` carries ``Nodes`` instead of ``NodeNames``, the nodes are template nodes (or copies of live
ones) the autoscaler wants judged: HAMi v2.10's contract (``filterSimulation``, PR #2046). The inventory is rebuilt
from each given Node (its registration annotations, else its group's device profile) with zero usage, the vendors'
Fit and scores run as in live scheduling (``hami.scheduling.simulation``), and the answer names the best node in
``Nodes``. A Node without a readable inventory is in ``FailedNodes`` (``node unregistered``, then hami's reason).

Nothing is written and nothing live changes: no pod annotation, no event, no ledger, quota, hold or busy-node
change, no live decision metric; only ``hami_filter_simulations`` counts. The namespace quotas are read (a pod its
quota refuses fits no new node either).

Where hami differs from HAMi: every node rejected, also an unregistered one, keeps its reasons (HAMi reports any
node without an inventory as ``node unregistered`` only); a replica that is not the leader answers too (the answer
depends on nothing but the request and the quotas); both ``Nodes`` and ``NodeNames`` in one request are refused.
"""

from __future__ import annotations

from collections.abc import Mapping

from hami.config.profiles import DeviceProfiles
from hami.devices.base import Vendor
from hami.errors import InvalidInput
from hami.protocol.extender import FilterArgs, FilterResult
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.simulation import simulate, simulated_reason, template_state
from hami.scheduling.state import ClusterState

__all__ = ["simulate_filter"]


def simulate_filter(
    args: FilterArgs,
    vendors: Mapping[str, Vendor],
    defaults: SchedulingDefaults,
    live: ClusterState,
    profiles: DeviceProfiles | None,
    now: int,
    not_ready: str | None = None,
) -> tuple[FilterResult, str]:
    """The answer to a ``Nodes`` /filter and its result label (fits, unschedulable, passthrough, invalid,
    not-ready). ``live`` is only read (its quotas)."""
    try:
        req = prefilter(args.pod, vendors, defaults)
    except InvalidInput as err:
        return FilterResult(error=str(err)), "invalid"
    names = args.candidate_names()
    if not req.wants_devices:
        return FilterResult(node_names=names, nodes=args.nodes_raw(names)), "passthrough"
    if not_ready is not None:
        return FilterResult(error=not_ready), "not-ready"
    scratch = template_state(vendors, args.nodes or (), profiles, live, (req,))
    decision = simulate(scratch, (req,), now)[0]
    failed = {node: simulated_reason(rejection) for node, rejection in decision.rejected.items()}
    chosen = decision.node
    if chosen is None:
        return FilterResult(failed_nodes=failed or None), "unschedulable"
    not_chosen = f"fits, but hami chose {chosen} under the {decision.node_policy or 'configured'} node policy"
    failed.update({node: not_chosen for node in decision.scores if node != chosen})
    return FilterResult(node_names=[chosen], nodes=args.nodes_raw([chosen]), failed_nodes=failed or None), "fits"
