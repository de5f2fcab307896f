"""Gangs as ``hami explain`` and ``hami top`` show them (docs/gangs.md): which members are bound, which hold devices
unbound (placed by /filter, waiting for the rest of the gang), which wait, and what the gang still lacks.

The members come from the snapshot's pods (label ``scheduling.x-k8s.io/pod-group`` or
``spec.schedulingGroup.podGroupName``, one gang per namespace and group). What the gang lacks is found by placing
the waiting members one after another on the cluster as it is (each placement reserved for the next, then taken back):
the members that then fit nowhere, each with why. The snapshot holds no PodGroup, so the gang's minimum is every
member.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hami.errors import InvalidInput
from hami.protocol.objects import Pod
from hami.scheduling.decide import decide, reserve, unreserve
from hami.scheduling.records import holds_devices, is_terminal, pod_group
from hami.scheduling.request import prefilter
from hami.simulate.simulator import Simulator

__all__ = ["GangView", "gang_json", "gang_views", "render_gang"]

BOUND, HOLDS, WAITS = "bound", "holds devices, unbound", "waits"


@dataclass(frozen=True, slots=True)
class GangView:
    namespace: str
    group: str
    members: tuple[tuple[str, str], ...]
    """Each member (pod name) and its state: ``bound``, ``holds devices, unbound`` or ``waits``."""
    lacking: tuple[tuple[str, str], ...]
    """The waiting members that fit nowhere even when the others are placed first, and why."""

    @property
    def complete(self) -> bool:
        return all(state == BOUND for _, state in self.members)

    def summary(self) -> str:
        placed = sum(1 for _, state in self.members if state != WAITS)
        head = f"gang {self.group}: {placed} of {len(self.members)} members placed (bound or holding devices)"
        if self.complete:
            return f"{head}; every member is bound"
        if self.lacking:
            names = ", ".join(f"{name} ({why})" for name, why in self.lacking)
            return f"{head}; the gang lacks room for {names}: its members wait, holding nothing once it is given up"
        return f"{head}; the waiting members fit now: the gang waits for kube-scheduler's next try"


def gang_views(sim: Simulator, pods: Iterable[Pod], only: tuple[str, str] | None = None) -> list[GangView]:
    """The gangs among ``pods`` (the snapshot's), or only the gang ``only`` (namespace, group); finished pods are
    left out. ``sim``'s state is left as it was found."""
    gangs: dict[tuple[str, str], list[Pod]] = {}
    for pod in pods:
        group = pod_group(pod)
        key = (pod.metadata.namespace or "default", group)
        if group and not is_terminal(pod) and (only is None or key == only):
            gangs.setdefault(key, []).append(pod)
    return [_view(sim, ns, group, sorted(members, key=lambda p: p.metadata.name)) for (ns, group), members in
            sorted(gangs.items())]  # fmt: skip


def _state(pod: Pod) -> str:
    if pod.spec.node_name:
        return BOUND
    return HOLDS if holds_devices(pod) else WAITS


def _view(sim: Simulator, namespace: str, group: str, members: list[Pod]) -> GangView:
    states = tuple((p.metadata.name, _state(p)) for p in members)
    lacking: list[tuple[str, str]] = []
    placed: list[str] = []
    try:
        for pod in (p for p in members if _state(p) == WAITS):
            uid = pod.metadata.uid or f"gang-{namespace}-{pod.metadata.name}"
            try:
                req = prefilter(_with_uid(pod, uid), sim.vendors, sim.defaults)
            except InvalidInput as err:
                lacking.append((pod.metadata.name, str(err)))
                continue
            names, _ = sim.candidates(pod)
            decision = decide(sim.state, req, names, 0)
            if decision.node is None and req.wants_devices:
                why = "; ".join(f"{n}: {r.summary}" for n, r in sorted(decision.rejected.items())[:3])
                lacking.append((pod.metadata.name, why or "no candidate node"))
            elif reserve(sim.state, req, decision) is not None:
                placed.append(uid)
    finally:
        for uid in placed:
            unreserve(sim.state, uid)
    return GangView(namespace, group, states, tuple(lacking))


def _with_uid(pod: Pod, uid: str) -> Pod:
    import msgspec

    return msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, uid=uid))


def render_gang(view: GangView) -> list[str]:
    lines = [f"  {view.summary()}"]
    lines += [f"    {name}: {state}" for name, state in view.members]
    return lines


def gang_json(view: GangView) -> dict[str, Any]:
    return {
        "namespace": view.namespace,
        "group": view.group,
        "members": [{"pod": name, "state": state} for name, state in view.members],
        "lacking": [{"pod": name, "why": why} for name, why in view.lacking],
        "summary": view.summary(),
    }
