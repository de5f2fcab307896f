"""In-process benchmarks of the decision core: decide, decide + reserve, ledger updates, full recount."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping

from bench.scenarios import SCENARIOS, Scenario, build_state, candidates, make_request, vendors
from hami.scheduling.decide import decide, reserve, unreserve
from hami.scheduling.memo import Verdicts


def percentiles(samples: list[float]) -> dict[str, float]:
    xs = sorted(samples)

    def q(p: float) -> float:
        return xs[min(len(xs) - 1, int(p * len(xs)))]

    return {"p50_ms": q(0.50) * 1e3, "p95_ms": q(0.95) * 1e3, "p99_ms": q(0.99) * 1e3, "n": len(xs)}


def bench_decide(
    s: Scenario,
    iterations: int,
    with_reserve: bool,
    warmup: int = 50,
    memo: bool = True,
    shapes: int = 1,
    changed: bool = False,
    screening: bool = True,
    gpumem: int = 1024,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, float]:
    """Latency of ``decide`` (and ``reserve``) over ``iterations`` pods after ``warmup``; ``memo=False`` clears
    the verdict memo before every decision (every candidate judged afresh: the worst case). ``shapes`` > 1
    interleaves that many request shapes (``gpumem`` 1,024, 1,032, … MiB), ``changed`` drops every node's capacity
    summary before each decision (as if every node had changed since the last one), ``screening=False`` judges
    every node with Fit (no capacity index: the figures before issue 19 item 4). ``gpumem`` is the request's
    memory (6,000 MiB: about half the nodes of the generated clusters cannot take it); ``annotations`` are added to
    every pod's (a card type filter, NUMA binding)."""
    state = build_state(s)
    verdicts = Verdicts(screening=screening)
    vs = vendors()
    rng = random.Random(7)
    samples: list[float] = []
    cpu: list[float] = []  # the same decisions in this thread's CPU time: the load of other processes adds none
    for k in range(warmup + iterations):
        cands = candidates(s, rng)
        req = make_request(s, f"bench-{k}", vs, gpumem=gpumem + 8 * (k % shapes), annotations=annotations)
        if not memo:
            verdicts.clear()
        if changed:
            for node in state.nodes.values():
                for table in node.tables.values():
                    table.charge(0, 0, 0, 0)  # a charge of nothing: the ledger's path, which drops the summary
        t0, c0 = time.perf_counter(), time.thread_time()
        d = decide(state, req, cands, 1_700_000_000, verdicts)
        if with_reserve:
            reserve(state, req, d)
        dt, dc = time.perf_counter() - t0, time.thread_time() - c0
        assert d.node is not None, d.message
        if with_reserve:
            unreserve(state, req.uid)
        if k >= warmup:
            samples.append(dt)
            cpu.append(dc)
    return percentiles(samples) | {f"cpu_{k}": v for k, v in percentiles(cpu).items() if k != "n"}


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    import sys

    for name in sys.argv[1:] or ["S", "M"]:
        s = SCENARIOS[name]
        print(name, "decide", bench_decide(s, 300, False))
        print(name, "decide+reserve", bench_decide(s, 300, True))
