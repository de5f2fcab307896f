"""A lean HTTP/1.1 client for the API server's small request/response exchanges (issue 19 item 2).

Measured on this project's machine, one request through ``httpx.AsyncClient`` costs the client about 0.9 ms of CPU
(0.6 ms through ``httpcore`` alone) — about half of hami's CPU per scheduled pod, which sends five (annotation
PATCH, lock PATCH, Binding, two events). This client writes the request line and headers itself and reads the
response with ``asyncio`` streams: about 0.05 ms. It serves ``KubeClient``'s plain requests and its watches
(:meth:`WireClient.stream`: every scheduled pod brings several watch events, and reading them through httpx cost
hami more CPU than anything else it does per pod); paged lists stay on httpx.

Scope, deliberately small: keep-alive connections to one server (TLS with the kubeconfig's context), bodies sent
with ``Content-Length``, responses read by ``Content-Length``, chunked encoding or until the server closes. Failures
are raised as the httpx exceptions ``KubeClient`` already maps (so its retry rules do not change): a connection that
could not be opened is ``httpx.ConnectError``/``ConnectTimeout`` (nothing was sent), a request past its time
``httpx.ReadTimeout``, a connection lost after the request went out ``httpx.RemoteProtocolError``. An idle
connection the server has closed is noticed before it is reused (it is at EOF) and dropped; one that breaks while
the request is written, before any of the response, is retried once on a new connection only for a GET (as Go's
transport does: a write's fate would be unknown).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncGenerator, Awaitable, Mapping
from urllib.parse import urlencode, urlsplit

import httpx

__all__ = ["Headers", "WireClient", "WireResponse", "WireStream"]

IDLE_S = 30.0
"""An idle connection older than this is closed rather than reused (servers close idle ones after a while)."""


class Headers(dict[str, str]):
    """Response headers, looked up without regard to case (names are kept lower-cased)."""

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name.lower() if isinstance(name, str) else name)

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(name.lower(), default)


class WireResponse:
    """Status, headers and body of one response."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: Headers, content: bytes) -> None:
        self.status_code, self.headers, self.content = status_code, headers, content


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.idle_since = time.monotonic()

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing() and time.monotonic() - self.idle_since < IDLE_S

    def close(self) -> None:
        self.writer.close()


class WireClient:
    """Pooled HTTP/1.1 connections to ``server`` (``https://host:port[/prefix]`` or ``http://…``)."""

    def __init__(
        self,
        server: str,
        context: ssl.SSLContext | None,
        headers: Mapping[str, str],
        *,
        connect_timeout: float,
        request_timeout: float | None,
        max_connections: int,
    ) -> None:
        url = urlsplit(server)
        self.host = url.hostname or ""
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.prefix = url.path.rstrip("/")
        self.context = context if url.scheme == "https" else None
        authority = url.netloc.rsplit("@", 1)[-1]
        self._fixed = f"Host: {authority}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.connect_timeout, self.request_timeout = connect_timeout, request_timeout
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(max_connections)

    async def aclose(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> WireResponse:
        target = self.prefix + path + ("?" + urlencode(params) if params else "")
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        length = f"Content-Length: {len(content)}\r\n" if content is not None else ""
        head = f"{method} {target} HTTP/1.1\r\n{self._fixed}{extra}{length}\r\n".encode("latin-1")
        message = head + content if content else head
        async with self._slots:
            try:
                async with asyncio.timeout(self.request_timeout):
                    return await self._exchange(method, message)
            except TimeoutError:
                raise httpx.ReadTimeout(f"{method} {target}: no response within {self.request_timeout}s") from None

    async def _exchange(self, method: str, message: bytes) -> WireResponse:
        conn, reused = await self._connection()
        try:
            response, keep = await _send(conn, message, method)
        except (OSError, asyncio.IncompleteReadError, _Untouched) as exc:
            if not (reused and method == "GET" and not isinstance(exc, asyncio.IncompleteReadError)):
                raise httpx.RemoteProtocolError(f"connection lost: {exc!r}") from None
            conn, _ = await self._connection(fresh=True)
            try:
                response, keep = await _send(conn, message, method)
            except (OSError, asyncio.IncompleteReadError, _Untouched) as again:
                raise httpx.RemoteProtocolError(f"connection lost: {again!r}") from None
        if keep:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()
        return response

    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        read_timeout: float,
    ) -> WireStream:
        """Send a request on a connection of its own and return once the response's head has arrived (within
        ``request_timeout``); the body is then read piece by piece (a watch), each piece within ``read_timeout``.
        Close the stream when done: its connection is never reused."""
        target = self.prefix + path + ("?" + urlencode(params) if params else "")
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        message = f"{method} {target} HTTP/1.1\r\n{self._fixed}{extra}\r\n".encode("latin-1")
        conn, _ = await self._connection(fresh=True)
        try:
            async with asyncio.timeout(self.request_timeout):
                conn.writer.write(message)
                await conn.writer.drain()
                _, status, response_headers = await _read_head(conn.reader)
        except TimeoutError:
            conn.close()
            raise httpx.ReadTimeout(f"{method} {target}: no response within {self.request_timeout}s") from None
        except (OSError, asyncio.IncompleteReadError, _Untouched) as exc:
            conn.close()
            raise httpx.RemoteProtocolError(f"connection lost: {exc!r}") from None
        except BaseException:
            conn.close()
            raise
        return WireStream(conn, status, response_headers, read_timeout)

    async def _connection(self, fresh: bool = False) -> tuple[_Connection, bool]:
        while self._idle and not fresh:
            conn = self._idle.pop()
            if conn.usable():
                return conn, True
            conn.close()
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self.context, server_hostname=self.host if self.context else None
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {self.host}:{self.port} timed out") from None
        except OSError as exc:
            raise httpx.ConnectError(f"connecting to {self.host}:{self.port}: {exc}") from None
        return _Connection(reader, writer), False


