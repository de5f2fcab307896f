"""Which node a ResourceSlice pool belongs to, and which of its slices the ledger believes (issue 39).

A device is named by (driver, pool, device), and nothing in the API ties a pool to a node: NodeRestriction lets a
node write only slices whose ``spec.nodeName`` is its own, but any pool name in them. A compromised node B could
publish a slice in node A's pool (with any generation) and, were the pool read as one, take A's devices' place:
A's claims charged to B or to nothing, A's cards looking free to hami's pods. So a pool's slices are read **per
node**, as kube-scheduler reads them (it gathers only a node's own slices of a node-local pool when it allocates
there), and a pool that several nodes publish is inconsistent:

* **the pool's node** is the node whose name the pool bears, when that node publishes in it (every node-local
  driver names its pools after their node, hami's own too); failing that, the one node that publishes in it;
* a slice of another node (``spec.nodeName`` differs from the pool's node) is **not used**, and reported
  (``ProblemKind.INCONSISTENT_POOL``: a log line, the ``hami_dra_problems`` gauge, ``hami top``);
* a pool that several nodes publish and none of them names is reported as a whole; each node's slices then count
  for that node alone;
* the highest generation is taken per node, so a generation B publishes never hides A's slices;
* slices without ``spec.nodeName`` (devices selected per device, written by a driver's controller, which a node
  cannot write) are used as they are.

Whatever the pool, a claim whose allocation names its node (kube-scheduler writes ``nodeSelector`` with the node's
``metadata.name`` for every node-local allocation) is resolved only among that node's devices: a claim allocated on
one node is never charged to another's card. Pure: the ledger keeps the slices and calls these functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from hami.scheduling.dra.mapping import DeviceKey, DraDevice, ProblemKind
from hami.scheduling.dra.reports import DraProblem

K = TypeVar("K")

__all__ = ["PoolView", "Published", "discard_member", "pool_view", "resolve"]

PoolKey = tuple[str, str]
"""(driver, pool name)."""


@dataclass(frozen=True, slots=True)
class Published:
    """One slice as the ledger keeps it: its pool, the node it names (``spec.nodeName``, "" for none), its
    generation and its readable devices."""

    pool: PoolKey
    node: str
    generation: int
    devices: tuple[DraDevice, ...]


@dataclass(frozen=True, slots=True)
class PoolView:
    """What the ledger uses of one pool: per node ("" for slices naming none) the devices of that node's highest
    generation, and the problems of its slices (inconsistent nodes)."""

    groups: Mapping[str, Mapping[DeviceKey, DraDevice]]
    problems: tuple[DraProblem, ...]

    def flat(self) -> dict[tuple[str, DeviceKey], DraDevice]:
        """Every device used, by (node group, key)."""
        return {(node, key): dev for node, devices in self.groups.items() for key, dev in devices.items()}


def owner(pool: PoolKey, nodes: Iterable[str]) -> str | None:
    """The pool's node among the ``nodes`` that publish node-local slices in it (module docstring); None when
    several do and none is named like the pool."""
    named = set(nodes)
    if len(named) == 1:
        return next(iter(named))
    return pool[1] if pool[1] in named else None


def pool_view(pool: PoolKey, slices: Mapping[str, Published]) -> PoolView:
    """The devices the ledger uses of ``pool``, given its ``slices`` (name → slice), and the problems found."""
    nodes = {s.node for s in slices.values() if s.node}
    mine = owner(pool, nodes)
    problems: list[DraProblem] = []
    used: dict[str, list[Published]] = {}
    for name in sorted(slices):
        sl = slices[name]
        if sl.node and mine is not None and sl.node != mine:
            problems.append(_foreign(name, sl, pool, mine))
            continue
        if sl.node and mine is None:
            problems.append(_unowned(name, sl, pool, nodes))
        used.setdefault(sl.node, []).append(sl)
    groups: dict[str, dict[DeviceKey, DraDevice]] = {}
    for node, group in used.items():
        top = max(s.generation for s in group)
        devices: dict[DeviceKey, DraDevice] = {}
        for sl in group:
            if sl.generation == top:
                for dev in sl.devices:
                    devices.setdefault(dev.key, dev)
        if devices:
            groups[node] = devices
    return PoolView(groups, tuple(problems))


def resolve(candidates: Iterable[DraDevice], node: str) -> tuple[DraDevice | None, tuple[str, ...]]:
    """The one device a claim's result names among ``candidates`` (the same key published by different nodes), on
    the claim's ``node`` ("" when its allocation names none). Returns the device, or None and the nodes that
    publish it when they are several and the claim names none of them."""
    found = [d for d in candidates if not node or d.node == node]
    if len(found) == 1:
        return found[0], ()
    return None, tuple(sorted({d.node for d in found}))


def _foreign(name: str, sl: Published, pool: PoolKey, mine: str) -> DraProblem:
    message = (
        f"slice of pool {pool[1]} of driver {pool[0]} published by node {sl.node}, but the pool belongs to node "
        f"{mine}: not used (a node publishes only its own pools; the pool's devices are counted as {mine} "
        f"publishes them)"
    )
    return DraProblem(ProblemKind.INCONSISTENT_POOL, f"ResourceSlice {name}", sl.node, message)


def _unowned(name: str, sl: Published, pool: PoolKey, nodes: Iterable[str]) -> DraProblem:
    message = (
        f"pool {pool[1]} of driver {pool[0]} is published by nodes {', '.join(sorted(nodes))} and named after none "
        f"of them: each node's slices count only for the claims allocated on that node"
    )
    return DraProblem(ProblemKind.INCONSISTENT_POOL, f"ResourceSlice {name}", sl.node, message)


def discard_member(index: dict[K, set[str]], key: K, cid: str) -> bool:
    """Remove ``cid`` from ``index[key]``; drop the key when its set empties (returns True then)."""
    members = index.get(key)
    if members is None:
        return False
    members.discard(cid)
    if not members:
        del index[key]
        return True
    return False
