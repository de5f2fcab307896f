"""``CertStore`` on the Kubernetes API, for the chart's certificate Jobs (``hami certs --secret ...``).

Three calls over one ``httpx.AsyncClient`` (so tests use ``httpx.MockTransport``): read a Secret, create it
(or merge-patch its data when it exists), and set ``caBundle`` on every webhook of a
MutatingWebhookConfiguration with a JSON patch whose ``test`` operations pin each webhook's name to its index
(a concurrent edit makes the patch fail instead of writing the CA into the wrong entry; it is then retried).

``in_cluster_client`` builds the client from the pod's service account — all a Job needs.
"""

# TODO(lead): k8s — once hami.k8s (KubeClient, load_config) is merged, build this on it (kubeconfig support
# included) instead of the minimal in-cluster loader below.

from __future__ import annotations

import base64
import os
import ssl
from pathlib import Path
from typing import Any, Final

import httpx
import msgspec

from hami.errors import ApiError, Conflict, NotFound

__all__ = ["SERVICE_ACCOUNT_DIR", "HttpCertStore", "in_cluster_client"]

SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_WEBHOOKS: Final = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
_RETRIES: Final = 3


def _secret_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/secrets"
    return f"{base}/{name}" if name else base


def _fail(response: httpx.Response, what: str) -> ApiError:
    try:
        message = str(msgspec.json.decode(response.content).get("message") or response.text)
    except (msgspec.DecodeError, AttributeError):
        message = response.text
    text = f"{what}: HTTP {response.status_code}: {message}"
    if response.status_code == 404:
        return NotFound(text, 404)
    if response.status_code == 409:
        return Conflict(text, 409)
    return ApiError(text, response.status_code)


class HttpCertStore:
    """Secrets and webhook configurations through the API server at the client's ``base_url``."""

    def __init__(self, client: httpx.AsyncClient, labels: dict[str, str] | None = None) -> None:
        self.client = client
        self.labels = labels or {"app.kubernetes.io/managed-by": "hami-certs"}

    async def _send(self, method: str, path: str, what: str, **kwargs: Any) -> httpx.Response:
        try:
            return await self.client.request(method, path, **kwargs)
        except httpx.HTTPError as err:
            raise ApiError(f"{what}: {type(err).__name__}: {err}") from err

    async def read_secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        what = f"get secret {namespace}/{name}"
        response = await self._send("GET", _secret_path(namespace, name), what)
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise _fail(response, what)
        data = msgspec.json.decode(response.content).get("data") or {}
        return {key: base64.b64decode(value) for key, value in data.items()}

    async def write_secret(self, namespace: str, name: str, data: dict[str, bytes]) -> None:
        encoded = {key: base64.b64encode(value).decode("ascii") for key, value in data.items()}
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "labels": self.labels},
            "type": "kubernetes.io/tls",
            "data": encoded,
        }
        what = f"create secret {namespace}/{name}"
        response = await self._send("POST", _secret_path(namespace), what, json=body)
        if response.status_code in (200, 201):
            return
        if response.status_code != 409:
            raise _fail(response, what)
        what = f"update secret {namespace}/{name}"
        response = await self._send(
            "PATCH",
            _secret_path(namespace, name),
            what,
            content=msgspec.json.encode({"data": encoded}),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        if response.status_code != 200:
            raise _fail(response, what)

    async def set_ca_bundle(self, webhook_configuration: str, ca_bundle: bytes) -> int:
        path = f"{_WEBHOOKS}/{webhook_configuration}"
        value = base64.b64encode(ca_bundle).decode("ascii")
        for attempt in range(_RETRIES):
            what = f"get mutatingwebhookconfiguration {webhook_configuration}"
            response = await self._send("GET", path, what)
            if response.status_code != 200:
                raise _fail(response, what)
            webhooks = msgspec.json.decode(response.content).get("webhooks") or []
            ops: list[dict[str, Any]] = []
            for i, webhook in enumerate(webhooks):
                ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": webhook.get("name")})
                ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": value})
            if not ops:
                return 0
            what = f"patch mutatingwebhookconfiguration {webhook_configuration}"
            response = await self._send(
                "PATCH",
                path,
                what,
                content=msgspec.json.encode(ops),
                headers={"Content-Type": "application/json-patch+json"},
            )
            if response.status_code == 200:
                return len(webhooks)
            if response.status_code not in (409, 422, 500) or attempt == _RETRIES - 1:
                raise _fail(response, what)  # 422/500: a test op failed, the list changed: read again
        raise AssertionError("unreachable")


def in_cluster_client(directory: Path = SERVICE_ACCOUNT_DIR, timeout: float = 30.0) -> httpx.AsyncClient:
    """An API client authenticated as the pod's service account (``KUBERNETES_SERVICE_HOST``/``_PORT``)."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ApiError("not running in a cluster: KUBERNETES_SERVICE_HOST is not set")
    if ":" in host:
        host = f"[{host}]"
    try:
        token = (directory / "token").read_text().strip()
        context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT  # as kubectl verifies, on every Python (KubeConfig.ssl_context)
    except OSError as err:
        raise ApiError(f"cannot read the service account in {directory}: {err}") from err
    return httpx.AsyncClient(
        base_url=f"https://{host}:{port}",
        verify=context,
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        timeout=timeout,
    )
