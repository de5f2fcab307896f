"""End to end: the real kube-apiserver calls hami's webhook over TLS, and the real kube-scheduler with hami as
its extender binds the mutated pod to the fake node that fits.

``hami scheduler`` runs as a subprocess (as in the chart): HTTPS with a certificate from ``hami.server.certs``,
webhook, extender, as the chart's hami ServiceAccount. The chart's own webhook entry (rules, matchConditions,
failurePolicy ``Fail``) points at it by URL with our CA as ``caBundle``; it only sees the test's namespace (a
label), so the rest of the session is never blocked by its ``Fail`` policy.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from hami.protocol import keys
from hami.server.certs import CertBundle, generate, write_files
from tests.e2e.cluster import (
    ApiError,
    ControlPlane,
    ControlPlaneError,
    KubeClient,
    ManagedProcess,
    free_port,
    wait_until,
)
from tests.e2e.identities import HAMI_SA, KUBE_SCHEDULER_SA, chart_identities

SCHEDULER = "hami-scheduler"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
ONE_GPU = {"nvidia.com/gpu": "1"}
NVIDIA_RESOURCES = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/priority",
)


def new_pair(ca_name: str) -> CertBundle:
    return generate(["localhost"], ["127.0.0.1"], now=datetime.now(UTC), ca_name=ca_name)


@dataclass
class Hami:
    """A running ``hami scheduler``: its HTTPS ports (Service listener, extender listener) and the directory its
    certificate files are read from."""

    process: ManagedProcess
    port: int
    extender_port: int
    tls_dir: Path

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def extender_url(self) -> str:
        return f"https://127.0.0.1:{self.extender_port}"

    def check_alive(self) -> None:
        code = self.process.exited()
        if code is not None:
            raise ControlPlaneError(f"hami scheduler exited with status {code}:\n{self.process.log_tail()}")

    def serves(self, ca: bytes, path: str = "/readyz") -> bool:
        """Whether ``path`` answers 200 over TLS verified against ``ca`` (for the SAN 127.0.0.1)."""
        context = ssl.create_default_context(cadata=ca.decode())
        return httpx.get(self.url + path, verify=context, timeout=5).status_code == 200


@pytest.fixture
def hami(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Hami]:
    tls_dir = tmp_path / "tls"
    first = new_pair("hami-e2e-ca-1")
    write_files(first, tls_dir)
    port, extender_port = free_port(), free_port()
    process = ManagedProcess(
        "hami-scheduler",
        [
            str(Path(sys.executable).parent / "hami"),
            "scheduler",
            f"--kubeconfig={chart_identities(control_plane).kubeconfig(HAMI_SA)}",
            f"--scheduler-name={SCHEDULER}",
            f"--http_bind=127.0.0.1:{port}",
            f"--extender-bind=127.0.0.1:{extender_port}",
            f"--cert_file={tls_dir / 'tls.crt'}",
            f"--key_file={tls_dir / 'tls.key'}",
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
            "--no-leader-elect",
            "--text-logs",
        ],
        control_plane.log_dir / f"hami-scheduler-{port}.log",
    )
    process.start()
    running = Hami(process, port, extender_port, tls_dir)
    try:
        wait_until(
            lambda: running.serves(first.ca_cert), description="hami scheduler /readyz", check=running.check_alive
        )
        yield running
    finally:
        process.stop()


@pytest.fixture
def webhook(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, hami: Hami
) -> Iterator[Callable[[bytes], None]]:
    """Registers the chart's webhook entry, calling hami by URL, for the test namespace only; call it again with a
    new CA bundle to rotate."""
    label = f"hami-e2e-{uuid.uuid4().hex[:8]}"
    kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {"hami-e2e/webhook": label}}})
    name = f"hami-e2e-{label}"
    (chart_entry,) = chart_identities(control_plane).one("MutatingWebhookConfiguration", "hami-webhook")["webhooks"]
    assert chart_entry["failurePolicy"] == "Fail"
    assert chart_entry["matchConditions"]

    def register(ca_bundle: bytes) -> None:
        entry = chart_entry | {
            "clientConfig": {"url": f"{hami.url}/webhook", "caBundle": base64.b64encode(ca_bundle).decode()},
            "namespaceSelector": {"matchLabels": {"hami-e2e/webhook": label}},
        }
        body: dict[str, Any] = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [entry],
        }
        try:
            current = kube.get(f"{WEBHOOKS}/{name}")
        except ApiError as err:
            if err.status != 404:
                raise
            kube.post(WEBHOOKS, body)
        else:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            kube.put(f"{WEBHOOKS}/{name}", body)

    register((hami.tls_dir / "ca.crt").read_bytes())
    try:
        yield register
    finally:
        with contextlib.suppress(ApiError):
            kube.delete(f"{WEBHOOKS}/{name}")


def admitted(kube: KubeClient, namespace: str, limits: dict[str, str]) -> Callable[[], dict[str, Any] | None]:
    """A probe for ``wait_until``: create a pod that asks for ``limits`` and can run nowhere (a node selector
    no node has); return it when our webhook mutated it, else delete it and return None. A configuration
    change reaches the API server's admission chain a moment after it is written."""

    def probe() -> dict[str, Any] | None:
        name = f"probe-{uuid.uuid4().hex[:8]}"
        try:
            pod = kube.create_pod(namespace, name, limits=limits, spec={"nodeSelector": {"hami-e2e/none": "x"}})
        except ApiError:  # e.g. the API server does not trust the webhook's certificate (yet)
            return None
        if pod["spec"].get("schedulerName") == SCHEDULER:
            return pod
        kube.delete_pod(namespace, name)
        return None

    return probe


