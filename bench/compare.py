"""Before/after of ``decide`` without the memo, in one run: ``python -m bench.compare [--before SRC] SCENARIO...``.

Runs the memo-off variants of ``bench.run``'s "Decisions without the memo" table (and a few more: NUMA binding, a
card type filter) for each scenario, once under the source tree ``--before`` (for example a ``git archive`` of
``main`` unpacked under ``/tmp``) and once under this checkout's ``src``, one after the other in separate
processes, and prints wall and CPU (``time.thread_time``) p50/p99 in ms with the load average beside each side.
CPU time is the figure to compare on a shared machine: the load of other processes does not add to it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

VARIANTS: dict[str, dict[str, Any]] = {
    "single": {"memo": True},
    "afresh": {"memo": False},
    "shapes200": {"memo": True, "shapes": 200},
    "half": {"memo": False, "gpumem": 6000},
    "half-numa": {"memo": False, "gpumem": 6000, "annotations": {"nvidia.com/numa-bind": "true"}},
    "type": {"memo": False, "annotations": {"nvidia.com/use-gputype": "T4"}},
    "changed": {"memo": False, "changed": True},
    "noindex": {"memo": False, "screening": False},
}


def measure(name: str, iterations: int, variants: list[str]) -> dict[str, Any]:
    """Every variant on one state of scenario ``name`` (built once), in this process."""
    import hami
    from bench.core import percentiles
    from bench.scenarios import SCENARIOS, build_state, candidates, make_request, vendors
    from hami.scheduling.decide import decide
    from hami.scheduling.memo import Verdicts

    s = SCENARIOS[name]
    state = build_state(s)
    vs = vendors()
    out: dict[str, Any] = {"src": str(Path(hami.__file__).parent), "load": os.getloadavg()[0]}
    for variant in variants:
        v = VARIANTS[variant]
        verdicts = Verdicts(screening=v.get("screening", True))
        rng = random.Random(7)
        wall: list[float] = []
        cpu: list[float] = []
        for k in range(30 + iterations):
            cands = candidates(s, rng)
            mem = v.get("gpumem", 1024) + 8 * (k % v.get("shapes", 1))
            req = make_request(s, f"b-{k}", vs, gpumem=mem, annotations=v.get("annotations"))
            if not v["memo"]:
                verdicts.clear()
            if v.get("changed"):
                for node in state.nodes.values():
                    for table in node.tables.values():
                        table.charge(0, 0, 0, 0)
            t0, c0 = time.perf_counter(), time.thread_time()
            decision = decide(state, req, cands, 1_700_000_000, verdicts)
            dt, dc = time.perf_counter() - t0, time.thread_time() - c0
            assert decision.node is not None, decision.message
            if k >= 30:
                wall.append(dt)
                cpu.append(dc)
        w, c = percentiles(wall), percentiles(cpu)
        out[variant] = {"p50": w["p50_ms"], "p99": w["p99_ms"], "cpu_p50": c["p50_ms"], "cpu_p99": c["p99_ms"]}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scenarios", nargs="+")
    parser.add_argument("--before", help="a source tree (the folder holding the 'hami' package) to compare with")
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.scenarios[0], args.iterations, args.variants)))
        return 0
    root = Path(__file__).resolve().parent.parent
    trees = ([("before", args.before)] if args.before else []) + [("after", str(root / "src"))]
    for name in args.scenarios:
        for side, tree in trees:
            env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{tree}"}
            command = [sys.executable, "-m", "bench.compare", "--child", name, "--iterations", str(args.iterations)]
            done = subprocess.run(
                [*command, "--variants", *args.variants], check=False, env=env, capture_output=True, text=True
            )
            if done.returncode != 0:
                print(done.stderr, file=sys.stderr)
                return done.returncode
            result = json.loads(done.stdout)
            print(f"{name} {side} ({result['src']}, load {result['load']:.2f})")
            for variant in args.variants:
                r = result[variant]
                print(
                    f"  {variant:10s} wall p50 {r['p50']:8.3f} p99 {r['p99']:8.3f}   "
                    f"CPU p50 {r['cpu_p50']:8.3f} p99 {r['cpu_p99']:8.3f}"
                )
            if "single" in result and "shapes200" in result:  # issue 19 item 4: within 2x of one shape
                one, many = result["single"], result["shapes200"]
                print(
                    f"  200 shapes x one shape: CPU p50 {many['cpu_p50'] / one['cpu_p50']:.2f}x "
                    f"p99 {many['cpu_p99'] / one['cpu_p99']:.2f}x, wall p99 {many['p99'] / one['p99']:.2f}x"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
