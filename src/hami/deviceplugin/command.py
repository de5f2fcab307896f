"""``hami device-plugin`` (also ``python -m hami.deviceplugin``): the node agent's command line.

Settings come from the scheduler's device config (``--device-config-file``, HAMi's ``--config-file``), the node
config file (``--node-config-file``, default ``/config/config.json``) and the environment HAMi's chart sets
(``NODE_NAME``, ``HOOK_PATH``, ``ENABLE_TOPOLOGY_SCORE``, ``DEVICE_LIST_STRATEGY``, ``PASS_DEVICE_SPECS``,
``NVIDIA_DRIVER_ROOT``, ``NVIDIA_CDI_HOOK_PATH``, ``GDRCOPY_ENABLED``, ``GDS_ENABLED``, ``MOFED_ENABLED``, …).
``--dry-run`` discovers the GPUs once, prints the annotations the plugin would write and exits, without a cluster or
kubelet. ``--fake-nvml`` replaces NVML with a YAML fixture (``hami.deviceplugin.fakenvml``), for clusters and
tests without GPUs.

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
    if_hami_core_missing: Annotated[
        str,
        typer.Option(
            envvar="IF_HAMI_CORE_MISSING",
            help="Without HAMi-core's libvgpu.so on the node: whole-gpus (advertise one share per GPU) or share "
            "(advertise shares without isolation); either way an error, a node event and a metric say so.",
        ),
    ] = "whole-gpus",
    topology_score: Annotated[
        bool, typer.Option(envvar="ENABLE_TOPOLOGY_SCORE", help="Publish hami.io/node-nvidia-score.")
    ] = False,
    device_list_strategy: Annotated[
        str,
        typer.Option(
            envvar="DEVICE_LIST_STRATEGY",
            help="How containers learn their GPUs: envvar, volume-mounts, cdi-annotations, cdi-cri (comma list).",
        ),
    ] = "envvar",
    pass_device_specs: Annotated[
        bool, typer.Option(envvar="PASS_DEVICE_SPECS", help="Also hand kubelet the GPUs' device nodes.")
    ] = False,
    driver_root: Annotated[
        str, typer.Option(envvar="NVIDIA_DRIVER_ROOT", help="The driver's root on the host (device node paths).")
    ] = "/",
    nvidia_cdi_hook_path: Annotated[
        str, typer.Option(envvar="NVIDIA_CDI_HOOK_PATH", help="nvidia-cdi-hook on the host, for the CDI spec.")
    ] = "",
    cdi_annotation_prefix: Annotated[
        str, typer.Option(envvar="CDI_ANNOTATION_PREFIX", help="Prefix of the cdi-annotations annotation.")
    ] = "cdi.k8s.io/",
    cdi_spec_dir: Annotated[
        str, typer.Option(envvar="CDI_SPECS_DIR", help="Where the CDI specs are written (CDI strategies).")
    ] = "/var/run/cdi",
    gdrcopy_enabled: Annotated[
        bool, typer.Option(envvar="GDRCOPY_ENABLED", help="Set NVIDIA_GDRCOPY=enabled.")
    ] = False,
    gds_enabled: Annotated[bool, typer.Option(envvar="GDS_ENABLED", help="Set NVIDIA_GDS=enabled.")] = False,
    mofed_enabled: Annotated[bool, typer.Option(envvar="MOFED_ENABLED", help="Set NVIDIA_MOFED=enabled.")] = False,
    imex_channel_ids: Annotated[
        str, typer.Option(envvar="IMEX_CHANNEL_IDS", help="IMEX channels every GPU container gets (comma list).")
    ] = "",
    mig_reconcile_seconds: Annotated[
        float, typer.Option(help="MIG nodes: how often instances nobody holds are destroyed.")
    ] = 60.0,
    fake_nvml: Annotated[
        Path | None,
        typer.Option(
            help="TESTS ONLY: a YAML fixture instead of NVML; the node advertises GPUs that do not exist.", hidden=True
        ),
    ] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="Default: KUBECONFIG, in-cluster, ~/.kube/config.")] = None,
    dry_run: Annotated[bool, typer.Option(help="Print the annotations this node would get, then exit.")] = False,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run the NVIDIA device plugin: register this node's GPUs and serve kubelet's Allocate."""
    from hami.deviceplugin.launch import launch

    if if_hami_core_missing not in ("whole-gpus", "share"):
        raise typer.BadParameter(
            f"{if_hami_core_missing!r} is not one of whole-gpus, share", param_hint="--if-hami-core-missing"
        )
    launch(
        if_hami_core_missing="share" if if_hami_core_missing == "share" else "whole-gpus",
        node_name=node_name,
        device_config_file=device_config_file,
        node_config_file=node_config_file,
        plugin_dir=plugin_dir,
        socket_name=socket_name,
        hook_path=hook_path,
        libvgpu_version=libvgpu_version,
        topology_score=topology_score,
        node_side={
            "device_list_strategy": device_list_strategy,
            "pass_device_specs": pass_device_specs,
            "driver_root": driver_root,
            "cdi_hook_path": nvidia_cdi_hook_path,
            "cdi_annotation_prefix": cdi_annotation_prefix,
            "cdi_spec_dir": cdi_spec_dir,
            "gdrcopy_enabled": gdrcopy_enabled,
            "gds_enabled": gds_enabled,
            "mofed_enabled": mofed_enabled,
            "imex_channel_ids": imex_channel_ids,
        },
        mig_reconcile_s=mig_reconcile_seconds,
        fake_nvml=fake_nvml,
        kubeconfig=kubeconfig,
        dry_run=dry_run,
        log_level=log_level,
    )


def main() -> None:
    """``python -m hami.deviceplugin``."""
    typer.run(device_plugin)
