"""The control plane calls an https admission webhook on 127.0.0.1 whose cert comes from its CA.

This checks the fixture's wiring (MutatingAdmissionWebhook on, ``ca.issue_serving_cert``, loopback
reachable), with a throw-away webhook written here; hami's own webhook has its own tests.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import ApiError, ControlPlane, KubeClient, wait_until

PROBE_LABEL = "hami-e2e/webhook-probe"


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        # The probe pods have no annotations, so the whole map is added.
        patch = [{"op": "add", "path": "/metadata/annotations", "value": {"hami-e2e/mutated": "yes"}}]
        body = json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {
                    "uid": review["request"]["uid"],
                    "allowed": True,
                    "patchType": "JSONPatch",
                    "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
                },
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass


@pytest.fixture
def webhook_port(control_plane: ControlPlane, tmp_path: Path) -> Iterator[int]:
    cert, key = control_plane.ca.issue_serving_cert(tmp_path, "probe-webhook")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_mutating_webhook_on_loopback_is_called(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, webhook_port: int
) -> None:
    name = f"probe-{uuid.uuid4().hex[:8]}"
    kube.post(
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "probe.e2e.hami.io",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{webhook_port}/mutate",
                        "caBundle": base64.b64encode(control_plane.ca_pem).decode(),
                    },
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ],
                    "objectSelector": {"matchLabels": {PROBE_LABEL: "yes"}},
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 10,
                }
            ],
        },
    )
    attempts = iter(range(10_000))
    try:
        # A new configuration reaches the API server's admission chain after a moment: create probe
        # pods until one comes back mutated.
        def mutated_probe() -> dict[str, Any] | None:
            pod = kube.create_pod(namespace, f"probe-{next(attempts)}", labels={PROBE_LABEL: "yes"})
            annotations = pod["metadata"].get("annotations") or {}
            return pod if annotations.get("hami-e2e/mutated") == "yes" else None

        pod = wait_until(mutated_probe, interval=0.5, description="the probe webhook to mutate a pod")
        assert pod["metadata"]["labels"][PROBE_LABEL] == "yes"
    finally:
        with contextlib.suppress(ApiError):
            kube.delete(f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}")
