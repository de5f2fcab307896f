"""The listening side of hami's HTTP servers: sockets bound before anything else starts, and a uvicorn protocol
that closes connections which do not deliver a whole request in time.

:func:`listen` binds every listener at start-up, before the API is touched, so a port already in use (or one
the process may not bind) ends ``hami scheduler`` at once with one line naming the flag and the address, and
exit status :data:`EXIT_CANNOT_LISTEN`, instead of a traceback after the caches have started.

:func:`guarded_h11` is uvicorn's HTTP/1.1 protocol with a read deadline. uvicorn closes an idle keep-alive
connection after ``timeout_keep_alive`` but waits for ever for the rest of a request it has started to read, so a
client sending half a header or half a body (slowloris) holds a connection and its memory for good. Here a
request must arrive completely — request line, headers and body — within ``timeout`` seconds of its first byte
(of the connection, for the first request); otherwise the connection is closed. Handling time is not counted:
the deadline ends when the request has been read.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Final

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from hami.errors import CannotListen

__all__ = ["EXIT_CANNOT_LISTEN", "REQUEST_READ_TIMEOUT", "GuardedH11", "guarded_h11", "listen"]

EXIT_CANNOT_LISTEN: Final = 3
"""Exit status of ``hami scheduler`` when a listener cannot be bound (2 is a configuration error)."""
REQUEST_READ_TIMEOUT: Final = 10.0
"""Seconds a client has to send a whole request. kube-scheduler and kube-apiserver send theirs at once; the
largest allowed body (a 7 MiB AdmissionReview) takes milliseconds on a cluster network."""
BACKLOG: Final = 2048  # uvicorn's default


def listen(bind: str, flag: str, host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening; ``flag`` and ``bind`` name it in the error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on sockets that name it, and the
    # connections accepted here inherit the protocol. With Nagle on, an answer's body (written after its headers)
    # waited for the client's delayed ACK: about 40 ms an answer.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as err:
        sock.close()
        raise CannotListen(f"cannot listen on {bind} ({flag}): {err.strerror or err}") from None
    return sock


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol closing a connection whose request is not read completely within ``read_timeout``."""

    read_timeout: float = REQUEST_READ_TIMEOUT
    _read_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.DONE:
            self._disarm()  # read completely: handling it is not limited here
        elif self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._read_deadline is None:
            self._read_deadline = self.loop.call_later(self.read_timeout, self._read_timed_out)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _read_timed_out(self) -> None:
        self._read_deadline = None
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
            self.transport.close()


def guarded_h11(timeout: float = REQUEST_READ_TIMEOUT) -> type[H11Protocol]:
    """:class:`GuardedH11` with a read deadline of ``timeout`` seconds (uvicorn takes a protocol class)."""
    return type("GuardedH11", (GuardedH11,), {"read_timeout": timeout})
