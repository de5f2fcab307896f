"""What ``hami dra-plugin`` does once its arguments are parsed (kept apart so the ``hami`` command line imports
gRPC, NVML and the Kubernetes client only when this command runs)."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass
from pathlib import Path

import typer

from hami.deviceplugin.dra.plugin import DraPaths, PluginRun, run_dra_plugin
from hami.deviceplugin.dra.state import ClaimStore, StoreOptions
from hami.deviceplugin.fakenvml import load_fake_nvml
from hami.deviceplugin.nvml import NvmlLib, PynvmlLib
from hami.deviceplugin.response import HostFiles
from hami.errors import HamiError
from hami.k8s.client import KubeClient
from hami.k8s.config import load_config

__all__ = ["LaunchOptions", "launch"]

log = logging.getLogger("hami.deviceplugin.dra")


@dataclass(frozen=True, slots=True)
class LaunchOptions:
    node_name: str
    plugin_dir: Path
    registry_dir: Path
    cdi_dir: Path
    hook_path: str
    libvgpu_version: str
    rediscover_s: float
    recover_after_s: float
    fake_nvml: Path | None
    kubeconfig: Path | None
    log_level: str
    schedulers: tuple[str, ...] = ("hami-scheduler",)


def launch(options: LaunchOptions) -> None:
    """Run the plugin until SIGTERM. Errors hami expects end the process with one line and exit status 1."""
    logging.basicConfig(level=options.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if not options.node_name:
            raise HamiError("the node name is required: pass --node-name or set NODE_NAME")
        fake = load_fake_nvml(options.fake_nvml) if options.fake_nvml is not None else None
        if fake is not None:
            log.warning("fake NVML fixture %s: advertising GPUs that do not exist (tests only)", options.fake_nvml)
        lib: NvmlLib = fake if fake is not None else PynvmlLib()
        host = HostFiles(hook_path=options.hook_path, libvgpu_version=options.libvgpu_version)
        try:
            host.ensure_preload()
        except OSError as exc:
            log.warning("cannot write %s/ld.so.preload (no libvgpu.so preload in containers): %s", host.vgpu_dir, exc)
        store = ClaimStore(
            StoreOptions(plugin_dir=options.plugin_dir, cdi_dir=options.cdi_dir, host=host, device_nodes=fake is None)
        )
        run = PluginRun(
            node_name=options.node_name,
            paths=DraPaths(plugin_dir=options.plugin_dir, registry_dir=options.registry_dir),
            rediscover_s=options.rediscover_s,
            recover_after_s=options.recover_after_s,
            root_of=fake.pcie_root_of if fake is not None else None,
            numa=fake.numa_of if fake is not None else None,
            schedulers=frozenset(options.schedulers),
        )
        asyncio.run(_serve(lib, store, run, options.kubeconfig))
    except HamiError as exc:
        typer.echo(f"hami dra-plugin: {exc}", err=True)
        raise typer.Exit(1) from None


async def _serve(lib: NvmlLib, store: ClaimStore, run: PluginRun, kubeconfig: Path | None) -> None:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    async with KubeClient(load_config(kubeconfig)) as client:
        try:
            await run_dra_plugin(lib, client, store, run)
        except asyncio.CancelledError:
            log.info("stopping on signal")
