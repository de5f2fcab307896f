"""The ``hami`` command line."""

from __future__ import annotations

import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from hami import __version__
from hami.deviceplugin.command import device_plugin
from hami.monitor.command import monitor

app = typer.Typer(no_args_is_help=True, add_completion=False, help="hami: GPU-sharing scheduler for Kubernetes.")


@app.command()
def version() -> None:
    """Print hami's version."""
    typer.echo(__version__)


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


def _node_policy(value: str) -> str:
    from hami.devices.policy import parse_node_policy
    from hami.errors import InvalidInput

    try:
        return parse_node_policy(value, "--node-policy")
    except InvalidInput as err:
        raise typer.BadParameter(err.reason) from None


def _gpu_policy(value: str) -> str:
    from hami.devices.policy import parse_gpu_policy
    from hami.errors import InvalidInput

    try:
        parse_gpu_policy(value, numa_bind=False, field="--gpu-policy")
    except InvalidInput as err:
        raise typer.BadParameter(err.reason) from None
    return value


_SIMULATE_HELP = "\n\n".join(
    [
        "Place pods on a cluster snapshot offline, with the scheduler's own decision code.",
        "Each pod is placed in the order given and its devices are reserved before the next one, so later pods "
        "see earlier placements. Pods of the snapshot that carry hami.io/vgpu-node hold devices and are charged.",
        "Candidate nodes are the snapshot's nodes whose labels match the pod's nodeSelector and that are not "
        "unschedulable. Other kube-scheduler predicates (taints and tolerations, affinity, CPU, memory and other "
        "non-device resources) are out of scope.",
        "Exit status: 0 when every file was read (pending pods included), 1 when a file is unreadable or invalid, "
        "2 for bad arguments. Warnings go to standard error.",
    ]
)


@app.command(help=_SIMULATE_HELP)
def simulate(
    pods: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="PODS", help="Pod files (YAML or JSON; multi-document or a List), placed in the order given."
        ),
    ] = None,
    snapshot: Annotated[
        list[Path] | None,
        typer.Option(
            "--snapshot",
            "-s",
            help="Cluster snapshot: what `kubectl get nodes,pods,resourcequotas -A -o json` (or -o yaml) prints, "
            "or any mix of Node/Pod/ResourceQuota/List documents. Repeat for several files.",
        ),
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="HAMi device-config.yaml (resource names, memory factor).")
    ] = None,
    node_policy: Annotated[
        str, typer.Option("--node-policy", callback=_node_policy, help="Default node policy: binpack or spread.")
    ] = "binpack",
    gpu_policy: Annotated[
        str,
        typer.Option(
            "--gpu-policy",
            callback=_gpu_policy,
            help="Default GPU policy: binpack, spread, topology-aware, mutex, numa, or a comma chain.",
        ),
    ] = "spread",
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="table, or json (one document).")] = (
        OutputFormat.table
    ),
    now: Annotated[
        int | None, typer.Option("--now", help="Unix seconds written into hami.io/vgpu-time (default: now).")
    ] = None,
    demo: Annotated[bool, typer.Option("--demo", help="Run the built-in example cluster and workload.")] = False,
) -> None:
    """Place pods on a cluster snapshot offline (help text: ``_SIMULATE_HELP``)."""
    from hami.simulate import SimulateOptions, run_simulate

    if not demo and (not snapshot or not pods):
        raise typer.BadParameter("give --snapshot FILE and at least one PODS file, or --demo", param_hint="arguments")
    opts = SimulateOptions(
        snapshots=tuple(snapshot or ()),
        pods=tuple(pods or ()),
        config=config,
        node_policy=node_policy,
        gpu_policy=gpu_policy,
        output="json" if output is OutputFormat.json else "table",
        now=int(time.time()) if now is None else now,
        demo=demo,
    )
    code = run_simulate(opts, typer.echo, lambda line: typer.echo(line, err=True))
    raise typer.Exit(code)


app.command("device-plugin")(device_plugin)
app.command("monitor")(monitor)


