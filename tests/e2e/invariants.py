"""What must hold after every fault, checked in one place.

``check_invariants`` waits (bounded) until a test's namespace is at rest and then holds hami to four invariants:

1. no device is over its slots, memory or cores (checked on every poll, not only at rest: it must never happen);
2. hami's ledger (its ``/metrics`` gauges) equals what the API holds (the pods' allocation annotations);
3. no node lock is left behind on the test's nodes;
4. every pod is either bound with an allocation for the node it is bound to, or pending with kube-scheduler's
   reason (``PodScheduled=False`` with a reason) and no allocation.

"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from hami.protocol import keys
from tests.e2e.cluster import KubeClient, wait_until
from tests.e2e.hami_stack import HamiScheduler, Usage, is_bound, usage_from_annotations

NVIDIA = keys.NVIDIA_KEYS


def over_capacity(usage: Usage, capacity: Usage) -> list[str]:
    """Devices used beyond their slots, MiB or cores (or devices not in ``capacity`` at all)."""
    out = []
    for uuid, used in sorted(usage.items()):
        limit = capacity.get(uuid)
        if limit is None or any(u > c for u, c in zip(used, limit, strict=True)):
            out.append(f"{uuid}: uses {used} of {limit}")
    return out


def pod_problems(pod: Mapping[str, Any]) -> list[str]:
    """How a pod breaks invariant 4 (empty when it holds)."""
    name = pod["metadata"]["name"]
    annotations = pod["metadata"].get("annotations") or {}
    node = pod["spec"].get("nodeName")
    if is_bound(pod):
        if annotations.get(keys.VGPU_NODE) != node or not annotations.get(NVIDIA.allocated):
            return [f"{name}: bound to {node} with allocation for {annotations.get(keys.VGPU_NODE)!r}"]
        return []
    problems = []
    if keys.VGPU_NODE in annotations:
        problems.append(f"{name}: pending but carries an allocation on {annotations[keys.VGPU_NODE]}")
    conditions = [c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
    if not any(c["status"] == "False" and c.get("reason") for c in conditions):
        problems.append(f"{name}: pending without a reason from kube-scheduler")
    return problems


def check_invariants(
    kube: KubeClient,
    namespace: str,
    hami: HamiScheduler,
    capacity: Usage,
    nodes: Sequence[str],
    *,
    bound: int | None = None,
    timeout: float = 120.0,
) -> list[dict[str, Any]]:
    """Wait until the namespace is at rest with every invariant holding (and ``bound`` pods bound, if given);
    fail at once if a device is ever over capacity, and with the open problems if it does not settle in
    ``timeout``. Returns the pods."""
    last: list[str] = []

    def at_rest() -> list[dict[str, Any]] | None:
        pods = kube.list_pods(namespace)
        usage = usage_from_annotations(pods)
        over = over_capacity(usage, capacity)
        assert not over, f"devices over capacity: {over}"
        problems = [p for pod in pods for p in pod_problems(pod)]
        for node in nodes:
            lock = (kube.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)
            if lock:
                problems.append(f"node {node} still locked: {lock}")
        ledger = hami.ledger()
        if ledger != usage:
            problems.append(f"hami's ledger {ledger} differs from the annotations {usage}")
        count = sum(map(is_bound, pods))
        if bound is not None and count != bound:
            problems.append(f"{count} pods bound, expected {bound}")
        last[:] = problems
        return None if problems else pods

    try:
        return wait_until(at_rest, timeout=timeout, interval=0.5, description="the invariants at rest")
    except TimeoutError as err:
        raise AssertionError(f"{err}; still open: {last}\n{hami_excerpt(hami, last)}") from None


def hami_excerpt(hami: HamiScheduler, problems: Sequence[str], lines: int = 80) -> str:
    """hami's log lines about the pods named in ``problems`` and its errors (its warnings and errors when no pod
    is named), the last ``lines``: a flake's evidence stays in the report once the run's temporary directory is
    gone."""
    pods = sorted({p.split(":", 1)[0] for p in problems if ":" in p and not p.startswith("node ")})
    named = re.compile(r"\b(" + "|".join(map(re.escape, pods)) + r")\b") if pods else None
    levels = ('"level": "error"', '"level": "critical"') if pods else ('"level": "warning"', '"level": "error"')
    picked = [
        line
        for line in hami.log().splitlines()
        if any(level in line for level in levels) or (named is not None and named.search(line))
    ]
    head = f"--- hami log ({hami.log_file}): the last {min(lines, len(picked))} of {len(picked)} lines picked ---"
    return "\n".join([head, *(line[:600] for line in picked[-lines:])])
