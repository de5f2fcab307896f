"""Listeners: a port in use stops ``hami scheduler`` with one line and exit status 3; connections that do not
deliver a whole request in time (half a header, half a body: slowloris) are closed while others are served."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from hami.errors import CannotListen
from hami.server.command import scheduler_main
from hami.server.listen import EXIT_CANNOT_LISTEN, guarded_h11, listen

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_a_port_in_use_exits_3_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        code = scheduler_main({"http_bind": f"127.0.0.1:{port}"}, str(kubeconfig), json_logs=True)
    assert code == EXIT_CANNOT_LISTEN == 3
    err = capsys.readouterr().err
    assert err == f"hami scheduler: cannot listen on 127.0.0.1:{port} (--http_bind): Address already in use\n"


def test_listen_names_the_flag_and_the_address() -> None:
    with pytest.raises(CannotListen, match=r"cannot listen on 203\.0\.113\.7:80 \(--extender-bind\): "):
        listen("203.0.113.7:80", "--extender-bind", "203.0.113.7", 80)  # TEST-NET-3: not this host's address


async def _echo(request: Request) -> PlainTextResponse:
    return PlainTextResponse(str(len(await request.body())))


async def test_slow_requests_are_closed_while_others_are_served() -> None:
    app = Starlette(
        routes=[Route("/echo", _echo, methods=["POST"]), Route("/healthz", lambda _: PlainTextResponse("ok"))]
    )
    sock = listen("127.0.0.1:0", "--test", "127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, lifespan="off", log_level="critical", http=guarded_h11(timeout=0.5))
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    slow: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        for i in range(60):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            if i % 3 == 0:
                writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # half a header
            elif i % 3 == 1:
                writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")  # half a body
            # else: connected, nothing sent
            await writer.drain()
            slow.append((reader, writer))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/healthz")).text == "ok"  # served meanwhile
            assert (await client.post("/echo", content=b"x" * 1000)).text == "1000"

        async def closed(reader: asyncio.StreamReader) -> bytes:
            return await asyncio.wait_for(reader.read(), 5)

        tails = await asyncio.gather(*(closed(reader) for reader, _ in slow))
        assert all(b" 200 " not in tail for tail in tails)  # closed (at most an error status), never served
        assert len(server.server_state.connections) == 0
    finally:
        for _, writer in slow:
            writer.close()
        server.should_exit = True
        await serving


async def test_answers_are_sent_without_waiting_for_the_clients_ack() -> None:
    """Connections accepted on a listener have Nagle's algorithm off (TCP_NODELAY), as asyncio sets it on the TCP
    sockets it makes itself: uvicorn writes an answer's headers and its body apart, and with Nagle on the body waited
    for the client's delayed ACK, about 40 ms an answer (webhook, /filter, /bind, /prioritize, /metrics alike)."""
    app = Starlette(routes=[Route("/healthz", lambda _: PlainTextResponse("ok"))])
    sock = listen("127.0.0.1:0", "--test", "127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="critical", http=guarded_h11()))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/healthz")).text == "ok"
            (connection,) = server.server_state.connections
            accepted = connection.transport.get_extra_info("socket")
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        server.should_exit = True
        await serving
