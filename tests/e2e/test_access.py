"""Who can call hami, end to end: the real kube-apiserver, the real kube-scheduler and ``hami scheduler`` as a
subprocess with **the chart's own listener flags** (rendered by helm; only ports and file paths are swapped for the
test's).

* The Service listener (``--http_bind``, what the chart's Service exposes) answers ``/filter`` and ``/bind`` with
  404 and changes nothing; kube-scheduler, configured as the chart configures its sidecar, schedules through the
  extender listener on 127.0.0.1.
* ``/metrics`` with ``--metrics-secure``: the API server's TokenReview and SubjectAccessReview decide (401 without
  or with a bad token, 403 for a ServiceAccount without the chart's metrics-reader ClusterRole, 200 with it).
* Opt-in authentication for an extender beyond loopback: mutual TLS (kube-scheduler's extender ``tlsConfig``
  with a client certificate) and a bearer token file; calls without the right certificate or token are refused.
* A half-configured listener stops ``hami scheduler`` at start-up with exit status 2.
* Every TLS listener of the chart's set-up refuses a TLS 1.2 client offering only CBC suites and serves AES-GCM.
"""

from __future__ import annotations

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
import yaml

from hami.protocol.keys import NVIDIA_REGISTER
from hami.server.certs import CertBundle, generate, write_files
from tests.e2e.cluster import (
    CertificateAuthority,
    ControlPlane,
    KubeClient,
    ManagedProcess,
    Scheduler,
    free_port,
    wait_until,
)
from tests.e2e.hami_stack import GPU, NVIDIA_RESOURCES, SCHEDULER_NAME, gpu_limits, register_annotation
from tests.helm import template

HAMI = Path(sys.executable).parent / "hami"
CHART_NAMESPACE = "hami-system"
LISTENER_FLAGS = ("--http_bind", "--extender-bind", "--cert_file", "--key_file", "--metrics-bind-address")


# --- the chart ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chart:
    """What the chart renders for the scheduler pod: hami's args, kube-scheduler's extender, the metrics role."""

    hami_args: list[str]
    extender: dict[str, Any]
    metrics_reader: dict[str, Any]


@pytest.fixture(scope="module")
def chart(kube: KubeClient) -> Chart:
    version = kube.get("/version")["gitVersion"].lstrip("v").split("-")[0]
    docs = template(CHART_NAMESPACE, version)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    hami = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "hami")
    config_map = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "hami-scheduler")
    (extender,) = yaml.safe_load(config_map["data"]["config.yaml"])["extenders"]
    reader = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("metrics-reader"))
    return Chart(hami["args"], extender, reader)


def chart_listener_args(chart: Chart, ports: dict[str, int], tls_dir: Path) -> list[str]:
    """The chart's listener flags with the test's ports (the chart's hosts kept) and certificate files."""
    out: list[str] = []
    for arg in chart.hami_args:
        flag, _, value = arg.partition("=")
        if flag in ("--cert_file", "--key_file"):
            out.append(f"{flag}={tls_dir / Path(value).name}")
        elif flag in ports:
            host = value.rpartition(":")[0]
            out.append(f"{flag}={host}:{ports[flag]}")
        elif flag == "--metrics-secure":
            out.append(arg)
        else:
            assert not flag.startswith(LISTENER_FLAGS), f"unexpected listener flag {arg}"
    return out


# --- running hami ---------------------------------------------------------------------------------------------


@dataclass
class Hami:
    process: ManagedProcess
    service_port: int
    extender_port: int
    metrics_port: int
    tls: CertBundle | None

    def verify(self) -> ssl.SSLContext:
        assert self.tls is not None
        return ssl.create_default_context(cadata=self.tls.ca_cert.decode())

    def check_alive(self) -> None:
        code = self.process.exited()
        if code is not None:
            raise RuntimeError(f"hami scheduler exited with status {code}:\n{self.process.log_tail()}")


