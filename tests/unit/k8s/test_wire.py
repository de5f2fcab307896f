"""The lean HTTP/1.1 client (``hami.k8s.wire``) against a real loopback server: bodies by length, chunked and until
close, keep-alive reuse, a server that closed an idle connection, a connection lost mid-response, timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from hami.errors import ApiError
from hami.k8s.client import KubeClient
from hami.k8s.config import KubeConfig
from hami.k8s.wire import WireClient

Handler = Callable[[bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


class Server:
    """A loopback HTTP/1.1 server answering each request with ``handler`` (False: close the connection)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length) if length else b""
                self.requests.append(head + body)
                if not await self.handler(head, reader, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[tuple[Server, WireClient]]]]:
    servers: list[asyncio.Server] = []
    handlers: list[Server] = []
    clients: list[WireClient] = []

    async def start(handler: Handler) -> tuple[Server, WireClient]:
        server = Server(handler)
        handlers.append(server)
        listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
        servers.append(listener)
        port = listener.sockets[0].getsockname()[1]
        client = WireClient(
            f"http://127.0.0.1:{port}/prefix",
            None,
            {"Accept": "application/json"},
            connect_timeout=2,
            request_timeout=0.5,
            max_connections=4,
        )
        clients.append(client)
        return server, client

    yield start
    for c in clients:
        await c.aclose()
    for s in servers:
        s.close()
    for h in handlers:
        for w in h.writers:
            w.close()
    await asyncio.sleep(0.05)  # the transports finish closing


