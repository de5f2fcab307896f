"""Fast checks of scripts/build-image (no mmdebstrap, no network, no container runtime): the OCI layout it
writes, that the same input gives the same digest, its wheel installer, image names from the chart, and that the
Dockerfile describes the same image. The full `build-image hami` runs with the real-node end-to-end tests."""

from __future__ import annotations

import gzip
import hashlib
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-image"
EPOCH = 1_700_000_000


def _load() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("build_image", str(SCRIPT))
    spec = importlib.util.spec_from_loader("build_image", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_image"] = module  # dataclasses look their module up by name
    loader.exec_module(module)
    return module


bi = _load()


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cached layers go to the test's folder, not the user's ~/.cache/hami/images."""
    monkeypatch.setenv("HAMI_TESTENV_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)


# ----------------------------------------------------------------------------------------------------
# helpers: read an OCI archive back


def _archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _blob(files: dict[str, bytes], digest: str) -> bytes:
    data = files[f"blobs/sha256/{digest.removeprefix('sha256:')}"]
    assert hashlib.sha256(data).hexdigest() == digest.removeprefix("sha256:")
    return data


def _image(path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], list[bytes]]:
    """(index, manifest, config, uncompressed layers) of an archive, every digest and size checked."""
    files = _archive(path)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    manifest_bytes = _blob(files, entry["digest"])
    assert len(manifest_bytes) == entry["size"]
    manifest = json.loads(manifest_bytes)
    config_bytes = _blob(files, manifest["config"]["digest"])
    assert len(config_bytes) == manifest["config"]["size"]
    layers = []
    for layer in manifest["layers"]:
        compressed = _blob(files, layer["digest"])
        assert len(compressed) == layer["size"]
        layers.append(gzip.decompress(compressed))
    return index, manifest, json.loads(config_bytes), layers


def _tree(root: Path) -> Path:
    (root / "opt" / "hami" / "bin").mkdir(parents=True)
    (root / "opt" / "hami" / "bin" / "hami").write_text("#!/opt/hami/bin/python\nprint('hi')\n")
    (root / "opt" / "hami" / "bin" / "hami").chmod(0o700)
    (root / "opt" / "hami" / "bin" / "python").symlink_to("/usr/bin/python3.11")
    (root / "opt" / "hami" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (root / "opt" / "hami" / "pyvenv.cfg").chmod(0o600)
    return root


def _build_from_tree(tree: Path, dest: Path, reference: str = "hami:0.1.0") -> Any:
    entries = bi.tree_entries(tree, epoch=EPOCH)
    blob, diff_id = bi.write_layer(entries, dest.with_suffix(".layer.tar.gz"), EPOCH)
    spec = bi.ImageSpec(
        reference=bi.normalize_reference(reference),
        layers=[bi.Layer(blob, diff_id, "test layer")],
        epoch=EPOCH,
        arch="amd64",
        config=bi.hami_config(),
    )
    return bi.write_oci_archive(spec, dest)


# ----------------------------------------------------------------------------------------------------
# the OCI layout


def test_the_archive_is_an_oci_image_layout_that_names_the_image_for_containerd(tmp_path: Path) -> None:
    built = _build_from_tree(_tree(tmp_path / "tree"), tmp_path / "hami.oci.tar")
    index, manifest, config, layers = _image(built.path)

    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert index["schemaVersion"] == manifest["schemaVersion"] == 2
    (entry,) = index["manifests"]
    assert entry["mediaType"] == manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert entry["annotations"] == {
        "io.containerd.image.name": "docker.io/library/hami:0.1.0",
        "org.opencontainers.image.ref.name": "0.1.0",
    }
    assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
    assert built.reference == "docker.io/library/hami:0.1.0"
    assert built.digest == entry["digest"]
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert [layer["mediaType"] for layer in manifest["layers"]] == ["application/vnd.oci.image.layer.v1.tar+gzip"]
    # diff_ids are the digests of the uncompressed layers, in order
    assert config["rootfs"] == {
        "type": "layers",
        "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}" for layer in layers],
    }
    assert config["os"] == "linux"
    assert config["architecture"] == "amd64"
    assert config["created"] == "2023-11-14T22:13:20Z"
    assert len(config["history"]) == 1


def test_the_hami_config_runs_hami_from_the_venv_as_the_unprivileged_user(tmp_path: Path) -> None:
    built = _build_from_tree(_tree(tmp_path / "tree"), tmp_path / "hami.oci.tar")
    _, _, config, _ = _image(built.path)
    run = config["config"]
    assert run["User"] == "10001:10001"
    assert run["Entrypoint"] == ["hami"]
    assert run["Cmd"] == ["--help"]
    env = dict(item.split("=", 1) for item in run["Env"])
    assert env["PATH"].split(":")[0] == "/opt/hami/bin"
    assert "/usr/bin" in env["PATH"].split(":")
    assert env["PYTHONUNBUFFERED"] == env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["LANG"] == "C.UTF-8"
    assert (
        run["Labels"]["org.opencontainers.image.version"]
        == yaml.safe_load((ROOT / "charts/hami/Chart.yaml").read_text())["appVersion"]
    )


def test_layer_entries_are_sorted_root_owned_and_time_stamped_with_the_epoch(tmp_path: Path) -> None:
    built = _build_from_tree(_tree(tmp_path / "tree"), tmp_path / "hami.oci.tar")
    files = _archive(built.path)
    _, manifest, _, layers = _image(built.path)
    compressed = files[f"blobs/sha256/{manifest['layers'][0]['digest'][7:]}"]
    assert compressed[4:8] == b"\0\0\0\0"  # gzip MTIME
    assert not compressed[3] & 0x08  # no FNAME
    with tarfile.open(fileobj=io.BytesIO(layers[0])) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == [
        "opt",
        "opt/hami",
        "opt/hami/bin",
        "opt/hami/bin/hami",
        "opt/hami/bin/python",
        "opt/hami/pyvenv.cfg",
    ]
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", EPOCH)}
    modes = {m.name: m.mode for m in members}
    assert modes["opt/hami/bin/hami"] == 0o755  # executable for everyone, whatever the umask was
    assert modes["opt/hami/pyvenv.cfg"] == 0o644
    assert members[4].issym()
    assert members[4].linkname == "/usr/bin/python3.11"


def test_the_same_tree_gives_the_same_digest_and_a_change_gives_another(tmp_path: Path) -> None:
    first = _build_from_tree(_tree(tmp_path / "a"), tmp_path / "one" / "hami.oci.tar")
    second_tree = _tree(tmp_path / "b")
    os.utime(second_tree / "opt" / "hami" / "pyvenv.cfg", (1, 1))  # other times, same content
    second = _build_from_tree(second_tree, tmp_path / "two" / "hami.oci.tar")
    assert first.digest == second.digest
    assert first.path.read_bytes() == second.path.read_bytes()

    (second_tree / "opt" / "hami" / "pyvenv.cfg").write_text("home = /usr/local/bin\n")
    third = _build_from_tree(second_tree, tmp_path / "three" / "hami.oci.tar")
    assert third.digest != first.digest


def test_pause_image_is_a_static_binary_built_reproducibly(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (scripts/build-image pause installs it with apt)")
    one = bi.build_pause(tmp_path / "one", bi.PAUSE_REFERENCE)
    two = bi.build_pause(tmp_path / "two", bi.PAUSE_REFERENCE)
    assert one.digest == two.digest
    assert one.reference == "localhost/hami-test/pause:1.0"
    _, _, config, layers = _image(one.path)
    assert config["config"]["Entrypoint"] == ["/pause"]
    with tarfile.open(fileobj=io.BytesIO(layers[0])) as tar:
        (member,) = tar.getmembers()
        binary = tar.extractfile(member).read()  # type: ignore[union-attr]
    assert member.name == "pause"
    assert member.mode == 0o755
    assert binary[:4] == b"\x7fELF"
    assert b"/lib64/ld-linux" not in binary
    assert b"ld-linux-aarch64" not in binary


def test_kube_scheduler_image_wraps_the_binary_under_the_charts_image_name(tmp_path: Path) -> None:
    binary = tmp_path / "kube-scheduler"
    binary.write_text('#!/bin/sh\necho "Kubernetes v1.36.3"\n')
    binary.chmod(0o755)
    built = bi.build_kube_scheduler(tmp_path / "out", binary, None)
    values = yaml.safe_load((ROOT / "charts/hami/values.yaml").read_text())["scheduler"]["kubeScheduler"]["image"]
    assert built.reference == f"{values['registry']}/{values['repository']}:v1.36.3"
    assert built.path.name == "kube-scheduler.oci.tar"
    _, _, config, layers = _image(built.path)
    assert config["config"]["User"] == "65532:65532"
    assert config["config"]["Entrypoint"] == ["/usr/local/bin/kube-scheduler"]
    with tarfile.open(fileobj=io.BytesIO(layers[0])) as tar:
        found = tar.getmember("usr/local/bin/kube-scheduler")
        assert tar.extractfile(found).read() == binary.read_bytes()  # type: ignore[union-attr]
        assert "nonroot:x:65532:65532" in tar.extractfile("etc/passwd").read().decode()  # type: ignore[union-attr]
    assert found.mode == 0o755
    assert bi.build_kube_scheduler(tmp_path / "o2", binary, "localhost/ks:test").reference == "localhost/ks:test"


def test_kube_scheduler_without_a_version_is_refused(tmp_path: Path) -> None:
    binary = tmp_path / "kube-scheduler"
    binary.write_text("#!/bin/sh\necho hello\n")
    binary.chmod(0o755)
    with pytest.raises(bi.BuildError, match="no Kubernetes version"):
        bi.build_kube_scheduler(tmp_path / "out", binary, None)
    with pytest.raises(bi.BuildError, match="--binary"):
        bi.build_kube_scheduler(tmp_path / "out", tmp_path / "missing", None)


# ----------------------------------------------------------------------------------------------------
# the base layer from mmdebstrap's tar


def _rootfs_tar(path: Path) -> Path:
    def add(tar: tarfile.TarFile, name: str, data: bytes | None = None, **fields: Any) -> None:
        info = tarfile.TarInfo(name)
        info.mtime = 2_000_000_000  # after the epoch: clamped
        for key, value in fields.items():
            setattr(info, key, value)
        if data is not None:
            info.size = len(data)
        tar.addfile(info, io.BytesIO(data) if data is not None else None)

    with tarfile.open(path, "w") as tar:
        add(tar, "./", type=tarfile.DIRTYPE, mode=0o755)
        add(tar, "./usr/", type=tarfile.DIRTYPE, mode=0o755)
        add(tar, "./usr/bin/", type=tarfile.DIRTYPE, mode=0o755)
        add(tar, "./usr/bin/perl", b"binary", mode=0o755)
        add(tar, "./usr/bin/perl5", type=tarfile.LNKTYPE, linkname="./usr/bin/perl")
        add(tar, "./usr/bin/aaa", type=tarfile.LNKTYPE, linkname="./usr/bin/perl")  # sorts before its target
        add(tar, "./var/", type=tarfile.DIRTYPE, mode=0o755)
        add(tar, "./var/mail/", type=tarfile.DIRTYPE, mode=0o2775, gid=8, gname="mail")
        add(tar, "./dev/", type=tarfile.DIRTYPE, mode=0o755)
        add(tar, "./dev/null", type=tarfile.CHRTYPE, devmajor=1, devminor=3, mode=0o666)
        add(tar, "./etc/", type=tarfile.DIRTYPE, mode=0o755)
        add(tar, "./etc/hostname", b"buildhost\n")
        add(tar, "./etc/passwd", b"root:x:0:0::/root:/bin/sh\n")
    return path


def test_rootfs_entries_are_sorted_keep_owners_drop_host_files_and_relink(tmp_path: Path) -> None:
    entries = bi.rootfs_entries(_rootfs_tar(tmp_path / "rootfs.tar"), EPOCH)
    by_name = {e.info.name: e for e in entries}
    assert [e.info.name for e in entries] == [
        "dev",
        "etc",
        "etc/passwd",
        "usr",
        "usr/bin",
        "usr/bin/aaa",
        "usr/bin/perl",
        "usr/bin/perl5",
        "var",
        "var/mail",
    ]
    assert by_name["usr/bin/aaa"].info.isreg()
    assert by_name["usr/bin/aaa"].content == b"binary"
    assert by_name["usr/bin/perl"].info.islnk()
    assert by_name["usr/bin/perl"].info.linkname == "usr/bin/aaa"
    assert by_name["usr/bin/perl5"].info.linkname == "usr/bin/aaa"
    assert by_name["usr/bin/aaa"].info.mode == 0o755
    assert (by_name["var/mail"].info.gid, by_name["var/mail"].info.mode) == (8, 0o2775)
    assert {e.info.mtime for e in entries} == {EPOCH}
    assert {e.info.gname for e in entries} == {""}
    # the written layer extracts: each hard link comes after the file it names
    blob, _ = bi.write_layer(entries, tmp_path / "layer.tar.gz", EPOCH)
    out = tmp_path / "x"
    with tarfile.open(blob.path) as tar:
        tar.extractall(out, filter="fully_trusted")
    assert (out / "usr/bin/perl5").read_bytes() == b"binary"
    assert (out / "usr/bin/perl5").stat().st_ino == (out / "usr/bin/aaa").stat().st_ino


def test_dpkg_status_versions() -> None:
    status = (
        "Package: python3.11\nStatus: install ok installed\nVersion: 3.11.2-6+deb12u6\n\n"
        "Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n"
    )
    assert bi.dpkg_versions(status) == {"python3.11": "3.11.2-6+deb12u6"}


def test_the_base_key_follows_its_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    key = bi.base_key("amd64", bi.BASE_EPOCH)
    assert key == bi.base_key("amd64", bi.BASE_EPOCH)
    assert key != bi.base_key("arm64", bi.BASE_EPOCH)
    monkeypatch.setattr(bi, "DPKG_OPTIONS", (*bi.DPKG_OPTIONS, "path-exclude=/x/*"))
    assert key != bi.base_key("amd64", bi.BASE_EPOCH)


# ----------------------------------------------------------------------------------------------------
# the wheel installer


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            archive.writestr(info, data)
    return path


def test_install_wheel_places_files_scripts_and_a_true_record(tmp_path: Path) -> None:
    wheel = _wheel(
        tmp_path / "demo-1.0-py3-none-any.whl",
        {
            "demo/__init__.py": b"def main():\n    return 0\n",
            "demo/_speed.so": b"\x7fELF",
            "demo-1.0.data/scripts/demo-tool": b"#!python\nprint('tool')\n",
            "demo-1.0.data/data/share/demo.txt": b"data\n",
            "demo-1.0.dist-info/METADATA": b"Name: demo\nVersion: 1.0\n",
            "demo-1.0.dist-info/entry_points.txt": (
                b"[console_scripts]\ndemo = demo:main\nDemoCase = demo.cli:app.run\n"
            ),
            "demo-1.0.dist-info/RECORD": b"stale\n",
        },
    )
    layout = bi.VenvLayout(tmp_path / "opt" / "hami")
    bi.install_wheel(wheel, layout)

    site = layout.site
    assert (site / "demo" / "__init__.py").read_text().startswith("def main")
    assert os.access(site / "demo" / "_speed.so", os.X_OK)
    assert (layout.root / "share" / "demo.txt").read_text() == "data\n"
    assert (layout.bin / "demo-tool").read_text() == "#!/opt/hami/bin/python\nprint('tool')\n"
    script = (layout.bin / "demo").read_text()
    assert script.startswith("#!/opt/hami/bin/python\n")
    assert "from demo import main" in script
    assert "sys.exit(main())" in script
    assert "from demo.cli import app" in (layout.bin / "DemoCase").read_text()  # names keep their case
    assert os.access(layout.bin / "demo", os.X_OK)
    rows = [line.split(",") for line in (site / "demo-1.0.dist-info" / "RECORD").read_text().splitlines()]
    recorded = {row[0]: row for row in rows}
    assert recorded["demo-1.0.dist-info/RECORD"][1:] == ["", ""]
    assert (site / "demo-1.0.dist-info" / "INSTALLER").exists()
    for name, digest, size in rows:
        if digest:
            data = (site / name).resolve().read_bytes()
            assert (digest, int(size)) == (bi.record_hash(data), len(data)), name
    assert "../../../bin/demo" in recorded


def test_install_wheel_refuses_paths_outside_the_environment(tmp_path: Path) -> None:
    wheel = _wheel(
        tmp_path / "evil-1.0-py3-none-any.whl",
        {"../../etc/passwd": b"x", "evil-1.0.dist-info/METADATA": b"Name: evil\n"},
    )
    with pytest.raises(bi.BuildError, match="not a plain relative path"):
        bi.install_wheel(wheel, bi.VenvLayout(tmp_path / "venv"))


def test_wheel_platforms_cover_bookworms_glibc() -> None:
    platforms = bi.wheel_platforms("amd64")
    assert platforms[0] == "manylinux_2_36_x86_64"
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"} <= set(platforms)
    assert not any("2_37" in p for p in platforms)
    assert bi.wheel_platforms("arm64")[-1] == "manylinux2014_aarch64"


# ----------------------------------------------------------------------------------------------------
# image names


@pytest.mark.parametrize(
    ("ref", "normalized"),
    [
        ("hami:0.1.0", "docker.io/library/hami:0.1.0"),
        ("hami", "docker.io/library/hami:latest"),
        ("someone/hami:1", "docker.io/someone/hami:1"),
        ("registry.k8s.io/kube-scheduler:v1.36.3", "registry.k8s.io/kube-scheduler:v1.36.3"),
        ("localhost:5000/hami:dev", "localhost:5000/hami:dev"),
        ("localhost/hami-test/pause:1.0", "localhost/hami-test/pause:1.0"),
    ],
)
def test_normalize_reference(ref: str, normalized: str) -> None:
    assert bi.normalize_reference(ref) == normalized


@pytest.mark.parametrize("ref", ["", "Hami:1", "hami@sha256:abc", "hami:bad tag", "hami:"])
def test_bad_references_are_refused_by_name(ref: str) -> None:
    with pytest.raises(bi.BuildError, match="image reference"):
        bi.normalize_reference(ref)


def test_the_default_hami_reference_is_the_charts_image() -> None:
    values = yaml.safe_load((ROOT / "charts/hami/values.yaml").read_text())
    app_version = yaml.safe_load((ROOT / "charts/hami/Chart.yaml").read_text())["appVersion"]
    expected = f"{values['image']['repository']}:{values['image']['tag'] or app_version}"
    assert bi.hami_reference() == bi.normalize_reference(expected)
    assert bi.hami_reference() == "docker.io/library/hami:0.1.0"


def test_yaml_scalars_reads_nested_values_and_skips_comments() -> None:
    text = "a:\n  # c\n  b: 'x'  \n  c:\n    d: 1 # note\ne: \"\"\nf: [1]\n"
    assert bi.yaml_scalars(text) == {"a.b": "x", "a.c.d": "1", "e": "", "f": "[1]"}


# ----------------------------------------------------------------------------------------------------
# the Dockerfile describes the same image


def _dockerfile_stages() -> list[list[tuple[str, str]]]:
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    stages: list[list[tuple[str, str]]] = [[]]
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        if keyword.upper() == "FROM":
            stages.append([])
        stages[-1].append((keyword.upper(), rest.strip()))
    return stages


def test_the_dockerfile_and_the_script_describe_the_same_image() -> None:
    preamble, build, final = _dockerfile_stages()
    args = dict(rest.split("=", 1) for keyword, rest in preamble if keyword == "ARG")
    assert args["DEBIAN_IMAGE"] == f"debian:{bi.DEBIAN_SUITE}-slim"
    assert final[0] == ("FROM", "${DEBIAN_IMAGE}")
    last = dict(final)  # the final stage's instructions
    run = shlex.split(last["RUN"])
    installed = run[run.index("install") : run.index("&&", run.index("install"))]
    assert set(bi.RUNTIME_PACKAGES) <= set(installed)
    assert bi.PYTHON_PACKAGE in bi.RUNTIME_PACKAGES
    assert not {"python3-pip", "python3.11-venv", "gcc"} & set(installed)
    groupadd = run[run.index("groupadd") : run.index("&&", run.index("groupadd"))]
    assert groupadd[groupadd.index("--gid") + 1] == str(bi.HAMI_GID)
    assert groupadd[-1] == bi.HAMI_USER
    useradd = run[run.index("useradd") :]
    assert useradd[useradd.index("--uid") + 1] == str(bi.HAMI_UID)
    assert useradd[useradd.index("--home-dir") + 1] == bi.HAMI_HOME
    assert useradd[useradd.index("--shell") + 1] == bi.HAMI_SHELL
    assert useradd[-1] == bi.HAMI_USER
    assert dict(item.split("=", 1) for item in shlex.split(last["ENV"])) == bi.ENV
    assert last["USER"] == f"{bi.HAMI_UID}:{bi.HAMI_GID}"
    assert json.loads(last["ENTRYPOINT"]) == bi.ENTRYPOINT
    assert json.loads(last["CMD"]) == bi.CMD
    assert last["COPY"] == f"--from=build {bi.VENV} {bi.VENV}"
    build_runs = " ".join(rest for keyword, rest in build if keyword == "RUN")
    assert f"python{bi.PYTHON_VERSION} -m venv {bi.VENV} " in build_runs
    assert "pip uninstall --yes pip" in build_runs  # no pip left in the venv, as the script installs none
    assert "--invalidation-mode unchecked-hash" in build_runs


def test_the_script_and_the_chart_agree_on_the_user() -> None:
    values = yaml.safe_load((ROOT / "charts/hami/values.yaml").read_text())
    assert values["scheduler"]["extender"]["runAsUser"] == bi.HAMI_UID
    assert values["scheduler"]["kubeScheduler"]["runAsUser"] == bi.NONROOT


def test_layers_keep_their_order_in_the_manifest_and_the_config(tmp_path: Path) -> None:
    layers = []
    for name in ("base", "deps", "app"):
        tree = tmp_path / name
        (tree / "opt" / "hami").mkdir(parents=True)
        (tree / "opt" / "hami" / f"{name}.txt").write_text(name)
        blob, diff_id = bi.write_layer(bi.tree_entries(tree, epoch=EPOCH), tmp_path / f"{name}.tar.gz", EPOCH)
        layers.append(bi.Layer(blob, diff_id, name))
    spec = bi.ImageSpec("hami:0.1.0", layers, EPOCH, "arm64", bi.hami_config())
    _, manifest, config, uncompressed = _image(bi.write_oci_archive(spec, tmp_path / "x.oci.tar").path)
    assert [layer["digest"] for layer in manifest["layers"]] == [layer.blob.digest for layer in layers]
    assert config["rootfs"]["diff_ids"] == [layer.diff_id for layer in layers]
    assert [h["created_by"] for h in config["history"]] == ["base", "deps", "app"]
    assert config["architecture"] == "arm64"
    for name, data in zip(("base", "deps", "app"), uncompressed, strict=True):
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            assert tar.extractfile(f"opt/hami/{name}.txt").read() == name.encode()  # type: ignore[union-attr]


def test_the_command_line_prints_archive_reference_and_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = tmp_path / "kube-scheduler"
    binary.write_text('#!/bin/sh\necho "Kubernetes v1.35.2"\n')
    binary.chmod(0o755)
    out = tmp_path / "images"
    assert bi.main(["kube-scheduler", "--binary", str(binary), "--out", str(out)]) == 0
    path, reference, digest = capsys.readouterr().out.strip().split("\t")
    assert Path(path) == out / "kube-scheduler.oci.tar"
    assert reference == "registry.k8s.io/kube-scheduler:v1.35.2"
    index, _, _, _ = _image(Path(path))
    assert index["manifests"][0]["digest"] == digest

    assert bi.main(["pause", "--out", str(out), "--ref", "Not A Name"]) == 1
    assert "image reference 'Not A Name'" in capsys.readouterr().err
    assert not (out / "pause.oci.tar").exists()


def test_test_images_keep_their_digest_from_commit_to_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = tmp_path / "kube-scheduler"
    binary.write_text('#!/bin/sh\necho "Kubernetes v1.36.3"\n')
    binary.chmod(0o755)
    first = bi.build_kube_scheduler(tmp_path / "one", binary, None)
    monkeypatch.setattr(bi, "source_date_epoch", lambda: 2_000_000_000)  # a later commit
    assert bi.build_kube_scheduler(tmp_path / "two", binary, None).digest == first.digest
    _, _, config, _ = _image(first.path)
    assert config["created"] == bi.iso_time(bi.BASE_EPOCH)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # an explicit time stamp is honoured
    assert bi.build_kube_scheduler(tmp_path / "three", binary, None).digest != first.digest
