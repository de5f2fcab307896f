"""HTTPS with a certificate that can change under a running server (spec §2.1: "certs are hot-reloaded").

``CertificateReloader`` hands the server one ``ssl.SSLContext``. When the certificate, the key or the client
CA file changes, a fresh context is built from the files, and the served context's ``sni_callback`` (which
OpenSSL runs on every ClientHello, with or without a server name) moves each new handshake onto it: new
connections present the new certificate and trust only the new CA; connections already open keep theirs. No
restart, no dropped listener.

Every context speaks TLS 1.2 or 1.3 with AEAD suites only: for TLS 1.2, ECDHE key exchange with AES-GCM or
ChaCha20-Poly1305 (no CBC, no static RSA key exchange); TLS 1.3 suites are all AEAD. With a client CA file the
peer must present a certificate that chains to it (mutual TLS).

A change is noticed by a file's identity (``st_mtime_ns``, ``st_size``, ``st_ino``, following symlinks), so
the atomic symlink swap kubelet uses to update a mounted Secret counts as a change. Files that do not load
— the key written before the certificate, say — are logged and retried on the next tick while the old context
keeps serving; nothing is recorded as loaded until a load succeeds.

Use with uvicorn::

    tls = CertificateReloader(cert_file, key_file)
    config = uvicorn.Config(app, host=..., port=..., ssl_context_factory=tls.context_factory)
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(tls.watch(interval=10.0))
        tasks.create_task(uvicorn.Server(config).serve())
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

__all__ = ["AEAD_CIPHERS", "CertificateReloader", "server_context"]

log = logging.getLogger("hami.tls")

AEAD_CIPHERS: Final = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL"
"""OpenSSL's TLS 1.2 cipher list: ECDHE with AES-GCM or ChaCha20-Poly1305 (TLS 1.3 suites are set apart, all AEAD)."""

_Identity = tuple[int, int, int]


def _identity(path: Path) -> _Identity:
    st = os.stat(path)  # follows symlinks: a swapped ..data link changes the target's inode
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def server_context(cert_file: Path, key_file: Path, client_ca_file: Path | None = None) -> ssl.SSLContext:
    """A server context: TLS 1.2+, AEAD suites, this certificate; with ``client_ca_file``, client certificates
    signed by that CA are required."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(AEAD_CIPHERS)
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file is not None:
        context.load_verify_locations(cafile=client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class CertificateReloader:
    """The server-side ``SSLContext`` of one listener, kept in step with its certificate, key and client CA files."""

    def __init__(
        self,
        cert_file: str | os.PathLike[str],
        key_file: str | os.PathLike[str],
        client_ca_file: str | os.PathLike[str] | None = None,
    ) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.client_ca_file = Path(client_ca_file) if client_ca_file else None
        self.reloads = 0
        # the first load must work: a server without a certificate cannot start
        self._stamp = self._stamp_now()
        self.context = self._build()
        self.context.sni_callback = self._use_current
        self._current = self.context

    def _files(self) -> list[Path]:
        return [self.cert_file, self.key_file, *([self.client_ca_file] if self.client_ca_file else [])]

    def _stamp_now(self) -> tuple[_Identity, ...]:
        return tuple(_identity(path) for path in self._files())

    def _build(self) -> ssl.SSLContext:
        return server_context(self.cert_file, self.key_file, self.client_ca_file)

    def _use_current(self, connection: Any, server_name: str | None, context: ssl.SSLContext) -> None:
        if self._current is not context:
            connection.context = self._current

    def reload_if_changed(self) -> bool:
        """Load the files again if any changed since the last good load; True when a new context is in use.

        A failed load (files missing, half written, key not matching, a CA file that is no certificate) is
        logged and returns False; new connections keep getting the previous context.
        """
        try:
            stamp = self._stamp_now()
            if stamp == self._stamp:
                return False
            fresh = self._build()
        except (OSError, ssl.SSLError) as err:
            names = " / ".join(str(path) for path in self._files())
            log.warning("TLS files %s not reloaded (keeping the old ones): %s", names, err)
            return False
        self._stamp = stamp
        self._current = fresh
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", self.cert_file)
        return True

    async def watch(self, interval: float = 10.0, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        """Check the files every ``interval`` seconds until cancelled (``sleep`` is injectable for tests)."""
        while True:
            await sleep(interval)
            self.reload_if_changed()

    def context_factory(self, config: Any, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        """For ``uvicorn.Config(ssl_context_factory=...)``: always this reloader's served context."""
        return self.context
