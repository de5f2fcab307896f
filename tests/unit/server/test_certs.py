"""``hami certs``: a CA and a serving certificate that verifies against it for exactly the requested names."""

from __future__ import annotations

import base64
import ipaddress
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from hami.errors import InvalidInput, NotFound
from hami.server.certs import CertBundle, ensure_secret, generate, inject_ca_bundle, still_good, write_files

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
DNS = ["hami-scheduler.hami-system.svc", "hami-scheduler.hami-system.svc.cluster.local"]
IPS = ["127.0.0.1", "::1"]


@pytest.fixture(scope="module")
def bundle() -> CertBundle:
    return generate(DNS, IPS, now=NOW, days=365)


def verifier(bundle: CertBundle, when: datetime = NOW) -> PolicyBuilder:
    return PolicyBuilder().store(Store([x509.load_pem_x509_certificate(bundle.ca_cert)])).time(when)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(x509.DNSName(DNS[0]), id="the service DNS name verifies"),
        pytest.param(x509.DNSName(DNS[1]), id="the cluster.local name verifies"),
        pytest.param(x509.IPAddress(ipaddress.ip_address("127.0.0.1")), id="loopback IPv4 verifies"),
        pytest.param(x509.IPAddress(ipaddress.ip_address("::1")), id="loopback IPv6 verifies"),
    ],
)
def test_the_serving_certificate_verifies_against_the_ca_for_each_requested_name(
    bundle: CertBundle, name: x509.DNSName | x509.IPAddress
) -> None:
    leaf = x509.load_pem_x509_certificate(bundle.cert)
    chain = verifier(bundle).build_server_verifier(name).verify(leaf, [])
    assert chain[0] == leaf
    assert chain[-1] == x509.load_pem_x509_certificate(bundle.ca_cert)


def test_other_names_do_not_verify(bundle: CertBundle) -> None:
    leaf = x509.load_pem_x509_certificate(bundle.cert)
    with pytest.raises(VerificationError):
        verifier(bundle).build_server_verifier(x509.DNSName("evil.example")).verify(leaf, [])


def test_the_certificate_expires_after_the_requested_days(bundle: CertBundle) -> None:
    leaf = x509.load_pem_x509_certificate(bundle.cert)
    assert leaf.not_valid_after_utc == NOW + timedelta(days=365)
    with pytest.raises(VerificationError):
        verifier(bundle, NOW + timedelta(days=366)).build_server_verifier(x509.DNSName(DNS[0])).verify(leaf, [])


def test_the_serving_certificate_is_for_servers_only(bundle: CertBundle) -> None:
    leaf = x509.load_pem_x509_certificate(bundle.cert)
    usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    ca = x509.load_pem_x509_certificate(bundle.ca_cert)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True


def test_the_ca_bundle_is_base64_of_the_ca_pem(bundle: CertBundle) -> None:
    assert base64.b64decode(bundle.ca_bundle) == bundle.ca_cert
    assert bundle.ca_cert.startswith(b"-----BEGIN CERTIFICATE-----")


def test_files_are_written_with_a_private_key_mode(bundle: CertBundle, tmp_path: Path) -> None:
    paths = write_files(bundle, tmp_path / "out")
    assert sorted(p.name for p in paths.values()) == ["ca.crt", "tls.crt", "tls.key"]
    assert (tmp_path / "out" / "tls.key").read_bytes() == bundle.key
    assert stat.S_IMODE((tmp_path / "out" / "tls.key").stat().st_mode) == 0o600
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ca.crt", "tls.crt", "tls.key"]


