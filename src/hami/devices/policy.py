"""GPU policies: the order in which a node's devices are tried (scheduler-core.md §5.4).

HAMi sorts the device list and Fit consumes it from the end; hami builds the *preference order* directly
(most preferred first), which is the same sequence reversed. Deliberate difference: exact ties are broken
by device index ascending (HAMi leaves them to Go's sort, which tries the later-registered device first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from hami.errors import InvalidInput, did_you_mean
from hami.protocol import keys

__all__ = ["GPU_POLICIES", "NODE_POLICIES", "GpuPolicy", "parse_gpu_policy", "parse_node_policy"]

GPU_POLICIES = frozenset({"binpack", "spread", "topology-aware", "mutex", "numa"})
NODE_POLICIES = frozenset({"binpack", "spread"})
_CHAIN_KEYS = ("binpack", "spread", "numa")


@dataclass(frozen=True, slots=True)
class GpuPolicy:
    """A parsed GPU policy. ``chain`` is set in chain mode (a comma list, or exactly ``numa``)."""

    raw: str
    single: str
    chain: tuple[str, ...] | None
    topology: bool
    mutex: bool
    numa_bind: bool

    def order(self, n: int, score: Callable[[int], float], numa: Sequence[int], used: Sequence[int]) -> list[int]:
        """Device indices, most preferred first. ``score(i)`` is the device score of spec §5.1."""
        return sorted(range(n), key=self.key(score, numa, used))

    def key(
        self, score: Callable[[int], float], numa: Sequence[int], used: Sequence[int]
    ) -> Callable[[int], tuple[float, ...]]:
        """The sort key of ``order``: device ``i`` is tried before ``j`` iff ``key(i) < key(j)`` (keys are unique,
        the index is their last part). The capacity screen uses it to break ties among a few devices without
        ordering them all."""
        if self.chain is not None:
            chain = self.chain
            if self.numa_bind and chain[0] != "numa":
                chain = ("numa", *(k for k in chain if k != "numa"))
            return _chain_key(chain, score, numa)
        policy = self.single
        if policy == "mutex":
            return lambda i: (used[i], -numa[i], i)
        if self.numa_bind and policy == "binpack":
            return lambda i: (numa[i], -score(i), i)
        if self.numa_bind:
            return lambda i: (-numa[i], score(i), i)
        if policy == "binpack":
            return lambda i: (-score(i), -numa[i], i)
        return lambda i: (score(i), -numa[i], i)

    def numa_last(self, numas: Iterable[int]) -> int:
        """With NUMA binding (neither ``mutex`` nor ``topology-aware``), ``order`` tries the devices NUMA node by NUMA
        node: the lowest id first for a single ``binpack``, the highest first otherwise. The NUMA node of ``numas``
        that is tried last."""
        return max(numas) if self.chain is None and self.single == "binpack" else min(numas)


def _chain_key(
    chain: Sequence[str], score: Callable[[int], float], numa: Sequence[int]
) -> Callable[[int], tuple[float, ...]]:
    """Chain mode: sorted by each policy of the chain in turn, then by index."""

    def chain_key(i: int) -> tuple[float, ...]:
        parts: list[float] = []
        for k in chain:
            if k == "binpack":
                parts.append(-score(i))
            elif k == "spread":
                parts.append(score(i))
            else:  # numa: HAMi tries the highest NUMA id first
                parts.append(-numa[i])
        parts.append(i)
        return tuple(parts)

    return chain_key


def parse_gpu_policy(value: str, numa_bind: bool, field: str = keys.GPU_SCHEDULER_POLICY) -> GpuPolicy:
    """Parse a GPU policy value (a single policy or a comma chain). Unknown tokens are rejected.

    Deliberate difference: HAMi silently treats an unknown policy as ``spread``; hami reports it.
    """
    tokens = [t.strip() for t in value.split(",") if t.strip()]
    if not tokens:
        raise InvalidInput(field, value, "empty GPU scheduler policy")
    unknown = [t for t in tokens if t not in GPU_POLICIES]
    if unknown:
        raise InvalidInput(
            field,
            value,
            f"unknown GPU policy {unknown[0]!r}; expected one of {', '.join(sorted(GPU_POLICIES))}"
            + did_you_mean(unknown[0], GPU_POLICIES),
        )
    chain: tuple[str, ...] | None = None
    if "," in value or value.strip() == "numa":
        seen: list[str] = []
        for t in tokens:
            if t in _CHAIN_KEYS and t not in seen:
                seen.append(t)
        chain = tuple(seen) or ("spread",)
    return GpuPolicy(
        raw=value,
        single=tokens[0] if len(tokens) == 1 else "",
        chain=chain,
        topology="topology-aware" in tokens,
        mutex="mutex" in tokens,
        numa_bind=numa_bind,
    )


def parse_node_policy(value: str, field: str = keys.NODE_SCHEDULER_POLICY) -> str:
    policy = value.strip()
    if policy not in NODE_POLICIES:
        expected = f"expected one of {', '.join(sorted(NODE_POLICIES))}{did_you_mean(policy, NODE_POLICIES)}"
        raise InvalidInput(field, value, f"unknown node policy {policy!r}; {expected}")
    return policy
