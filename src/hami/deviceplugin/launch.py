"""What ``hami device-plugin`` does once its arguments are parsed (kept apart from ``command`` so that the
``hami`` command line imports gRPC, NVML and the Kubernetes client only when this command runs).

Settings come from the scheduler's device config (``--device-config-file``, HAMi's ``--config-file``), the node
config file (``--node-config-file``, default ``/config/config.json``) and the environment HAMi's chart sets
(``NODE_NAME``, ``HOOK_PATH``, ``ENABLE_TOPOLOGY_SCORE``). ``--dry-run`` discovers the GPUs once, prints the
annotations the plugin would write and exits, without a cluster or kubelet. ``--fake-nvml`` replaces NVML with a
YAML fixture (``hami.deviceplugin.fakenvml``), for clusters and tests without GPUs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import typer

from hami.config import parse_device_config
from hami.deviceplugin import hamicore
from hami.deviceplugin.agent import PluginOptions, run_plugin
from hami.deviceplugin.discovery import GpuSource, discover
from hami.deviceplugin.fakenvml import load_fake_nvml
from hami.deviceplugin.nvml import NvmlLib, PynvmlLib
from hami.deviceplugin.register import desired_annotations
from hami.deviceplugin.response import HostFiles
from hami.deviceplugin.server import KubeletPaths
from hami.deviceplugin.settings import NodeSettings, apply_node_config, settings_from_device_config
from hami.devices.nvidia import NVIDIA_FAMILY
from hami.errors import ConfigError, HamiError
from hami.k8s.client import KubeClient
from hami.k8s.cluster import KubeCluster
from hami.k8s.config import load_config
from hami.k8s.resources import PODS
from hami.protocol.objects import Pod

__all__ = ["launch", "load_settings"]

log = logging.getLogger("hami.deviceplugin")


def node_side_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """The node-side options (command line or the chart's environment) as ``NodeSettings`` fields: the comma
    lists become tuples. Raises ``ConfigError`` naming the variable for a channel id that is not a number."""
    fields = dict(values)
    if "device_list_strategy" in fields:
        fields["device_list_strategy"] = _comma_list(str(fields["device_list_strategy"]))
    if "imex_channel_ids" in fields:
        ids = _comma_list(str(fields["imex_channel_ids"]))
        try:
            fields["imex_channel_ids"] = tuple(int(i) for i in ids)
        except ValueError:
            raise ConfigError(
                "IMEX_CHANNEL_IDS", fields["imex_channel_ids"], "must be comma-separated numbers"
            ) from None
    return fields


def _comma_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def load_settings(
    *,
    node_name: str,
    device_config_file: Path | None,
    node_config_file: Path | None,
    hook_path: str,
    topology_score: bool,
    node_side: Mapping[str, Any] | None = None,
) -> NodeSettings:
    """The effective settings: defaults and the node-side options, then the device config, then this node's
    node-config entry."""
    settings = NodeSettings(hook_path=hook_path, topology_score=topology_score, **node_side_settings(node_side or {}))
    if device_config_file is not None and not device_config_file.exists():
        log.warning("no device config at %s; using the built-in defaults", device_config_file)
    elif device_config_file is not None:
        loaded = parse_device_config(_read(device_config_file), str(device_config_file))
        for warning in loaded.warnings:
            log.warning("%s", warning)
        settings = settings_from_device_config(NVIDIA_FAMILY.section_of(loaded.config), settings)
    if node_config_file is not None:
        if node_config_file.exists():
            settings = apply_node_config(settings, _read(node_config_file), node_name, str(node_config_file))
        else:
            log.info("no node config file at %s; using the device config only", node_config_file)
    return settings.validate(str(node_config_file or device_config_file or "settings"))


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise HamiError(f"cannot read {path}: {exc.strerror or exc}") from exc


def launch(
    *,
    node_name: str,
    device_config_file: Path | None,
    node_config_file: Path,
    plugin_dir: Path,
    socket_name: str,
    hook_path: str,
    libvgpu_version: str,
    topology_score: bool,
    fake_nvml: Path | None,
    if_hami_core_missing: hamicore.IfMissing = "whole-gpus",
    kubeconfig: Path | None,
    node_side: Mapping[str, Any] | None = None,
    mig_reconcile_s: float = 60.0,
    dry_run: bool,
    log_level: str,
) -> None:
    """Run the plugin (or, with ``dry_run``, print the inventory). Errors hami expects end the process with
    one line on stderr and exit status 1, never a traceback."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if not node_name and not dry_run:
            raise HamiError("the node name is required: pass --node-name or set NODE_NAME")
        settings = load_settings(
            node_name=node_name,
            device_config_file=device_config_file,
            node_config_file=node_config_file,
            hook_path=hook_path,
            topology_score=topology_score,
            node_side=node_side,
        )
        fake = load_fake_nvml(fake_nvml) if fake_nvml is not None else None
        if fake is not None:
            settings = _without_device_nodes(settings, fake_nvml)
        lib: NvmlLib = fake if fake is not None else PynvmlLib()
        numa = fake.numa_of if fake is not None else None
        host = HostFiles(hook_path=hook_path, libvgpu_version=libvgpu_version)
        settings, missing = _check_hami_core(settings, host, if_hami_core_missing)
        if dry_run:
            typer.echo(f"# HAMi-core: {missing or f'{host.library()} found'}")
            _print_inventory(lib, settings, numa)
            return
        options = PluginOptions(
            node_name=node_name,
            settings=settings,
            paths=KubeletPaths(directory=plugin_dir, endpoint=socket_name),
            host=host,
            numa=numa,
            mig_reconcile_s=mig_reconcile_s,
        )
        asyncio.run(_serve(lib, options, kubeconfig, missing))
    except HamiError as exc:
        typer.echo(f"hami device-plugin: {exc}", err=True)
        raise typer.Exit(1) from None


def _check_hami_core(
    settings: NodeSettings, host: HostFiles, if_missing: hamicore.IfMissing
) -> tuple[NodeSettings, str | None]:
    """The settings to register with and, when HAMi-core is missing on a node that uses it, the sentence saying
    so and what the node does about it (logged as an error here; also the node's event)."""
    problem = hamicore.library_problem(host) if settings.operating_mode != "mig" else None
    if problem is None:
        return settings, None
    adjusted = hamicore.adjust(settings, problem, if_missing)
    message = f"{problem}: {hamicore.consequence(settings, adjusted)}"
    log.error("%s", message)
    return adjusted, message


def _without_device_nodes(settings: NodeSettings, fixture: Path | None) -> NodeSettings:
    """A fake NVML's GPUs have no device nodes: hand kubelet none (``PASS_DEVICE_SPECS`` is ignored), else the
    runtime refuses to start their containers. Said loudly: this node advertises GPUs that do not exist."""
    log.warning("fake NVML fixture %s: advertising GPUs that do not exist (tests only); no device nodes", fixture)
    return dataclasses.replace(settings, pass_device_specs=False)


def _print_inventory(lib: NvmlLib, settings: NodeSettings, numa: Callable[[str], int] | None) -> None:
    source = GpuSource(lib, functools.partial(discover, numa=numa))
    try:
        gpus = source.discover()
    finally:
        source.close()
    for gpu in gpus:
        memory = f"{gpu.memory_mib} MiB" if gpu.memory_mib is not None else "memory not reported"
        mig = f", MIG with {len(gpu.mig_profiles)} profiles" if gpu.mig_enabled else ""
        typer.echo(f"# GPU {gpu.index} {gpu.uuid} {gpu.name}, {memory}, bus {gpu.bus_id}, NUMA {gpu.numa}{mig}")
    values, _ = desired_annotations(gpus, settings, frozenset())
    for key, value in values.items():
        typer.echo(f"{key}={value}")


async def _serve(lib: NvmlLib, options: PluginOptions, kubeconfig: Path | None, missing: str | None) -> None:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    async with KubeClient(load_config(kubeconfig)) as client:
        cluster = KubeCluster(client)
        if missing is not None:
            await hamicore.record_event(cluster, options.node_name, missing)

        async def pods_on_node(node: str) -> list[Pod]:
            return (await client.list(PODS, type=Pod, field_selector=f"spec.nodeName={node}")).items

        try:
            await run_plugin(lib, cluster, pods_on_node, options)
        except asyncio.CancelledError:
            log.info("stopping on signal")
