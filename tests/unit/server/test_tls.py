"""Certificate reload under a running HTTPS server: a real uvicorn on loopback serves cert A; the files are
replaced with cert B; new connections see B — no restart."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import tempfile
import warnings
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from hami.server.certs import CertBundle, generate, write_files
from hami.server.tls import CertificateReloader, server_context


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


@contextlib.asynccontextmanager
async def serving(tls: CertificateReloader) -> AsyncIterator[int]:
    """A real uvicorn on a free loopback port with ``tls``; yields the port."""

    async def healthz(_: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        Starlette(routes=[Route("/healthz", healthz)]),
        ssl_context_factory=tls.context_factory,
        log_level="critical",
        lifespan="off",
    )
    srv = uvicorn.Server(config)
    task = asyncio.create_task(srv.serve(sockets=[sock]))
    while not srv.started:
        await asyncio.sleep(0.01)
    try:
        yield port
    finally:
        srv.should_exit = True
        await task
        sock.close()


@pytest.fixture
async def server(certdir: Path) -> AsyncIterator[tuple[int, CertificateReloader]]:
    tls = CertificateReloader(certdir / "tls.crt", certdir / "tls.key")
    async with serving(tls) as port:
        yield port, tls


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


# --- AEAD suites only, and client certificates ------------------------------------------------------------


def client_context(
    *, maximum: ssl.TLSVersion | None = None, ciphers: str | None = None, cert: CertBundle | None = None
) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if maximum is not None:
        with warnings.catch_warnings():  # TLS 1.1 is deprecated: that is the point of offering it
            warnings.simplefilter("ignore", DeprecationWarning)
            context.minimum_version = min(maximum, ssl.TLSVersion.TLSv1_2)
            context.maximum_version = maximum
    if ciphers is not None:
        context.set_ciphers(ciphers)
    if cert is not None:
        with tempfile.TemporaryDirectory() as tmp:
            write_files(cert, Path(tmp))
            context.load_cert_chain(Path(tmp) / "tls.crt", Path(tmp) / "tls.key")
    return context


async def handshake(port: int, context: ssl.SSLContext) -> tuple[str, str]:
    """(TLS version, cipher) of a connection that completed its handshake and read an answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: hami\r\nConnection: close\r\n\r\n")
        await writer.drain()
        answer = await reader.read()
        if not answer:  # TLS 1.3: the client's side of the handshake is done before the server refuses its cert
            raise ConnectionResetError("the server closed the connection without answering")
        assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
        ssl_object = writer.get_extra_info("ssl_object")
        return ssl_object.version(), ssl_object.cipher()[0]
    finally:
        writer.close()
        with contextlib.suppress(ssl.SSLError, ConnectionError):
            await writer.wait_closed()


CBC_TLS12 = "ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA:ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA384"


@pytest.mark.parametrize(
    ("maximum", "ciphers"),
    [
        pytest.param(ssl.TLSVersion.TLSv1_2, CBC_TLS12, id="tls1.2-cbc-suites-only"),
        pytest.param(ssl.TLSVersion.TLSv1_1, "ALL:@SECLEVEL=0", id="tls1.1"),
    ],
)
async def test_a_client_offering_only_cbc_suites_or_old_tls_is_refused(
    server: tuple[int, CertificateReloader], maximum: ssl.TLSVersion, ciphers: str
) -> None:
    port, _ = server
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await handshake(port, client_context(maximum=maximum, ciphers=ciphers))


@pytest.mark.parametrize(
    ("maximum", "ciphers", "expected"),
    [
        pytest.param(
            ssl.TLSVersion.TLSv1_2,
            f"{CBC_TLS12}:ECDHE-ECDSA-AES128-GCM-SHA256",
            ("TLSv1.2", "ECDHE-ECDSA-AES128-GCM-SHA256"),
            id="tls1.2-gcm-chosen-over-cbc",
        ),
        pytest.param(
            ssl.TLSVersion.TLSv1_2,
            "ECDHE-ECDSA-CHACHA20-POLY1305",
            ("TLSv1.2", "ECDHE-ECDSA-CHACHA20-POLY1305"),
            id="tls1.2-chacha20",
        ),
        pytest.param(None, None, ("TLSv1.3", "TLS_AES_256_GCM_SHA384"), id="tls1.3"),
    ],
)
async def test_aead_suites_are_served(
    server: tuple[int, CertificateReloader],
    maximum: ssl.TLSVersion | None,
    ciphers: str | None,
    expected: tuple[str, str],
) -> None:
    port, _ = server
    assert await handshake(port, client_context(maximum=maximum, ciphers=ciphers)) == expected


def test_every_tls12_suite_offered_is_ecdhe_with_an_aead(certdir: Path) -> None:
    context = server_context(certdir / "tls.crt", certdir / "tls.key")
    tls12 = [c for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12
    for cipher in tls12:
        assert cipher["aead"] is True, cipher["name"]
        assert cipher["kea"] == "kx-ecdhe", cipher["name"]
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def client_pair(name: str) -> CertBundle:
    """A CA and a client certificate (extended key usage clientAuth) signed by it."""
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-scheduler")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return CertBundle(ca.public_bytes(pem), cert.public_bytes(pem), key_pem)


@pytest.fixture
def client_a() -> CertBundle:
    return client_pair("clients-a")


@pytest.fixture
async def mtls(certdir: Path, client_a: CertBundle) -> AsyncIterator[tuple[int, CertificateReloader]]:
    """A server requiring client certificates signed by the CA in ``client-ca.crt`` (``client_a``'s CA)."""
    (certdir / "client-ca.crt").write_bytes(client_a.ca_cert)
    tls = CertificateReloader(certdir / "tls.crt", certdir / "tls.key", certdir / "client-ca.crt")
    async with serving(tls) as port:
        yield port, tls


async def test_mutual_tls_needs_a_client_certificate_from_the_ca(
    mtls: tuple[int, CertificateReloader], client_a: CertBundle
) -> None:
    port, _ = mtls
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await handshake(port, client_context())  # no certificate
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await handshake(port, client_context(cert=client_pair("clients-other")))  # a certificate of another CA
    assert (await handshake(port, client_context(cert=client_a)))[0] == "TLSv1.3"


async def test_a_replaced_client_ca_is_trusted_instead_of_the_old_one(
    mtls: tuple[int, CertificateReloader], certdir: Path, client_a: CertBundle
) -> None:
    port, tls = mtls
    client_b = client_pair("clients-b")
    (certdir / "client-ca.crt").write_bytes(client_b.ca_cert)

    assert tls.reload_if_changed() is True

    assert (await handshake(port, client_context(cert=client_b)))[0] == "TLSv1.3"
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await handshake(port, client_context(cert=client_a))
