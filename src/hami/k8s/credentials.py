"""Kubeconfig users whose credentials come from elsewhere: ``exec`` plugins and the ``oidc`` auth-provider.

**exec** (client.authentication.k8s.io/v1 and v1beta1, as kubectl runs them): the command (a path with a
separator is relative to the kubeconfig's folder, a bare name is looked up on ``PATH``) runs with hami's
environment plus the configured ``env``, and ``KUBERNETES_EXEC_INFO`` holding an ``ExecCredential`` whose
``spec.interactive`` is false (hami never hands a plugin the terminal; a plugin configured with
``interactiveMode: Always`` is refused with a clear error) and, with ``provideClusterInfo``, ``spec.cluster``. Its
standard error goes to hami's. It must print an ``ExecCredential`` of the same apiVersion whose ``status`` holds a
``token`` or a ``clientCertificateData``/``clientKeyData`` pair, and may give ``expirationTimestamp``. The
credential is cached until that time (for the process's life without one) and fetched again when it has expired
or when the API server answers 401. A client certificate is read when the client is made (a new process picks up
a rotated one). The plugin runs synchronously, in the request that needs the credential (as in client-go): with
a cached credential that is once per expiry.

**auth-provider ``oidc``**: the ``id-token`` is sent as the bearer token. Its ``exp`` claim is read (the token is
not verified: the API server does that); an expired token is an error that says to log in again. hami does not
refresh OIDC tokens itself: that would mean writing a new token into the user's kubeconfig, which kubectl's
login helpers (``kubectl oidc-login``, ``kubelogin``) do as exec plugins — the supported way. Other providers
(``gcp``, ``azure``) were removed from kubectl in 1.26 and are refused with the name of the exec plugin that
replaced them.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from hami.errors import ConfigError

__all__ = ["EXEC_API_VERSIONS", "CredentialSource", "ExecPlugin", "OidcToken", "exec_plugin", "oidc_token"]

EXEC_API_VERSIONS: Final = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
_INTERACTIVE_MODES: Final = ("Never", "IfAvailable", "Always")
EXEC_TIMEOUT_S: Final = 60.0
"""How long a plugin may run: long enough for a cloud CLI to fetch a token over the network."""
EXPIRY_SLACK_S: Final = 10.0
"""A credential is fetched again this long before it expires, so a request never carries one that lapses in flight."""

_REPLACED: Final = {
    "gcp": "gke-gcloud-auth-plugin (an exec plugin)",
    "azure": "kubelogin (an exec plugin)",
}


class CredentialSource:
    """Where a client's credential comes from when it is not in the kubeconfig itself."""

    def token(self) -> str | None:
        """The bearer token to send now (None: no token from this source)."""
        raise NotImplementedError

    def client_pair(self) -> tuple[bytes, bytes] | None:
        """PEM certificate and key for TLS client authentication, or None."""
        return None

    def invalidate(self) -> None:
        """The API server refused the credential (401): fetch a new one next time."""


@dataclass
class ExecPlugin(CredentialSource):
    """One kubeconfig user's exec plugin and its cached credential (thread-safe)."""

    origin: str
    api_version: str
    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    interactive_mode: str = "IfAvailable"
    install_hint: str = ""
    cluster: Mapping[str, Any] | None = None
    clock: Callable[[], float] = time.time
    _token: str | None = None
    _pair: tuple[bytes, bytes] | None = None
    _expires: float | None = None
    _fetched: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _fresh(self) -> bool:
        return self._fetched and (self._expires is None or self.clock() < self._expires - EXPIRY_SLACK_S)

    def _ensure(self) -> None:
        with self._lock:
            if not self._fresh():
                self._run()

    def token(self) -> str | None:
        self._ensure()
        return self._token

    def client_pair(self) -> tuple[bytes, bytes] | None:
        self._ensure()
        return self._pair

    def invalidate(self) -> None:
        with self._lock:
            self._fetched = False

    def _run(self) -> None:
        if self.interactive_mode == "Always":
            raise ConfigError(
                f"{self.origin}.interactiveMode",
                "Always",
                "the plugin needs a terminal; hami runs plugins non-interactively",
            )
        spec: dict[str, Any] = {"interactive": False}
        if self.cluster is not None:
            spec["cluster"] = dict(self.cluster)
        info = {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": json.dumps(info)}
        hint = f" ({self.install_hint.strip()})" if self.install_hint.strip() else ""
        try:
            done = subprocess.run(  # the user's own kubeconfig names the command, as for kubectl
                [self.command, *self.args],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=None,
                timeout=EXEC_TIMEOUT_S,
                check=False,
            )
        except FileNotFoundError:
            raise ConfigError(f"{self.origin}.command", self.command, f"not found{hint}") from None
        except PermissionError:
            raise ConfigError(f"{self.origin}.command", self.command, "not executable") from None
        except subprocess.TimeoutExpired:
            raise ConfigError(
                f"{self.origin}.command", self.command, f"gave no credential in {EXEC_TIMEOUT_S:.0f} s"
            ) from None
        if done.returncode != 0:
            raise ConfigError(f"{self.origin}.command", self.command, f"exited with status {done.returncode}{hint}")
        self._accept(done.stdout)

    def _accept(self, stdout: bytes) -> None:
        where = f"{self.origin}.command"
        try:
            cred = json.loads(stdout)
        except ValueError:
            raise ConfigError(where, self.command, "did not print an ExecCredential (not JSON)") from None
        if not isinstance(cred, dict) or cred.get("kind") != "ExecCredential":
            raise ConfigError(where, self.command, "did not print an ExecCredential (kind is missing or another)")
        if cred.get("apiVersion") != self.api_version:
            raise ConfigError(
                where, self.command, f"printed apiVersion {cred.get('apiVersion')!s}, expected {self.api_version}"
            )
        status = cred.get("status") or {}
        token = status.get("token") or None
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if bool(cert) != bool(key):
            raise ConfigError(where, self.command, "printed a client certificate without its key (or a key alone)")
        if not token and not cert:
            raise ConfigError(
                where, self.command, "printed an ExecCredential with neither token nor client certificate"
            )
        expires = status.get("expirationTimestamp")
        self._expires = _parse_time(expires, f"{where}: status.expirationTimestamp") if expires else None
        self._token = token
        self._pair = (str(cert).encode(), str(key).encode()) if cert else None
        self._fetched = True


def _parse_time(value: object, where: str) -> float:
    if not isinstance(value, str):
        raise ConfigError(where, value, "not an RFC 3339 time")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ConfigError(where, value, "not an RFC 3339 time") from None


def exec_plugin(raw: Mapping[str, Any], ufield: str, kubeconfig: Path, cluster: Mapping[str, Any] | None) -> ExecPlugin:
    """Check a kubeconfig ``exec`` block (``ufield`` names it in errors) and make its plugin."""
    where = f"{ufield}.exec"
    version = raw.get("apiVersion")
    if version not in EXEC_API_VERSIONS:
        raise ConfigError(f"{where}.apiVersion", version, f"must be one of {', '.join(EXEC_API_VERSIONS)}")
    args = raw.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}.args", args, "must be a list of strings")
    hint = raw.get("installHint") or ""
    return ExecPlugin(
        origin=where,
        api_version=version,
        command=_exec_command(raw, where, kubeconfig),
        args=tuple(args),
        env=_exec_env(raw, where),
        interactive_mode=_interactive_mode(raw, where, version),
        install_hint=hint if isinstance(hint, str) else "",
        cluster=cluster if raw.get("provideClusterInfo") else None,
    )