async def _send(conn: _Connection, message: bytes, method: str) -> tuple[WireResponse, bool]:
    """Write the request and read its response; the connection is closed on any failure or cancellation."""
    try:
        conn.writer.write(message)
        await conn.writer.drain()
        return await _read_response(conn.reader, method)
    except BaseException:
        conn.close()
        raise


class WireStream:
    """A response whose body is read as it arrives (see :meth:`WireClient.stream`). Failures while reading are
    raised as httpx's: ``ReadTimeout`` after ``read_timeout`` without a byte, ``RemoteProtocolError`` for a broken
    connection or a malformed chunk."""

    def __init__(self, conn: _Connection, status_code: int, headers: Headers, read_timeout: float) -> None:
        self._conn = conn
        self.status_code, self.headers = status_code, headers
        self.read_timeout = read_timeout

    async def _timed(self, read: Awaitable[bytes]) -> bytes:
        try:
            async with asyncio.timeout(self.read_timeout):
                return await read
        except TimeoutError:
            raise httpx.ReadTimeout(f"no data within {self.read_timeout}s") from None
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            raise httpx.RemoteProtocolError(f"stream broken: {exc!r}") from None

    async def chunks(self) -> AsyncGenerator[bytes]:
        """The body's pieces as they arrive (chunked, by ``Content-Length``, or until the server closes); ends
        with the body."""
        reader = self._conn.reader
        if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
            while True:
                line = await self._timed(reader.readuntil(b"\r\n"))
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise httpx.RemoteProtocolError(f"malformed chunk size {line[:40]!r}") from None
                if size == 0:
                    return  # trailers are not read: the connection is closed, never reused
                yield (await self._timed(reader.readexactly(size + 2)))[:-2]
        elif "content-length" in self.headers:
            yield await self._timed(reader.readexactly(int(self.headers["content-length"])))
        else:
            while piece := await self._timed(reader.read(1 << 16)):
                yield piece

    async def aread(self) -> bytes:
        return b"".join([piece async for piece in self.chunks()])

    def close(self) -> None:
        self._conn.close()


class _Untouched(Exception):
    """The connection ended before a single byte of the response arrived."""


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, int, Headers]:
    """The status line's version and code, and the headers (names lower-cased)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise _Untouched from None
        raise
    except asyncio.LimitOverrunError:
        raise httpx.RemoteProtocolError("response headers too long") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise httpx.RemoteProtocolError(f"not an HTTP/1.x response: {lines[0][:80]!r}")
    headers = Headers()
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return parts[0], int(parts[1]), headers


async def _read_response(reader: asyncio.StreamReader, method: str) -> tuple[WireResponse, bool]:
    """One response; and whether the connection can be reused."""
    version, status, headers = await _read_head(reader)
    keep = version == "HTTP/1.1" and (headers.get("connection") or "").lower() != "close"
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        body = b""
    elif "chunked" in (headers.get("transfer-encoding") or "").lower():
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        body = await reader.read()
        keep = False
    return WireResponse(status, headers, body), keep


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out: list[bytes] = []
    while True:
        line = await reader.readuntil(b"\r\n")
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers, then the blank line
                pass
            return b"".join(out)
        out.append((await reader.readexactly(size + 2))[:-2])
