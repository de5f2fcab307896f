"""What bounds a pipeline: time spent per pod inside the processes, from their own Prometheus histograms.

Read before and after a burst (the difference, per bound pod, in ms):

* kube-scheduler's ``scheduler_framework_extension_point_duration_seconds`` by extension point (PreFilter, Filter,
  Score, Reserve, Permit, PreBind, Bind…): where its scheduling and binding cycles spend their time;
* ``rest_client_rate_limiter_duration_seconds`` of kube-scheduler and kube-controller-manager by verb: how long
  their requests waited for their own client's limit (``clientConnection.qps``/``burst``, ``--kube-api-qps``);
* kube-apiserver's ``apiserver_admission_webhook_admission_duration_seconds`` by webhook: the admission calls
  (a mean per call, not per pod).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import httpx

Sums = dict[str, tuple[float, float]]
"""label value(s) → (sum of seconds, count)."""

Families = dict[str, tuple[str, ...]]
"""histogram family → the labels it is split by."""
SCHEDULER: Final[Families] = {
    "scheduler_framework_extension_point_duration_seconds": ("extension_point",),
    "rest_client_rate_limiter_duration_seconds": ("verb",),
    "scheduler_scheduling_algorithm_duration_seconds": (),
}
"""kube-scheduler: its extension points, its client's waits, and its scheduling algorithm (every filter and score,
the extenders' calls included: with the extension points left out, what its extenders took)."""
HAMI: Final[Families] = {"hami_request_duration_seconds": ("endpoint",)}
"""hami: the time it answered each endpoint in (webhook, filter, bind, prioritize; a mean per call)."""
CONTROLLER_MANAGER: Final[Families] = {"rest_client_rate_limiter_duration_seconds": ("verb",)}
APISERVER: Final[Families] = {"apiserver_admission_webhook_admission_duration_seconds": ("name",)}
_LABELS = re.compile(r'(\w+)="([^"]*)"')


def histogram_sums(text: str, families: Mapping[str, tuple[str, ...]]) -> dict[str, Sums]:
    """Each histogram family's ``_sum`` and ``_count``, added up over the labels not named, keyed by
    ``<family>:<value of the named labels, joined by '/'>``."""
    out: dict[str, Sums] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, rest = line.split("{", 1) if "{" in line else (line.split(" ", 1)[0], "}")
        for family, labels in families.items():
            for suffix, slot in (("_sum", 0), ("_count", 1)):
                if name != family + suffix:
                    continue
                found = dict(_LABELS.findall(rest.split("}", 1)[0]))
                key = "/".join(found.get(label, "") for label in labels)
                sums = out.setdefault(family, {})
                current = list(sums.get(key, (0.0, 0.0)))
                current[slot] += float(line.rsplit(" ", 1)[1])
                sums[key] = (current[0], current[1])
    return out


def ms_per_pod(before: dict[str, Sums], after: dict[str, Sums], pods: int) -> dict[str, dict[str, float]]:
    """Milliseconds per pod spent in each histogram between ``before`` and ``after`` (a key absent before counts
    from zero); keys with no time left out."""
    out: dict[str, dict[str, float]] = {}
    for family, sums in after.items():
        old = before.get(family, {})
        for key, (total, _) in sums.items():
            spent = total - old.get(key, (0.0, 0.0))[0]
            if spent > 0:
                out.setdefault(family, {})[key] = round(1e3 * spent / max(pods, 1), 3)
    return out


def mean_ms(before: dict[str, Sums], after: dict[str, Sums]) -> dict[str, dict[str, float]]:
    """Milliseconds per observation between ``before`` and ``after`` (e.g. per admission call)."""
    out: dict[str, dict[str, float]] = {}
    for family, sums in after.items():
        old = before.get(family, {})
        for key, (total, count) in sums.items():
            was = old.get(key, (0.0, 0.0))
            if count > was[1]:
                out.setdefault(family, {})[key] = round(1e3 * (total - was[0]) / (count - was[1]), 3)
    return out


def scrape(url: str, token: str, families: Mapping[str, tuple[str, ...]]) -> dict[str, Sums]:
    """``histogram_sums`` of a component's ``/metrics`` (its self-signed certificate on loopback; the admin's
    token); nothing when it does not answer."""
    try:
        text = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, verify=False, timeout=10).text
    except httpx.HTTPError:
        return {}
    return histogram_sums(text, families)


