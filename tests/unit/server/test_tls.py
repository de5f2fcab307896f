"""Certificate reload under a running HTTPS server: a real uvicorn on loopback serves cert A; the files are
replaced with cert B; new connections see B — no restart."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from hami.server.certs import CertBundle, generate, write_files
from hami.server.tls import CertificateReloader


def pair(name: str) -> CertBundle:
    return generate(["localhost"], ["127.0.0.1"], now=datetime.now(UTC), ca_name=name)


def der(pem: bytes) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.decode())


async def served_cert(port: int) -> bytes:
    """The DER certificate a fresh TLS connection to the port is shown."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        cert = ssl_object.getpeercert(binary_form=True)
        assert cert is not None
        return bytes(cert)
    finally:
        writer.close()
        await writer.wait_closed()


async def get_ok(port: int, ca: bytes) -> str:
    """An HTTPS request that verifies the server against ``ca`` (and its SAN 127.0.0.1)."""
    context = ssl.create_default_context(cadata=ca.decode())
    async with httpx.AsyncClient(verify=context) as client:
        response = await client.get(f"https://127.0.0.1:{port}/healthz")
        return response.text


@pytest.fixture
def certdir(tmp_path: Path) -> Path:
    write_files(pair("ca-a"), tmp_path)
    return tmp_path


@pytest.fixture
async def server(certdir: Path) -> AsyncIterator[tuple[int, CertificateReloader]]:
    async def healthz(_: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    tls = CertificateReloader(certdir / "tls.crt", certdir / "tls.key")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        Starlette(routes=[Route("/healthz", healthz)]),
        ssl_context_factory=tls.context_factory,
        log_level="warning",
        lifespan="off",
    )
    srv = uvicorn.Server(config)
    task = asyncio.create_task(srv.serve(sockets=[sock]))
    while not srv.started:
        await asyncio.sleep(0.01)
    try:
        yield port, tls
    finally:
        srv.should_exit = True
        await task
        sock.close()


async def test_new_connections_see_the_replaced_certificate(
    server: tuple[int, CertificateReloader], certdir: Path
) -> None:
    port, tls = server
    a = (certdir / "ca.crt").read_bytes()
    cert_a = (certdir / "tls.crt").read_bytes()
    assert await served_cert(port) == der(cert_a)
    assert await get_ok(port, a) == "ok"

    b = pair("ca-b")
    write_files(b, certdir)
    assert tls.reload_if_changed() is True
    assert await served_cert(port) == der(b.cert)
    assert await get_ok(port, b.ca_cert) == "ok"
    with pytest.raises(httpx.ConnectError):  # the old CA no longer vouches for the server
        await get_ok(port, a)
    assert tls.reloads == 1


async def test_a_mismatched_pair_keeps_the_old_certificate_until_the_pair_is_complete(
    server: tuple[int, CertificateReloader], certdir: Path
) -> None:
    port, tls = server
    cert_a = (certdir / "tls.crt").read_bytes()
    b = pair("ca-b")
    (certdir / "tls.key").write_bytes(b.key)  # the key lands first
    assert tls.reload_if_changed() is False
    assert await served_cert(port) == der(cert_a)
    (certdir / "tls.crt").write_bytes(b.cert)  # then the certificate
    assert tls.reload_if_changed() is True
    assert await served_cert(port) == der(b.cert)


async def test_the_watcher_reloads_on_its_own(server: tuple[int, CertificateReloader], certdir: Path) -> None:
    port, tls = server
    b = pair("ca-b")
    ticks: list[float] = []

    async def tick(interval: float) -> None:
        ticks.append(interval)
        if len(ticks) == 2:
            write_files(b, certdir)
        if len(ticks) == 4:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await tls.watch(interval=7.5, sleep=tick)
    assert ticks == [7.5] * 4
    assert tls.reloads == 1
    assert await served_cert(port) == der(b.cert)


def test_unchanged_files_are_not_reloaded(certdir: Path) -> None:
    tls = CertificateReloader(certdir / "tls.crt", certdir / "tls.key")
    assert tls.reload_if_changed() is False
    assert tls.reloads == 0


def test_a_kubelet_style_symlink_swap_is_noticed(tmp_path: Path) -> None:
    """Secret volumes: tls.crt -> ..data/tls.crt, and ..data is a symlink swapped to a new directory."""
    first, second = tmp_path / "..v1", tmp_path / "..v2"
    write_files(pair("ca-a"), first)
    os.symlink(first.name, tmp_path / "..data")
    for name in ("tls.crt", "tls.key"):
        os.symlink(f"..data/{name}", tmp_path / name)
    tls = CertificateReloader(tmp_path / "tls.crt", tmp_path / "tls.key")
    write_files(pair("ca-b"), second)
    os.symlink(second.name, tmp_path / "..data_tmp")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    assert tls.reload_if_changed() is True


def test_missing_files_keep_the_old_pair(certdir: Path) -> None:
    tls = CertificateReloader(certdir / "tls.crt", certdir / "tls.key")
    (certdir / "tls.crt").unlink()
    assert tls.reload_if_changed() is False


def test_a_server_cannot_start_without_a_loadable_pair(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        CertificateReloader(tmp_path / "tls.crt", tmp_path / "tls.key")
