"""A Binding that lands after its client gave up, against the real control plane.

kube-apiserver cancels a request whose client went away: connected directly, a Binding still in admission when
hami's client gives up (``--kube-timeout``) never lands (checked by hand with the webhook below). It does land where
something between them keeps the request going after hami's side closed (an L7 proxy or load balancer that does not
pass a client's disconnect on), or where etcd commits a write whose caller already gave up. Here a TCP relay
(``_Relay``) stands for such a proxy: it keeps each upstream connection open after the client leaves (it drops the
client's TLS close_notify, which would tell kube-apiserver). A validating admission webhook on ``pods/binding``
(``_HoldingWebhook``) holds the Binding longer than the client waits; meanwhile the pod is written, as hami's
clean-up removes the allocation of a pod it read back unbound. Sent by hami's own client with the resourceVersion
precondition hami uses (``Cycle._bind_version``), the late Binding is refused; with the UID alone (HAMi's Binding)
it binds the pod whose allocation is gone.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from hami.errors import ApiError as HamiApiError
from hami.k8s.client import ClientSettings
from hami.k8s.client import KubeClient as HamiKubeClient
from hami.k8s.config import load_kubeconfig
from tests.e2e.cluster import ApiError, ControlPlane, KubeClient, wait_until

NOBODY = "no-such-scheduler"  # kube-scheduler leaves these pods alone: the test plays its part
HOLD_S = 8.0
KUBE_TIMEOUT_S = 3.0


class _Relay:
    """TCP relay 127.0.0.1:<port> → kube-apiserver that keeps the upstream connection (and so the request on it)
    alive when the client closes its end; ``late`` is set once the upstream answers a client already gone."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.late = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            gone = threading.Event()
            threading.Thread(target=self._up, args=(client, server, gone), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, gone), daemon=True).start()

    @staticmethod
    def _up(client: socket.socket, server: socket.socket, gone: threading.Event) -> None:
        """Client → upstream, except the client's TLS close_notify (hami's TLS layer sends one when it gives up):
        passed on, it would tell kube-apiserver that the client left."""
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if _is_close_notify(data):
                    gone.set()  # the client is leaving: what the upstream answers from now on comes too late
                    client.shutdown(socket.SHUT_RDWR)  # its TLS layer need not wait for the server's close_notify
                    break
                server.sendall(data)
        gone.set()

    def _down(self, server: socket.socket, client: socket.socket, gone: threading.Event) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                if gone.is_set():
                    self.late.set()
                    continue
                with contextlib.suppress(OSError):
                    client.sendall(data)
        with contextlib.suppress(OSError):
            client.close()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()


def _is_close_notify(chunk: bytes) -> bool:
    """A lone TLS alert record: TLS 1.2 sends it as content type 21; TLS 1.3 hides it in an application-data
    record of 24 bytes (5 of header, the 2-byte alert, the inner content type, a 16-byte AEAD tag)."""
    return len(chunk) >= 5 and (chunk[0] == 21 or (chunk[0] == 23 and len(chunk) == 24))


