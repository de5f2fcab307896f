"""HTTPS with a certificate that can change under a running server (spec §2.1: "certs are hot-reloaded").

``CertificateReloader`` owns one ``ssl.SSLContext``. The server keeps using that same object; when the
certificate or key file changes, ``load_cert_chain`` is called on it again, and every TLS handshake after
that presents the new certificate (connections already open keep theirs). No restart, no dropped listener.

A change is noticed by a file's identity (``st_mtime_ns``, ``st_size``, ``st_ino``, following symlinks), so
the atomic symlink swap kubelet uses to update a mounted Secret counts as a change. A pair that does not load
— the key written before the certificate, say — is logged and retried on the next tick while the old pair
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
from typing import Any

__all__ = ["CertificateReloader"]

log = logging.getLogger("hami.tls")

_Stamp = tuple[tuple[int, int, int], tuple[int, int, int]]


def _identity(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)  # follows symlinks: a swapped ..data link changes the target's inode
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class CertificateReloader:
    """One server-side ``SSLContext`` kept in step with a certificate file and a key file."""

    def __init__(self, cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.reloads = 0
        self._stamp: _Stamp | None = None
        self._load()  # the first load must work: a server without a certificate cannot start

    def _stamp_now(self) -> _Stamp:
        return (_identity(self.cert_file), _identity(self.key_file))

    def _load(self) -> None:
        stamp = self._stamp_now()
        self.context.load_cert_chain(self.cert_file, self.key_file)
        self._stamp = stamp

    def reload_if_changed(self) -> bool:
        """Load the files again if either changed since the last good load; True when a new pair is loaded.

        A failed load (files missing, half written, key not matching) is logged and returns False; the
        context keeps its previous certificate.
        """
        try:
            stamp = self._stamp_now()
            if stamp == self._stamp:
                return False
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as err:
            log.warning("TLS certificate %s / key %s not reloaded (keeping the old pair): %s",
                        self.cert_file, self.key_file, err)  # fmt: skip
            return False
        self._stamp = stamp
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", self.cert_file)
        return True

    async def watch(self, interval: float = 10.0, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        """Check the files every ``interval`` seconds until cancelled (``sleep`` is injectable for tests)."""
        while True:
            await sleep(interval)
            self.reload_if_changed()

    def context_factory(self, config: Any, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        """For ``uvicorn.Config(ssl_context_factory=...)``: always this reloader's context."""
        return self.context
