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
from typing import Annotated, Any, Final

import typer

from hami.errors import did_you_mean

__all__ = ["LOG_LEVELS", "device_plugin", "log_level", "main"]


_NodeName = Annotated[str, typer.Option(envvar="NODE_NAME", help="This node's name (the DaemonSet sets it).")]
_DeviceConfigFile = Annotated[
    Path | None, typer.Option("--device-config-file", "--config-file", help="The scheduler's device-config.yaml.")
]
_NodeConfigFile = Annotated[Path, typer.Option(help="HAMi's per-node config (nodeconfig[] JSON); missing is fine.")]
_PluginDir = Annotated[Path, typer.Option(help="kubelet's device-plugin directory.")]
_SocketName = Annotated[str, typer.Option(help="This plugin's socket file name in --plugin-dir.")]
_HookPath = Annotated[str, typer.Option(envvar="HOOK_PATH", help="Host directory holding vgpu/libvgpu.so (HAMi-core).")]
_LibvgpuVersion = Annotated[
    str, typer.Option(help="Mount <hook>/vgpu/libvgpu.so.<version> when that file exists on the host.")
]
HAMI_CORE_MISSING: Final = ("whole-gpus", "share")


def hami_core_missing(value: str) -> str:
    """``--if-hami-core-missing``: one of ``HAMI_CORE_MISSING``, or a usage error naming them and the closest one."""
    choice = value.strip().lower()
    if choice not in HAMI_CORE_MISSING:
        raise typer.BadParameter(
            f"{value!r} is not one of {', '.join(HAMI_CORE_MISSING)}{did_you_mean(value, HAMI_CORE_MISSING)}"
        )
    return choice


_IfHamiCoreMissing = Annotated[
    str,
    typer.Option(
        envvar="IF_HAMI_CORE_MISSING",
        parser=hami_core_missing,
        help="Without HAMi-core's libvgpu.so on the node: whole-gpus (advertise one share per GPU) or share "
        "(advertise shares without isolation); either way an error, a node event and a metric say so.",
    ),
]
_TopologyScore = Annotated[
    bool, typer.Option(envvar="ENABLE_TOPOLOGY_SCORE", help="Publish hami.io/node-nvidia-score.")
]
_DeviceListStrategy = Annotated[
    str,
    typer.Option(
        envvar="DEVICE_LIST_STRATEGY",
        help="How containers learn their GPUs: envvar, volume-mounts, cdi-annotations, cdi-cri (comma list).",
    ),
]
_PassDeviceSpecs = Annotated[
    bool, typer.Option(envvar="PASS_DEVICE_SPECS", help="Also hand kubelet the GPUs' device nodes.")
]
_DriverRoot = Annotated[
    str, typer.Option(envvar="NVIDIA_DRIVER_ROOT", help="The driver's root on the host (device node paths).")
]
_CdiHookPath = Annotated[
    str, typer.Option(envvar="NVIDIA_CDI_HOOK_PATH", help="nvidia-cdi-hook on the host, for the CDI spec.")
]
_CdiAnnotationPrefix = Annotated[
    str, typer.Option(envvar="CDI_ANNOTATION_PREFIX", help="Prefix of the cdi-annotations annotation.")
]
_CdiSpecDir = Annotated[
    str, typer.Option(envvar="CDI_SPECS_DIR", help="Where the CDI specs are written (CDI strategies).")
]
_Gdrcopy = Annotated[bool, typer.Option(envvar="GDRCOPY_ENABLED", help="Set NVIDIA_GDRCOPY=enabled.")]
_Gds = Annotated[bool, typer.Option(envvar="GDS_ENABLED", help="Set NVIDIA_GDS=enabled.")]
_Mofed = Annotated[bool, typer.Option(envvar="MOFED_ENABLED", help="Set NVIDIA_MOFED=enabled.")]
_ImexChannelIds = Annotated[
    str, typer.Option(envvar="IMEX_CHANNEL_IDS", help="IMEX channels every GPU container gets (comma list).")
]
_MigReconcileSeconds = Annotated[float, typer.Option(help="MIG nodes: how often instances nobody holds are destroyed.")]
_FakeNvml = Annotated[
    Path | None,
    typer.Option(
        help="TESTS ONLY: a YAML fixture instead of NVML; the node advertises GPUs that do not exist.", hidden=True
    ),
]
_Kubeconfig = Annotated[Path | None, typer.Option(help="Default: KUBECONFIG, in-cluster, ~/.kube/config.")]
_DryRun = Annotated[bool, typer.Option(help="Print the annotations this node would get, then exit.")]
LOG_LEVELS: Final = ("debug", "info", "warning", "error")


