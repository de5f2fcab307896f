"""Benchmark runner: ``python -m bench.run [--quick] [--only NAME…] [--e2e-pods N]``.

Prints one table per measurement and writes every raw figure to ``bench/results/<UTC time>.json`` (that folder
is git-ignored; copy a file next to it under a name of your own to keep a baseline). Timings are measured here,
never asserted: tests do not depend on how fast the machine is.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.breakdown import BOUNDS, bound_figures
from bench.coldstart import cold_start_real
from bench.core import bench_decide
from bench.dra import PIPELINES as DRA_PIPELINES
from bench.http import bench_http_filter
from bench.ledger import cold_start, ledger_ops
from bench.scenarios import SCENARIOS

QUICK = ["S", "M"]
FULL = ["S", "M", "M-50x8", "M-100x16", "M-topo4", "L-420", "L-1000", "L-1000-init3", "XL-500", "XL-5000"]
HTTP = ["M", "L-1000", "XL-500"]
TARGETS = {"S": 0.5, "M": 2.0, "L-1000": 10.0, "XL-500": 10.0}  # in-process decide p99, ms
AFRESH_TARGETS = {"L-1000": 3.0, "XL-500": 3.0, "XL-5000": 25.0}  # decide p99 with the memo off, ms (issue 19)
AFRESH = ["M", "L-1000", "XL-500", "XL-5000"]
TYPE_FILTER = {"nvidia.com/use-gputype": "T4"}  # every generated card is a T4: the filter passes, the pod fits


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = (0.0, 0.0, 0.0)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg_1m_at_start": round(load[0], 2),
    }


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)))


def fmt(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small scenarios only (S, M), no end-to-end run")
    parser.add_argument("--only", nargs="*", help="scenario names to run")
    parser.add_argument("--iterations", type=int, default=1000, help="decisions per scenario (after warm-up)")
    parser.add_argument("--e2e-pods", type=int, default=200, help="pods for the end-to-end rate (0: skip)")
    parser.add_argument("--e2e-rounds", type=int, default=3, help="interleaved rounds of the end-to-end table")
    parser.add_argument(
        "--pipelines", nargs="+", choices=list(PIPELINES), help="rows of the end-to-end table (default: every one)"
    )
    parser.add_argument("--table-only", action="store_true", help="only the end-to-end table (no scenarios, faults)")
    args = parser.parse_args(argv)
    if args.table_only:
        return table_only(args.e2e_pods, args.e2e_rounds, args.pipelines)
    names = args.only or (QUICK if args.quick else FULL)
    results: dict[str, Any] = {"machine": machine(), "started": datetime.datetime.now(datetime.UTC).isoformat()}
    print(f"machine: {results['machine']}")

    rows = []
    decide_results: dict[str, Any] = {}
    for name in names:
        s = SCENARIOS[name]
        d = bench_decide(s, args.iterations, with_reserve=False)
        dr = bench_decide(s, args.iterations, with_reserve=True)
        cold = bench_decide(s, min(args.iterations, 200), with_reserve=False, memo=False)
        decide_results[name] = {"decide": d, "decide_reserve": dr, "decide_cold": cold}
        target = TARGETS.get(name)
        rows.append(
            [
                name,
                f"{s.nodes}x{s.gpus}",
                str(s.pods),
                str(s.candidates),
                fmt(d["p50_ms"]),
                fmt(d["p95_ms"]),
                fmt(d["p99_ms"]),
                fmt(dr["p99_ms"]),
                fmt(cold["p99_ms"]),
                "-" if target is None else (f"< {target}" + (" ok" if d["p99_ms"] < target else " MISSED")),
            ]
        )
    results["decide"] = decide_results
    table(
        "In-process decision (ms; 'cold' = verdict memo off, every node judged afresh)",
        ["scenario", "cluster", "pods", "cands", "p50", "p95", "p99", "+reserve p99", "cold p99", "target p99"],
        rows,
    )

    afresh_rows(names, args.iterations, results)

    rows = []
    ledger_results: dict[str, Any] = {}
    for name in [n for n in names if n in ("M", "L-1000", "XL-500")] or names[:1]:
        s = SCENARIOS[name]
        ops = ledger_ops(s)
        ledger_results[name] = ops
        rows.append([name, f"{ops['adds_per_s']:,.0f}", f"{ops['removes_per_s']:,.0f}", fmt(ops["recount_ms"])])
    results["ledger"] = ledger_results
    table("Ledger updates (pod records) and full recount", ["scenario", "adds/s", "removes/s", "recount ms"], rows)

    cold_name = "M" if args.quick else "XL-500"
    cs = cold_start(SCENARIOS[cold_name])
    real = cold_start_real(SCENARIOS[cold_name])
    results["cold_start"] = {cold_name: {**cs, "real_start": real}}
    table(
        f"Cold start ({cold_name}: {cs['pods']:,} pods, {real['nodes']:,.0f} nodes, "
        f"{cs['list_json_mb']:.0f} MB of list JSON): the real runtime lists them from a list server in another "
        "process; start -> ready (caches synced, heap settled). CPU = hami's process; 'waited' = time it was "
        "runnable but had no core (other load)",
        ["ready s", "CPU s", "waited s", "load 1m", "ledger state MB", "process growth MB", "decode+ledger only s"],
        [
            [
                fmt(real["ready_s"]),
                fmt(real["cpu_s"]),
                fmt(real["runqueue_s"]),
                fmt(real["load"]),
                fmt(cs["state_mb"]),
                fmt(real["rss_growth_mb"]),
                fmt(cs["cold_start_s"]),
            ]
        ],
    )

    from bench.scrape import bench_scrape

    scrape_name = "M" if args.quick else "XL-500"
    sc = bench_scrape(SCENARIOS[scrape_name])
    results["scrape"] = {scrape_name: sc}
    table(
        f"/metrics scrape ({scrape_name}, {sc['sliced']['mb']:.0f} MB of text): one scrape, and the longest the event "
        "loop waited meanwhile",
        ["writer", "scrape s", "longest loop stall ms"],
        [
            [name, fmt(r["seconds"]), fmt(r["loop_stall_ms"])]
            for name, r in (("generate_latest, one go (before)", sc["generate_latest"]), ("sliced", sc["sliced"]))
        ],
    )

    rows = []
    http_results: dict[str, Any] = {}
    for name in [n for n in HTTP if n in names] or ["M"]:
        h = bench_http_filter(SCENARIOS[name], iterations=min(args.iterations, 1000))
        http_results[name] = h
        rows.append([name, f"{h['request_kb']:.1f}", fmt(h["p50_ms"]), fmt(h["p95_ms"]), fmt(h["p99_ms"])])
    results["http_filter"] = http_results
    table("HTTP /filter on a running server (stub API server)", ["scenario", "req KB", "p50", "p95", "p99"], rows)

    if not args.quick and args.e2e_pods > 0:
        pipelines_table(args.e2e_pods, results, args.e2e_rounds, args.pipelines)

    if not args.quick and args.e2e_pods > 0:
        from bench.e2e import THROTTLED, bench_e2e

        e2e = bench_e2e(nodes=100, gpus=8, pods=args.e2e_pods)
        results["e2e"] = e2e
        table(
            "End to end (M: 100 nodes x 8 GPUs): real kube-apiserver + kube-scheduler + hami",
            ["pods", "bound", "seconds", "pods/s", "hami filter ms", "hami bind ms"],
            [
                [
                    str(e2e["pods"]),
                    str(e2e["bound"]),
                    fmt(e2e["seconds"]),
                    fmt(e2e["pods_per_s"]),
                    fmt(e2e.get("hami_filter_mean_ms", 0)),
                    fmt(e2e.get("hami_bind_mean_ms", 0)),
                ]
            ],
        )
        storm = bench_e2e(nodes=100, gpus=8, pods=args.e2e_pods, apiserver_args=THROTTLED)
        crash = bench_e2e(nodes=100, gpus=8, pods=args.e2e_pods, restart_apiserver_at=args.e2e_pods // 4)
        results["e2e_429_storm"] = storm
        results["e2e_apiserver_restart"] = crash
        table(
            "Faults, same scenario; baseline = the plain run above (this run)",
            ["run", "bound", "seconds", "pods/s", "vs baseline", "apiserver back s", "next bind s", "all bound s"],
            [
                ["baseline", str(e2e["bound"]), fmt(e2e["seconds"]), fmt(e2e["pods_per_s"]), "1.00", "", "", ""],
                [
                    "429 storm",
                    str(storm["bound"]),
                    fmt(storm["seconds"]),
                    fmt(storm["pods_per_s"]),
                    fmt(storm["pods_per_s"] / e2e["pods_per_s"]),
                    "",
                    "",
                    "",
                ],
                [
                    f"apiserver SIGKILL at {args.e2e_pods // 4} bound",
                    str(crash["bound"]),
                    fmt(crash["seconds"]),
                    fmt(crash["pods_per_s"]),
                    fmt(crash["pods_per_s"] / e2e["pods_per_s"]),
                    fmt(crash.get("apiserver_restart_s", 0)),
                    fmt(crash.get("recover_s", 0)),
                    fmt(crash.get("restart_to_all_s", 0)),
                ],
            ],
        )

    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = out / f"{stamp}{'-quick' if args.quick else ''}.json"
    path.write_text(json.dumps(results, indent=2))
    print(f"\nraw results: {path}")
    return 0


PIPELINES = {
    "bare": "bare kube-scheduler (no devices)",
    "spread": "hami spread",
    "binpack": "hami binpack",
    "spread-quiet": "hami spread --no-success-events",
    **DRA_PIPELINES,
}
HAMI_ARGS = {"spread-quiet": ("--no-success-events",)}
DRA_TARGETS = (0.6, 1.5)
"""DRA mode (issue 38): at least 0.6x bare kube-scheduler and 1.5x hami's extender (``spread``) in the same run."""
PROCESSES = ["kube-apiserver", "etcd", "kube-scheduler", "hami", "hami stand-in", "kube-controller-manager", "bench"]
REQUEST_SENDERS = [
    "hami",
    "hami stand-in",
    "device plugin stand-in",
    "kube-scheduler",
    "kube-controller-manager",
    "bench",
]


