"""HTTP ``/filter`` end to end on a running server: real ExtenderArgs JSON with a realistic ~6 KB pod.

The server is the real starlette app under uvicorn on loopback, with the real extender and ledger. The
annotation PATCH goes to a stub cluster that answers in constant time (the L/XL scenarios), or — in the
end-to-end benchmark — to a real kube-apiserver. The client is httpx over a keep-alive connection, like
kube-scheduler's.
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time
from collections.abc import Mapping

import httpx
import msgspec
import uvicorn

from bench.scenarios import Scenario, build_state, candidates, vendors
from hami.protocol.events import EventReason, EventType
from hami.protocol.objects import ObjectMeta, Pod
from hami.scheduling.request import SchedulingDefaults
from hami.server.app import build_app
from hami.server.extender import Extender
from hami.server.metrics import Metrics


class StubCluster:
    """The cycle's ``ClusterPort`` answering every call at once (no I/O); ``patch_pod_metadata`` only counts."""

    def __init__(self) -> None:
        self.patches = 0

    async def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None] | None = None,
        labels: Mapping[str, str | None] | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> Pod:
        self.patches += 1
        return Pod(metadata=ObjectMeta(name=name, namespace=namespace, uid=uid or ""))

    async def get_pod(self, namespace: str, name: str) -> Pod:
        raise NotImplementedError

    def watched_pod(self, namespace: str, name: str) -> Pod | None:
        return None

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, *, resource_version: str | None = None
    ) -> None:
        return None

    async def lock_node(self, node: str, namespace: str, name: str) -> None:
        return None

    async def unlock_node(self, node: str, namespace: str, name: str) -> None:
        return None

    def event(self, pod: Pod, type: EventType, reason: EventReason, message: str) -> None:
        return None


def realistic_pod(uid: str, gpus: int = 1) -> dict[str, object]:
    """A pod as kube-scheduler sends it: managed fields, env, probes, volumes — about 6 KB of JSON."""
    env = [{"name": f"CONFIG_{k}", "value": f"value-{k}-" + "x" * 60} for k in range(30)]
    return {
        "metadata": {
            "name": uid,
            "namespace": "bench",
            "uid": uid,
            "resourceVersion": "12345",
            "labels": {"app": "trainer", "team": "ml", "pod-template-hash": "5d8f7c9b6"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{" + '"k":"v",' * 40 + "}"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "trainer-5d8f7c9b6",
                    "uid": "0b7c1d2e-aaaa-bbbb-cccc-1234567890ab",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "command": ["python", "train.py"],
                    "env": env,
                    "resources": {
                        "limits": {
                            "nvidia.com/gpu": str(gpus),
                            "nvidia.com/gpumem": "1024",
                            "nvidia.com/gpucores": "10",
                            "cpu": "4",
                            "memory": "16Gi",
                        }
                    },
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "shm", "mountPath": "/dev/shm"}],
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
                }
            ],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "dataset"}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
        "status": {"phase": "Pending"},
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerThread:
    """uvicorn serving ``app`` on loopback in a background thread (its own event loop)."""

    def __init__(self, app: object) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off", access_log=False)  # type: ignore[arg-type]
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def bench_http_filter(s: Scenario, iterations: int = 1000, warmup: int = 50) -> dict[str, float]:
    state = build_state(s)
    vs = vendors()
    stub = StubCluster()
    extender = Extender(state, vs, SchedulingDefaults(), stub, Metrics(lambda: state))
    rng = random.Random(11)
    samples: list[float] = []
    sizes: list[int] = []
    with ServerThread(build_app(extender)) as srv, httpx.Client(base_url=f"http://127.0.0.1:{srv.port}") as client:
        for k in range(warmup + iterations):
            uid = f"http-{k}"
            body = msgspec.json.encode({"Pod": realistic_pod(uid), "NodeNames": candidates(s, rng)})
            t0 = time.perf_counter()
            r = client.post("/filter", content=body, headers={"Content-Type": "application/json"})
            dt = time.perf_counter() - t0
            result = r.json()
            assert r.status_code == 200, r.text
            assert result.get("NodeNames"), result.get("Error")
            # Keep the cluster stable: forget the reservation (not timed).
            asyncio.run(_forget(extender, uid))
            if k >= warmup:
                samples.append(dt)
                sizes.append(len(body))
    from bench.core import percentiles

    out = percentiles(samples)
    out["request_kb"] = sum(sizes) / len(sizes) / 1024
    return out


async def _forget(extender: Extender, uid: str) -> None:
    extender.cycle.pending.discard(uid)
    from hami.scheduling.decide import unreserve

    unreserve(extender.state, uid)