def log_level(value: str) -> str:
    """``--log-level``: one of ``LOG_LEVELS`` (any case), or a usage error naming them and the closest one."""
    level = value.strip().lower()
    if level not in LOG_LEVELS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(LOG_LEVELS)}{did_you_mean(value, LOG_LEVELS)}")
    return level


_LogLevel = Annotated[str, typer.Option(parser=log_level, help="debug, info, warning or error.")]

NODE_SIDE: Final = {
    "device_list_strategy": "device_list_strategy",
    "pass_device_specs": "pass_device_specs",
    "driver_root": "driver_root",
    "nvidia_cdi_hook_path": "cdi_hook_path",
    "cdi_annotation_prefix": "cdi_annotation_prefix",
    "cdi_spec_dir": "cdi_spec_dir",
    "gdrcopy_enabled": "gdrcopy_enabled",
    "gds_enabled": "gds_enabled",
    "mofed_enabled": "mofed_enabled",
    "imex_channel_ids": "imex_channel_ids",
}
"""The node-side options (this command's parameter -> ``NodeSettings`` field), handed to ``launch`` together."""


def device_plugin(
    *,
    node_name: _NodeName = "",
    device_config_file: _DeviceConfigFile = None,
    node_config_file: _NodeConfigFile = Path("/config/config.json"),
    plugin_dir: _PluginDir = Path("/var/lib/kubelet/device-plugins"),
    socket_name: _SocketName = "hami-nvidia.sock",
    hook_path: _HookPath = "/usr/local",
    libvgpu_version: _LibvgpuVersion = "v2.10.0",
    if_hami_core_missing: _IfHamiCoreMissing = "whole-gpus",
    topology_score: _TopologyScore = False,
    device_list_strategy: _DeviceListStrategy = "envvar",
    pass_device_specs: _PassDeviceSpecs = False,
    driver_root: _DriverRoot = "/",
    nvidia_cdi_hook_path: _CdiHookPath = "",
    cdi_annotation_prefix: _CdiAnnotationPrefix = "cdi.k8s.io/",
    cdi_spec_dir: _CdiSpecDir = "/var/run/cdi",
    gdrcopy_enabled: _Gdrcopy = False,
    gds_enabled: _Gds = False,
    mofed_enabled: _Mofed = False,
    imex_channel_ids: _ImexChannelIds = "",
    mig_reconcile_seconds: _MigReconcileSeconds = 60.0,
    fake_nvml: _FakeNvml = None,
    kubeconfig: _Kubeconfig = None,
    dry_run: _DryRun = False,
    log_level: _LogLevel = "info",
) -> None:
    """Run the NVIDIA device plugin: register this node's GPUs and serve kubelet's Allocate."""
    given: dict[str, Any] = dict(locals())  # the options, each named as launch's parameter (but those below)
    from hami.deviceplugin.launch import launch

    node_side = {field: given.pop(option) for option, field in NODE_SIDE.items()}
    mig_reconcile_s = given.pop("mig_reconcile_seconds")
    launch(**given, node_side=node_side, mig_reconcile_s=mig_reconcile_s)


def main() -> None:
    """``python -m hami.deviceplugin``."""
    typer.run(device_plugin)