def _targets(med: dict[str, dict[str, float]], runs: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """Each row's target and whether this run meets it (``-`` where the row it compares with was not run)."""
    rate = {name: m["pods_per_s"] for name, m in med.items()}
    bare, spread = rate.get("bare", 0.0), rate.get("spread", 0.0)
    out = dict.fromkeys(runs, "-")
    if bare and "spread" in rate:
        out["spread"] = f">= 0.5x bare: {'ok' if spread >= 0.5 * bare else 'MISSED'}"
    if bare and "spread-quiet" in rate:
        out["spread-quiet"] = f">= 0.34x bare: {'ok' if rate['spread-quiet'] >= 0.34 * bare else 'MISSED'}"
    if spread and "binpack" in rate:
        ok = rate["binpack"] >= 0.5 * spread and max(r["failed_attempts"] for r in runs["binpack"]) == 0
        out["binpack"] = f">= 0.5x spread, 0 failed: {'ok' if ok else 'MISSED'}"
    low, high = DRA_TARGETS
    for name in ("dra", "dra-default", "dra-noprio", "dra-fewer"):
        if name in rate and bare and spread:
            ok = rate[name] >= low * bare and rate[name] >= high * spread
            out[name] = f">= {low}x bare, >= {high}x spread: {'ok' if ok else 'MISSED'}"
    return out


def pipelines_table(pods: int, results: dict[str, Any], rounds: int = 3, names: list[str] | None = None) -> None:
    """The honest end-to-end table (issue 19 item 3, issue 38 item 5): bare kube-scheduler, hami ``spread``, hami
    ``binpack``, and DRA mode's pipelines (``bench.dra``), in this run, interleaved (each row once, then again,
    ``rounds`` times; each on a fresh control plane, M: 100 nodes x 8 GPUs), with the median and range of each
    figure, the ratios to bare and the targets; then where the CPU and the API requests of a pod go (medians)."""
    from bench.e2e import bench_pipeline

    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names or PIPELINES}
    for i in range(rounds):
        for name, done in runs.items():
            r = bench_pipeline(
                name.split("-")[0] if name in HAMI_ARGS else name, pods=pods, hami_args=HAMI_ARGS.get(name, ())
            )
            done.append(r)
            print(f"  round {i + 1} {name}: {r['pods_per_s']:.1f} pods/s, load average {r['loadavg']:.1f}", flush=True)
    results["pipelines"] = runs
    med = {name: {k: _median([r[k] for r in rs]) for k in _FIGURES} for name, rs in runs.items()}
    bare = med.get("bare", {}).get("pods_per_s", 0.0)
    spread = med.get("spread", {}).get("pods_per_s", 0.0)
    targets = _targets(med, runs)
    rows = []
    for name, rs in runs.items():
        m = med[name]
        cpu = m["hami_cpu_ms_per_pod"]
        rows.append(
            [
                PIPELINES[name],
                f"{min(r['bound'] for r in rs):.0f}/{pods}",
                _ranged(rs, "pods_per_s"),
                f"{m['pods_per_s'] / bare:.2f}" if bare else "-",
                f"{m['pods_per_s'] / spread:.2f}" if spread else "-",
                _ranged(rs, "p50_s"),
                _ranged(rs, "p99_s"),
                _ranged(rs, "api_requests_per_pod"),
                f"{sum(r['failed_attempts'] for r in rs):.0f}",
                "-"
                if name in ("bare", "dra-claims")
                else _ranged(rs, "hami_cpu_ms_per_pod") + (" ok" if cpu < 5 else " MISSED"),
                _ranged(rs, "loadavg"),
                targets[name],
            ]
        )
    table(
        f"End to end, {pods} pods created at once, {rounds} interleaved rounds, median (min-max) (M: 100 nodes x 8 "
        "GPUs, real kube-apiserver + kube-scheduler)",
        [
            "pipeline",
            "bound",
            "pods/s",
            "x bare",
            "x spread",
            "p50 s",
            "p99 s",
            "API req/pod",
            "failed",
            "hami CPU ms/pod (< 5)",
            "load avg",
            "target",
        ],
        rows,
    )
    breakdown_tables(runs)