@app.command()
def certs(
    dns: Annotated[list[str], typer.Option("--dns", help="DNS name for the serving certificate (repeatable)")] = [],  # noqa: B006
    ip: Annotated[list[str], typer.Option("--ip", help="IP address for the serving certificate (repeatable)")] = [],  # noqa: B006
    out: Annotated[Path | None, typer.Option("--out", help="write ca.crt, tls.crt and tls.key here")] = None,
    days: Annotated[int, typer.Option("--days", min=1, help="validity of the CA and the certificate")] = 3650,
    secret: Annotated[
        str | None,
        typer.Option("--secret", metavar="NAMESPACE/NAME", help="keep the pair in this Secret (in-cluster)"),
    ] = None,
    patch_webhook: Annotated[
        str | None,
        typer.Option("--patch-webhook", metavar="NAME", help="set caBundle on this MutatingWebhookConfiguration"),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="with --secret: replace a pair that is still good")] = False,
) -> None:
    """Make a CA and a serving certificate for the webhook; print the caBundle (base64 of ca.crt).

    With --out the files are written to a directory. With --secret the pair lives in a Kubernetes Secret
    (kept while it is still valid for the names, else replaced); with --patch-webhook as well, the CA is
    published as the webhook configuration's caBundle. The chart's Jobs run the --secret forms.
    """
    import asyncio
    from datetime import UTC, datetime

    from hami.errors import HamiError
    from hami.server.certs import ensure_secret, generate, inject_ca_bundle, write_files
    from hami.server.certstore import HttpCertStore, in_cluster_client

    if out is None and secret is None:
        raise typer.BadParameter("give --out DIR, --secret NAMESPACE/NAME, or both", param_hint="--out/--secret")
    if patch_webhook and secret is None:
        raise typer.BadParameter("--patch-webhook needs --secret (the CA is read from it)", param_hint="--secret")
    now = datetime.now(UTC)

    async def in_cluster(namespace: str, name: str) -> str:
        async with in_cluster_client() as client:
            store = HttpCertStore(client)
            bundle, created = await ensure_secret(store, namespace, name, dns, ip, now=now, days=days, force=force)
            typer.echo(f"secret {namespace}/{name}: {'new pair written' if created else 'kept'}", err=True)
            if patch_webhook:
                count = await inject_ca_bundle(store, patch_webhook, bundle)
                typer.echo(f"caBundle set on {count} webhook(s) of {patch_webhook}", err=True)
        if out is not None:
            write_files(bundle, out)
        return bundle.ca_bundle

    try:
        if secret is not None:
            namespace, _, name = secret.partition("/")
            if not namespace or not name:
                raise typer.BadParameter("expected NAMESPACE/NAME", param_hint="--secret")
            ca_bundle = asyncio.run(in_cluster(namespace, name))
        else:
            bundle = generate(dns, ip, now=now, days=days)
            assert out is not None
            for path in write_files(bundle, out).values():
                typer.echo(f"wrote {path}", err=True)
            ca_bundle = bundle.ca_bundle
    except HamiError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None
    typer.echo(ca_bundle)


def main() -> None:
    app()


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def scheduler(
    scheduler_name: str | None = typer.Option(None, "--scheduler-name", help="Scheduler name the webhook sets."),
    node_scheduler_policy: str | None = typer.Option(None, "--node-scheduler-policy", help="binpack or spread."),
    gpu_scheduler_policy: str | None = typer.Option(
        None, "--gpu-scheduler-policy", help="spread, binpack, topology-aware, mutex, numa, or a comma chain."
    ),
    http_bind: str | None = typer.Option(
        None, "--http_bind", help="Service listener: /webhook, /healthz, /readyz (default 127.0.0.1:8080)."
    ),
    extender_bind: str | None = typer.Option(
        None,
        "--extender-bind",
        help="Extender listener: /filter, /bind (default 127.0.0.1:8888; beyond loopback only with a client auth).",
    ),
    cert_file: str | None = typer.Option(None, "--cert_file", help="TLS certificate (reloaded when it changes)."),
    key_file: str | None = typer.Option(None, "--key_file", help="TLS key."),
    extender_client_ca_file: str | None = typer.Option(
        None, "--extender-client-ca-file", help="Require extender client certificates signed by this CA (mTLS)."
    ),
    extender_token_file: str | None = typer.Option(
        None, "--extender-token-file", help="Require a bearer token from this file (one a line) on /filter, /bind."
    ),
    metrics_bind_address: str | None = typer.Option(None, "--metrics-bind-address", help="Prometheus listener."),
    metrics_secure: bool | None = typer.Option(
        None,
        "--metrics-secure/--no-metrics-secure",
        help="Serve /metrics over TLS to callers allowed get on /metrics (TokenReview + SubjectAccessReview).",
    ),
    node_label_selector: str | None = typer.Option(None, "--node-label-selector", help="k=v,k2=v2: nodes to read."),
    kube_qps: float | None = typer.Option(None, "--kube-qps", help="API requests per second (default 300)."),
    kube_burst: int | None = typer.Option(None, "--kube-burst", help="API burst (default 600)."),
    node_lock_timeout: str | None = typer.Option(None, "--node-lock-timeout", help="Node lock expiry, e.g. 5m."),
    node_lock_retry_timeout: str | None = typer.Option(
        None, "--node-lock-retry-timeout", help="How long a PodGroup member's bind waits for a locked node (28s)."
    ),
    bind_lock_wait: str | None = typer.Option(
        None, "--bind-lock-wait", help="How long a bind waits for another hami bind's node lock hand-over (20s)."
    ),
    kube_timeout: str | None = typer.Option(None, "--kube-timeout", help="API request timeout, e.g. 10s (0: 30s)."),
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
        "extender_bind": extender_bind,
        "cert_file": cert_file,
        "key_file": key_file,
        "extender_client_ca_file": extender_client_ca_file,
        "extender_token_file": extender_token_file,
        "metrics_bind_address": metrics_bind_address,
        "metrics_secure": metrics_secure,
        "node_label_selector": node_label_selector,
        "kube_qps": kube_qps,
        "kube_burst": kube_burst,
        "node_lock_timeout": node_lock_timeout,
        "node_lock_retry_timeout": node_lock_retry_timeout,
        "bind_lock_wait": bind_lock_wait,
        "kube_timeout": kube_timeout,
        "force_overwrite_default_scheduler": force_overwrite_default_scheduler,
        "leader_elect": leader_elect,
        "leader_elect_resource_name": leader_elect_resource_name,
        "leader_elect_resource_namespace": leader_elect_resource_namespace,
        "device_config_file": device_config_file,
        "debug": debug,
    }
    raise typer.Exit(scheduler_main({k: v for k, v in given.items() if v is not None}, kubeconfig, json_logs))