def gpu_node(make_node: Callable[..., dict[str, Any]], name: str, pool: str, devmem: int) -> dict[str, Any]:
    inventory = [
        {"id": f"GPU-{name}", "index": 0, "count": 10, "devmem": devmem, "devcore": 100, "type": "NVIDIA-Tesla T4",
         "health": True},
    ]  # fmt: skip
    return make_node(
        name,
        extended={"nvidia.com/gpu": 10},
        labels={"hami-e2e/pool": pool},
        annotations={keys.NVIDIA_REGISTER: json.dumps(inventory)},
    )


def test_a_gpu_pod_is_sent_to_hami_and_bound_to_the_node_that_fits(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    hami: Hami,
    webhook: Callable[[bytes], None],
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Any],
) -> None:
    pool = uuid.uuid4().hex[:8]
    small, big = f"gpu-small-{pool}", f"gpu-big-{pool}"
    gpu_node(make_node, small, pool, devmem=1000)
    gpu_node(make_node, big, pool, devmem=16384)
    start_scheduler(
        {
            "clientConnection": {"kubeconfig": str(chart_identities(control_plane).kubeconfig(KUBE_SCHEDULER_SA))},
            "profiles": [{"schedulerName": SCHEDULER}],
            "extenders": [
                {
                    "urlPrefix": hami.extender_url,
                    "filterVerb": "filter",
                    "bindVerb": "bind",
                    "nodeCacheCapable": True,
                    "weight": 1,
                    "httpTimeout": "30s",
                    "enableHTTPS": True,
                    "tlsConfig": {"caData": base64.b64encode((hami.tls_dir / "ca.crt").read_bytes()).decode()},
                    "managedResources": [{"name": n, "ignoredByScheduler": True} for n in NVIDIA_RESOURCES],
                }
            ],
        }
    )
    wait_until(admitted(kube, namespace, {"nvidia.com/gpumem": "100"}), description="hami's webhook to be in effect")

    # The pod names no scheduler and no GPU count: the webhook sends it to hami and adds the default count.
    created = kube.create_pod(
        namespace, "train", limits={"nvidia.com/gpumem": 2000}, spec={"nodeSelector": {"hami-e2e/pool": pool}}
    )
    assert created["spec"]["schedulerName"] == SCHEDULER
    assert created["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2k"}

    bound = kube.wait_for_pod_scheduled(namespace, "train")
    assert bound["spec"]["nodeName"] == big
    annotations = bound["metadata"]["annotations"]
    assert annotations[keys.VGPU_NODE] == big
    assert annotations["hami.io/vgpu-devices-allocated"] == f"GPU-{big},NVIDIA,2000,0:;"
    assert annotations["hami.io/vgpu-devices-to-allocate"] == f"GPU-{big},NVIDIA,2000,0:;"
    assert annotations[keys.BIND_PHASE] == "allocating"


