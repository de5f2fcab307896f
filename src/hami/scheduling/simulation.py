"""Scale-up simulation on template nodes (Cluster Autoscaler; HAMi v2.10 ``filterSimulation``, PR #2046).

A template node stands for a node a node group would add: a Node object that does not exist in the API. The
simulation judges pods on such nodes with the same stages as live scheduling (``decide``: every vendor's own Fit
and scores) over a *scratch* state built from the given Node objects alone, each device at zero usage, and
returns the decisions as data. Nothing live is read beyond the namespace quotas (a pod its quota refuses fits no
new node either), and nothing live is written: the scratch state is the caller's and dies with it.

* ``template_state``: the scratch state of some Node objects; a node without a registration of its own gets its
  group's device profile (``hami.config.profiles``, cold-zero groups).
* ``simulate``: pods judged one after another on the templates; each pod placed is charged to the scratch state,
  so the next pod sees it (several pending pods packed onto one template, as the autoscaler's estimator asks).
* ``estimate``: how many new nodes of one group a list of pods needs (the operator's question, ``hami simulate
  --template-node``): pods packed onto copies of one template, a copy added when a pod fits no copy yet but fits an
  empty one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec

from hami.config.profiles import DeviceProfiles
from hami.devices.base import Vendor
from hami.protocol.objects import Node
from hami.scheduling.decide import Decision, decide, reserve
from hami.scheduling.filter import NodeRejection
from hami.scheduling.request import PodRequest
from hami.scheduling.state import ClusterState

__all__ = ["Estimate", "estimate", "simulate", "simulated_reason", "template_state"]

UNREGISTERED = "node unregistered"
"""HAMi's FailedNodes text for a template without a readable inventory; hami's own reason follows it."""


def template_state(
    vendors: Mapping[str, Vendor],
    templates: Sequence[Node],
    profiles: DeviceProfiles | None = None,
    live: ClusterState | None = None,
    requests: Sequence[PodRequest] = (),
) -> ClusterState:
    """A fresh state holding only ``templates`` (their inventories decoded by every vendor, zero usage). With
    ``live``, its namespace quotas are copied (limits and usage) less what the pods of ``requests`` hold there
    already (a pod judged again must not count its own allocation). ``live`` is only read."""
    scratch = ClusterState(vendors)
    if live is not None:
        scratch.quotas = live.quotas.copy()
        for req in requests:
            record = live.pods.get(req.uid)
            if record is not None:
                scratch.quotas.add_usage(record.namespace, live.quota_amounts(record), sign=-1)
    for node in templates:
        scratch.upsert_node(profiles.fill(node) if profiles is not None else node)
    return scratch


def simulate(scratch: ClusterState, requests: Sequence[PodRequest], now: int) -> list[Decision]:
    """Each pod of ``requests`` in turn on every node of ``scratch``; a pod placed is charged there, so the pods
    after it see its devices taken. Changes ``scratch`` only."""
    names = sorted(scratch.nodes)
    decisions: list[Decision] = []
    for req in requests:
        decision = decide(scratch, req, names, now)
        reserve(scratch, req, decision)
        decisions.append(decision)
    return decisions


def simulated_reason(rejection: NodeRejection) -> str:
    """A template's FailedNodes text: HAMi's ``node unregistered`` for one without a readable inventory (hami's
    own reason after it: which vendor, or why its registration was refused), else the vendor's reasons."""
    if rejection.node_reason is None:
        return rejection.summary
    detail = rejection.detail
    if detail.startswith(UNREGISTERED):
        return detail
    return f"{UNREGISTERED}: {detail}" if detail else UNREGISTERED


@dataclass(frozen=True, slots=True)
class Estimate:
    """``estimate``'s answer: the new nodes used (``copies``), where each pod went (None: it fits no new node of
    this group, ``decisions`` says why) and each pod's decision."""

    copies: tuple[str, ...]
    placed: tuple[str | None, ...]
    decisions: tuple[Decision, ...]


def estimate(
    vendors: Mapping[str, Vendor],
    template: Node,
    requests: Sequence[PodRequest],
    now: int,
    profiles: DeviceProfiles | None = None,
    live: ClusterState | None = None,
    max_nodes: int = 100,
) -> Estimate:
    """Pack ``requests`` (in order) onto new nodes like ``template``: each pod goes to the best copy that takes it;
    when none does but an empty copy would, a copy is added (at most ``max_nodes``). A pod that fits no empty copy
    has the empty copy's rejection as its decision."""
    base = template.metadata.name or "template"
    scratch = template_state(vendors, (), profiles, live, requests)
    copies: list[str] = []
    placed: list[str | None] = []
    decisions: list[Decision] = []
    for req in requests:
        decision = decide(scratch, req, copies, now) if copies else None
        if (decision is None or decision.node is None) and len(copies) < max_nodes:
            name = f"{base}-{len(copies) + 1}"
            trial = template_state(vendors, [_renamed(template, name)], profiles, live, (req,))
            fresh = decide(trial, req, [name], now)
            if fresh.node is not None:
                copies.append(name)
                scratch.upsert_node(_renamed(profiles.fill(template) if profiles else template, name))
                decision = decide(scratch, req, copies, now)
            else:
                decision = fresh  # why it fits no new node of this group, not only the copies in use
        assert decision is not None
        reserve(scratch, req, decision)
        decisions.append(decision)
        placed.append(decision.node)
    return Estimate(tuple(copies), tuple(placed), tuple(decisions))


def _renamed(node: Node, name: str) -> Node:
    return msgspec.structs.replace(node, metadata=msgspec.structs.replace(node.metadata, name=name))
