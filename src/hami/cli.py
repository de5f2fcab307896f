"""The ``hami`` command line."""

from __future__ import annotations

import typer

from hami import __version__

app = typer.Typer(no_args_is_help=True, add_completion=False, help="hami: GPU-sharing scheduler for Kubernetes.")


@app.command()
def version() -> None:
    """Print hami's version."""
    typer.echo(__version__)


def main() -> None:
    app()


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def scheduler(
    scheduler_name: str | None = typer.Option(None, "--scheduler-name", help="Scheduler name the webhook sets."),
    node_scheduler_policy: str | None = typer.Option(None, "--node-scheduler-policy", help="binpack or spread."),
    gpu_scheduler_policy: str | None = typer.Option(
        None, "--gpu-scheduler-policy", help="spread, binpack, topology-aware, mutex, numa, or a comma chain."
    ),
    http_bind: str | None = typer.Option(None, "--http_bind", help="Listen address of extender and webhook."),
    cert_file: str | None = typer.Option(None, "--cert_file", help="TLS certificate (reloaded when it changes)."),
    key_file: str | None = typer.Option(None, "--key_file", help="TLS key."),
    metrics_bind_address: str | None = typer.Option(None, "--metrics-bind-address", help="Prometheus listener."),
    node_label_selector: str | None = typer.Option(None, "--node-label-selector", help="k=v,k2=v2: nodes to read."),
    kube_qps: float | None = typer.Option(None, "--kube-qps", help="API requests per second (default 100)."),
    kube_burst: int | None = typer.Option(None, "--kube-burst", help="API burst (default 200)."),
    node_lock_timeout: str | None = typer.Option(None, "--node-lock-timeout", help="Node lock expiry, e.g. 5m."),
    force_overwrite_default_scheduler: bool | None = typer.Option(
        None, "--force-overwrite-default-scheduler/--no-force-overwrite-default-scheduler"
    ),
    leader_elect: bool | None = typer.Option(None, "--leader-elect/--no-leader-elect"),
    leader_elect_resource_name: str | None = typer.Option(None, "--leader-elect-resource-name"),
    leader_elect_resource_namespace: str | None = typer.Option(None, "--leader-elect-resource-namespace"),
    device_config_file: str | None = typer.Option(None, "--device-config-file", help="HAMi device-config.yaml."),
    kubeconfig: str | None = typer.Option(None, "--kubeconfig", help="Kubeconfig; default in-cluster or ~/.kube."),
    debug: bool | None = typer.Option(None, "--debug/--no-debug"),
    json_logs: bool = typer.Option(True, "--json-logs/--text-logs", help="Structured (JSON) logs."),
) -> None:
    """Run the scheduler extender (and webhook) that kube-scheduler calls. Flags are HAMi's where they exist."""
    from hami.server.command import scheduler_main

    given = {
        "scheduler_name": scheduler_name,
        "node_scheduler_policy": node_scheduler_policy,
        "gpu_scheduler_policy": gpu_scheduler_policy,
        "http_bind": http_bind,
        "cert_file": cert_file,
        "key_file": key_file,
        "metrics_bind_address": metrics_bind_address,
        "node_label_selector": node_label_selector,
        "kube_qps": kube_qps,
        "kube_burst": kube_burst,
        "node_lock_timeout": node_lock_timeout,
        "force_overwrite_default_scheduler": force_overwrite_default_scheduler,
        "leader_elect": leader_elect,
        "leader_elect_resource_name": leader_elect_resource_name,
        "leader_elect_resource_namespace": leader_elect_resource_namespace,
        "device_config_file": device_config_file,
        "debug": debug,
    }
    raise typer.Exit(scheduler_main({k: v for k, v in given.items() if v is not None}, kubeconfig, json_logs))