def breakdown_tables(runs: dict[str, list[dict[str, Any]]]) -> None:
    """Where a pod's CPU and API requests go, per pipeline (medians over the rounds)."""
    table(
        "Where a pod's CPU goes (ms per bound pod, median; 'bench' = the load generator, its watch and the device "
        "plugin's stand-in; 'hami stand-in' = bench.drastandin, DRA mode's front door while hami has none)",
        ["pipeline", *PROCESSES, "all"],
        [
            [
                PIPELINES[name],
                *(fmt(_median([r["cpu_ms_per_pod"].get(p, 0.0) for r in rs])) for p in PROCESSES),
                fmt(_median([sum(r["cpu_ms_per_pod"].values()) for r in rs])),
            ]
            for name, rs in runs.items()
        ],
    )
    table(
        "API requests per bound pod by who sent them (kube-apiserver's audit log, by User-Agent; median)",
        ["pipeline", *REQUEST_SENDERS, "all (apiserver_request_total)"],
        [
            [
                PIPELINES[name],
                *(fmt(_median([r.get(f"{who}_requests_per_pod", 0.0) for r in rs])) for who in REQUEST_SENDERS),
                fmt(_median([r["api_requests_per_pod"] for r in rs])),
            ]
            for name, rs in runs.items()
        ],
    )
    for who in ("hami", "hami stand-in", "kube-scheduler", "kube-controller-manager"):
        kinds = sorted({k for rs in runs.values() for r in rs for k in r["requests_per_pod_by_who"].get(who, {})})
        shown = [n for n, rs in runs.items() if any(r["requests_per_pod_by_who"].get(who) for r in rs)]
        if not kinds:
            continue
        table(
            f"{who}'s API requests per bound pod by verb and resource (audit log; median; a code where it is not 2xx)",
            ["request", *(PIPELINES[n] for n in shown)],
            [
                [
                    k,
                    *(
                        fmt(_median([r["requests_per_pod_by_who"].get(who, {}).get(k, 0.0) for r in runs[n]]))
                        for n in shown
                    ),
                ]
                for k in kinds
            ],
        )
    titles = [title for *_, title in BOUNDS]
    table(
        "What bounds it: ms per bound pod inside the processes (median; their own histograms): how long requests "
        "waited for their client's limit, kube-scheduler's extension points (PreBind and Bind run concurrently, off "
        "the scheduling cycle), the admission webhooks' mean per call",
        ["pipeline", *titles],
        [
            [PIPELINES[name], *(fmt(_median([bound_figures(r.get("inside_ms", {}))[t] for r in rs])) for t in titles)]
            for name, rs in runs.items()
        ],
    )
    kinds = sorted({k for rs in runs.values() for r in rs for k in r["api_requests_per_pod_by"]})
    table(
        "API requests per bound pod by verb and resource (median; a status code where it is not 2xx)",
        ["request", *(PIPELINES[n] for n in runs)],
        [
            [k, *(fmt(_median([r["api_requests_per_pod_by"].get(k, 0.0) for r in rs])) for rs in runs.values())]
            for k in kinds
        ],
    )


