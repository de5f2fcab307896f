"""How to reach the API server: a kubeconfig file or the pod's service account (in-cluster).

:func:`load_config` picks the source the way kubectl and client-go do: an explicit kubeconfig path, else the
``KUBECONFIG`` variable (a ``:``-separated list, merged first-wins by entry name; one naming only missing files is
an error that names them, not a reason to read another), else the in-cluster service
account when ``KUBERNETES_SERVICE_HOST`` is set, else ``~/.kube/config``. Everything is read and checked at load
time, so a bad file fails at start-up with a :class:`~hami.errors.ConfigError` naming the file and the field.

Supported credentials: bearer token, token file (re-read by the client, so rotated service-account tokens keep
working), client certificate and key (inline data or files), ``exec`` credential plugins and the ``oidc``
auth-provider (``hami.k8s.credentials``: cached until expiry, as kubectl does). Basic auth and the other
auth-providers are refused with a clear error, not ignored.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import msgspec
import yaml

from hami.errors import ConfigError, readable_validation
from hami.k8s.credentials import CredentialSource, exec_plugin, oidc_token

__all__ = [
    "SERVICE_ACCOUNT_DIR",
    "KubeConfig",
    "load_config",
    "load_incluster_config",
    "load_kubeconfig",
]

SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True, slots=True)
class KubeConfig:
    """Where the API server is and how to authenticate. PEM material is held as bytes.

    ``token_file`` wins over ``token`` when both are set; the client re-reads it (bound service-account tokens
    rotate). ``source`` says where the configuration came from, for logs.
    """

    server: str
    ca_data: bytes | None = None
    verify: bool = True
    token: str | None = None
    token_file: Path | None = None
    client_cert: bytes | None = None
    client_key: bytes | None = None
    namespace: str = "default"
    source: str = ""
    credential: CredentialSource | None = None
    """An exec plugin or the oidc auth-provider: asked for the token on each request (it caches)."""

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context: the configured CA (else the system's), the client certificate, or no verification."""
        context = ssl.create_default_context(cadata=self.ca_data.decode("ascii") if self.ca_data else None)
        # Verify as kubectl (Go) does, the same on every Python: 3.13 adds OpenSSL's X509_STRICT to the default
        # context, which refuses cluster certificates Go accepts (a serving certificate without an Authority Key
        # Identifier). The chain, the names and the validity are checked all the same.
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.client_cert is None and self.credential is not None:
            pair = self.credential.client_pair()
            if pair is not None:
                return replace(self, client_cert=pair[0], client_key=pair[1], credential=None).ssl_context()
        if self.client_cert is not None and self.client_key is not None:
            # The ssl module loads a certificate chain only from files: write both to a private temporary
            # directory, load them, and remove them at once.
            with tempfile.TemporaryDirectory(prefix="hami-tls-") as folder:
                cert, key = Path(folder, "tls.crt"), Path(folder, "tls.key")
                cert.write_bytes(self.client_cert)
                key.touch(mode=0o600)
                key.write_bytes(self.client_key)
                try:
                    context.load_cert_chain(cert, key)
                except ssl.SSLError as exc:
                    raise ConfigError(f"{self.source}: client certificate", "<pem>", f"cannot load: {exc}") from None
        return context


# --- kubeconfig file schema (only what hami reads) --------------------------------------------------------


class _Cluster(msgspec.Struct, rename="kebab"):
    server: str = ""
    certificate_authority: str | None = None
    certificate_authority_data: str | None = None
    insecure_skip_tls_verify: bool = False


class _User(msgspec.Struct, rename=lambda name: "tokenFile" if name == "token_file" else name.replace("_", "-")):
    token: str | None = None
    token_file: str | None = None
    client_certificate: str | None = None
    client_certificate_data: str | None = None
    client_key: str | None = None
    client_key_data: str | None = None
    username: str | None = None
    exec: dict[str, Any] | None = None
    auth_provider: dict[str, Any] | None = None


class _Context(msgspec.Struct):
    cluster: str = ""
    user: str = ""
    namespace: str = ""


class _NamedCluster(msgspec.Struct):
    name: str
    cluster: _Cluster = msgspec.field(default_factory=_Cluster)


