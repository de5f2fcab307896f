"""Exec credential plugins (real scripts, run as kubectl runs them) and the oidc auth-provider."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from hami.errors import ConfigError
from hami.k8s.config import load_kubeconfig
from hami.k8s.credentials import EXPIRY_SLACK_S, ExecPlugin, OidcToken
from tests.unit.k8s.test_config import kubeconfig

PLUGIN = """#!{python}
import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
with open({log!r}, "a") as log:
    log.write(json.dumps({{"info": info, "env": os.environ.get("HAMI_TEST_ENV"), "args": sys.argv[1:]}}) + "\\n")
status = {status}
print(json.dumps({{"apiVersion": {version!r}, "kind": "ExecCredential", "status": status}}))
"""


def write_plugin(tmp_path: Path, status: dict[str, Any], version: str = "client.authentication.k8s.io/v1") -> Path:
    script = tmp_path / "bin" / "plugin"
    script.parent.mkdir(exist_ok=True)
    script.write_text(
        PLUGIN.format(python=sys.executable, log=str(tmp_path / "calls.log"), status=repr(status), version=version)
    )
    script.chmod(0o755)
    return script


def calls(tmp_path: Path) -> list[dict[str, Any]]:
    log = tmp_path / "calls.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def exec_user(version: str = "client.authentication.k8s.io/v1", **extra: Any) -> dict[str, Any]:
    return {
        "exec": {
            "apiVersion": version,
            "command": "./bin/plugin",  # relative to the kubeconfig's folder, as kubectl resolves it
            "args": ["get-token", "--cluster", "c1"],
            "env": [{"name": "HAMI_TEST_ENV", "value": "set-by-kubeconfig"}],
            "interactiveMode": "Never",
            **extra,
        }
    }


@pytest.mark.parametrize("version", ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"])
def test_exec_plugin_token_is_fetched_once_and_cached_without_expiry(tmp_path: Path, version: str) -> None:
    write_plugin(tmp_path, {"token": "from-plugin"}, version)
    config = load_kubeconfig(kubeconfig(tmp_path, user=exec_user(version, provideClusterInfo=True)))
    assert calls(tmp_path) == []  # nothing runs until a token is needed
    assert config.credential is not None
    assert config.credential.token() == "from-plugin"
    assert config.credential.token() == "from-plugin"
    (call,) = calls(tmp_path)
    assert call["args"] == ["get-token", "--cluster", "c1"]
    assert call["env"] == "set-by-kubeconfig"
    assert call["info"] == {
        "apiVersion": version,
        "kind": "ExecCredential",
        "spec": {
            "interactive": False,
            "cluster": {"server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": False},
        },
    }


def test_exec_token_is_fetched_again_when_it_expires_or_after_a_401(tmp_path: Path) -> None:
    write_plugin(tmp_path, {"token": "t", "expirationTimestamp": "2030-01-01T00:00:00Z"})
    config = load_kubeconfig(kubeconfig(tmp_path, user=exec_user()))
    plugin = config.credential
    assert isinstance(plugin, ExecPlugin)
    expiry = 1893456000.0  # 2030-01-01T00:00:00Z
    now = [expiry - 3600]
    plugin.clock = lambda: now[0]
    plugin.token()
    plugin.token()
    assert len(calls(tmp_path)) == 1
    now[0] = expiry - EXPIRY_SLACK_S + 1  # about to expire: fetched again
    plugin.token()
    assert len(calls(tmp_path)) == 2
    plugin.invalidate()  # the API server said 401
    plugin.token()
    assert len(calls(tmp_path)) == 3


def test_exec_client_certificate_pair(tmp_path: Path) -> None:
    write_plugin(tmp_path, {"clientCertificateData": "CERT", "clientKeyData": "KEY"})
    config = load_kubeconfig(kubeconfig(tmp_path, user=exec_user()))
    assert config.credential is not None
    assert config.credential.client_pair() == (b"CERT", b"KEY")
    assert config.credential.token() is None


@pytest.mark.parametrize(
    ("status", "version_printed", "reason"),
    [
        ({}, None, "neither token nor client certificate"),
        ({"clientCertificateData": "C"}, None, "without its key"),
        ({"token": "t"}, "client.authentication.k8s.io/v1beta1", "expected client.authentication.k8s.io/v1"),
        ({"token": "t", "expirationTimestamp": "tomorrow"}, None, "not an RFC 3339 time"),
    ],
    ids=["empty-status", "cert-without-key", "wrong-api-version", "bad-expiry"],
)
def test_bad_plugin_output_is_a_clear_error(
    tmp_path: Path, status: dict[str, Any], version_printed: str | None, reason: str
) -> None:
    write_plugin(tmp_path, status, version_printed or "client.authentication.k8s.io/v1")
    config = load_kubeconfig(kubeconfig(tmp_path, user=exec_user()))
    assert config.credential is not None
    with pytest.raises(ConfigError, match=reason) as caught:
        config.credential.token()
    assert "users[u1].user.exec.command" in caught.value.field


def test_failing_or_missing_plugin_names_the_command_and_the_hint(tmp_path: Path) -> None:
    script = tmp_path / "bin" / "plugin"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\necho 'no session' >&2\nexit 3\n")
    script.chmod(0o755)
    config = load_kubeconfig(kubeconfig(tmp_path, user=exec_user(installHint="install it with: make plugin")))
    assert config.credential is not None
    with pytest.raises(ConfigError, match=r"exited with status 3 \(install it with: make plugin\)"):
        config.credential.token()
    missing = exec_user()
    missing["exec"]["command"] = "hami-no-such-plugin"
    config = load_kubeconfig(kubeconfig(tmp_path, user=missing, name="missing"))
    assert config.credential is not None
    with pytest.raises(ConfigError, match="not found"):
        config.credential.token()


@pytest.mark.parametrize(
    ("exec_block", "field", "reason"),
    [
        ({"apiVersion": "client.authentication.k8s.io/v1", "command": "x"}, "interactiveMode", "required for v1"),
        (
            {"apiVersion": "client.authentication.k8s.io/v1", "command": "x", "interactiveMode": "Sometimes"},
            "interactiveMode",
            "Never, IfAvailable or Always",
        ),
        ({"apiVersion": "client.authentication.k8s.io/v1beta1"}, "command", "a command is required"),
        (
            {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "x", "env": [{"name": "A"}]},
            "env[0]",
            "name and a value",
        ),
    ],
    ids=["v1-needs-interactive-mode", "unknown-interactive-mode", "no-command", "env-without-value"],
)
def test_exec_block_is_checked_at_load(tmp_path: Path, exec_block: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason) as caught:
        load_kubeconfig(kubeconfig(tmp_path, user={"exec": exec_block}))
    assert caught.value.field.endswith(f"users[u1].user.exec.{field}")


def test_interactive_only_plugin_is_refused(tmp_path: Path) -> None:
    write_plugin(tmp_path, {"token": "t"})
    config = load_kubeconfig(kubeconfig(tmp_path, user=exec_user(interactiveMode="Always")))
    assert config.credential is not None
    with pytest.raises(ConfigError, match="needs a terminal"):
        config.credential.token()
    assert calls(tmp_path) == []


def jwt(claims: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


def test_oidc_id_token_is_sent_until_it_expires(tmp_path: Path) -> None:
    token = jwt({"iss": "https://idp", "exp": 2000000000})
    user = {"auth-provider": {"name": "oidc", "config": {"id-token": token, "refresh-token": "r", "client-id": "k"}}}
    config = load_kubeconfig(kubeconfig(tmp_path, user=user))
    source = config.credential
    assert isinstance(source, OidcToken)
    source.clock = lambda: 1999999999.0
    assert source.token() == token
    source.clock = lambda: 2000000000.0
    with pytest.raises(ConfigError, match=r"expired at .*log in again") as caught:
        source.token()
    assert caught.value.field.endswith("users[u1].user.auth-provider.config.id-token")


@pytest.mark.parametrize(
    ("provider", "reason"),
    [
        ({"name": "oidc", "config": {}}, "missing: log in first"),
        ({"name": "oidc", "config": {"id-token": "not-a-jwt"}}, "not a JWT"),
        ({"name": "azure"}, "kubelogin"),
        ({"name": "openstack"}, "only the oidc provider"),
    ],
    ids=["no-id-token", "not-a-jwt", "azure-removed", "unknown-provider"],
)
def test_auth_provider_errors(tmp_path: Path, provider: dict[str, Any], reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        load_kubeconfig(kubeconfig(tmp_path, user={"auth-provider": provider}))