def reply(body: bytes, *, chunked: bool = False, close: bool = False, status: str = "200 OK") -> Handler:
    async def handler(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        headers = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        if close:
            headers += "Connection: close\r\n"
        if chunked:
            half = len(body) // 2
            payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:half], body[half:]) if p) + b"0\r\n\r\n"
            writer.write((headers + "Transfer-Encoding: chunked\r\n\r\n").encode() + payload)
        else:
            writer.write((headers + f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
        await writer.drain()
        return not close

    return handler


async def test_a_request_carries_its_line_headers_and_body_and_the_connection_is_reused(serve) -> None:  # type: ignore[no-untyped-def]
    server, client = await serve(reply(b'{"kind":"Pod"}'))
    first = await client.request(
        "PATCH",
        "/api/v1/pods/p",
        params={"labelSelector": "a in (x,y)"},
        content=b'{"a":1}',
        headers={"Content-Type": "application/merge-patch+json"},
    )
    second = await client.request("GET", "/api/v1/pods/p")
    assert (first.status_code, first.content, first.headers["content-type"]) == (
        200,
        b'{"kind":"Pod"}',
        "application/json",
    )
    assert second.content == b'{"kind":"Pod"}'
    assert server.connections == 1
    head = server.requests[0].decode()
    assert head.startswith("PATCH /prefix/api/v1/pods/p?labelSelector=a+in+%28x%2Cy%29 HTTP/1.1\r\n")
    assert "\r\nHost: 127.0.0.1:" in head
    assert "\r\nContent-Type: application/merge-patch+json\r\n" in head
    assert head.endswith('\r\nContent-Length: 7\r\n\r\n{"a":1}')


async def test_chunked_and_closing_responses(serve) -> None:  # type: ignore[no-untyped-def]
    body = b"x" * 10000
    _, client = await serve(reply(body, chunked=True))
    assert (await client.request("GET", "/a")).content == body
    server2, client2 = await serve(reply(b"bye", close=True))
    assert (await client2.request("POST", "/b", content=b"{}")).content == b"bye"
    assert (await client2.request("POST", "/b", content=b"{}")).content == b"bye"
    assert server2.connections == 2  # Connection: close is honoured


async def test_an_error_status_is_a_response(serve) -> None:  # type: ignore[no-untyped-def]
    _, client = await serve(reply(b'{"kind":"Status","code":409}', status="409 Conflict"))
    response = await client.request("POST", "/x", content=b"{}")
    assert (response.status_code, response.content) == (409, b'{"kind":"Status","code":409}')


async def test_an_idle_connection_the_server_closed_is_not_reused(serve) -> None:  # type: ignore[no-untyped-def]
    closing = reply(b"ok", close=False)

    async def once_then_close(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await closing(head, reader, writer)
        return False  # closes after answering, without saying so

    server, client = await serve(once_then_close)
    assert (await client.request("POST", "/a", content=b"{}")).content == b"ok"
    await asyncio.sleep(0.05)  # the close reaches the client
    assert (await client.request("POST", "/a", content=b"{}")).content == b"ok"
    assert server.connections == 2


async def test_a_connection_lost_mid_response_and_a_silent_server(serve) -> None:  # type: ignore[no-untyped-def]
    async def half(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc")
        await writer.drain()
        return False

    _, client = await serve(half)
    with pytest.raises(httpx.RemoteProtocolError):
        await client.request("POST", "/a", content=b"{}")

    async def silent(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await reader.read()  # until the client gives up and closes
        return False

    _, slow = await serve(silent)
    with pytest.raises(httpx.ReadTimeout):
        await slow.request("GET", "/a")


async def test_a_refused_connection_is_a_connect_error() -> None:
    listener = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    listener.close()
    await listener.wait_closed()
    client = WireClient(f"http://127.0.0.1:{port}", None, {}, connect_timeout=1, request_timeout=1, max_connections=1)
    with pytest.raises(httpx.ConnectError):
        await client.request("GET", "/")


async def test_a_write_the_server_took_before_resetting_is_never_sent_again(serve) -> None:  # type: ignore[no-untyped-def]
    # kube-apiserver SIGKILLed after it stored a Binding: the connection is reset with no answer. The request's
    # fate is unknown to the client, so it is not repeated (a second Binding would 409, a second PATCH might
    # apply twice); the caller reads the object back instead. Also on a reused connection, where a GET is.
    ok = reply(b"{}")

    async def take_then_reset(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if head.startswith(b"GET"):
            return await ok(head, reader, writer)
        writer.transport.abort()  # RST, nothing answered
        return False

    server, client = await serve(take_then_reset)
    assert (await client.request("GET", "/warm")).content == b"{}"  # the next request reuses this connection
    for method in ("POST", "PATCH"):
        before = len(server.requests)
        with pytest.raises(httpx.RemoteProtocolError):
            await client.request(method, "/api/v1/namespaces/ns/pods/p/binding", content=b"{}")
        assert [r.split(b" ", 1)[0] for r in server.requests[before:]] == [method.encode()]


async def test_kube_client_reports_a_binding_lost_in_a_reset_without_sending_it_again() -> None:
    # The same through KubeClient (which sends plain requests through this client): one Binding on the wire, an
    # ApiError with status 0 for the caller (the cycle then reads the pod back), no retry and no wait.
    bindings: list[bytes] = []

    async def take_then_reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
        bindings.append(head + await reader.readexactly(length))
        writer.transport.abort()

    listener = await asyncio.start_server(take_then_reset, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    try:
        async with KubeClient(KubeConfig(server=f"http://127.0.0.1:{port}"), sleep=sleep) as kube:
            with pytest.raises(ApiError) as caught:
                await kube.create_binding("ns", "p", "uid-p", "n1")
    finally:
        listener.close()
    assert caught.value.status == 0
    assert len(bindings) == 1
    assert bindings[0].startswith(b"POST /api/v1/namespaces/ns/pods/p/binding ")
    assert waits == []


async def test_a_stream_yields_each_chunk_as_it_arrives_on_a_connection_of_its_own(serve) -> None:  # type: ignore[no-untyped-def]
    """A watch: the head first, then every chunk as the server sends it (the second only after the first was
    read), the end at the last chunk; the stream's connection is never pooled."""
    sent = asyncio.Event()

    async def watch(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n{"a":1\r\n')
        await writer.drain()
        await sent.wait()
        writer.write(b"2\r\n}\n\r\n0\r\n\r\n")
        await writer.drain()
        return False

    server, client = await serve(watch)
    stream = await client.stream("GET", "/w", params={"watch": "1"}, read_timeout=1)
    pieces = stream.chunks()
    assert stream.status_code == 200
    assert await anext(pieces) == b'{"a":1'
    sent.set()
    assert [p async for p in pieces] == [b"}\n"]
    stream.close()
    assert server.requests[0].startswith(b"GET /prefix/w?watch=1 HTTP/1.1\r\n")
    assert client._idle == []


async def test_a_stream_that_goes_silent_or_breaks_raises_httpx_errors(serve) -> None:  # type: ignore[no-untyped-def]
    async def silent(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        await reader.read()
        return False

    _, client = await serve(silent)
    stream = await client.stream("GET", "/w", read_timeout=0.2)
    with pytest.raises(httpx.ReadTimeout):
        await anext(stream.chunks())
    stream.close()

    async def broken(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc")
        await writer.drain()
        return False

    _, client2 = await serve(broken)
    stream = await client2.stream("GET", "/w", read_timeout=1)
    with pytest.raises(httpx.RemoteProtocolError):
        await anext(stream.chunks())
    stream.close()


async def test_a_refused_stream_reads_the_error_body(serve) -> None:  # type: ignore[no-untyped-def]
    _, client = await serve(reply(b'{"kind":"Status","code":410}', status="410 Gone"))
    stream = await client.stream("GET", "/w", read_timeout=1)
    assert (stream.status_code, await stream.aread()) == (410, b'{"kind":"Status","code":410}')
    stream.close()
