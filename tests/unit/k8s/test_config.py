from __future__ import annotations

import base64
import ssl
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hami.errors import ApiError, ConfigError
from hami.k8s.client import KubeClient
from hami.k8s.config import KubeConfig, load_config, load_incluster_config, load_kubeconfig
from hami.k8s.resources import NODES
from hami.protocol.objects import Node
from tests.unit.k8s.certs import make_pki
from tests.unit.k8s.fakeapi import serve

PKI = make_pki()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(
    tmp_path: Path,
    *,
    cluster: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    current: str = "dev",
    name: str = "config",
    namespace: str = "gpu",
) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "clusters": [{"name": "c1", "cluster": cluster or {"server": "https://10.0.0.1:6443"}}],
        "users": [{"name": "u1", "user": user or {"token": "abc"}}],
        "contexts": [
            {"name": "dev", "context": {"cluster": "c1", "user": "u1", "namespace": namespace}},
            {"name": "other", "context": {"cluster": "c1", "user": "nobody"}},
        ],
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_token_and_inline_ca_from_the_current_context(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, cluster={"server": "https://10.0.0.1:6443/", "certificate-authority-data": b64(b"CA")})
    config = load_kubeconfig(path)
    assert config == KubeConfig(
        server="https://10.0.0.1:6443",
        ca_data=b"CA",
        token="abc",
        namespace="gpu",
        source=f"kubeconfig {path}, context dev",
    )


def test_files_are_resolved_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(PKI.ca.cert)
    (tmp_path / "pki" / "c.crt").write_bytes(PKI.client.cert)
    (tmp_path / "pki" / "c.key").write_bytes(PKI.client.key)
    (tmp_path / "tok").write_text("from-file")
    path = kubeconfig(
        tmp_path,
        cluster={"server": "https://h:1", "certificate-authority": "pki/ca.crt", "insecure-skip-tls-verify": False},
        user={"client-certificate": "pki/c.crt", "client-key": str(tmp_path / "pki" / "c.key"), "tokenFile": "tok"},
    )
    config = load_kubeconfig(path)
    assert (config.ca_data, config.client_cert, config.client_key) == (PKI.ca.cert, PKI.client.cert, PKI.client.key)
    assert config.token_file == tmp_path / "tok"
    context = config.ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname


def test_insecure_skip_tls_verify_turns_verification_off(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, cluster={"server": "https://h:1", "insecure-skip-tls-verify": True})
    context = load_kubeconfig(path).ssl_context()
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_NONE, False)


@pytest.mark.parametrize(
    ("kwargs", "field", "reason"),
    [
        ({"current": ""}, "current-context", "no context selected"),
        ({"current": "nope"}, "contexts", "context not found (got 'nope')"),
        ({"cluster": {"server": "10.0.0.1"}}, "clusters[c1].cluster.server", "must be an http(s) URL"),
        (
            {"cluster": {"server": "https://h", "certificate-authority-data": "%%%"}},
            "clusters[c1].cluster.certificate-authority-data",
            "not valid base64",
        ),
        (
            {"cluster": {"server": "https://h", "certificate-authority": "missing.crt"}},
            "certificate-authority",
            "cannot read",
        ),
        ({"user": {"client-certificate-data": b64(b"x")}}, "users[u1].user.client-key", "needs both"),
        ({"user": {"exec": {"command": "aws"}}}, "users[u1].user.exec.apiVersion", "must be one of"),
        ({"user": {"auth-provider": {"name": "gcp"}}}, "users[u1].user.auth-provider.name", "gke-gcloud-auth-plugin"),
        ({"user": {"token": 5}}, "users[0].user.token", "expected a string or null, got an integer"),
    ],
    ids=[
        "no-current-context",
        "unknown-context",
        "server-not-a-url",
        "bad-base64",
        "missing-ca-file",
        "cert-without-key",
        "exec-plugin-without-api-version",
        "removed-gcp-provider",
        "wrong-type",
    ],
)
def test_errors_name_the_file_and_the_field(tmp_path: Path, kwargs: dict[str, Any], field: str, reason: str) -> None:
    path = kubeconfig(tmp_path, **kwargs)
    with pytest.raises(ConfigError) as caught:
        load_kubeconfig(path)
    assert caught.value.field.startswith(str(path))
    assert field in caught.value.field
    assert reason in str(caught.value)


def test_unreadable_and_invalid_files_are_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read kubeconfig"):
        load_kubeconfig(tmp_path / "absent")
    (tmp_path / "bad").write_text("clusters: [")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_kubeconfig(tmp_path / "bad")