def start_hami(plane: ControlPlane, args: list[str], ready: Callable[[], bool], name: str) -> ManagedProcess:
    process = ManagedProcess(
        name,
        [
            str(HAMI),
            "scheduler",
            f"--kubeconfig={plane.kubeconfig}",
            f"--scheduler-name={SCHEDULER_NAME}",
            "--no-leader-elect",
            *args,
        ],
        plane.log_dir / f"{name}.log",
    )
    process.start()

    def check() -> None:
        code = process.exited()
        if code is not None:
            raise RuntimeError(f"hami scheduler exited with status {code}:\n{process.log_tail()}")

    try:
        wait_until(ready, description=f"{name} to be ready", check=check, interval=0.1)
    except BaseException:
        process.stop()
        raise
    return process


def new_tls(directory: Path) -> CertBundle:
    bundle = generate(["localhost"], ["127.0.0.1"], now=datetime.now(UTC))
    write_files(bundle, directory)
    return bundle


@pytest.fixture
def chart_hami(control_plane: ControlPlane, chart: Chart, tmp_path: Path) -> Iterator[Hami]:
    """hami with the chart's listener flags: Service listener with TLS, extender on 127.0.0.1, secure metrics."""
    tls = new_tls(tmp_path / "tls")
    ports = {"--http_bind": free_port(), "--extender-bind": free_port(), "--metrics-bind-address": free_port()}
    args = chart_listener_args(chart, ports, tmp_path / "tls")
    assert "--metrics-secure" in args
    context = ssl.create_default_context(cadata=tls.ca_cert.decode())
    url = f"https://127.0.0.1:{ports['--http_bind']}/readyz"
    process = start_hami(
        control_plane,
        args,
        lambda: httpx.get(url, verify=context, timeout=5).status_code == 200,
        f"hami-chart-{ports['--http_bind']}",
    )
    try:
        yield Hami(process, ports["--http_bind"], ports["--extender-bind"], ports["--metrics-bind-address"], tls)
    finally:
        process.stop()


# --- the cluster side -----------------------------------------------------------------------------------------


@pytest.fixture
def pool(namespace: str, make_node: Callable[..., dict[str, Any]]) -> tuple[str, dict[str, str]]:
    """One fake GPU node for this test, and the node selector that keeps the test's pods on it."""
    label = {"hami-e2e/access": namespace}
    node = f"{namespace}-gpu"
    make_node(
        node, extended={GPU: 20}, labels=label, annotations={NVIDIA_REGISTER: register_annotation(node, 2, 24000)}
    )
    return node, label


def gpu_pod(kube: KubeClient, namespace: str, name: str, selector: dict[str, str]) -> dict[str, Any]:
    return kube.create_pod(
        namespace, name, limits=gpu_limits(), scheduler_name=SCHEDULER_NAME, spec={"nodeSelector": selector}
    )


def extender_from_chart(chart: Chart, url: str, **changes: Any) -> dict[str, Any]:
    """The chart's KubeSchedulerConfiguration profile and extender, pointed at ``url``."""
    extender = {**chart.extender, "urlPrefix": url, **changes}
    return {"profiles": [{"schedulerName": SCHEDULER_NAME}], "extenders": [extender]}


# --- the Service listener, the loopback extender --------------------------------------------------------------


