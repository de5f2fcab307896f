"""The certificate Jobs' API calls, against a scripted API server (``httpx.MockTransport``)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from hami.errors import ApiError, NotFound
from hami.server.certstore import HttpCertStore, in_cluster_client
from tests.unit.jsonpatch import apply_patch

SECRETS = "/api/v1/namespaces/hami/secrets"
WEBHOOK = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/vgpu.hami.io"


def status(code: int, message: str) -> httpx.Response:
    return httpx.Response(code, json={"kind": "Status", "code": code, "message": message})


class FakeApi:
    """Secrets in namespace ``hami`` and one MutatingWebhookConfiguration, with the verbs the store uses."""

    def __init__(self) -> None:
        self.secrets: dict[str, dict[str, Any]] = {}
        self.webhook: dict[str, Any] | None = {
            "metadata": {"name": "vgpu.hami.io"},
            "webhooks": [
                {"name": "vgpu.hami.io", "clientConfig": {"service": {"name": "hami", "namespace": "hami"}}},
                {"name": "other.hami.io", "clientConfig": {"url": "https://127.0.0.1/webhook"}},
            ],
        }
        self.requests: list[tuple[str, str, str]] = []
        self.before_patch: list[dict[str, Any]] = []  # webhook lists swapped in just before a PATCH lands

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path, request.method
        self.requests.append((method, path, request.headers.get("content-type", "")))
        assert request.headers["authorization"] == "Bearer t0ken"
        if path.startswith(SECRETS):
            return self.secret(request, path.removeprefix(SECRETS).strip("/"))
        if path == WEBHOOK:
            if self.webhook is None:
                return status(404, 'mutatingwebhookconfigurations "vgpu.hami.io" not found')
            if method == "GET":
                return httpx.Response(200, json=self.webhook)
            if self.before_patch:
                self.webhook["webhooks"] = self.before_patch.pop(0)["webhooks"]
            assert request.headers["content-type"] == "application/json-patch+json"
            try:
                self.webhook = apply_patch(self.webhook, json.loads(request.content))
            except AssertionError as err:
                return status(422, str(err))
            return httpx.Response(200, json=self.webhook)
        return status(404, "no route")

    def secret(self, request: httpx.Request, name: str) -> httpx.Response:
        if request.method == "GET":
            if name not in self.secrets:
                return status(404, f'secrets "{name}" not found')
            return httpx.Response(200, json=self.secrets[name])
        if request.method == "POST":
            body = json.loads(request.content)
            name = body["metadata"]["name"]
            if name in self.secrets:
                return status(409, f'secrets "{name}" already exists')
            self.secrets[name] = body
            return httpx.Response(201, json=body)
        if request.method == "PATCH":
            assert request.headers["content-type"] == "application/merge-patch+json"
            self.secrets[name]["data"].update(json.loads(request.content)["data"])
            return httpx.Response(200, json=self.secrets[name])
        return status(405, "method not allowed")


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def store(api: FakeApi) -> HttpCertStore:
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(api), base_url="https://api.test", headers={"Authorization": "Bearer t0ken"}
    )
    return HttpCertStore(client)


DATA = {"ca.crt": b"CA", "tls.crt": b"CERT", "tls.key": b"KEY"}


async def test_a_missing_secret_reads_as_none(store: HttpCertStore) -> None:
    assert await store.read_secret("hami", "tls") is None


async def test_a_secret_is_created_as_a_tls_secret_and_read_back(store: HttpCertStore, api: FakeApi) -> None:
    await store.write_secret("hami", "tls", DATA)
    created = api.secrets["tls"]
    assert created["type"] == "kubernetes.io/tls"
    assert created["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "hami-certs"}
    assert created["data"]["tls.key"] == base64.b64encode(b"KEY").decode()
    assert await store.read_secret("hami", "tls") == DATA


async def test_an_existing_secret_has_its_data_merge_patched(store: HttpCertStore, api: FakeApi) -> None:
    await store.write_secret("hami", "tls", DATA)
    await store.write_secret("hami", "tls", {**DATA, "tls.crt": b"NEW"})
    assert await store.read_secret("hami", "tls") == {**DATA, "tls.crt": b"NEW"}
    assert [r[0] for r in api.requests] == ["POST", "POST", "PATCH", "GET"]


async def test_ca_bundle_is_set_on_every_webhook(store: HttpCertStore, api: FakeApi) -> None:
    assert await store.set_ca_bundle("vgpu.hami.io", b"PEM") == 2
    assert api.webhook is not None
    assert [w["clientConfig"]["caBundle"] for w in api.webhook["webhooks"]] == [base64.b64encode(b"PEM").decode()] * 2
    assert api.webhook["webhooks"][0]["clientConfig"]["service"] == {"name": "hami", "namespace": "hami"}


async def test_a_webhook_list_that_changed_under_the_patch_is_read_again(store: HttpCertStore, api: FakeApi) -> None:
    assert api.webhook is not None
    reordered = {"webhooks": list(reversed(api.webhook["webhooks"]))}
    api.before_patch.append(reordered)
    assert await store.set_ca_bundle("vgpu.hami.io", b"PEM") == 2
    assert [r[0] for r in api.requests] == ["GET", "PATCH", "GET", "PATCH"]


async def test_a_missing_webhook_configuration_is_not_found(store: HttpCertStore, api: FakeApi) -> None:
    api.webhook = None
    with pytest.raises(NotFound, match=r'mutatingwebhookconfigurations "vgpu\.hami\.io" not found'):
        await store.set_ca_bundle("vgpu.hami.io", b"PEM")


async def test_a_forbidden_answer_is_an_api_error_with_the_status(api: FakeApi) -> None:
    def forbidden(request: httpx.Request) -> httpx.Response:
        return status(403, 'secrets "tls" is forbidden: User "system:serviceaccount:hami:x" cannot get resource')

    client = httpx.AsyncClient(transport=httpx.MockTransport(forbidden), base_url="https://api.test")
    with pytest.raises(ApiError, match='HTTP 403: secrets "tls" is forbidden') as caught:
        await HttpCertStore(client).read_secret("hami", "tls")
    assert caught.value.status == 403


async def test_a_transport_failure_is_an_api_error_with_status_0() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(refuse), base_url="https://api.test")
    with pytest.raises(ApiError, match="ConnectError") as caught:
        await HttpCertStore(client).read_secret("hami", "tls")
    assert caught.value.status == 0


def test_in_cluster_client_needs_the_service_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ApiError, match="KUBERNETES_SERVICE_HOST is not set"):
        in_cluster_client()


async def test_in_cluster_client_uses_the_service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import UTC, datetime

    from hami.server.certs import generate

    (tmp_path / "token").write_text("t0ken\n")
    (tmp_path / "ca.crt").write_bytes(generate(["kubernetes"], now=datetime.now(UTC)).ca_cert)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    async with in_cluster_client(tmp_path) as client:
        assert str(client.base_url) == "https://[fd00::1]:6443"
        assert client.headers["authorization"] == "Bearer t0ken"
