"""``hami version``'s commit and build date: from the build's record in a wheel, from git in a checkout,
``unknown`` otherwise; and the build backend that writes the record (``src/hami_build.py``)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from hami.buildinfo import UNKNOWN, BuildInfo, build_info

ROOT = Path(__file__).parents[2]


@pytest.fixture
def backend():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "src"))
    try:
        yield importlib.import_module("hami_build")
    finally:
        sys.path.remove(str(ROOT / "src"))


def test_a_checkout_reads_git_and_was_never_built() -> None:
    info = build_info()  # the tests run from a checkout (make setup's editable install)
    assert len(info.commit) == 40
    assert info.date == UNKNOWN


def test_an_installed_package_without_a_record_says_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "site-packages" / "hami"
    package.mkdir(parents=True)
    monkeypatch.setitem(sys.modules, "hami._build", None)  # no record: import fails
    assert build_info(package) == BuildInfo(UNKNOWN, UNKNOWN)


def test_the_backend_records_the_commit_and_date_it_is_given(backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = {"HAMI_BUILD_COMMIT": "abc123", "SOURCE_DATE_EPOCH": "1767225600"}
    assert backend.build_info(tmp_path, env) == ("abc123", "2026-01-01T00:00:00Z")
    assert backend.build_info(tmp_path, {})[0] == UNKNOWN  # no git there, nothing given
    target = tmp_path / "_build.py"
    target.write_text("COMMIT = 'kept'\n")
    backend.write_build_info(tmp_path, target)  # unknown never overwrites a record that names a commit
    assert target.read_text() == "COMMIT = 'kept'\n"


def test_the_backend_finds_every_proto_folder(backend) -> None:  # type: ignore[no-untyped-def]
    folders = backend.proto_folders()
    assert ROOT / "src" / "hami" / "deviceplugin" in folders
    assert all(f.name != "_generated" for f in folders)
    assert not backend.stubs_needed()  # make setup generated them
    assert backend.grpc_tools_pin().startswith("grpcio-tools==")
