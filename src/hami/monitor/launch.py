"""What ``hami monitor`` does once its arguments are parsed: NVML, the HTTP endpoint, the pod list, the rounds."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import typer
from prometheus_client import CollectorRegistry, start_http_server

from hami.deviceplugin.response import HostFiles
from hami.errors import HamiError, NvmlError
from hami.k8s.client import KubeClient
from hami.k8s.config import load_config
from hami.k8s.resources import PODS
from hami.monitor.gpustats import PynvmlStats, StatsNvml, load_fake_stats
from hami.monitor.monitor import Monitor, MonitorOptions
from hami.protocol.objects import Pod

__all__ = ["launch", "run_monitor"]

log = logging.getLogger("hami.monitor")


def launch(
    *,
    node_name: str,
    hook_path: str,
    bind_address: str,
    hami_core: tuple[str, Path] = ("v2.10.0", Path("/")),
    port: int,
    interval: float,
    max_regions: int,
    cleanup_grace: float,
    fake_nvml: Path | None,
    kubeconfig: Path | None,
    log_level: str,
    dra_checkpoint: Path | None = None,
) -> None:
    """Run until SIGTERM/SIGINT. Errors hami expects end the process with one line on stderr, exit status 1."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if not node_name:
            raise HamiError("the node name is required: pass --node-name or set NODE_NAME")
        if max_regions < 1 or interval <= 0:
            raise HamiError(f"--max-regions must be ≥ 1 and --interval > 0, not {max_regions} and {interval}")
        lib = _nvml(fake_nvml)
        vgpu = Path(hook_path.rstrip("/") or "/") / "vgpu"
        options = MonitorOptions(
            node_name=node_name,
            containers_dir=vgpu / "containers",
            max_regions=max_regions,
            grace_seconds=cleanup_grace,
            claims_dir=vgpu / "claims",
            dra_checkpoint=dra_checkpoint,
            hami_core=HostFiles(hook_path=hook_path, libvgpu_version=hami_core[0], root=hami_core[1]),
        )
        asyncio.run(_serve(Monitor(lib, options), bind_address, port, interval, kubeconfig))
    except HamiError as exc:
        typer.echo(f"hami monitor: {exc}", err=True)
        raise typer.Exit(1) from None


def _nvml(fake_nvml: Path | None) -> StatsNvml | None:
    lib: StatsNvml = load_fake_stats(fake_nvml) if fake_nvml is not None else PynvmlStats()
    try:
        lib.init()
    except NvmlError as exc:
        # HAMi's monitor keeps serving the regions' metrics when NVML is missing; so does hami.
        log.error("NVML is not available (%s); serving container metrics only", exc)
        return None
    return lib


async def _serve(monitor: Monitor, bind_address: str, port: int, interval: float, kubeconfig: Path | None) -> None:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(monitor)
    server, thread = start_http_server(port, addr=bind_address, registry=registry)
    log.info("serving HAMi's monitor metrics on %s:%d/metrics", bind_address, port)
    try:
        async with KubeClient(load_config(kubeconfig)) as client:
            await run_monitor(monitor, client, interval)
    except asyncio.CancelledError:
        log.info("stopping on signal")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


async def run_monitor(monitor: Monitor, client: KubeClient, interval: float) -> None:
    """Every ``interval`` seconds: list this node's pods (read only), then run a feedback round. When the list
    fails the round still runs on the last list, without removing anything."""
    node = monitor.node_name
    while True:
        fresh = False
        try:
            pods = await client.list(PODS, type=Pod, field_selector=f"spec.nodeName={node}")
            monitor.set_pods(pods.items)
            fresh = True
        except HamiError as exc:
            log.warning("cannot list the pods on node %s: %s", node, exc)
        await asyncio.to_thread(monitor.feedback_round, clean_up=fresh)
        await asyncio.sleep(interval)