def _exec_command(raw: Mapping[str, Any], where: str, kubeconfig: Path) -> str:
    """The plugin's command: a path with a separator is relative to the kubeconfig (as kubectl resolves it), a
    bare name is looked up on ``PATH``."""
    command = raw.get("command")
    if not isinstance(command, str) or not command:
        raise ConfigError(f"{where}.command", command, "a command is required")
    if os.sep in command and not os.path.isabs(command):
        return str(kubeconfig.parent / command)
    if os.sep not in command:
        return shutil.which(command) or command
    return command


def _exec_env(raw: Mapping[str, Any], where: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for i, item in enumerate(raw.get("env") or []):
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or not isinstance(item.get("value"), str)
        ):
            raise ConfigError(f"{where}.env[{i}]", item, "must have a name and a value (strings)")
        env[item["name"]] = item["value"]
    return env


def _interactive_mode(raw: Mapping[str, Any], where: str, version: str) -> str:
    mode = raw.get("interactiveMode")
    if mode is None:
        if version == EXEC_API_VERSIONS[0]:
            raise ConfigError(f"{where}.interactiveMode", None, "required for v1: Never, IfAvailable or Always")
        mode = "IfAvailable"
    if mode not in _INTERACTIVE_MODES:
        raise ConfigError(f"{where}.interactiveMode", mode, "must be Never, IfAvailable or Always")
    return str(mode)


@dataclass
class OidcToken(CredentialSource):
    """The ``oidc`` auth-provider's id-token, refused once expired (see the module docstring)."""

    origin: str
    id_token: str
    expires: float | None
    clock: Callable[[], float] = time.time

    def token(self) -> str | None:
        if self.expires is not None and self.clock() >= self.expires:
            at = datetime.fromtimestamp(self.expires).astimezone().isoformat(timespec="seconds")
            raise ConfigError(
                f"{self.origin}.config.id-token",
                "<expired>",
                f"expired at {at}; log in again (kubectl oidc-login, or your identity provider's tool) — hami does "
                "not refresh OIDC tokens",
            )
        return self.id_token


def _jwt_expiry(token: str, where: str) -> float | None:
    parts = token.split(".")
    if len(parts) != 3:
        raise ConfigError(where, "<id-token>", "not a JWT (expected three dot-separated parts)")
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        raise ConfigError(where, "<id-token>", "its payload is not base64url JSON") from None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) else None


def oidc_token(raw: Mapping[str, Any], ufield: str) -> OidcToken:
    """Check a kubeconfig ``auth-provider`` block and make its credential source."""
    where = f"{ufield}.auth-provider"
    name = raw.get("name")
    if name != "oidc":
        replaced = _REPLACED.get(str(name))
        why = f"removed from kubectl in 1.26; use {replaced}" if replaced else "hami supports only the oidc provider"
        raise ConfigError(f"{where}.name", name, why)
    config = raw.get("config") or {}
    token = config.get("id-token") if isinstance(config, dict) else None
    if not isinstance(token, str) or not token:
        raise ConfigError(f"{where}.config.id-token", None, "missing: log in first (kubectl oidc-login)")
    return OidcToken(where, token, _jwt_expiry(token, f"{where}.config.id-token"))
