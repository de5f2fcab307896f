"""``hami dra-plugin``: the DRA kubelet plugin's command line (docs/dra-driver.md).

Options come from flags or the environment the chart sets (``NODE_NAME``, ``HOOK_PATH``, ``CDI_ROOT``).
``--fake-nvml`` replaces NVML with a YAML fixture (tests and GPU-less clusters; the CDI specs then carry no device
nodes). This module only declares the options; the work is imported when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["dra_plugin"]


def dra_plugin(
    *,
    node_name: Annotated[str, typer.Option(envvar="NODE_NAME", help="This node's name (the DaemonSet sets it).")] = "",
    plugin_dir: Annotated[
        Path, typer.Option(help="Where the DRA socket and the checkpoint live (kubelet's plugin directory).")
    ] = Path("/var/lib/kubelet/plugins/hami-core-gpu.project-hami.io"),
    registry_dir: Annotated[Path, typer.Option(help="kubelet's plugin registry directory.")] = Path(
        "/var/lib/kubelet/plugins_registry"
    ),
    cdi_dir: Annotated[Path, typer.Option(envvar="CDI_ROOT", help="Where the claims' CDI specs are written.")] = Path(
        "/var/run/cdi"
    ),
    hook_path: Annotated[
        str, typer.Option(envvar="HOOK_PATH", help="Host directory holding vgpu/libvgpu.so (HAMi-core).")
    ] = "/usr/local",
    libvgpu_version: Annotated[
        str, typer.Option(help="Mount <hook>/vgpu/libvgpu.so.<version> when that file exists on the host.")
    ] = "v2.10.0",
    rediscover_seconds: Annotated[float, typer.Option(help="How often the GPUs are read again.")] = 60.0,
    recover_after_seconds: Annotated[
        float, typer.Option(help="A GPU is healthy again this long after its last critical XID.")
    ] = 300.0,
    fake_nvml: Annotated[
        Path | None,
        typer.Option(
            help="TESTS ONLY: a YAML fixture instead of NVML; the node advertises GPUs that do not exist.", hidden=True
        ),
    ] = None,
    scheduler_name: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME",
            help="hami's scheduler name (repeatable): cards that pods of these schedulers hold through the device "
            "plugin are held back from claims.",
        ),
    ] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="Default: KUBECONFIG, in-cluster, ~/.kube/config.")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the DRA kubelet plugin: publish this node's GPUs as shares and prepare claims through CDI."""
    from hami.deviceplugin.dra.launch import LaunchOptions, launch

    launch(
        LaunchOptions(
            node_name=node_name,
            plugin_dir=plugin_dir,
            registry_dir=registry_dir,
            cdi_dir=cdi_dir,
            hook_path=hook_path,
            libvgpu_version=libvgpu_version,
            rediscover_s=rediscover_seconds,
            recover_after_s=recover_after_seconds,
            fake_nvml=fake_nvml,
            schedulers=tuple(scheduler_name or ("hami-scheduler",)),
            kubeconfig=kubeconfig,
            log_level=log_level,
        )
    )