def test_an_explicit_context_is_used_and_a_missing_user_means_no_credentials(tmp_path: Path) -> None:
    config = load_kubeconfig(kubeconfig(tmp_path), context="other")
    assert (config.token, config.client_cert, config.namespace) == (None, None, "default")


def test_kubeconfig_env_lists_are_merged_first_wins(tmp_path: Path) -> None:
    first = tmp_path / "a"
    first.write_text(yaml.safe_dump({"current-context": "dev", "users": [{"name": "u1", "user": {"token": "mine"}}]}))
    second = kubeconfig(tmp_path, name="b", current="other")
    env = {"KUBECONFIG": f"{tmp_path / 'missing'}:{first}:{second}"}
    config = load_config(env=env, home=tmp_path)
    assert (config.server, config.token) == ("https://10.0.0.1:6443", "mine")


def service_account(tmp_path: Path) -> Path:
    root = tmp_path / "sa"
    root.mkdir()
    (root / "token").write_text("sa-token")
    (root / "ca.crt").write_bytes(PKI.ca.cert)
    (root / "namespace").write_text("hami-system\n")
    return root


def test_in_cluster_config_from_the_service_account(tmp_path: Path) -> None:
    root = service_account(tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    config = load_incluster_config(env=env, root=root)
    assert config == KubeConfig(
        server="https://[fd00::1]:443",
        ca_data=PKI.ca.cert,
        token_file=root / "token",
        namespace="hami-system",
        source="in-cluster service account",
    )


def test_in_cluster_needs_the_service_env_and_token(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not running in a pod"):
        load_incluster_config(env={}, root=tmp_path)
    with pytest.raises(ConfigError, match="service-account token not found"):
        load_incluster_config(env={"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"}, root=tmp_path)


def test_load_config_order_explicit_env_in_cluster_home(tmp_path: Path) -> None:
    (tmp_path / "home" / ".kube").mkdir(parents=True)
    home_config = kubeconfig(tmp_path / "home" / ".kube")
    root = service_account(tmp_path)
    in_cluster = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    explicit = kubeconfig(tmp_path, name="explicit", cluster={"server": "https://explicit:1"})
    home = tmp_path / "home"
    assert load_config(explicit, env=in_cluster, home=home).server == "https://explicit:1"
    assert load_config(env=in_cluster, home=home, service_account_dir=root).server == "https://10.96.0.1:443"
    assert load_config(env={}, home=home).source == f"kubeconfig {home_config}, context dev"
    with pytest.raises(ConfigError, match="no kubeconfig found"):
        load_config(env={}, home=tmp_path / "nowhere")
    # a KUBECONFIG naming a missing file is named in the error, never passed over for ~/.kube/config
    with pytest.raises(ConfigError, match=r"^KUBECONFIG: no such file.*'/x'"):
        load_config(env={"KUBECONFIG": "/x", **in_cluster}, home=home, service_account_dir=root)


async def test_tls_with_the_configured_ca_and_client_certificate(tmp_path: Path) -> None:
    """A real TLS handshake: the server checks our client certificate, we check its certificate against the CA."""
    for name, data in [
        ("ca.crt", PKI.ca.cert),
        ("server.crt", PKI.server.cert),
        ("server.key", PKI.server.key),
    ]:
        (tmp_path / name).write_bytes(data)

    async def node(request: Request) -> JSONResponse:
        return JSONResponse({"metadata": {"name": request.path_params["name"]}})

    app = Starlette(routes=[Route("/api/v1/nodes/{name}", node)])
    tls = {
        "ssl_certfile": str(tmp_path / "server.crt"),
        "ssl_keyfile": str(tmp_path / "server.key"),
        "ssl_ca_certs": str(tmp_path / "ca.crt"),
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
    }
    async with serve(app, tls) as url:
        user = {"client-certificate-data": b64(PKI.client.cert), "client-key-data": b64(PKI.client.key)}
        cluster = {"server": url, "certificate-authority-data": b64(PKI.ca.cert)}
        config = load_kubeconfig(kubeconfig(tmp_path, cluster=cluster, user=user))
        async with KubeClient(config) as kube:
            assert (await kube.get(NODES, "gpu-1", type=Node)).metadata.name == "gpu-1"
        # Without the client certificate the server refuses the handshake.
        async with KubeClient(KubeConfig(server=url, ca_data=PKI.ca.cert)) as anonymous:
            with pytest.raises(ApiError) as caught:
                await anonymous.get(NODES, "gpu-1", type=Node)
            assert caught.value.status == 0
