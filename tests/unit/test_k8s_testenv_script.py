"""Fast checks of scripts/k8s-testenv's pure parts (no Go, no network): the wrapper module it writes,
version parsing and how the e2e fixtures find a finished build."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "k8s-testenv"


def _load() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("k8s_testenv", str(SCRIPT))
    spec = importlib.util.spec_from_loader("k8s_testenv", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


testenv = _load()

UPSTREAM = {
    "Module": {"Path": "k8s.io/kubernetes"},
    "Go": "1.26.0",
    "GoDebug": [{"Key": "default", "Value": "go1.26"}],
    "Require": [
        {"Path": "github.com/spf13/cobra", "Version": "v1.10.0"},
        {"Path": "k8s.io/api", "Version": "v0.0.0"},
        {"Path": "k8s.io/streaming", "Version": "v0.0.0"},
        {"Path": "k8s.io/klog/v2", "Version": "v2.130.1"},
        {"Path": "k8s.io/apimachinery", "Version": "v0.0.0"},
    ],
}


def test_staging_modules_are_the_k8s_requirements_at_v0_0_0() -> None:
    assert testenv.staging_modules(UPSTREAM) == ["k8s.io/api", "k8s.io/apimachinery", "k8s.io/streaming"]


def test_wrapper_go_mod_pins_staging_modules_and_copies_go_and_godebug(tmp_path: Path) -> None:
    testenv.write_k8s_wrapper(tmp_path, "v1.36.3", UPSTREAM)
    go_mod = (tmp_path / "go.mod").read_text()
    assert "\ngo 1.26.0\n" in go_mod
    assert "\ngodebug default=go1.26\n" in go_mod
    assert "require k8s.io/kubernetes v1.36.3" in go_mod
    assert "\tk8s.io/kubernetes => k8s.io/kubernetes v1.36.3\n" in go_mod
    assert "\tk8s.io/streaming => k8s.io/streaming v0.36.3\n" in go_mod
    assert "klog" not in go_mod  # only staging modules are replaced
    assert '_ "k8s.io/kubernetes/cmd/kube-apiserver"' in (tmp_path / "tools.go").read_text()


def test_ldflags_set_the_reported_version() -> None:
    flags = testenv.k8s_ldflags("v1.36.3")
    assert "-X k8s.io/component-base/version.gitVersion=v1.36.3" in flags
    assert "-X k8s.io/client-go/pkg/version.gitMinor=36" in flags


@pytest.mark.parametrize(
    ("text", "expected"),
    [("go1.26.8", (1, 26, 8)), ("1.26.0", (1, 26, 0)), ("1.26", (1, 26, 0)), ("go1.27rc1", (1, 27, 0))],
)
def test_parse_go_version(text: str, expected: tuple[int, ...]) -> None:
    assert testenv.parse_go_version(text) == expected


def _fake_build(root: Path, version: str, *, complete: bool = True) -> Path:
    directory = root / f"k8s-{version}"
    directory.mkdir(parents=True)
    for name in testenv.CONTROL_PLANE_BINARIES:
        binary = directory / name
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
    if complete:
        (directory / "manifest.json").write_text(json.dumps({"kubernetes": version}))
    return directory


def test_locate_prints_the_default_releases_build_not_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HAMI_TESTENV_CACHE", str(tmp_path))
    monkeypatch.delenv("HAMI_K8S_VERSION", raising=False)
    expected = _fake_build(tmp_path, testenv.DEFAULT_K8S_VERSION)
    _fake_build(tmp_path, "v1.99.0")  # newer, but not the default: the tests run on the default
    _fake_build(tmp_path, "v1.35.4")
    (tmp_path / "k8s-v1.36.9.partial").mkdir()

    assert testenv.main(["locate"]) == 0
    assert capsys.readouterr().out.strip() == str(expected)


def test_hami_k8s_version_picks_another_release_prereleases_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HAMI_TESTENV_CACHE", str(tmp_path))
    _fake_build(tmp_path, testenv.DEFAULT_K8S_VERSION)
    beta = _fake_build(tmp_path, "v1.38.0-beta.0")
    monkeypatch.setenv("HAMI_K8S_VERSION", "1.38.0-beta.0")  # the leading "v" may be left out

    assert testenv.main(["locate"]) == 0
    assert capsys.readouterr().out.strip() == str(beta)


def test_locating_a_release_that_is_not_built_names_it_and_what_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HAMI_TESTENV_CACHE", str(tmp_path))
    monkeypatch.delenv("HAMI_K8S_VERSION", raising=False)
    _fake_build(tmp_path, "v1.35.4")
    _fake_build(tmp_path, "v1.37.9", complete=False)

    assert testenv.main(["locate", "--k8s-version=v1.37.9"]) == 1
    err = capsys.readouterr().err
    assert "k8s-v1.37.9/" in err
    assert "HAMI_K8S_VERSION=v1.37.9 make testenv" in err
    assert "built: k8s-v1.35.4" in err


def test_a_version_that_is_no_release_tag_is_refused_naming_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HAMI_TESTENV_CACHE", str(tmp_path))
    assert testenv.main(["locate", "--k8s-version=1.37"]) == 1
    assert "--k8s-version 'v1.37' is not a Kubernetes release tag" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("version", "parts", "staging"),
    [
        ("v1.36.3", (1, 36, 3, ""), "v0.36.3"),
        ("v1.37.2", (1, 37, 2, ""), "v0.37.2"),
        ("v1.38.0-beta.0", (1, 38, 0, "beta.0"), "v0.38.0-beta.0"),
        ("v1.39.0-rc.1", (1, 39, 0, "rc.1"), "v0.39.0-rc.1"),
    ],
)
def test_release_tags_and_their_staging_module_tags(version: str, parts: tuple[object, ...], staging: str) -> None:
    assert testenv.release_parts(version) == parts
    assert testenv.staging_tag(version) == staging


def test_a_prerelease_wrapper_pins_the_staging_prerelease_tags(tmp_path: Path) -> None:
    testenv.write_k8s_wrapper(tmp_path, "v1.38.0-beta.0", UPSTREAM)
    go_mod = (tmp_path / "go.mod").read_text()
    assert "\tk8s.io/api => k8s.io/api v0.38.0-beta.0\n" in go_mod
    assert "-X k8s.io/component-base/version.gitMinor=38" in testenv.k8s_ldflags("v1.38.0-beta.0")


@pytest.mark.parametrize(
    ("version", "needs"),
    [("v1.33.5", False), ("v1.34.0", True), ("v1.36.3", True), ("v1.37.2", True), ("v1.38.0-beta.0", True)],
)
def test_the_real_node_of_1_34_and_newer_gets_containerd_2_for_cdi(version: str, needs: bool) -> None:
    assert testenv.needs_containerd_2(version) is needs


def test_the_installed_go_builds_what_it_can_and_a_newer_toolchain_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HAMI_GO_TOOLCHAIN", raising=False)
    try:
        assert testenv.use_toolchain("1.26.0", (1, 26, 8)) == "1.26.8"
        assert testenv.go_env()["GOTOOLCHAIN"] == "local"
        assert testenv.use_toolchain("1.27.0", (1, 26, 8)) == testenv.NEWER_GO_TOOLCHAIN.removeprefix("go")
        assert testenv.go_env()["GOTOOLCHAIN"] == testenv.NEWER_GO_TOOLCHAIN
        monkeypatch.setenv("HAMI_GO_TOOLCHAIN", "go1.27.0")
        with pytest.raises(testenv.BuildError, match=r"HAMI_GO_TOOLCHAIN to a Go toolchain >= 1\.28\.0"):
            testenv.use_toolchain("1.28.0", (1, 26, 8))
    finally:
        testenv.use_toolchain("1.0", (1, 26, 8))  # back to GOTOOLCHAIN=local for the other tests


def test_locate_containerd_prints_the_build_only_for_releases_that_need_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HAMI_TESTENV_CACHE", str(tmp_path))
    monkeypatch.delenv("HAMI_K8S_VERSION", raising=False)
    assert testenv.main(["locate", "--containerd", "--k8s-version=v1.33.5"]) == 0  # Debian's containerd will do
    assert capsys.readouterr().out == ""
    assert testenv.main(["locate", "--containerd", "--k8s-version=v1.38.0-beta.0"]) == 1
    assert f"containerd-{testenv.CONTAINERD_VERSION}/" in capsys.readouterr().err
    directory = tmp_path / f"containerd-{testenv.CONTAINERD_VERSION}"
    directory.mkdir()
    for name in testenv.CONTAINERD_BINARIES:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    (directory / "manifest.json").write_text("{}")
    assert testenv.main(["locate", "--containerd", "--k8s-version=v1.38.0-beta.0"]) == 0
    assert capsys.readouterr().out.strip() == str(directory)


def test_locate_without_a_build_says_to_run_make_testenv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HAMI_TESTENV_CACHE", str(tmp_path))
    monkeypatch.delenv("HAMI_K8S_VERSION", raising=False)
    assert testenv.main(["locate"]) == 1
    assert "make testenv" in capsys.readouterr().err


def test_waiting_on_another_builds_lock_prints_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import fcntl
    import threading

    lock = tmp_path / "k8s-v0.lock"
    entered = threading.Event()
    with lock.open("a+") as other:  # another run holds the lock
        fcntl.flock(other, fcntl.LOCK_EX)

        def second_run() -> None:
            with testenv.build_lock(lock, progress_every=0.05, poll=0.01):
                entered.set()

        thread = threading.Thread(target=second_run)
        thread.start()
        assert not entered.wait(0.3)  # still waiting while the other holds it
        fcntl.flock(other, fcntl.LOCK_UN)
        thread.join(5)
    assert entered.is_set()
    out = capsys.readouterr().out
    assert "waiting for it" in out
    assert out.count("still waiting for the other build") >= 2
    assert "the other build finished after" in out


def test_node_wrapper_pins_the_node_commands(tmp_path: Path) -> None:
    testenv.write_k8s_wrapper(tmp_path, "v1.36.3", UPSTREAM, testenv.NODE_BINARIES)
    tools = (tmp_path / "tools.go").read_text()
    for name in ("kubelet", "kube-proxy", "kube-controller-manager"):
        assert f'_ "k8s.io/kubernetes/cmd/{name}"' in tools
    assert "kube-apiserver" not in tools


def test_locate_node_finds_the_node_build_of_the_control_planes_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HAMI_TESTENV_CACHE", str(tmp_path))
    monkeypatch.delenv("HAMI_K8S_VERSION", raising=False)
    version = testenv.DEFAULT_K8S_VERSION
    _fake_build(tmp_path, version)
    assert testenv.main(["locate", "--node"]) == 1  # the control plane alone is not enough
    assert f"k8s-node-{version}/" in capsys.readouterr().err
    node = tmp_path / f"k8s-node-{version}"
    node.mkdir()
    for name in testenv.NODE_BINARIES:
        (node / name).write_text("#!/bin/sh\n")
        (node / name).chmod(0o755)
    (node / "manifest.json").write_text(json.dumps({"kubernetes": version}))
    (tmp_path / f"k8s-{version}" / "kubelet").write_text("")  # the control plane's directory is never looked in

    assert testenv.main(["locate", "--node"]) == 0
    assert capsys.readouterr().out.strip() == str(node)
    assert testenv.main(["locate"]) == 0  # the control plane is still complete and found as before
    assert capsys.readouterr().out.strip() == str(tmp_path / f"k8s-{version}")


def test_a_failed_download_names_the_module_versions_the_proxy_refused() -> None:
    lines = [
        "go: hami.local/k8s-testenv imports",
        "\tk8s.io/apiextensions-api/pkg/client: k8s.io/apiextensions-api@v0.38.0-beta.0: reading "
        "https://proxy.example/k8s.io/apiextensions-api/@v/v0.38.0-beta.0.zip: 403 Forbidden",
        "\tsigs.k8s.io/structured-merge-diff/v7/merge: sigs.k8s.io/structured-merge-diff/v7@v7.0.1: reading "
        "https://proxy.example/sigs.k8s.io/structured-merge-diff/v7/@v/v7.0.1.zip: 403 Forbidden",
        "\tk8s.io/apiextensions-api@v0.38.0-beta.0: reading https://proxy.example/x.zip: 403 Forbidden",
    ]
    assert testenv.unserved_summary(lines) == (
        "\nthe Go module proxy does not serve: k8s.io/apiextensions-api@v0.38.0-beta.0, "
        "sigs.k8s.io/structured-merge-diff/v7@v7.0.1"
    )
    assert testenv.unserved_summary(["go: downloading k8s.io/api v0.37.2"]) == ""
