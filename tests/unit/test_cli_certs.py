"""``hami certs`` on the command line."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography import x509
from typer.testing import CliRunner

from hami.cli import app

runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1"})


def test_certs_writes_the_files_and_prints_the_ca_bundle(tmp_path: Path) -> None:
    result = runner.invoke(app, ["certs", "--dns", "hami.hami.svc", "--ip", "127.0.0.1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    ca = (tmp_path / "ca.crt").read_bytes()
    assert result.stdout.strip() == base64.b64encode(ca).decode()
    leaf = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["hami.hami.svc"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--dns", "a"], "give --out DIR, --secret NAMESPACE/NAME, or both", id="nowhere to put the pair"),
        pytest.param(
            ["--dns", "a", "--out", "x", "--patch-webhook", "w"],
            "--patch-webhook needs --secret",
            id="patch without secret",
        ),
        pytest.param(["--dns", "a", "--secret", "noslash"], "expected NAMESPACE/NAME", id="a secret without namespace"),
    ],
)
def test_certs_refuses_incomplete_arguments(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["certs", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_certs_reports_bad_names_without_a_traceback(tmp_path: Path) -> None:
    result = runner.invoke(app, ["certs", "--ip", "not-an-ip", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "error: --ip: not an IP address (got 'not-an-ip')" in result.output


def test_certs_with_a_secret_outside_a_cluster_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    result = runner.invoke(app, ["certs", "--dns", "a", "--secret", "hami/tls"])
    assert result.exit_code == 1
    assert "not running in a cluster" in result.output
