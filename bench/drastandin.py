"""A stand-in for hami's DRA-mode front door, for the benches while hami's own is not there (DRAMODE.md).

``python -m bench.drastandin --server URL --token-file F --ca-file F --port N --cert F --key F``

It does what hami's webhook route ``/webhook/dra`` and hami's claim controller do, with the same API requests,
in a process of its own (its CPU is counted apart from hami's), with the User-Agent :data:`AGENT`:

* **the webhook** (HTTPS, ``/webhook/dra``): no API request; it answers kube-apiserver's AdmissionReview with
  the patch of the contract — the HAMi resources out of the container's limits and requests, the pod's
  ``resourceClaims`` entry naming a claim object ``<pod>-<container>-<5 random>``, the container's ``claims``
  entry, label ``hami.io/dra``, annotation ``hami.io/dra-requests`` (the original request), the scheduler name;
* **the claim controller**: one watch on pods (hami has one anyway); for each pod of the scheduler name, unbound,
  labelled ``hami.io/dra``, first seen, one POST of each ResourceClaim of its ``hami.io/dra-requests``, owned by
  the pod (controller, blockOwnerDeletion). One write per claim; AlreadyExists is done.

The translation is :func:`claim_spec` (the bench's one shape: GPUs, MiB, cores; no annotations), not hami's
pure function: the figures of a run with it are labelled "stand-in".
"""

from __future__ import annotations

import argparse
import base64
import json
import queue
import random
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

AGENT = "hami-bench-dra-standin"
"""The User-Agent of the stand-in's requests (its claim POSTs and its pod watch)."""
DRIVER = "hami-core-gpu.project-hami.io"
DRA_LABEL = "hami.io/dra"
REQUESTS_ANNOTATION = "hami.io/dra-requests"
POD_ANNOTATION = "hami.io/dra-pod"
GPU, GPUMEM, GPUCORES = "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"
TRANSLATED = (GPU, GPUMEM, "nvidia.com/gpumem-percentage", GPUCORES, "nvidia.com/priority")
SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"
WORKERS = 4


def claim_spec(resources: dict[str, str], device_class: str = DRIVER) -> dict[str, Any]:
    """A ResourceClaim's ``spec`` for one container's HAMi request (the contract's shape, for what the bench
    asks: ``nvidia.com/gpu``, ``gpumem`` MiB and ``gpucores`` percent)."""
    count = int(resources.get(GPU, "1"))
    capacity = {"cores": str(int(resources.get(GPUCORES, "0")))}
    if GPUMEM in resources:
        capacity["memory"] = f"{int(resources[GPUMEM])}Mi"
    exactly: dict[str, Any] = {
        "deviceClassName": device_class,
        "allocationMode": "ExactCount",
        "count": count,
        "capacity": {"requests": capacity},
    }
    devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": exactly}]}
    if count > 1:
        devices["constraints"] = [{"requests": ["gpu"], "distinctAttribute": f"{DRIVER}/uuid"}]
    return {"devices": devices}


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _container_patch(i: int, container: dict[str, Any], claim: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The container's JSON-patch operations and its original HAMi request (empty: nothing to translate)."""
    resources = container.get("resources") or {}
    asked: dict[str, str] = {}
    ops: list[dict[str, Any]] = []
    for section in ("limits", "requests"):
        for key, value in (resources.get(section) or {}).items():
            if key in TRANSLATED:
                asked.setdefault(key, str(value))
                ops.append({"op": "remove", "path": f"/spec/containers/{i}/resources/{section}/{_escape(key)}"})
    if not asked:
        return [], {}
    pod_claim = f"hami-{container['name']}"
    if "claims" in resources:
        ops.append({"op": "add", "path": f"/spec/containers/{i}/resources/claims/-", "value": {"name": pod_claim}})
    else:
        ops.append({"op": "add", "path": f"/spec/containers/{i}/resources/claims", "value": [{"name": pod_claim}]})
    return ops, asked


def admission_patch(pod: dict[str, Any], scheduler_name: str, rng: random.Random) -> list[dict[str, Any]]:
    """The contract's patch for a pod (empty when no container asks for a GPU)."""
    meta = pod.get("metadata") or {}
    base = str(meta.get("name") or str(meta.get("generateName", "pod")).rstrip("-"))
    ops: list[dict[str, Any]] = []
    entries: list[dict[str, str]] = []
    requests: dict[str, Any] = {}
    for i, container in enumerate((pod.get("spec") or {}).get("containers") or []):
        suffix = "".join(rng.choice(SUFFIX_CHARS) for _ in range(5))
        claim = f"{base}-{container['name']}-{suffix}"
        container_ops, asked = _container_patch(i, container, claim)
        if not asked:
            continue
        ops += container_ops
        entries.append({"name": f"hami-{container['name']}", "resourceClaimName": claim})
        requests[claim] = {
            "container": container["name"],
            "section": "containers",
            "resources": asked,
            "annotations": {},
        }
    if not entries:
        return []
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        ops += [{"op": "add", "path": "/spec/resourceClaims/-", "value": e} for e in entries]
    else:
        ops.append({"op": "add", "path": "/spec/resourceClaims", "value": entries})
    for field, key, value in (
        ("labels", DRA_LABEL, "true"),
        ("annotations", REQUESTS_ANNOTATION, json.dumps(requests, sort_keys=True)),
    ):
        if meta.get(field):
            ops.append({"op": "add", "path": f"/metadata/{field}/{_escape(key)}", "value": value})
        else:
            ops.append({"op": "add", "path": f"/metadata/{field}", "value": {key: value}})
    ops.append({"op": "add", "path": "/spec/schedulerName", "value": scheduler_name})
    return ops


def claims_of(pod: dict[str, Any], device_class: str = DRIVER) -> list[dict[str, Any]]:
    """The ResourceClaims a translated pod needs, owned by it (re-translated from ``hami.io/dra-requests``)."""
    meta = pod["metadata"]
    requests = json.loads((meta.get("annotations") or {}).get(REQUESTS_ANNOTATION, "{}"))
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": {DRA_LABEL: "true"},
                "annotations": {POD_ANNOTATION: meta["name"]},
                "ownerReferences": [owner],
            },
            "spec": claim_spec(entry["resources"], device_class),
        }
        for name, entry in sorted(requests.items())
    ]