class _NamedUser(msgspec.Struct):
    name: str
    user: _User = msgspec.field(default_factory=_User)


class _NamedContext(msgspec.Struct):
    name: str
    context: _Context = msgspec.field(default_factory=_Context)


class _File(msgspec.Struct, rename="kebab"):
    clusters: list[_NamedCluster] | None = None
    users: list[_NamedUser] | None = None
    contexts: list[_NamedContext] | None = None
    current_context: str = ""


def _read_file(path: Path) -> _File:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), None, f"cannot read kubeconfig: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), None, f"not valid YAML: {exc}") from None
    try:
        return msgspec.convert(data, type=_File)
    except msgspec.ValidationError as exc:
        reason, where = readable_validation(str(exc))
        raise ConfigError(f"{path}: {where}" if where else str(path), None, reason) from None


class _Merged:
    """Several kubeconfig files merged first-wins by name; each entry remembers the file it came from."""

    def __init__(self) -> None:
        self.clusters: dict[str, tuple[_Cluster, Path]] = {}
        self.users: dict[str, tuple[_User, Path]] = {}
        self.contexts: dict[str, tuple[_Context, Path]] = {}
        self.current_context = ""
        self.files: list[Path] = []

    def add(self, path: Path, data: _File) -> None:
        self.files.append(path)
        for c in data.clusters or []:
            self.clusters.setdefault(c.name, (c.cluster, path))
        for u in data.users or []:
            self.users.setdefault(u.name, (u.user, path))
        for x in data.contexts or []:
            self.contexts.setdefault(x.name, (x.context, path))
        self.current_context = self.current_context or data.current_context


