"""Certificates for the webhook and extender listener: a private CA and a serving certificate it signs.

``generate`` is pure apart from key generation (the time is passed in): it returns PEM bytes for the CA
certificate, the serving certificate (SANs = the given DNS names and IP addresses, ``serverAuth``) and its
key. The CA's own key is thrown away — nothing is ever signed with it again; a new pair means a new CA, and
the webhook's ``caBundle`` is set from the new ``ca.crt``. Keys are ECDSA P-256 (accepted by kube-apiserver,
kube-scheduler and Python's ``ssl``; fast to make).

``still_good`` says whether an existing pair can be kept (same CA, the names asked for, not expiring soon);
``ensure_secret`` and ``inject_ca_bundle`` are the two steps of the chart's certificate Jobs, written against
the small ``CertStore`` seam so they are tested without a cluster.
"""

from __future__ import annotations

import base64
import ipaddress
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final, Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hami.errors import InvalidInput

__all__ = [
    "CA_FILE",
    "CERT_FILE",
    "KEY_FILE",
    "CertBundle",
    "CertStore",
    "ensure_secret",
    "generate",
    "inject_ca_bundle",
    "still_good",
    "write_files",
]

log = logging.getLogger("hami.certs")

CA_FILE: Final = "ca.crt"
CERT_FILE: Final = "tls.crt"
KEY_FILE: Final = "tls.key"
_BACKDATE: Final = timedelta(minutes=5)  # tolerate clocks a little behind ours


@dataclass(frozen=True, slots=True)
class CertBundle:
    """PEM bytes: the CA certificate, the serving certificate and the serving key (PKCS#8)."""

    ca_cert: bytes
    cert: bytes
    key: bytes

    @property
    def ca_bundle(self) -> str:
        """``caBundle`` for a webhook's ``clientConfig``: base64 of the CA certificate's PEM."""
        return base64.b64encode(self.ca_cert).decode("ascii")

    def as_secret_data(self) -> dict[str, bytes]:
        return {CA_FILE: self.ca_cert, CERT_FILE: self.cert, KEY_FILE: self.key}


def _parse_ips(ips: Sequence[str]) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    out = []
    for ip in ips:
        try:
            out.append(ipaddress.ip_address(ip.strip()))
        except ValueError:
            raise InvalidInput("--ip", ip, "not an IP address") from None
    return out


def _check_dns(dns: Sequence[str]) -> list[str]:
    out = []
    for raw in dns:
        name = raw.strip()
        if not name or not name.isascii() or any(ch.isspace() for ch in name) or "/" in name:
            raise InvalidInput("--dns", name, "not a DNS name")
        out.append(name)
    return out