def probes(
    server: str, scheduler_port: int, controller_manager_port: int = 0, hami_metrics_port: int = 0
) -> dict[str, tuple[str, dict[str, tuple[str, ...]]]]:
    """The components to read: name → (metrics URL, histogram families)."""
    out = {
        "kube-scheduler": (f"https://127.0.0.1:{scheduler_port}/metrics", SCHEDULER),
        "kube-apiserver": (f"{server}/metrics", APISERVER),
    }
    if hami_metrics_port:
        out["hami"] = (f"http://127.0.0.1:{hami_metrics_port}/metrics", HAMI)
    if controller_manager_port:
        out["kube-controller-manager"] = (f"https://127.0.0.1:{controller_manager_port}/metrics", CONTROLLER_MANAGER)
    return out


def snapshot(
    components: Mapping[str, tuple[str, Mapping[str, tuple[str, ...]]]], token: str
) -> dict[str, dict[str, Sums]]:
    return {name: scrape(url, token, families) for name, (url, families) in components.items()}


def breakdown(before: dict[str, dict[str, Sums]], after: dict[str, dict[str, Sums]], pods: int) -> dict[str, Any]:
    """Per component: ms per pod in each histogram (kube-apiserver's admission webhooks: ms per call)."""
    out: dict[str, Any] = {}
    for name, sums in after.items():
        if name in ("kube-apiserver", "hami"):
            out[name] = mean_ms(before.get(name, {}), sums)
        else:
            out[name] = ms_per_pod(before.get(name, {}), sums, pods)
    return out


BOUNDS: Final = (
    ("kube-scheduler", "rest_client_rate_limiter_duration_seconds", "", "kube-scheduler client limit wait"),
    ("kube-controller-manager", "rest_client_rate_limiter_duration_seconds", "", "kcm client limit wait"),
    ("kube-scheduler", "scheduler_framework_extension_point_duration_seconds", "Filter", "Filter"),
    ("kube-scheduler", "scheduler_framework_extension_point_duration_seconds", "Score", "Score"),
    ("kube-scheduler", "scheduler_framework_extension_point_duration_seconds", "PreBind", "PreBind"),
    ("kube-scheduler", "scheduler_framework_extension_point_duration_seconds", "Bind", "Bind"),
    ("kube-scheduler", "scheduler_scheduling_algorithm_duration_seconds", "", "scheduling algorithm"),
    ("kube-apiserver", "apiserver_admission_webhook_admission_duration_seconds", "", "webhooks (ms a call)"),
    ("hami", "hami_request_duration_seconds", "webhook-dra", "hami webhook (ms a call)"),
    ("hami", "hami_request_duration_seconds", "prioritize", "hami prioritize (ms a call)"),
    ("hami", "hami_request_duration_seconds", "filter", "hami filter (ms a call)"),
)
"""The columns of the "what bounds it" tables: (component, family, key or "" for all keys added up, title)."""


def bound_figures(inside: Mapping[str, Any]) -> dict[str, float]:
    """:data:`BOUNDS` of one run's ``inside_ms`` (ms per pod; the webhooks' mean per call, added up)."""
    out = {}
    for component, family, key, title in BOUNDS:
        values = (inside.get(component) or {}).get(family) or {}
        out[title] = float(values.get(key, 0.0)) if key else float(sum(values.values()))
    return out


PPROF_DIR = os.environ.get("HAMI_BENCH_PPROF_DIR", "")
"""A folder: kube-scheduler's CPU profile is recorded during each burst (``go tool pprof`` reads the files)."""


@contextlib.contextmanager
def cpu_profiles(port: int, token: str, name: str, seconds: int = 5) -> Iterator[None]:
    """With :data:`PPROF_DIR` set: while the block runs, kube-scheduler's ``/debug/pprof/profile`` on ``port``,
    ``seconds`` at a time, into ``<PPROF_DIR>/<name>-<n>.pprof`` (``go tool pprof -top -cum`` shows where its CPU
    went; several files are read together). Without it, nothing."""
    if not PPROF_DIR:
        yield
        return
    stop = threading.Event()

    def record() -> None:
        n = 0
        while not stop.is_set():
            url = f"https://127.0.0.1:{port}/debug/pprof/profile?seconds={seconds}"
            with contextlib.suppress(httpx.HTTPError):
                answer = httpx.get(
                    url, headers={"Authorization": f"Bearer {token}"}, verify=False, timeout=seconds + 30
                )
                if answer.status_code == 200:
                    Path(PPROF_DIR, f"{name}-{n}.pprof").write_bytes(answer.content)
                    n += 1

    Path(PPROF_DIR).mkdir(parents=True, exist_ok=True)
    thread = threading.Thread(target=record, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(seconds + 5)  # the profile in flight covers the burst's end