def test_the_service_listener_refuses_filter_and_bind_and_kube_scheduler_uses_the_loopback_extender(
    kube: KubeClient,
    namespace: str,
    chart: Chart,
    chart_hami: Hami,
    pool: tuple[str, dict[str, str]],
    start_scheduler: Callable[..., Scheduler],
) -> None:
    node, selector = pool
    pod = gpu_pod(kube, namespace, "web", selector)
    service = f"https://127.0.0.1:{chart_hami.service_port}"
    verify = chart_hami.verify()

    forged_filter = httpx.post(f"{service}/filter", json={"Pod": pod, "NodeNames": [node]}, verify=verify, timeout=10)
    forged_bind = httpx.post(
        f"{service}/bind",
        json={"PodName": "web", "PodNamespace": namespace, "PodUID": pod["metadata"]["uid"], "Node": node},
        verify=verify,
        timeout=10,
    )

    assert (forged_filter.status_code, forged_bind.status_code) == (404, 404)
    after = kube.get_pod(namespace, "web")
    assert after["spec"].get("nodeName") is None
    assert after["metadata"].get("annotations") in (None, {})
    assert after["metadata"]["resourceVersion"] == pod["metadata"]["resourceVersion"]
    node_obj = kube.get(f"/api/v1/nodes/{node}")
    assert "hami.io/mutex.lock" not in (node_obj["metadata"].get("annotations") or {})

    # kube-scheduler configured as the chart configures its sidecar: https://127.0.0.1:<extender port>
    assert chart.extender["urlPrefix"].startswith("https://127.0.0.1:")
    url = chart.extender["urlPrefix"].rpartition(":")[0] + f":{chart_hami.extender_port}"
    start_scheduler(extender_from_chart(chart, url))

    bound = kube.wait_for_pod_scheduled(namespace, "web")
    assert bound["spec"]["nodeName"] == node
    assert bound["metadata"]["annotations"]["hami.io/vgpu-node"] == node


# --- /metrics: TokenReview + SubjectAccessReview ---------------------------------------------------------------


def service_account_token(kube: KubeClient, namespace: str, name: str) -> str:
    kube.post(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}})
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}}
    created = kube.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", request)
    token: str = created["status"]["token"]
    return token


def may_get_metrics(kube: KubeClient, user: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "nonResourceAttributes": {"path": "/metrics", "verb": "get"}},
    }
    return bool(kube.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"].get("allowed"))


@pytest.fixture
def metrics_reader(kube: KubeClient, namespace: str, chart: Chart) -> Iterator[str]:
    """A ServiceAccount bound to the chart's metrics-reader ClusterRole (created under a name of this test)."""
    role = {**chart.metrics_reader, "metadata": {"name": f"{namespace}-metrics-reader"}}
    kube.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    binding = {
        "metadata": {"name": f"{namespace}-prometheus"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}],
    }
    kube.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    token = service_account_token(kube, namespace, "prometheus")
    user = f"system:serviceaccount:{namespace}:prometheus"
    wait_until(lambda: may_get_metrics(kube, user), description="RBAC to allow the reader")  # before hami caches
    try:
        yield token
    finally:
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{namespace}-prometheus")
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{namespace}-metrics-reader")


