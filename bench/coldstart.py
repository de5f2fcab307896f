"""Cold start the way ``hami scheduler`` starts: the real runtime lists nodes, pods and quotas from an API server.

``cold_start_real(s)`` runs :class:`hami.server.runtime.Runtime` (the reflectors, the runtime's watch handlers,
the extender, the ledger, the HTTP servers) against a list server in another process that answers the list and
watch requests as kube-apiserver does: JSON pages of ``limit`` items with ``continue`` tokens, watches held open
without events, writes answered ``{}``. Every page travels over a loopback socket through hami's own HTTP client.

What is timed: from the runtime's start to the moment its readiness says the caches are synced (what ``/readyz``
and ``/filter`` check; the heap is settled in the same step), wall clock and this process's CPU time (the list
server's CPU is in its own process and not counted). The list server builds its pages before the clock starts.

Run alone: ``PYTHONPATH=. python -m bench.coldstart XL-500`` (add ``--pods N`` to change the pod count).
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import subprocess
import sys
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgspec

from bench.scenarios import SCENARIOS, Scenario

__all__ = ["cold_start_real", "serve"]

_HANDSHAKE = "Requesting_2026-01-01 00:00:00"
"""Every listed node already carries a requesting handshake (a restart): no stamps are written during the start."""


def _items(kind: str, s: Scenario) -> list[bytes]:
    from bench.ledger import _node_json, _pod_json
    from hami.protocol import keys

    if kind == "nodes":
        out = []
        for n in range(s.nodes):
            node = _node_json(n, s.gpus)
            node["metadata"]["annotations"][keys.NVIDIA_HANDSHAKE] = _HANDSHAKE  # type: ignore[index]
            out.append(msgspec.json.encode(node))
        return out
    return [msgspec.json.encode(_pod_json(p, s)) for p in range(s.pods)]


_OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


class _ListServer:
    """Answers list pages from pre-encoded items, holds watches open, and says ``{}`` to every write."""

    def __init__(self, lists: dict[str, list[bytes]]) -> None:
        self.lists = lists
        self.requests: dict[str, int] = {}

    def page(self, what: str, query: dict[str, list[str]]) -> bytes:
        items = self.lists.get(what, [])
        limit = int(query.get("limit", ["0"])[0]) or len(items)
        start = int(query.get("continue", ["0"])[0] or 0)
        end = min(start + limit, len(items))
        token = str(end) if end < len(items) else ""
        head = b'{"kind":"List","apiVersion":"v1","metadata":{"resourceVersion":"1000","continue":"%s"},"items":[' % (
            token.encode()
        )
        return head + b",".join(items[start:end]) + b"]}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                length = 0
                for line in lines[1:]:
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                if length:
                    await reader.readexactly(length)
                url = urlsplit(target)
                query = parse_qs(url.query)
                what = url.path.rstrip("/").rsplit("/", 1)[-1]
                key = f"{method} {what if method == 'GET' else 'write'}{' watch' if 'watch' in query else ''}"
                self.requests[key] = self.requests.get(key, 0) + 1
                if "watch" in query:
                    writer.write(_OK + b"Transfer-Encoding: chunked\r\n\r\n")
                    await writer.drain()
                    await reader.read()  # held open, no events, until the client goes away
                    return
                body = self.page(what, query) if method == "GET" else b"{}"
                writer.write(_OK + b"Content-Length: %d\r\n\r\n" % len(body))
                writer.write(body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _serve(s: Scenario) -> None:
    server = _ListServer({"nodes": _items("nodes", s), "pods": _items("pods", s)})
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0, limit=2**20)
    port = listener.sockets[0].getsockname()[1]
    print(port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # until the parent says stop
    print(msgspec.json.encode({**server.requests, "server cpu s": time.process_time()}).decode(), flush=True)


def serve(s: Scenario) -> None:
    """The list server's process: prints its port once its pages are built, its request counts at the end."""
    asyncio.run(_serve(s))


def _runqueue_s() -> float:
    """Seconds this process has waited for a core so far (``/proc/self/schedstat``): what other load costs it."""
    with open("/proc/self/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def _start(port: int) -> dict[str, float]:
    from hami.config import SchedulerSettings, default_device_config
    from hami.k8s.config import KubeConfig
    from hami.server.runtime import Runtime

    any_port = "127.0.0.1:0"
    settings = SchedulerSettings(http_bind=any_port, extender_bind=any_port, metrics_bind_address=any_port)
    runtime = Runtime(settings, default_device_config(), KubeConfig(server=f"http://127.0.0.1:{port}"))
    rss0 = _rss_mb()
    cpu0, t0, queued0 = time.process_time(), time.perf_counter(), _runqueue_s()
    task = asyncio.create_task(runtime.run())
    while getattr(runtime, "extender", None) is None or runtime.extender.readiness.ready_problem() is not None:
        if task.done():
            task.result()
            raise RuntimeError("the runtime stopped before it was ready")
        await asyncio.sleep(0.005)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    gc.unfreeze()  # what settle_heap froze without collecting it: the cyclic garbage of the start
    frozen_garbage = gc.collect()
    gc.freeze()
    out = {
        "ready_s": wall,
        "cpu_s": cpu,
        "runqueue_s": _runqueue_s() - queued0,
        "rss_growth_mb": _rss_mb() - rss0,
        "pods": float(len(runtime.state.pods)),
        "nodes": float(len(runtime.state.nodes)),
        "drift": float(len(runtime.state.verify())),
        "frozen_garbage_objects": float(frozen_garbage),
    }
    runtime.stop.set()
    await task
    gc.unfreeze()  # the benchmarks after this one start from an ordinary heap
    return out


def cold_start_real(s: Scenario) -> dict[str, Any]:
    """Start the real runtime against a list server holding ``s``'s nodes and pods; see the module docstring."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, "-m", "bench.coldstart", "serve", s.name, str(s.pods)]
    with subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        try:
            result: dict[str, Any] = asyncio.run(_start(port))
        finally:
            proc.stdin.write("stop\n")
            proc.stdin.flush()
            requests = proc.stdout.readline().strip()
    result["requests"] = msgspec.json.decode(requests) if requests else {}
    result["load"] = os.getloadavg()[0]
    result["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def _scenario(name: str, pods: str | None) -> Scenario:
    from dataclasses import replace

    s = SCENARIOS[name]
    return replace(s, pods=int(pods)) if pods else s


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(_scenario(sys.argv[2], sys.argv[3]))
    else:
        name = sys.argv[1] if len(sys.argv) > 1 else "XL-500"
        pods = sys.argv[sys.argv.index("--pods") + 1] if "--pods" in sys.argv else None
        print(cold_start_real(_scenario(name, pods)))