@pytest.mark.parametrize(
    ("dns", "ips", "message"),
    [
        pytest.param([], [], "at least one DNS name or IP address", id="no names at all"),
        pytest.param(["ok.svc"], ["300.1.1.1"], "not an IP address", id="a bad IP"),
        pytest.param(["has space.svc"], [], "not a DNS name", id="a bad DNS name"),
    ],
)
def test_bad_names_are_refused(dns: list[str], ips: list[str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        generate(dns, ips, now=NOW)


def test_an_ip_only_certificate_is_named_after_the_ip() -> None:
    leaf = x509.load_pem_x509_certificate(generate([], ["10.0.0.1"], now=NOW).cert)
    assert leaf.subject.rfc4514_string() == "CN=10.0.0.1"


# --- keeping or replacing an existing pair -------------------------------------------------------------


def test_a_pair_for_the_same_names_is_still_good(bundle: CertBundle) -> None:
    assert still_good(bundle.as_secret_data(), DNS, IPS, now=NOW)
    assert still_good(bundle.as_secret_data(), DNS[:1], [], now=NOW)  # a subset is covered


@pytest.mark.parametrize(
    ("change", "dns", "when"),
    [
        pytest.param("none", [*DNS, "new.svc"], NOW, id="a new name needs a new pair"),
        pytest.param("none", DNS, NOW + timedelta(days=340), id="a pair expiring within 30 days is renewed"),
        pytest.param("key", DNS, NOW, id="a key that does not match is replaced"),
        pytest.param("ca", DNS, NOW, id="a certificate not signed by the CA is replaced"),
        pytest.param("missing", DNS, NOW, id="missing keys are replaced"),
        pytest.param("garbage", DNS, NOW, id="garbage is replaced"),
    ],
)
def test_a_pair_that_no_longer_fits_is_not_kept(
    bundle: CertBundle, change: str, dns: list[str], when: datetime
) -> None:
    data = bundle.as_secret_data()
    other = generate(DNS, IPS, now=NOW)
    if change == "key":
        data["tls.key"] = other.key
    elif change == "ca":
        data["ca.crt"] = other.ca_cert
    elif change == "missing":
        del data["tls.key"]
    elif change == "garbage":
        data["tls.crt"] = b"not a certificate"
    assert not still_good(data, dns, IPS, now=when)


class MemoryStore:
    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, bytes]] = {}
        self.webhooks: dict[str, list[bytes | None]] = {"vgpu.hami.io": [None, None]}
        self.writes = 0

    async def read_secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        return self.secrets.get((namespace, name))

    async def write_secret(self, namespace: str, name: str, data: dict[str, bytes]) -> None:
        self.writes += 1
        self.secrets[(namespace, name)] = dict(data)

    async def set_ca_bundle(self, webhook_configuration: str, ca_bundle: bytes) -> int:
        if webhook_configuration not in self.webhooks:
            raise NotFound(webhook_configuration, 404)
        self.webhooks[webhook_configuration] = [ca_bundle] * len(self.webhooks[webhook_configuration])
        return len(self.webhooks[webhook_configuration])


async def test_ensure_secret_creates_then_keeps_the_pair() -> None:
    store = MemoryStore()
    first, created = await ensure_secret(store, "hami", "hami-tls", DNS, IPS, now=NOW)
    assert created
    assert store.secrets[("hami", "hami-tls")] == first.as_secret_data()
    again, created = await ensure_secret(store, "hami", "hami-tls", DNS, IPS, now=NOW + timedelta(days=1))
    assert not created
    assert again == first
    assert store.writes == 1


async def test_ensure_secret_replaces_when_forced_or_names_change() -> None:
    store = MemoryStore()
    first, _ = await ensure_secret(store, "hami", "hami-tls", DNS, IPS, now=NOW)
    forced, created = await ensure_secret(store, "hami", "hami-tls", DNS, IPS, now=NOW, force=True)
    assert created
    assert forced.ca_cert != first.ca_cert
    renamed, created = await ensure_secret(store, "hami", "hami-tls", ["x.svc"], [], now=NOW)
    assert created
    assert renamed.ca_cert != forced.ca_cert
    assert store.writes == 3


async def test_inject_ca_bundle_sets_every_webhook(bundle: CertBundle) -> None:
    store = MemoryStore()
    assert await inject_ca_bundle(store, "vgpu.hami.io", bundle) == 2
    assert store.webhooks["vgpu.hami.io"] == [bundle.ca_cert, bundle.ca_cert]
    with pytest.raises(NotFound):
        await inject_ca_bundle(store, "absent", bundle)