def test_metrics_are_served_to_tokens_rbac_allows_to_get_them(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, chart_hami: Hami, metrics_reader: str
) -> None:
    nobody = service_account_token(kube, namespace, "nobody")
    url = f"https://127.0.0.1:{chart_hami.metrics_port}/metrics"
    verify = chart_hami.verify()

    def scrape(token: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return httpx.get(url, headers=headers, verify=verify, timeout=10)

    assert scrape(None).status_code == 401
    assert scrape("not-a-token").status_code == 401
    assert scrape(nobody).status_code == 403
    allowed = scrape(metrics_reader)
    assert allowed.status_code == 200
    assert "hami_" in allowed.text
    assert scrape(control_plane.token).status_code == 200  # system:masters may get every URL
    with pytest.raises(httpx.HTTPError):  # no plain HTTP on the metrics port
        httpx.get(f"http://127.0.0.1:{chart_hami.metrics_port}/metrics", timeout=5).raise_for_status()


# --- opt-in authentication: mutual TLS --------------------------------------------------------------------------


def test_kube_scheduler_schedules_through_an_extender_that_requires_client_certificates(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    pool: tuple[str, dict[str, str]],
    start_scheduler: Callable[..., Scheduler],
    tmp_path: Path,
) -> None:
    node, selector = pool
    ca = control_plane.ca  # signs hami's serving certificate and kube-scheduler's client certificate
    serving_cert, serving_key = ca.issue_serving_cert(tmp_path, "hami")
    client_cert, client_key = ca.issue_serving_cert(tmp_path, "kube-scheduler")
    stranger = CertificateAuthority.create(tmp_path / "other", common_name="another-ca")
    stranger_cert, stranger_key = stranger.issue_serving_cert(tmp_path / "other", "kube-scheduler")
    port, service_port = free_port(), free_port()
    url = f"https://127.0.0.1:{port}"
    trusted = ssl.create_default_context(cafile=str(ca.cert_file))
    trusted.load_cert_chain(client_cert, client_key)
    process = start_hami(
        control_plane,
        [
            f"--extender-bind=0.0.0.0:{port}",  # beyond loopback: allowed because client certificates are required
            f"--extender-client-ca-file={ca.cert_file}",
            f"--cert_file={serving_cert}",
            f"--key_file={serving_key}",
            f"--http_bind=127.0.0.1:{service_port}",
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
        ],
        lambda: httpx.get(f"{url}/readyz", verify=trusted, timeout=5).status_code == 200,
        f"hami-mtls-{port}",
    )
    try:
        start_scheduler(
            {
                "profiles": [{"schedulerName": SCHEDULER_NAME}],
                "extenders": [
                    {
                        "urlPrefix": url,
                        "filterVerb": "filter",
                        "bindVerb": "bind",
                        "nodeCacheCapable": True,
                        "weight": 1,
                        "httpTimeout": "30s",
                        "enableHTTPS": True,
                        "tlsConfig": {
                            "certFile": str(client_cert),
                            "keyFile": str(client_key),
                            "caFile": str(ca.cert_file),
                        },
                        "managedResources": [{"name": n, "ignoredByScheduler": True} for n in NVIDIA_RESOURCES],
                    }
                ],
            }
        )
        gpu_pod(kube, namespace, "train", selector)
        assert kube.wait_for_pod_scheduled(namespace, "train")["spec"]["nodeName"] == node

        no_cert = ssl.create_default_context(cafile=str(ca.cert_file))
        wrong_ca = ssl.create_default_context(cafile=str(ca.cert_file))
        wrong_ca.load_cert_chain(stranger_cert, stranger_key)
        for context in (no_cert, wrong_ca):
            with pytest.raises(httpx.TransportError):
                httpx.post(f"{url}/bind", json={"PodName": "x"}, verify=context, timeout=10)
        answer = httpx.post(f"{url}/filter", content=b"{}", verify=trusted, timeout=10)
        assert answer.status_code == 200
        assert "missing pod" in answer.json()["Error"]
    finally:
        process.stop()


# --- opt-in authentication: a bearer token ----------------------------------------------------------------------


def test_an_extender_with_a_token_file_serves_only_callers_with_the_token(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, pool: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    node, selector = pool
    token_file = tmp_path / "extender-token"
    token_file.write_text(f"{uuid.uuid4().hex}\n")
    token = token_file.read_text().strip()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_hami(
        control_plane,
        [
            f"--extender-bind=0.0.0.0:{port}",  # beyond loopback: allowed because a token is required
            f"--extender-token-file={token_file}",
            f"--http_bind=127.0.0.1:{free_port()}",
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
        ],
        lambda: httpx.get(f"{url}/readyz", timeout=5).status_code == 200,  # health needs no token
        f"hami-token-{port}",
    )
    try:
        pod = gpu_pod(kube, namespace, "job", selector)
        args = {"Pod": pod, "NodeNames": [node]}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {token}"}):
            refused = httpx.post(f"{url}/filter", json=args, headers=headers, timeout=10)
            assert refused.status_code == 401
        assert kube.get_pod(namespace, "job")["metadata"].get("annotations") in (None, {})

        # A caller with the token plays kube-scheduler's part: filter, then bind.
        auth = {"Authorization": f"Bearer {token}"}
        filtered = httpx.post(f"{url}/filter", json=args, headers=auth, timeout=30).json()
        assert filtered["NodeNames"] == [node], filtered
        wait_until(
            lambda: (
                "hami.io/vgpu-devices-allocated"
                in (kube.get_pod(namespace, "job")["metadata"].get("annotations") or {})
            ),
            description="the allocation annotation",
        )
        bind = {"PodName": "job", "PodNamespace": namespace, "PodUID": pod["metadata"]["uid"], "Node": node}
        assert httpx.post(f"{url}/bind", json=bind, headers=auth, timeout=30).json().get("Error", "") == ""
        assert kube.get_pod(namespace, "job")["spec"]["nodeName"] == node

        # The file is re-read when it changes: the old token stops working, the new one works.
        token_file.write_text("rotated-token\n")
        old = httpx.post(f"{url}/filter", content=b"{}", headers=auth, timeout=10)
        new = httpx.post(f"{url}/filter", content=b"{}", headers={"Authorization": "Bearer rotated-token"}, timeout=10)
        assert (old.status_code, new.status_code) == (401, 200)
    finally:
        process.stop()


# --- half-configured: refused at start-up -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--extender-bind=0.0.0.0:{port}"],
            "--extender-bind: /filter and /bind may bind any pod to any node",
            id="extender-beyond-loopback-without-authentication",
        ),
        pytest.param(
            ["--extender-bind=0.0.0.0:{port}", "--extender-client-ca-file={ca}"],
            "--extender-client-ca-file: client certificates need TLS on the extender listener",
            id="client-ca-without-a-serving-certificate",
        ),
        pytest.param(
            ["--extender-token-file={tmp}/empty"],
            "--extender-token-file: the token file holds no token",
            id="empty-token-file",
        ),
        pytest.param(["--metrics-secure"], "--metrics-secure: authenticated metrics are served over TLS", id="metrics"),
    ],
)
def test_a_half_configured_listener_stops_hami_at_start_up(
    control_plane: ControlPlane, tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "empty").write_text("")
    given = [a.format(port=free_port(), ca=control_plane.ca.cert_file, tmp=tmp_path) for a in args]
    process = ManagedProcess(
        "hami-refused",
        [str(HAMI), "scheduler", f"--kubeconfig={control_plane.kubeconfig}", *given],
        tmp_path / "hami.log",
    )
    process.start()
    try:
        code = wait_until(process.exited, description="hami to exit", interval=0.1)
    finally:
        process.stop()  # reaps it (and forgets it) whatever happened
    log = (tmp_path / "hami.log").read_text()
    assert code == 2, log
    assert f"hami scheduler: {message}" in log


# --- TLS: AEAD suites only --------------------------------------------------------------------------------------


def tls12_client(ciphers: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(ciphers)
    return context


def test_every_tls_listener_of_the_chart_refuses_cbc_suites(chart_hami: Hami) -> None:
    cbc = tls12_client("ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA:ECDHE-ECDSA-AES128-SHA256")
    gcm = tls12_client("ECDHE-ECDSA-AES128-GCM-SHA256")
    for port, path in ((chart_hami.service_port, "/healthz"), (chart_hami.extender_port, "/healthz")):
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"https://127.0.0.1:{port}{path}", verify=cbc, timeout=10)
        assert httpx.get(f"https://127.0.0.1:{port}{path}", verify=gcm, timeout=10).status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"https://127.0.0.1:{chart_hami.metrics_port}/metrics", verify=cbc, timeout=10)
    answer = httpx.get(f"https://127.0.0.1:{chart_hami.metrics_port}/metrics", verify=gcm, timeout=10)
    assert answer.status_code == 401  # the handshake worked; no token was sent
