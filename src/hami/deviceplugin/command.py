"""``hami device-plugin`` (also ``python -m hami.deviceplugin``): the node agent's command line.

Settings come from the scheduler's device config (``--device-config-file``, HAMi's ``--config-file``), the node
config file (``--node-config-file``, default ``/config/config.json``) and the environment HAMi's chart sets
(``NODE_NAME``, ``HOOK_PATH``, ``ENABLE_TOPOLOGY_SCORE``). ``--dry-run`` discovers the GPUs once, prints the
annotations the plugin would write and exits, without a cluster or kubelet. ``--fake-nvml`` replaces NVML with a
YAML fixture (``hami.deviceplugin.fakenvml``), for clusters and tests without GPUs.

This module only declares the options; :mod:`hami.deviceplugin.launch` does the work and is imported when the
command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["device_plugin", "main"]


def device_plugin(
    *,
    node_name: Annotated[str, typer.Option(envvar="NODE_NAME", help="This node's name (the DaemonSet sets it).")] = "",
    device_config_file: Annotated[
        Path | None,
        typer.Option("--device-config-file", "--config-file", help="The scheduler's device-config.yaml."),
    ] = None,
    node_config_file: Annotated[
        Path, typer.Option(help="HAMi's per-node config (nodeconfig[] JSON); missing is fine.")
    ] = Path("/config/config.json"),
    plugin_dir: Annotated[Path, typer.Option(help="kubelet's device-plugin directory.")] = Path(
        "/var/lib/kubelet/device-plugins"
    ),
    socket_name: Annotated[str, typer.Option(help="This plugin's socket file name in --plugin-dir.")] = (
        "hami-nvidia.sock"
    ),
    hook_path: Annotated[
        str, typer.Option(envvar="HOOK_PATH", help="Host directory holding vgpu/libvgpu.so (HAMi-core).")
    ] = "/usr/local",
    libvgpu_version: Annotated[
        str, typer.Option(help="Mount <hook>/vgpu/libvgpu.so.<version> when that file exists on the host.")
    ] = "v2.10.0",
    topology_score: Annotated[
        bool, typer.Option(envvar="ENABLE_TOPOLOGY_SCORE", help="Publish hami.io/node-nvidia-score.")
    ] = False,
    fake_nvml: Annotated[Path | None, typer.Option(help="Use a YAML fixture instead of NVML (no GPU needed).")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="Default: KUBECONFIG, in-cluster, ~/.kube/config.")] = None,
    dry_run: Annotated[bool, typer.Option(help="Print the annotations this node would get, then exit.")] = False,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the NVIDIA device plugin: register this node's GPUs and serve kubelet's Allocate."""
    from hami.deviceplugin.launch import launch

    launch(
        node_name=node_name,
        device_config_file=device_config_file,
        node_config_file=node_config_file,
        plugin_dir=plugin_dir,
        socket_name=socket_name,
        hook_path=hook_path,
        libvgpu_version=libvgpu_version,
        topology_score=topology_score,
        fake_nvml=fake_nvml,
        kubeconfig=kubeconfig,
        dry_run=dry_run,
        log_level=log_level,
    )


def main() -> None:
    """``python -m hami.deviceplugin``."""
    typer.run(device_plugin)
