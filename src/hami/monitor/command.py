"""``hami monitor``: the vGPU monitor's command line (HAMi's ``vGPUmonitor``).

Reads HAMi-core's regions under ``<hook path>/vgpu/containers`` and NVML, serves HAMi's monitor metrics on
``--port`` (9394) at ``/metrics``, and every ``--interval`` seconds writes the priority feedback into the regions
and removes the directories of containers whose pod left this node. The regions of DRA claims hami's DRA plugin
prepared (``<hook path>/vgpu/claims``) are read too, tied to their containers through ``--dra-checkpoint`` (the
plugin's checkpoint) and the pods on the node (:mod:`hami.monitor.claims`). ``--fake-nvml`` reads a YAML fixture
instead of NVML (``hami.monitor.gpustats``). The work is done in :mod:`hami.monitor.launch`, imported when the
command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hami.deviceplugin.command import log_level as log_level_parser

__all__ = ["monitor"]


def monitor(
    *,
    node_name: Annotated[str, typer.Option(envvar="NODE_NAME", help="This node's name (the DaemonSet sets it).")] = "",
    hook_path: Annotated[
        str, typer.Option(envvar="HOOK_PATH", help="Host directory holding vgpu/ (the device plugin's --hook-path).")
    ] = "/usr/local",
    libvgpu_version: Annotated[
        str, typer.Option(help="HAMi-core's version, as the device plugin's (libvgpu.so.<version> is looked for).")
    ] = "v2.10.0",
    host_root: Annotated[
        Path, typer.Option(help="Where the host's <hook path>/vgpu is visible, for hami_core_library_present.")
    ] = Path("/"),
    bind_address: Annotated[str, typer.Option(help="Address the metrics endpoint listens on.")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="Port of the metrics endpoint (HAMi's monitor: 9394).")] = 9394,
    interval: Annotated[float, typer.Option(help="Seconds between pod refreshes and feedback rounds.")] = 5.0,
    max_regions: Annotated[int, typer.Option(help="Most container directories read per scrape or round.")] = 1024,
    cleanup_grace: Annotated[
        float, typer.Option(help="Seconds a dead container's directory is kept before it is removed.")
    ] = 300.0,
    fake_nvml: Annotated[Path | None, typer.Option(help="Use a YAML fixture instead of NVML (no GPU needed).")] = None,
    dra_checkpoint: Annotated[
        Path,
        typer.Option(help="hami's DRA plugin's checkpoint: which claim each <hook>/vgpu/claims/<UID> is."),
    ] = Path("/var/lib/kubelet/plugins/hami-core-gpu.project-hami.io/checkpoint.json"),
    kubeconfig: Annotated[Path | None, typer.Option(help="Default: KUBECONFIG, in-cluster, ~/.kube/config.")] = None,
    log_level: Annotated[str, typer.Option(parser=log_level_parser, help="debug, info, warning or error.")] = "info",
) -> None:
    """Run HAMi's vGPU monitor: per-container GPU usage from HAMi-core, per-GPU usage from NVML, priority
    feedback."""
    from hami.monitor.launch import launch

    launch(
        node_name=node_name,
        hook_path=hook_path,
        hami_core=(libvgpu_version, host_root),
        bind_address=bind_address,
        port=port,
        interval=interval,
        max_regions=max_regions,
        cleanup_grace=cleanup_grace,
        fake_nvml=fake_nvml,
        dra_checkpoint=dra_checkpoint,
        kubeconfig=kubeconfig,
        log_level=log_level,
    )
