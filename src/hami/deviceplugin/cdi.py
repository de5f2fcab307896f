"""CDI (Container Device Interface) specs for this node's GPUs, for the ``cdi-annotations``/``cdi-cri`` strategies.

A CDI spec declares devices by fully qualified name, ``<vendor>/<class>=<name>``, each with the edits a container
runtime applies when a container asks for it. hami writes two specs into the CDI spec directory
(``CDI_SPECS_DIR``, default ``/var/run/cdi``), replacing them atomically whenever the devices change:

``hami-nvidia-gpu.json``   kind ``k8s.device-plugin.nvidia.com/gpu``; one device per GPU, named by its UUID, with its
                           ``/dev/nvidia<minor>`` node, and one per MIG device (MIG mode), named by the MIG UUID,
                           with its parent GPU's node; the spec-wide edits add ``/dev/nvidiactl``,
                           ``/dev/nvidia-uvm`` and ``/dev/nvidia-uvm-tools``, and, when ``NVIDIA_CDI_HOOK_PATH`` is
                           set, the ``nvidia-cdi-hook update-ldcache`` createContainer hook. Host paths are under
                           ``NVIDIA_DRIVER_ROOT``.
``hami-nvidia-imex.json``  kind ``k8s.device-plugin.nvidia.com/imex-channel``; one device per ``IMEX_CHANNEL_IDS``
                           entry with its ``/dev/nvidia-caps-imex-channels/channel<N>`` node (only when channels are
                           configured).

The kind is the one HAMi's plugin (a fork of NVIDIA's) uses, so a runtime configured for it finds hami's devices.
Driver libraries are not listed: the runtime's NVIDIA hook (or the image) provides them, as with ``envvar``.
:func:`gpu_spec` and :func:`imex_spec` are pure; :func:`write_spec` does the file I/O.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from hami.deviceplugin.discovery import GpuInfo
from hami.deviceplugin.nvml import MigInstance

__all__ = [
    "CDI_VERSION",
    "GPU_KIND",
    "GPU_SPEC_FILE",
    "IMEX_KIND",
    "IMEX_SPEC_FILE",
    "device_name",
    "gpu_spec",
    "host_path",
    "imex_spec",
    "write_spec",
]

CDI_VERSION: Final = "0.6.0"
"""The oldest CDI version with everything used here (``hostPath`` on device nodes arrived in 0.5.0)."""
GPU_KIND: Final = "k8s.device-plugin.nvidia.com/gpu"
IMEX_KIND: Final = "k8s.device-plugin.nvidia.com/imex-channel"
GPU_SPEC_FILE: Final = "hami-nvidia-gpu.json"
IMEX_SPEC_FILE: Final = "hami-nvidia-imex.json"
CONTROL_NODES: Final = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def device_name(kind: str, name: str) -> str:
    """The fully qualified CDI device name ``<kind>=<name>``."""
    return f"{kind}={name}"


def host_path(driver_root: str, path: str) -> str:
    """``path`` (absolute, as in the container) under the driver root on the host."""
    root = driver_root.rstrip("/")
    return f"{root}{path}" if root else path


def _node(path: str, driver_root: str) -> dict[str, Any]:
    node: dict[str, Any] = {"path": path}
    if host_path(driver_root, path) != path:
        node["hostPath"] = host_path(driver_root, path)
    return node


def gpu_spec(
    gpus: Sequence[GpuInfo],
    mig: Mapping[str, Sequence[MigInstance]],
    *,
    driver_root: str = "/",
    hook_path: str = "",
) -> dict[str, Any]:
    """The GPU spec (module docstring). ``mig`` maps a GPU UUID to its MIG instances; those without a MIG
    device (no compute instance) are left out."""
    devices: list[dict[str, Any]] = []
    for gpu in gpus:
        nodes = [_node(f"/dev/nvidia{gpu.minor}", driver_root)] if gpu.minor is not None else []
        devices.append({"name": gpu.uuid, "containerEdits": {"deviceNodes": nodes}})
        for instance in mig.get(gpu.uuid, ()):
            if instance.mig_uuid:
                devices.append({"name": instance.mig_uuid, "containerEdits": {"deviceNodes": nodes}})
    edits: dict[str, Any] = {"deviceNodes": [_node(p, driver_root) for p in CONTROL_NODES]}
    if hook_path:
        edits["hooks"] = [
            {
                "hookName": "createContainer",
                "path": hook_path,
                "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib64", "--folder", "/usr/lib"],
            }
        ]
    return {"cdiVersion": CDI_VERSION, "kind": GPU_KIND, "devices": devices, "containerEdits": edits}


def imex_spec(channels: Sequence[int], *, driver_root: str = "/") -> dict[str, Any]:
    """The IMEX channel spec: one device per channel id."""
    return {
        "cdiVersion": CDI_VERSION,
        "kind": IMEX_KIND,
        "devices": [
            {
                "name": str(channel),
                "containerEdits": {
                    "deviceNodes": [_node(f"/dev/nvidia-caps-imex-channels/channel{channel}", driver_root)]
                },
            }
            for channel in channels
        ],
    }


def write_spec(directory: Path, name: str, spec: Mapping[str, Any]) -> bool:
    """Write ``spec`` as ``directory/name`` atomically (a runtime never reads half a file); returns whether the
    file changed. Raises ``OSError``."""
    path = directory / name
    text = json.dumps(spec, indent=2, sort_keys=True) + "\n"
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    directory.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return True
