"""Screening: judging a node from its capacity index instead of running Fit (issue 19 item 4).

Every device table keeps a summary of its usage (``hami.devices.table.Capacity``: the cards that can take another
task with their free memory, cores, NUMA node and model, the full and the unhealthy cards, the largest free amounts,
the idle cards, the node-score totals). It is built at most once per change and dropped by ``DeviceTable.charge``,
the ledger's single mutation path, so reading it costs O(1) until the node changes again. A vendor that can answer
"would ``fit`` succeed, and if not, why?" from that summary implements ``Screening`` (the vendor contract,
``hami.devices.screening``; the shared fit loop does: ``SharedDeviceVendor.screener``); any other vendor is judged
by Fit as before.

``Screen.judge`` then costs, per candidate node:

* a node every vendor screens as fitting: O(1). It is listed as fitting with ``placements`` left ``SCREENED``; only
  the node that ``decide`` chooses is fitted for real (``realize``) — the devices of the others are never
  needed. Its score needs no devices either: a screened fit's vendor contribution is 0 by ``Screening``'s contract.
  For the commonest request (one card with memory, no type filter) ``decide.filter_nodes`` inlines the screen as
  two comparisons on numbers kept with the node's memo entry (``Screen.shortcut``): a fresh verdict then costs
  about what a memo hit does, however many request shapes come in turn.
* a node some vendor screens as not fitting: that vendor's ``Unfit`` is told from the summary (``Screener.unfit``:
  the same reasons, counts and closest misses as Fit; O(1) when no open card has the memory, a few comparisons per
  card otherwise), and the "could it fit if empty" check (``unresolvable``) is answered from the static summary of
  the empty table.
* anything the screen cannot tell (a quota in the namespace, cordoned devices, a node whose kubelet does not back a
  registration (``NodeState.unallocatable``), UUID filters, sliced devices,
  several containers with devices, ``topology-aware``/``mutex``, a vendor ordering its devices its own way): Fit,
  as before.

The decisions are the same as without screening — chosen node, devices, scores, every reason and number — which is
a property test (``tests/unit/scheduling/test_screen.py``). A lying index is caught: ``decide`` falls back to judging
every node with Fit when a screened node does not fit after all, or when the one index-told rejection it audits per
decision (``Screen.audit``) differs from Fit's; the ledger's self-check reports a summary that differs from its table
(``DeviceTable.stale_summary``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

from hami.devices.base import FitContext, Placement, Unfit
from hami.devices.screening import Screener, Screening
from hami.protocol.inventory import DeviceInfo
from hami.scheduling.filter import NodeFit, NodeRejection, filter_node
from hami.scheduling.request import PodRequest
from hami.scheduling.state import ClusterState, NodeState

__all__ = ["NO_SHORTCUT", "SCREENED", "Screen", "realize", "screened", "screened_fit", "screened_fits"]

SCREENED: Final[Mapping[str, tuple[tuple[Placement, ...], ...]]] = MappingProxyType({})
"""``NodeFit.placements`` of a node that screened as fitting and was not fitted yet."""


NO_SHORTCUT: Final[tuple[str, None, int, int]] = ("", None, 0, 0)
"""``Screen.shortcut`` of a screen without one: no table is ever kept under the vendor name ""."""


def screened(fit: NodeFit) -> bool:
    """Whether ``fit`` is a screened node whose devices were not chosen yet."""
    return fit.placements is SCREENED


class Screen:
    """Screening for one decision: the request's single device-using container, per vendor its screen and context."""

    __slots__ = ("checks", "indexed", "one", "quick", "req", "state")

    def __init__(
        self,
        state: ClusterState,
        req: PodRequest,
        checks: tuple[tuple[str, Screener], ...],
    ) -> None:
        self.state, self.req, self.checks = state, req, checks
        self.one = checks[0] if len(checks) == 1 else None
        self.quick = checks[0][1].shortcut() if len(checks) == 1 else None
        """The one vendor's ``Shortcut``, for ``shortcut``."""
        self.indexed: list[NodeRejection] = []
        """The rejections told from the capacity index in this decision (one of them is checked: ``audit``)."""

    @classmethod
    def prepare(cls, state: ClusterState, req: PodRequest) -> Screen | None:
        """A screen for ``req``, or None when the request cannot be screened (several containers with devices, a
        namespace quota, a vendor without ``Screening``)."""
        with_devices = [c for c in req.containers if c]
        if len(with_devices) != 1 or state.quotas.has_limits(req.namespace):
            return None
        checks = []
        ctx = FitContext(policy=req.gpu_policy, weights=req.weights)
        for vendor, creq in sorted(with_devices[0].items()):
            owner = state.vendors[vendor]
            screen = owner.screener(creq, ctx, req.selectors[vendor]) if isinstance(owner, Screening) else None
            if screen is None:
                return None
            checks.append((vendor, screen))
        return cls(state, req, tuple(checks))

    def shortcut(self) -> tuple[str, Callable[[DeviceInfo], bool] | None, int, int]:
        """(vendor, carves, memreq, cores) of the one vendor's ``Shortcut``, for a per-candidate loop that inlines
        it (``decide.filter_nodes``): a node that is not cordoned, whose table of that vendor has a summary
        (``summary(carves)``) with nothing carved, ``max_mem >= memreq`` and ``first_cores >= cores``, is a screened
        fit (``screened_fits()[node]``, else ``judge``). ``NO_SHORTCUT`` when there is none."""
        quick, one = self.quick, self.one
        return NO_SHORTCUT if quick is None or one is None else (one[0], *quick)

    def judge(self, node: NodeState) -> NodeFit | NodeRejection:
        """The node's verdict; a fitting node comes back ``SCREENED`` (see the module docstring)."""
        if node.unallocatable:  # kubelet does not back some registration there (rare): Fit turns the node down
            return self._fit(node)
        tables = node.tables
        one = self.one
        if one is not None and not node.cordoned:  # one vendor: the common case, kept short (it runs per candidate)
            table = tables.get(one[0])
            if table is not None and one[1](table, False):
                fit = _SCREENED_FITS.get(node.name)
                return fit if fit is not None else screened_fit(node.name)
        answer: bool | None = None if node.cordoned else True
        for vendor, screen in self.checks:
            if answer is None:
                break
            table = tables.get(vendor)
            answer = None if table is None else screen(table, False)
            if answer is False:
                # Fit tries the vendors in this order and reports the first one that does not fit (once every
                # vendor of the pod is registered on the node: filter_node says "unregistered" first).
                unfit = screen.unfit(tables[vendor]) if all(v in tables for v, _ in self.checks) else None
                if unfit is not None:
                    return self._indexed(node, unfit)
                break
        if answer:
            return screened_fit(node.name)
        return self._fit(node)

    def _indexed(self, node: NodeState, unfit: Unfit) -> NodeRejection:
        """A rejection told from the index: ``filter_node``'s for a container's ``Unfit``, with ``unresolvable``."""
        verdict = NodeRejection(node.name, unfit.counts, unfit.total, unfit.closest, self._never_fits(node))
        self.indexed.append(verdict)
        return verdict

    def _fit(self, node: NodeState) -> NodeFit | NodeRejection:
        """The node judged by Fit; for a rejection, ``unresolvable`` from the idle summaries where they can say."""
        verdict = filter_node(self.state, node, self.req)
        if isinstance(verdict, NodeRejection) and not verdict.unresolvable and self._never_fits(node):
            return NodeRejection(
                verdict.node, verdict.counts, verdict.total, verdict.closest, True, verdict.detail, verdict.node_reason
            )
        return verdict

    def audit(self) -> bool:
        """Whether one of the rejections told from the index in this decision (a different one for different pods)
        is exactly Fit's. Costs one Fit per decision; a capacity index that disagrees with its table (usage changed
        behind ``DeviceTable.charge``) is caught here as well as by the ledger's self-check."""
        indexed = self.indexed
        if not indexed:
            return True
        told = indexed[hash(self.req.uid) % len(indexed)]
        return self._fit(self.state.nodes[told.node]) == told

    def _never_fits(self, node: NodeState) -> bool:
        """Whether the node could not run the pod even without any usage (``judge``'s ``unresolvable``)."""
        idle = not node.cordoned  # the empty node keeps its cordons, which the idle summary does not know
        for vendor, screen in self.checks:
            answer = screen(node.tables[vendor], True)
            if answer is False:
                return True
            if answer is None:
                idle = False
        if idle:
            return False
        return isinstance(filter_node(self.state, node, self.req, empty=True), NodeRejection)


_SCREENED_FITS: dict[str, NodeFit] = {}


def screened_fit(node: str) -> NodeFit:
    """``NodeFit(node, SCREENED)``, one per node name (immutable, so shared by every decision): a screened node then
    costs no allocation. Bounded: it starts over beyond ``_MAX_SCREENED`` names."""
    fit = _SCREENED_FITS.get(node)
    if fit is None:
        if len(_SCREENED_FITS) >= _MAX_SCREENED:
            _SCREENED_FITS.clear()
        fit = _SCREENED_FITS[node] = NodeFit(node, SCREENED)
    return fit


_MAX_SCREENED: Final = 1 << 16


def screened_fits() -> Mapping[str, NodeFit]:
    """The ``NodeFit(node, SCREENED)`` made so far, by node name (the same mapping for good: read it per decision)."""
    return _SCREENED_FITS


def realize(state: ClusterState, req: PodRequest, fit: NodeFit) -> NodeFit | None:
    """A screened node's real fit (its devices), or None when Fit disagrees with the screen; other fits as they are."""
    if not screened(fit):
        return fit
    verdict = filter_node(state, state.nodes[fit.node], req)
    return verdict if isinstance(verdict, NodeFit) else None