_FIGURES = ("pods_per_s", "p50_s", "p99_s", "api_requests_per_pod", "failed_attempts", "hami_cpu_ms_per_pod")


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


def _ranged(rs: list[dict[str, Any]], key: str) -> str:
    xs = [float(r[key]) for r in rs]
    if len(xs) == 1:
        return fmt(xs[0])
    return f"{fmt(_median(xs))} ({fmt(min(xs))}-{fmt(max(xs))})"


def afresh_rows(names: list[str], iterations: int, results: dict[str, Any]) -> None:
    """Decisions the memo does not help (issue 19 item 4): the memo cleared before every decision, 200 request
    shapes interleaved (memo on), every node's capacity summary dropped too, a request about half the nodes reject
    (6,000 MiB; memo off), a card type filter (``nvidia.com/use-gputype: T4``, memo off: screened per card model),
    and Fit on every node (the capacity index off: the figure before it), each against its scenario's single-shape
    memo figure from this run."""
    rows = []
    out: dict[str, Any] = {}
    n = min(iterations, 200)
    for name in [x for x in AFRESH if x in names]:
        s = SCENARIOS[name]
        single = results["decide"][name]["decide"]
        afresh = results["decide"][name]["decide_cold"]
        shapes = bench_decide(s, n, with_reserve=False, shapes=200)
        rejecting = bench_decide(s, min(n, 100), with_reserve=False, memo=False, gpumem=6000)
        changed = bench_decide(s, min(n, 100), with_reserve=False, memo=False, changed=True)
        unscreened = bench_decide(s, min(n, 100), with_reserve=False, memo=False, screening=False)
        typed = bench_decide(s, min(n, 100), with_reserve=False, memo=False, annotations=TYPE_FILTER)
        out[name] = {
            "shapes_200": shapes,
            "all_changed": changed,
            "no_index": unscreened,
            "half_rejected": rejecting,
            "type_filter": typed,
        }
        target = AFRESH_TARGETS.get(name)
        rows.append(
            [
                name,
                fmt(single["p99_ms"]),
                fmt(afresh["p50_ms"]) + " / " + fmt(afresh["p99_ms"]),
                fmt(shapes["p99_ms"]) + f" ({shapes['p99_ms'] / single['p99_ms']:.1f}x)",
                fmt(changed["p99_ms"]),
                fmt(rejecting["p99_ms"]),
                fmt(typed["p99_ms"]),
                fmt(unscreened["p99_ms"]),
                " / ".join(fmt(r["cpu_p99_ms"]) for r in (afresh, shapes, rejecting, typed, unscreened))
                + f" ({shapes['cpu_p99_ms'] / single['cpu_p99_ms']:.1f}x)",
                "-" if target is None else (f"< {target}" + (" ok" if afresh["p99_ms"] < target else " MISSED")),
            ]
        )
    results["afresh"] = out
    if rows:
        table(
            "Decisions without the memo (ms): memo off; 200 shapes interleaved (x single shape); every node changed; "
            "half the nodes rejecting; a card type filter (memo off); no capacity index",
            [
                "scenario",
                "1 shape p99",
                "afresh p50 / p99",
                "200 shapes p99",
                "all changed p99",
                "half rejected p99",
                "type filter p99",
                "no index p99",
                "CPU p99: afresh / 200 shapes / half / type / no index (200 shapes x 1 shape)",
                "target",
            ],
            rows,
        )


