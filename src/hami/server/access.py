"""Who may call which listener: the extender's client authentication, metrics' review, and loading the TLS files.

hami serves three listeners (see docs/security.md):

* the **extender** (``--extender-bind``: ``/filter``, ``/bind``, ``/healthz``, ``/readyz``), loopback-only by
  default, because kube-scheduler runs in the same pod. Listening beyond loopback needs a client authentication:
  client certificates chained to ``--extender-client-ca-file`` (checked in the TLS handshake, see
  :mod:`hami.server.tls`) and/or a bearer token from ``--extender-token-file`` (checked here, on ``/filter`` and
  ``/bind``; health stays open). With both, a call must pass both.
* the **Service** listener (``--http_bind``): ``/webhook`` and health; ``/filter`` and ``/bind`` answer 404.
* **metrics** (``--metrics-bind-address``): with ``--metrics-secure``, TLS and a bearer token that the API
  server says may ``get`` ``/metrics`` (:class:`~hami.k8s.reviews.AccessReviewer`).

:func:`load_transport` reads every file at start-up and turns any problem into a
:class:`~hami.errors.ConfigError` naming the flag and the file, so a half-configured server never starts.
"""

from __future__ import annotations

import hmac
import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

from hami.config import SchedulerSettings
from hami.errors import ApiError, ConfigError
from hami.k8s.reviews import Access, AccessReviewer
from hami.server.tls import CertificateReloader, server_context

__all__ = ["BearerTokenGate", "MetricsGate", "TokenFile", "Transport", "load_transport"]

log = logging.getLogger("hami.access")

OPEN_PATHS: Final = frozenset({"/healthz", "/readyz"})
"""Paths a gate lets through without credentials: probes learn nothing from them."""


class TokenFile:
    """The bearer tokens in a file (one a line; blank lines and surrounding spaces ignored), re-read when the
    file changes. A re-read that fails or finds no token keeps the tokens read before (and logs why)."""

    def __init__(self, path: str | os.PathLike[str], flag: str = "--extender-token-file") -> None:
        self.path = Path(path)
        self.flag = flag
        try:
            self._stamp = self._stat()
            self._tokens = self._read()
        except OSError as err:
            raise ConfigError(flag, str(path), f"cannot read the token file: {err.strerror or err}") from None
        if not self._tokens:
            raise ConfigError(flag, str(path), "the token file holds no token (one token a line)")

    def _stat(self) -> tuple[int, int, int]:
        st = os.stat(self.path)
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _read(self) -> tuple[bytes, ...]:
        lines = self.path.read_bytes().splitlines()
        return tuple(line.strip() for line in lines if line.strip())

    def _refresh(self) -> None:
        try:
            stamp = self._stat()
            if stamp == self._stamp:
                return
            tokens = self._read()
        except OSError as err:
            log.warning("%s %s not re-read (keeping the tokens read before): %s", self.flag, self.path, err)
            return
        if not tokens:
            log.warning("%s %s holds no token now (keeping the tokens read before)", self.flag, self.path)
            return
        self._stamp, self._tokens = stamp, tokens
        log.info("%s %s re-read: %d token(s)", self.flag, self.path, len(tokens))

    def matches(self, presented: str) -> bool:
        """Whether ``presented`` is one of the tokens; each comparison takes the same time whatever matches."""
        self._refresh()
        given = presented.encode()
        found = False
        for token in self._tokens:
            found |= hmac.compare_digest(given, token)
        return found


def bearer_token(scope: Scope) -> str:
    """The token of an ``Authorization: Bearer <token>`` header, or ""."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


async def _answer(send: Send, status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = (text + "\n").encode()
    head = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head + (headers or [])})
    await send({"type": "http.response.body", "body": body})


_CHALLENGE: Final = [(b"www-authenticate", b'Bearer realm="hami"')]


class BearerTokenGate:
    """ASGI middleware: every path but health needs ``Authorization: Bearer`` with a token of ``tokens``."""

    def __init__(self, app: ASGIApp, tokens: TokenFile) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        token = bearer_token(scope)
        if not token or not self.tokens.matches(token):
            client = scope.get("client")
            log.warning("extender call to %s from %s refused: %s", scope["path"], client and client[0],
                        "no bearer token" if not token else "unknown bearer token")  # fmt: skip
            await _answer(send, 401, "a valid bearer token is required (Authorization: Bearer <token>)", _CHALLENGE)
            return
        await self.app(scope, receive, send)


class MetricsGate:
    """ASGI middleware for the metrics listener: 401 without a token the API server accepts, 403 when its user
    may not ``get`` the path (RBAC ``nonResourceURLs``), 503 when the API server cannot be asked."""

    def __init__(self, app: ASGIApp, reviewer: AccessReviewer) -> None:
        self.app = app
        self.reviewer = reviewer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            access = await self.reviewer.check(bearer_token(scope))
        except ApiError as err:
            log.warning("metrics: cannot review the caller's token: %s", err)
            await _answer(send, 503, "cannot check the bearer token with the API server; try again")
            return
        if access is Access.UNAUTHENTICATED:
            await _answer(send, 401, "a bearer token the API server accepts is required", _CHALLENGE)
        elif access is Access.FORBIDDEN:
            await _answer(send, 403, f"forbidden: the token's user may not {self.reviewer.verb} {self.reviewer.path}")
        else:
            await self.app(scope, receive, send)


@dataclass(frozen=True)
class Transport:
    """What each listener serves with: TLS contexts (None: plain HTTP) and the extender's token file."""

    service_tls: CertificateReloader | None
    extender_tls: CertificateReloader | None
    metrics_tls: CertificateReloader | None
    extender_tokens: TokenFile | None

    def reloaders(self) -> list[CertificateReloader]:
        found: list[CertificateReloader] = []
        for tls in (self.service_tls, self.extender_tls, self.metrics_tls):
            if tls is not None and all(tls is not seen for seen in found):
                found.append(tls)
        return found


def _check_loads(flag: str, path: str, what: str, load: Callable[[], object]) -> None:
    try:
        load()
    except (OSError, ssl.SSLError) as err:
        reason = str(err) if isinstance(err, ssl.SSLError) else err.strerror or str(err)
        raise ConfigError(flag, path, f"cannot load {what}: {reason}") from None


def load_transport(settings: SchedulerSettings) -> Transport:
    """Load the certificate, client CA and token files the settings name; a problem is a ConfigError."""
    s = settings
    tls = ca_tls = None
    if s.cert_file:
        cert, key = Path(s.cert_file), Path(s.key_file)
        what = f"it with --key_file {s.key_file} (a PEM certificate chain and its PEM private key)"
        _check_loads("--cert_file", s.cert_file, what, lambda: server_context(cert, key))
        tls = CertificateReloader(cert, key)
        if s.extender_client_ca_file:
            ca = s.extender_client_ca_file
            _check_loads(
                "--extender-client-ca-file",
                ca,
                "it (PEM CA certificates)",
                lambda: ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(cafile=ca),
            )
            ca_tls = CertificateReloader(cert, key, ca)
    tokens = TokenFile(s.extender_token_file) if s.extender_token_file else None
    return Transport(
        service_tls=tls,
        extender_tls=ca_tls or tls,
        metrics_tls=tls if s.metrics_secure else None,
        extender_tokens=tokens,
    )