def generate(
    dns: Sequence[str],
    ips: Sequence[str] = (),
    *,
    now: datetime,
    days: int = 3650,
    ca_name: str = "hami-webhook-ca",
) -> CertBundle:
    """A new CA and a serving certificate for ``dns`` and ``ips``, both valid ``days`` days from ``now``."""
    names = _check_dns(dns)
    addresses = _parse_ips(ips)
    if not names and not addresses:
        raise InvalidInput("--dns/--ip", "", "a serving certificate needs at least one DNS name or IP address")
    if days < 1:
        raise InvalidInput("--days", days, "must be at least 1")
    start, end = now - _BACKDATE, now + timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = _ca_certificate(ca_key, ca_subject, ca_ski, start, end)

    key = ec.generate_private_key(ec.SECP256R1())
    common_name = names[0] if names else str(addresses[0])
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    sans += [x509.IPAddress(a) for a in addresses]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])]))
        .issuer_name(ca_subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            _key_usage(signs_certificates=False),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return CertBundle(
        ca_cert=ca.public_bytes(pem),
        cert=cert.public_bytes(pem),
        key=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def _ca_certificate(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_subject: x509.Name,
    ca_ski: x509.SubjectKeyIdentifier,
    start: datetime,
    end: datetime,
) -> x509.Certificate:
    """The self-signed CA that signs the serving certificate (path length 0: it signs no other CA)."""
    return (
        x509.CertificateBuilder()
        .subject_name(ca_subject)
        .issuer_name(ca_subject)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            _key_usage(signs_certificates=True),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def _key_usage(signs_certificates: bool) -> x509.KeyUsage:
    """Digital signatures, plus certificate and CRL signing for a CA."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def still_good(
    data: dict[str, bytes],
    dns: Sequence[str],
    ips: Sequence[str],
    *,
    now: datetime,
    renew_before: timedelta = timedelta(days=30),
) -> bool:
    """Whether an existing ``ca.crt``/``tls.crt``/``tls.key`` set can be kept: the certificate is signed by
    that CA, its key matches, it covers every requested name and address, and it does not expire within
    ``renew_before`` (nor does the CA)."""
    try:
        ca = x509.load_pem_x509_certificate(data[CA_FILE])
        cert = x509.load_pem_x509_certificate(data[CERT_FILE])
        key = serialization.load_pem_private_key(data[KEY_FILE], password=None)
        cert.verify_directly_issued_by(ca)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (KeyError, ValueError, TypeError, x509.ExtensionNotFound, InvalidSignature):
        return False
    if key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) != cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo):
        return False
    have_dns = set(sans.get_values_for_type(x509.DNSName))
    have_ips = set(sans.get_values_for_type(x509.IPAddress))
    try:
        want_ips = set(_parse_ips(ips))
    except InvalidInput:
        return False
    if not set(dns) <= have_dns or not want_ips <= have_ips:
        return False
    horizon = now + renew_before
    return cert.not_valid_before_utc <= now and cert.not_valid_after_utc > horizon and ca.not_valid_after_utc > horizon


def write_files(bundle: CertBundle, out: str | os.PathLike[str]) -> dict[str, Path]:
    """Write ``ca.crt``, ``tls.crt`` and ``tls.key`` (mode 0600) into ``out`` (created if needed)."""
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {name: directory / name for name in (CA_FILE, CERT_FILE, KEY_FILE)}
    for name, content in bundle.as_secret_data().items():
        path = paths[name]
        tmp = path.with_name(f".{name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if name == KEY_FILE else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        os.replace(tmp, path)  # readers (a reloading server) never see a half-written file
    return paths


class CertStore(Protocol):
    """Where the chart's Jobs keep the pair and publish the CA (implemented on the Kubernetes API)."""

    async def read_secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        """The Secret's data, None when there is no such Secret."""

    async def write_secret(self, namespace: str, name: str, data: dict[str, bytes]) -> None:
        """Create the Secret (type ``kubernetes.io/tls``) or replace its data."""

    async def set_ca_bundle(self, webhook_configuration: str, ca_bundle: bytes) -> int:
        """Set ``clientConfig.caBundle`` (PEM) on every webhook of the MutatingWebhookConfiguration; returns how
        many webhooks it has. Raises ``NotFound`` when the configuration does not exist."""


async def ensure_secret(
    store: CertStore,
    namespace: str,
    name: str,
    dns: Sequence[str],
    ips: Sequence[str],
    *,
    now: datetime,
    days: int = 3650,
    force: bool = False,
) -> tuple[CertBundle, bool]:
    """The Secret's pair if it is still good (``still_good``), else a new one written to the Secret.

    Returns ``(bundle, created)``. Keeping a good pair makes the pre-upgrade Job a no-op, so an upgrade does
    not rotate the CA under a running webhook.
    """
    existing = await store.read_secret(namespace, name)
    if existing is not None and not force and still_good(existing, dns, ips, now=now):
        return CertBundle(existing[CA_FILE], existing[CERT_FILE], existing[KEY_FILE]), False
    bundle = generate(dns, ips, now=now, days=days)
    await store.write_secret(namespace, name, bundle.as_secret_data())
    log.info("wrote a new serving certificate to secret %s/%s", namespace, name)
    return bundle, True


async def inject_ca_bundle(store: CertStore, webhook_configuration: str, bundle: CertBundle) -> int:
    """Publish the CA of ``bundle`` as the caBundle of every webhook of the configuration."""
    count = await store.set_ca_bundle(webhook_configuration, bundle.ca_cert)
    log.info("caBundle set on %d webhook(s) of %s", count, webhook_configuration)
    return count