def save(results: dict[str, Any], suffix: str = "") -> Path:
    """Write ``results`` to ``bench/results/<UTC time><suffix>.json``; its path."""
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = out / f"{stamp}{suffix}.json"
    path.write_text(json.dumps(results, indent=2))
    return path


def table_only(pods: int, rounds: int, names: list[str] | None) -> int:
    """``--table-only``: the end-to-end table alone (``--pipelines`` picks its rows), to ``bench/results``."""
    results: dict[str, Any] = {"machine": machine(), "started": datetime.datetime.now(datetime.UTC).isoformat()}
    print(f"machine: {results['machine']}", flush=True)
    pipelines_table(pods, results, rounds, names)
    results["load_avg_1m_at_end"] = round(os.getloadavg()[0], 2)
    print(f"\nraw results: {save(results, '-pipelines')}")
    return 0


def profile() -> int:
    """``make bench-profile``: pyinstrument over scenario L (1,000 candidates): decide+reserve and HTTP /filter."""
    from pyinstrument import Profiler

    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    s = SCENARIOS["L-1000"]
    profiler = Profiler(interval=0.0005)
    profiler.start()
    bench_decide(s, 300, with_reserve=True, memo=False)
    bench_decide(s, 300, with_reserve=True)
    bench_http_filter(s, iterations=200)
    profiler.stop()
    text = out / "profile-L.txt"
    html = out / "profile-L.html"
    text.write_text(profiler.output_text(unicode=True, color=False))
    html.write_text(profiler.output_html())
    print(profiler.output_text(unicode=True, color=False)[:4000])
    print(f"profile written to {text} and {html}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["profile"]:
        raise SystemExit(profile())
    raise SystemExit(main())