class _HoldingWebhook:
    """A validating webhook on ``pods/binding``: allows every Binding, holding the first one of each pod named in
    ``hold`` for ``HOLD_S`` seconds; ``seen`` lists (pod, the Binding's resourceVersion) in arrival order."""

    def __init__(self, plane: ControlPlane, tmp_path: Path) -> None:
        self.hold: set[str] = set()
        self.seen: list[tuple[str, str]] = []
        self.released = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["request"]
                name = request["name"]
                first = all(seen != name for seen, _ in owner.seen)
                owner.seen.append((name, (request["object"].get("metadata") or {}).get("resourceVersion", "")))
                if first and name in owner.hold:
                    time.sleep(HOLD_S)
                    owner.released.set()
                review = {"uid": request["uid"], "allowed": True}
                body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": review})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, format: str, *args: Any) -> None:
                pass

        cert, key = plane.ca.issue_serving_cert(tmp_path, "holding-webhook")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, name="holding-webhook", daemon=True).start()

    def configuration(self, plane: ControlPlane, name: str, namespace: str) -> dict[str, Any]:
        url = f"https://127.0.0.1:{self.server.server_address[1]}/validate"
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "hold-bindings.e2e.hami.io",
                    "clientConfig": {"url": url, "caBundle": base64.b64encode(plane.ca_pem).decode()},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods/binding"],
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 20,
                }
            ],
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook(control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path) -> Iterator[_HoldingWebhook]:
    """The holding webhook, registered for this test's namespace and seen working (a probe pod's Binding)."""
    hook = _HoldingWebhook(control_plane, tmp_path)
    name = f"hold-bindings-{uuid.uuid4().hex[:8]}"
    kube.post(
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        hook.configuration(control_plane, name, namespace),
    )
    probes = iter(range(10_000))
    try:
        # A new configuration reaches the API server's admission chain after a moment.
        def probed() -> bool:
            probe = f"probe-{next(probes)}"
            kube.create_pod(namespace, probe, scheduler_name=NOBODY)
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": probe},
                "target": {"kind": "Node", "name": "nowhere"},
            }
            kube.post(f"/api/v1/namespaces/{namespace}/pods/{probe}/binding", binding)
            return any(seen == probe for seen, _ in hook.seen)

        wait_until(probed, interval=0.5, description="the holding webhook to see a Binding")
        yield hook
    finally:
        with contextlib.suppress(ApiError):
            kube.delete(f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}")
        hook.close()


@pytest.fixture
def relay(control_plane: ControlPlane) -> Iterator[_Relay]:
    host, port = httpx.URL(control_plane.server).host, httpx.URL(control_plane.server).port
    assert port is not None
    through = _Relay((host, port))
    yield through
    through.close()


def relay_kubeconfig(plane: ControlPlane, relay: _Relay, tmp_path: Path) -> Path:
    """The admin kubeconfig, pointed at the relay (kube-apiserver's certificate is for 127.0.0.1: still valid)."""
    path = tmp_path / "through-relay.kubeconfig"
    path.write_text(plane.kubeconfig.read_text().replace(plane.server, f"https://127.0.0.1:{relay.port}"))
    return path


@pytest.mark.parametrize("guarded", [True, False], ids=["with-version-precondition", "uid-only"])
async def test_a_binding_held_past_its_clients_timeout_lands_only_on_the_version_it_was_sent_for(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    webhook: _HoldingWebhook,
    relay: _Relay,
    tmp_path: Path,
    guarded: bool,
) -> None:
    """hami's client sends a Binding the webhook holds past the client's timeout; the pod is written meanwhile."""
    pod = kube.create_pod(namespace, "p1", scheduler_name=NOBODY)
    uid, version = pod["metadata"]["uid"], pod["metadata"]["resourceVersion"]
    webhook.hold.add("p1")
    settings = ClientSettings(request_timeout=KUBE_TIMEOUT_S)
    async with HamiKubeClient(load_kubeconfig(relay_kubeconfig(control_plane, relay, tmp_path)), settings) as client:
        with pytest.raises(HamiApiError) as gave_up:
            await client.create_binding(namespace, "p1", uid, "n1", version if guarded else None)
        kube.patch(f"/api/v1/namespaces/{namespace}/pods/p1", {"metadata": {"annotations": {"cleaned": "up"}}})
        async with asyncio.timeout(3 * HOLD_S):  # the loop runs meanwhile: the client's TLS close goes out
            while not relay.late.is_set():
                await asyncio.sleep(0.1)

    assert "Timeout" in str(gave_up.value)
    assert webhook.seen[-1] == ("p1", version if guarded else "")
    after = kube.get_pod(namespace, "p1")
    assert after["metadata"]["annotations"] == {"cleaned": "up"}
    assert after["spec"].get("nodeName") == (None if guarded else "n1")