class StandIn:
    """The webhook and the claim controller (see the module docstring)."""

    def __init__(self, server: str, token: str, ca_file: str, scheduler_name: str, device_class: str) -> None:
        self.server, self.token, self.ca_file = server, token, ca_file
        self.scheduler_name, self.device_class = scheduler_name, device_class
        self.rng = random.Random()
        self.rng_lock = threading.Lock()
        self.queue: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: set[str] = set()

    def client(self, timeout: float | None = 30) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}", "User-Agent": AGENT}
        return httpx.Client(base_url=self.server, verify=self.ca_file, headers=headers, timeout=timeout)

    def review(self, body: dict[str, Any]) -> dict[str, Any]:
        request = body.get("request") or {}
        with self.rng_lock:
            ops = admission_patch(request.get("object") or {}, self.scheduler_name, self.rng)
        response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
        if ops:
            response |= {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(ops).encode()).decode()}
        return {
            "apiVersion": body.get("apiVersion", "admission.k8s.io/v1"),
            "kind": "AdmissionReview",
            "response": response,
        }

    def watch(self) -> None:
        params = {"watch": "1", "labelSelector": f"{DRA_LABEL}=true"}
        while True:
            try:
                with self.client(None) as http, http.stream("GET", "/api/v1/pods", params=params) as stream:
                    for line in stream.iter_lines():
                        event = json.loads(line)
                        pod = event.get("object") or {}
                        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
                        key = f"{meta.get('namespace')}/{meta.get('name')}"
                        if (
                            event.get("type") in ("ADDED", "MODIFIED")
                            and spec.get("schedulerName") == self.scheduler_name
                            and not spec.get("nodeName")
                            and key not in self.seen
                        ):
                            self.seen.add(key)
                            self.queue.put(pod)
            except httpx.HTTPError:
                time.sleep(0.2)

    def work(self) -> None:
        with self.client() as http:
            while True:
                pod = self.queue.get()
                for claim in claims_of(pod, self.device_class):
                    path = f"/apis/resource.k8s.io/v1/namespaces/{claim['metadata']['namespace']}/resourceclaims"
                    try:
                        answer = http.post(path, json=claim)
                    except httpx.HTTPError:
                        time.sleep(0.2)
                        self.queue.put(pod)
                        break
                    if not answer.is_success and answer.status_code != 409:
                        print(f"claim {claim['metadata']['name']}: {answer.status_code} {answer.text}", flush=True)


def _handler(standin: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            out = json.dumps(standin.review(body)).encode() if self.path.startswith("/webhook/dra") else b"{}"
            self.send_response(200 if self.path.startswith("/webhook/dra") else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in ("--server", "--token-file", "--ca-file", "--cert", "--key"):
        parser.add_argument(name, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--scheduler-name", default="hami-scheduler")
    parser.add_argument("--device-class", default=DRIVER)
    args = parser.parse_args(argv)
    token = Path(args.token_file).read_text().strip()
    standin = StandIn(args.server, token, args.ca_file, args.scheduler_name, args.device_class)
    threading.Thread(target=standin.watch, daemon=True).start()
    for _ in range(WORKERS):
        threading.Thread(target=standin.work, daemon=True).start()
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), _handler(standin))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    print(f"DRA stand-in serving /webhook/dra on 127.0.0.1:{args.port}", flush=True)
    httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
