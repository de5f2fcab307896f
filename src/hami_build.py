"""hami's build backend: setuptools', after making the two things git does not hold but the package needs.

1. **gRPC stubs.** Every folder under ``src/hami`` that holds ``.proto`` files gets a ``_generated`` package
   beside them (``hami/deviceplugin/api.proto`` -> ``hami.deviceplugin._generated.api_pb2`` and ``api_pb2_grpc``),
   generated with grpcio-tools at the version ``constraints.txt`` pins (asked for as a build requirement, so
   ``pip install .`` and ``pip wheel .`` fetch it into the isolated build environment). A folder whose stubs are
   newer than its protos is left alone. ``make setup`` runs the same code (``python src/hami_build.py``).
2. **Build information.** ``hami/_build.py`` (git-ignored) records the commit and the build date that ``hami
   version`` prints: the commit from ``HAMI_BUILD_COMMIT``, else ``git rev-parse HEAD`` of the source checkout,
   else ``unknown``; the date from ``SOURCE_DATE_EPOCH`` (reproducible builds), else now, in UTC. Written for
   wheels and sdists, not for editable installs (a checkout reads git when asked: ``hami.buildinfo``).

It lives in ``src`` beside the package (``backend-path``), not in it: the wheel does not ship it. Standard library
only, but for grpcio-tools when stubs are to be made.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parent
ROOT = SRC.parent
GENERATED = "_generated"
BUILD_INFO = SRC / "hami" / "_build.py"


def proto_folders(src: Path = SRC) -> list[Path]:
    """The folders under ``src/hami`` that hold ``.proto`` files (each gets a ``_generated`` package)."""
    return sorted({p.parent for p in (src / "hami").rglob("*.proto") if GENERATED not in p.parts})


def _stale(folder: Path) -> bool:
    out = folder / GENERATED
    for proto in folder.glob("*.proto"):
        made = [out / f"{proto.stem}_pb2.py", out / f"{proto.stem}_pb2_grpc.py"]
        if not all(m.exists() and m.stat().st_mtime >= proto.stat().st_mtime for m in made):
            return True
    return not (out / "__init__.py").exists()


def stubs_needed(src: Path = SRC) -> bool:
    """Whether some folder's stubs are missing or older than its protos."""
    return any(_stale(folder) for folder in proto_folders(src))


def generate_stubs(src: Path = SRC) -> list[Path]:
    """Generate the stubs of every proto folder that needs them; returns the ``_generated`` folders written."""
    written = []
    for folder in proto_folders(src):
        if _stale(folder):
            written.append(_generate(folder, src))
    return written


def _generate(folder: Path, src: Path) -> Path:
    from grpc_tools import protoc  # only here: a build that makes no stub needs no grpcio-tools

    out = folder / GENERATED
    out.mkdir(exist_ok=True)
    package = "/".join(out.relative_to(src).parts)  # the modules import each other as hami.x._generated.*
    protos = sorted(folder.glob("*.proto"))
    well_known = resources.files("grpc_tools") / "_proto"
    args = ["protoc", f"-I{package}={folder}", f"-I{well_known}"]
    args += [f"--python_out={src}", f"--grpc_python_out={src}", f"--pyi_out={src}"]
    if protoc.main([*args, *(f"{package}/{p.name}" for p in protos)]) != 0:
        raise RuntimeError(f"protoc failed on {', '.join(str(p) for p in protos)}")
    names = ", ".join(p.name for p in protos)
    dotted = ".".join(out.relative_to(src).parts)
    (out / "__init__.py").write_text(
        f'"""{dotted}: gRPC stubs generated from {names} at build time (git-ignored; do not edit)."""\n'
    )
    return out


def grpc_tools_pin(root: Path = ROOT) -> str:
    """``grpcio-tools==X`` as ``constraints.txt`` pins it (unpinned when the file is absent)."""
    constraints = root / "constraints.txt"
    if constraints.exists():
        for line in constraints.read_text().splitlines():
            if line.strip().lower().startswith("grpcio-tools=="):
                return line.strip()
    return "grpcio-tools"


def build_info(root: Path = ROOT, env: dict[str, str] | None = None) -> tuple[str, str]:
    """The commit and the build date (ISO 8601, UTC) to record; ``unknown`` for a commit nobody can tell."""
    env = dict(os.environ) if env is None else env
    commit = env.get("HAMI_BUILD_COMMIT", "").strip() or git_commit(root) or "unknown"
    epoch = env.get("SOURCE_DATE_EPOCH", "").strip()
    when = (
        datetime.datetime.fromtimestamp(int(epoch), datetime.UTC)
        if epoch.isdigit()
        else datetime.datetime.now(datetime.UTC)
    )
    return commit, when.strftime("%Y-%m-%dT%H:%M:%SZ")


def git_commit(root: Path) -> str | None:
    """``git rev-parse HEAD`` of the checkout at ``root`` (``-dirty`` added when files differ), None without git."""
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head or None


def write_build_info(root: Path = ROOT, target: Path = BUILD_INFO) -> None:
    """Record the build information; a record that names a commit is kept when this build cannot tell one (a
    wheel built from an sdist)."""
    commit, date = build_info(root)
    if commit == "unknown" and target.exists():
        return
    target.write_text(
        '"""Written by the build (src/hami_build.py): what `hami version` prints. Git-ignored."""\n\n'
        f"COMMIT = {commit!r}\nDATE = {date!r}\n"
    )


def _setuptools() -> Any:
    """setuptools' backend, imported when a hook runs (``make stubs`` needs no setuptools)."""
    from setuptools import build_meta

    return build_meta


def get_requires_for_build_sdist(config_settings: dict[str, Any] | None = None) -> list[str]:
    return list(_setuptools().get_requires_for_build_sdist(config_settings))


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    return str(_setuptools().prepare_metadata_for_build_wheel(metadata_directory, config_settings))


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    return str(_setuptools().prepare_metadata_for_build_editable(metadata_directory, config_settings))


def _requires(base: list[str]) -> list[str]:
    return [*base, grpc_tools_pin()] if stubs_needed() else base


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    return _requires(_setuptools().get_requires_for_build_wheel(config_settings))


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    return _requires(_setuptools().get_requires_for_build_editable(config_settings))


def build_wheel(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    generate_stubs()
    write_build_info()
    return str(_setuptools().build_wheel(wheel_directory, config_settings, metadata_directory))


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    write_build_info()
    return str(_setuptools().build_sdist(sdist_directory, config_settings))


def build_editable(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    generate_stubs()
    return str(_setuptools().build_editable(wheel_directory, config_settings, metadata_directory))


if __name__ == "__main__":  # make setup: the stubs alone
    for folder in generate_stubs():
        print(f"generated {folder.relative_to(ROOT)}", file=sys.stderr)
