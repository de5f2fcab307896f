"""Throw-away PKI for TLS tests: a CA, a server certificate for 127.0.0.1 and a client certificate."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pair:
    cert: bytes
    key: bytes


@dataclass(frozen=True)
class Pki:
    ca: Pair
    server: Pair
    client: Pair


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _issue(
    subject: str, issuer: x509.Name | None, signer: ec.EllipticCurvePrivateKey | None, *, ca: bool = False,
    server: bool = False,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
    return builder.sign(signer or key, hashes.SHA256()), key


def make_pki() -> Pki:
    ca_cert, ca_key = _issue("test-ca", None, None, ca=True)
    server_cert, server_key = _issue("apiserver", ca_cert.subject, ca_key, server=True)
    client_cert, client_key = _issue("hami", ca_cert.subject, ca_key)
    pem = serialization.Encoding.PEM
    return Pki(
        ca=Pair(ca_cert.public_bytes(pem), _pem_key(ca_key)),
        server=Pair(server_cert.public_bytes(pem), _pem_key(server_key)),
        client=Pair(client_cert.public_bytes(pem), _pem_key(client_key)),
    )