def test_a_pod_with_node_name_asking_for_gpus_is_rejected_with_our_message(
    kube: KubeClient, namespace: str, webhook: Callable[[bytes], None]
) -> None:
    wait_until(admitted(kube, namespace, ONE_GPU), description="hami's webhook to be in effect")
    with pytest.raises(ApiError) as caught:
        kube.create_pod(namespace, "pinned", limits={"nvidia.com/gpu": 1}, node_name="some-node")
    assert caught.value.status == 403
    message = caught.value.body["message"]
    assert 'admission webhook "vgpu.hami.io" denied the request: pod has node assigned' in message
    assert "containers[0](main) asks for nvidia.com/gpu" in message


def test_a_pod_without_gpus_is_left_alone(kube: KubeClient, namespace: str, webhook: Callable[[bytes], None]) -> None:
    wait_until(admitted(kube, namespace, ONE_GPU), description="hami's webhook to be in effect")
    pod = kube.create_pod(namespace, "web", limits={"cpu": "1"})
    assert pod["spec"]["schedulerName"] == "default-scheduler"


def test_rotating_the_certificate_files_keeps_the_webhook_working(
    kube: KubeClient, namespace: str, hami: Hami, webhook: Callable[[bytes], None]
) -> None:
    old_ca = (hami.tls_dir / "ca.crt").read_bytes()
    wait_until(admitted(kube, namespace, ONE_GPU), description="hami's webhook to be in effect")
    rotated = new_pair("hami-e2e-ca-2")
    webhook(old_ca + rotated.ca_cert)  # trust both while the server switches, as a rotation would
    write_files(rotated, hami.tls_dir)  # the running server picks the new files up by itself
    wait_until(lambda: hami.serves(rotated.ca_cert), description="hami to serve the new certificate")
    pod = wait_until(admitted(kube, namespace, ONE_GPU), description="admission with the new certificate")
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] == "100"
    webhook(rotated.ca_cert)  # the old CA is no longer trusted at all
    wait_until(admitted(kube, namespace, ONE_GPU), description="admission trusting only the new CA")
    with pytest.raises(httpx.ConnectError):  # the old CA no longer vouches for the server
        hami.serves(old_ca)


def test_while_hami_is_down_only_pods_for_hami_are_refused(
    kube: KubeClient, namespace: str, hami: Hami, webhook: Callable[[bytes], None]
) -> None:
    wait_until(admitted(kube, namespace, ONE_GPU), description="hami's webhook to be in effect")
    hami.process.stop()

    # The chart's matchConditions never send these to the webhook: hami being down changes nothing for them.
    web = kube.create_pod(namespace, "web", limits={"cpu": "1"}, requests={"cpu": "1", "memory": "1Gi"})
    assert web["spec"]["schedulerName"] == "default-scheduler"
    other = {
        "name": "init",
        "image": "registry.invalid/hami-e2e:none",
        "resources": {"limits": {"example.com/fpga": "1"}},
    }
    assert kube.create_pod(namespace, "fpga", spec={"initContainers": [other]})["metadata"]["name"] == "fpga"

    # Pods that ask for a managed resource (limits or requests, any container) or name hami's scheduler are sent,
    # and failurePolicy Fail refuses them while hami cannot answer.
    init_dcu = {
        "name": "init",
        "image": "registry.invalid/hami-e2e:none",
        "resources": {"limits": {"hygon.com/dcunum": "1"}},
    }
    for name, kwargs in [
        ("gpu", {"limits": ONE_GPU}),
        ("gpumem-request", {"requests": {"nvidia.com/gpumem": "1000"}}),
        ("dcu-init", {"spec": {"initContainers": [init_dcu]}}),
        ("names-hami", {"scheduler_name": SCHEDULER}),
    ]:
        with pytest.raises(ApiError) as refused:
            kube.create_pod(namespace, name, **kwargs)  # type: ignore[arg-type]
        assert 'failed calling webhook "vgpu.hami.io"' in str(refused.value), name
    assert sorted(
        p["metadata"]["name"] for p in kube.list_pods(namespace) if not p["metadata"]["name"].startswith("probe-")
    ) == ["fpga", "web"]