def _b64(field: str, value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(field, value, "not valid base64") from None


def _file_bytes(field: str, base: Path, value: str) -> bytes:
    path = Path(value).expanduser()
    path = path if path.is_absolute() else base.parent / path  # relative to the kubeconfig, as kubectl does
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(field, value, f"cannot read {path}: {exc.strerror}") from None


def load_kubeconfig(path: str | Path | list[Path], *, context: str | None = None) -> KubeConfig:
    """Load one kubeconfig file (or several, merged first-wins) for ``context`` (default: current-context)."""
    merged = _Merged()
    for p in path if isinstance(path, list) else [Path(path)]:
        merged.add(p, _read_file(p))
    where = ", ".join(str(p) for p in merged.files)
    name = context or merged.current_context
    if not name:
        raise ConfigError(f"{where}: current-context", None, "no context selected and current-context is empty")
    if name not in merged.contexts:
        raise ConfigError(f"{where}: contexts", name, "context not found")
    ctx, ctx_file = merged.contexts[name]
    if ctx.cluster not in merged.clusters:
        raise ConfigError(f"{ctx_file}: contexts[{name}].context.cluster", ctx.cluster, "cluster not found")
    cluster, cluster_file = merged.clusters[ctx.cluster]
    cfield = f"{cluster_file}: clusters[{ctx.cluster}].cluster"
    if not cluster.server.startswith(("https://", "http://")):
        raise ConfigError(f"{cfield}.server", cluster.server, "must be an http(s) URL")
    ca = _inline_or_file(
        f"{cfield}.certificate-authority",
        cluster_file,
        cluster.certificate_authority_data,
        cluster.certificate_authority,
    )
    user, user_file = merged.users.get(ctx.user, (_User(), ctx_file))
    ufield = f"{user_file}: users[{ctx.user}].user"
    credential = _credential_source(user, user_file, ufield, cluster, ca)
    cert, key, token_file = _credentials(user, user_file, ufield)
    return KubeConfig(
        server=cluster.server.rstrip("/"),
        ca_data=ca,
        verify=not cluster.insecure_skip_tls_verify,
        token=user.token or None,
        token_file=token_file,
        client_cert=cert,
        client_key=key,
        namespace=ctx.namespace or "default",
        source=f"kubeconfig {where}, context {name}",
        credential=credential,
    )


def _inline_or_file(field: str, origin: Path, data: str | None, path: str | None) -> bytes | None:
    """``<field>-data`` (base64) if set, else the file ``<field>`` names (relative to ``origin``), else None."""
    if data:
        return _b64(f"{field}-data", data)
    if path:
        return _file_bytes(field, origin, path)
    return None


def _credential_source(
    user: _User, user_file: Path, ufield: str, cluster: _Cluster, ca: bytes | None
) -> CredentialSource | None:
    """The user's ``exec`` plugin or ``oidc`` auth-provider, if any (basic auth is refused, as kubectl does)."""
    if user.username is not None:
        raise ConfigError(f"{ufield}.username", user.username, "basic auth is not supported by hami (nor by kubectl)")
    if user.exec is not None:
        info: dict[str, object] = {
            "server": cluster.server,
            "insecure-skip-tls-verify": cluster.insecure_skip_tls_verify,
        }
        if ca is not None:
            info["certificate-authority-data"] = base64.b64encode(ca).decode()
        return exec_plugin(user.exec, ufield, user_file, info)
    if user.auth_provider is not None:
        return oidc_token(user.auth_provider, ufield)
    return None


def _credentials(user: _User, user_file: Path, ufield: str) -> tuple[bytes | None, bytes | None, Path | None]:
    """The user's client certificate, key and token file (a token is read as is)."""
    cert = _inline_or_file(
        f"{ufield}.client-certificate", user_file, user.client_certificate_data, user.client_certificate
    )
    key = _inline_or_file(f"{ufield}.client-key", user_file, user.client_key_data, user.client_key)
    if (cert is None) != (key is None):
        missing = "client-key" if key is None else "client-certificate"
        raise ConfigError(f"{ufield}.{missing}", None, "a client certificate needs both certificate and key")
    token_file = None
    if user.token_file:
        _file_bytes(f"{ufield}.tokenFile", user_file, user.token_file)  # readable now, re-read later
        token_file = Path(user.token_file).expanduser()
        token_file = token_file if token_file.is_absolute() else user_file.parent / token_file
    return cert, key, token_file


def load_incluster_config(*, env: Mapping[str, str] = os.environ, root: Path = SERVICE_ACCOUNT_DIR) -> KubeConfig:
    """The pod's own service account: ``KUBERNETES_SERVICE_HOST``/``_PORT``, ``token``, ``ca.crt``, ``namespace``."""
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError("KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT", f"{host}:{port}", "not running in a pod")
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    token = root / "token"
    if not token.is_file():
        raise ConfigError(str(token), None, "service-account token not found")
    ca_path = root / "ca.crt"
    ca = _file_bytes(str(ca_path), ca_path, str(ca_path)) if ca_path.exists() else None
    ns_path = root / "namespace"
    namespace = ns_path.read_text().strip() if ns_path.is_file() else "default"
    return KubeConfig(
        server=f"https://{host}:{port}",
        ca_data=ca,
        token_file=token,
        namespace=namespace or "default",
        source="in-cluster service account",
    )


def load_config(
    kubeconfig: str | Path | None = None,
    *,
    context: str | None = None,
    env: Mapping[str, str] = os.environ,
    home: Path | None = None,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> KubeConfig:
    """Explicit kubeconfig > ``KUBECONFIG`` > in-cluster > ``~/.kube/config`` (see the module docstring)."""
    if kubeconfig:
        return load_kubeconfig(Path(kubeconfig), context=context)
    listed = [Path(p).expanduser() for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    existing = [p for p in listed if p.exists()]
    if existing:
        return load_kubeconfig(existing, context=context)
    if listed:  # kubectl's habit: a KUBECONFIG that names only missing files is not passed over for another
        names = os.pathsep.join(str(p) for p in listed)
        raise ConfigError("KUBECONFIG", names, "no such file: the kubeconfig it names does not exist")
    if env.get("KUBERNETES_SERVICE_HOST"):
        return load_incluster_config(env=env, root=service_account_dir)
    default = (home or Path.home()) / ".kube" / "config"
    if default.exists():
        return load_kubeconfig(default, context=context)
    raise ConfigError(
        "kubeconfig", str(default), "no kubeconfig found (none given, KUBECONFIG unset or missing, not in a pod)"
    )
