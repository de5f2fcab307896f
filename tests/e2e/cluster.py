"""A real Kubernetes control plane on loopback for end-to-end tests.

``start_control_plane()`` runs etcd and kube-apiserver (built by ``make testenv``) on free loopback
ports inside a directory it is given, with its own CA, an admin bearer token in ``system:masters``,
RBAC authorization, the MutatingAdmissionWebhook plugin on and the ServiceAccount admission plugin off.
``ControlPlane.start_scheduler()`` adds kube-scheduler with a KubeSchedulerConfiguration given as a
dict. ``KubeClient`` is a small synchronous client (httpx) with helpers for fake nodes and plain pods.

No kubelet and, by default, no kube-controller-manager run: nodes are API objects only (they stay Ready and
schedulable), bound pods stay ``Pending`` with ``spec.nodeName`` set, and namespaces never finish
deleting. Delete pods with grace period 0 (``KubeClient.delete_pod`` does). ``start_control_plane(
controllers=...)`` adds kube-controller-manager (the node binaries' build, as the real node's harness uses) running
only the controllers named, say the garbage collector and the resourceclaim controller (DRA mode's tests); the
node lifecycle controller is never among the defaults, so fake nodes stay Ready.

Every process runs in its own process group and is ended by its own id (``killpg`` on the group it
leads) when the control plane stops; an ``atexit`` hook stops whatever is still running if the
interpreter exits another way, and on Linux the kernel kills the children if the test process is
killed outright (``PR_SET_PDEATHSIG``). Component logs go to ``<workdir>/logs/<name>.log``;
``running_log_files()`` lists them so the pytest hook can point to them when a test fails.

The pytest fixtures that wrap this module are in ``tests/e2e/conftest.py``.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import datetime
import functools
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTENV_SCRIPT = REPO_ROOT / "scripts" / "k8s-testenv"

#: Upper bounds for waits. They are safety nets for a hung component, not speed expectations:
#: every wait polls and returns as soon as the condition holds.
START_TIMEOUT_S = float(os.environ.get("HAMI_E2E_START_TIMEOUT", "180"))
WAIT_TIMEOUT_S = float(os.environ.get("HAMI_E2E_WAIT_TIMEOUT", "120"))

T = TypeVar("T")


class ControlPlaneError(RuntimeError):
    """The control plane could not be found or started; the message says why and where the logs are."""


# ----------------------------------------------------------------------------------------------------
# binaries


@dataclass(frozen=True)
class Binaries:
    """The control-plane binaries of one build (``~/.cache/hami/k8s-v1.Y.Z/``)."""

    directory: Path
    kubernetes_version: str
    etcd_version: str

    @property
    def etcd(self) -> Path:
        return self.directory / "etcd"

    @property
    def kube_apiserver(self) -> Path:
        return self.directory / "kube-apiserver"

    @property
    def kube_scheduler(self) -> Path:
        return self.directory / "kube-scheduler"


def locate_binaries() -> Binaries:
    """Find the build of the release ``HAMI_K8S_VERSION`` names (else ``scripts/k8s-testenv``'s default release) via
    ``scripts/k8s-testenv locate`` (offline, no Go needed); ``make test-matrix`` sets it per release.

    ``HAMI_K8S_BIN_DIR`` points at a directory with the three binaries instead (a ``manifest.json``
    there is optional). Raises ControlPlaneError telling to run ``make testenv`` when there is none.
    """
    override = os.environ.get("HAMI_K8S_BIN_DIR")
    if override:
        directory = Path(override)
    else:
        proc = subprocess.run(
            [sys.executable, str(TESTENV_SCRIPT), "locate"], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise ControlPlaneError(
                "the end-to-end tests need the local Kubernetes control plane, which is not built:\n"
                f"  {proc.stderr.strip() or proc.stdout.strip()}\n"
                "Run `make testenv` (a one-time build; `make test` runs it for you), or run only the fast "
                'tests: `make test-fast` or `pytest -m "not e2e"`.'
            )
        directory = Path(proc.stdout.strip())
    missing = [name for name in ("etcd", "kube-apiserver", "kube-scheduler") if not (directory / name).is_file()]
    if missing:
        raise ControlPlaneError(f"{directory} lacks {', '.join(missing)}; run `make testenv`")
    manifest_file = directory / "manifest.json"
    manifest: dict[str, Any] = json.loads(manifest_file.read_text()) if manifest_file.is_file() else {}
    return Binaries(
        directory=directory,
        kubernetes_version=str(manifest.get("kubernetes", "unknown")),
        etcd_version=str(manifest.get("etcd", "unknown")),
    )


# ----------------------------------------------------------------------------------------------------
# certificates


def _write_private_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


@dataclass(frozen=True)
class CertificateAuthority:
    """A throw-away CA. ``issue_serving_cert`` makes certs that kube-apiserver (and anything using
    ``ca_pem`` as its trust root, e.g. a webhook's ``caBundle``) accepts for 127.0.0.1."""

    cert_file: Path
    key_file: Path
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @classmethod
    def create(cls, directory: Path, common_name: str = "hami-e2e-ca") -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        directory.mkdir(parents=True, exist_ok=True)
        cert_file, key_file = directory / "ca.crt", directory / "ca.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_private_key(key_file, key)
        return cls(cert_file=cert_file, key_file=key_file, cert=cert, key=key)

    def issue_serving_cert(
        self,
        directory: Path,
        name: str,
        ips: tuple[str, ...] = ("127.0.0.1",),
        dns_names: tuple[str, ...] = ("localhost",),
    ) -> tuple[Path, Path]:
        """Write ``<name>.crt``/``<name>.key`` (server + client auth, SANs ``ips`` and ``dns_names``)
        into ``directory`` and return their paths."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        sans += [x509.DNSName(dns) for dns in dns_names]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        directory.mkdir(parents=True, exist_ok=True)
        cert_file, key_file = directory / f"{name}.crt", directory / f"{name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_private_key(key_file, key)
        return cert_file, key_file


# ----------------------------------------------------------------------------------------------------
# processes

_RUNNING: dict[int, ManagedProcess] = {}


@dataclass
class ManagedProcess:
    """A child process in its own process group, logging to ``log_file``."""

    name: str
    args: list[str]
    log_file: Path
    env: Mapping[str, str] | None = None
    """the process's environment; None: this one's"""
    popen: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    def start(self) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            log.write(f"$ {' '.join(self.args)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                _dying_with_parent(self.args),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # own process group: killpg(pid) ends it and only it
            )
        _RUNNING[self.popen.pid] = self

    @property
    def pid(self) -> int | None:
        return None if self.popen is None else self.popen.pid

    def exited(self) -> int | None:
        """The exit status, or None while running (or not started)."""
        return None if self.popen is None else self.popen.poll()

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group this process leads, SIGKILL it after ``grace_s``; idempotent.

        Signals go only to the group while its leader is not yet reaped, so the id cannot have been
        reused by an unrelated process.
        """
        popen = self.popen
        if popen is None:
            return
        try:
            if popen.poll() is None:
                _signal_group(popen.pid, signal.SIGTERM)
                try:
                    popen.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    _signal_group(popen.pid, signal.SIGKILL)
                    popen.wait()
        finally:
            _RUNNING.pop(popen.pid, None)

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


# Linux: the kernel SIGKILLs the children if the test process dies without cleaning up (SIGKILL, a
# crash), so no etcd/kube-apiserver outlives its pytest run. SIGKILL, not SIGTERM: a kube-apiserver
# whose etcd vanished at the same moment hangs in its graceful shutdown. util-linux's setpriv sets the
# parent-death signal and execs the command (the setting survives exec), so Popen needs no preexec_fn:
# with one, Python forks instead of vforking, and the fork handlers of a library the test process loaded
# run in the child before exec (gRPC's event engine aborted a kube-scheduler there with SIGABRT).
_SETPRIV = shutil.which("setpriv") if sys.platform == "linux" else None


def _dying_with_parent(args: Sequence[str]) -> list[str]:
    """``args`` run so that the kernel SIGKILLs the process when this one dies (as they are without setpriv)."""
    return [_SETPRIV, "--pdeathsig", "KILL", "--", *args] if _SETPRIV else list(args)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def running_log_files() -> dict[str, Path]:
    """Log files of the components that are running now (name -> path)."""
    return {proc.name: proc.log_file for proc in _RUNNING.values()}


def _stop_all_at_exit() -> None:
    for proc in list(_RUNNING.values()):
        proc.stop(grace_s=5.0)


atexit.register(_stop_all_at_exit)


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(
    condition: Callable[[], T | None],
    *,
    timeout: float = WAIT_TIMEOUT_S,
    interval: float = 0.2,
    description: str = "condition",
    check: Callable[[], None] | None = None,
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that.

    ``check`` runs before each poll and may raise to stop early (e.g. when a process died).
    Raises TimeoutError naming ``description`` and the last exception ``condition`` raised, if any.
    The timeout is a safety net: a slow machine only makes this take longer.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        if check is not None:
            check()
        try:
            result = condition()
        except (httpx.HTTPError, OSError, ApiError) as err:
            last_error, result = err, None
        if result:
            return result
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {description}{detail}")
        time.sleep(interval)


def _unverified_ok(url: str) -> bool:
    with httpx.Client(verify=False, timeout=5.0) as client:
        return client.get(url).status_code == 200


# ----------------------------------------------------------------------------------------------------
# API client


class ApiError(RuntimeError):
    """A non-2xx answer from the API server; ``status`` and the decoded ``body`` are kept."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status
        self.body = body


class KubeClient:
    """A small synchronous Kubernetes client over httpx, authenticated as the cluster admin.

    ``request``/``get``/``post``/``put``/``patch``/``delete`` take API paths (``/api/v1/nodes``) and
    JSON-able bodies and return the decoded JSON, raising ApiError on non-2xx answers. The helpers
    below cover what tests need without a kubelet: fake nodes, plain pods, namespaces and waits.
    Use as a context manager or call ``close()``.
    """

    def __init__(self, server: str, ca_file: Path, token: str, timeout: float = 30.0) -> None:
        self.server = server
        self._http = httpx.Client(
            base_url=server,
            verify=ssl.create_default_context(cafile=str(ca_file)),
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- raw -------------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str | int] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        content = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if content is not None else {}
        response = self._http.request(method, path, content=content, params=params, headers=headers)
        try:
            decoded: Any = response.json()
        except ValueError:
            decoded = response.text
        if response.is_error:
            raise ApiError(method, path, response.status_code, decoded)
        return decoded

    def healthy(self, endpoint: str = "readyz") -> bool:
        """Whether ``/<endpoint>`` (readyz, livez, healthz) answers 200."""
        return self._http.get(f"/{endpoint}").status_code == 200

    def get(self, path: str, **params: str | int) -> Any:
        return self.request("GET", path, params=params or None)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body)

    def patch(self, path: str, body: Any, patch_type: str = "merge") -> Any:
        """``patch_type``: ``merge`` (RFC 7386), ``strategic`` or ``json`` (RFC 6902)."""
        content_type = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
        }[patch_type]
        return self.request("PATCH", path, body, content_type=content_type)

    def delete(self, path: str, body: Any = None) -> Any:
        return self.request("DELETE", path, body)

    # -- namespaces --------------------------------------------------------------------------------

    def create_namespace(self, name: str | None = None, labels: Mapping[str, str] | None = None) -> str:
        """Create a namespace (a unique ``e2e-xxxxxxxx`` name by default) and return its name."""
        name = name or f"e2e-{uuid.uuid4().hex[:8]}"
        self.post(
            "/api/v1/namespaces",
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": dict(labels or {})},
            },
        )
        return name

    # -- nodes -------------------------------------------------------------------------------------

    def create_node(
        self,
        name: str,
        *,
        cpu: str = "16",
        memory: str = "64Gi",
        pods: str = "110",
        extended: Mapping[str, str | int] | None = None,
        allocatable: Mapping[str, str | int] | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        ready: bool = True,
    ) -> dict[str, Any]:
        """Create a fake node (no kubelet behind it) and return it as the API server stores it.

        ``status.capacity`` is cpu/memory/pods plus ``extended`` (e.g. ``{"nvidia.com/gpu": 4}``);
        ``status.allocatable`` is the capacity, overridden key by key by ``allocatable``. The node has
        a ``Ready`` condition (``True`` unless ``ready=False``), the usual ``kubernetes.io/hostname``
        label plus ``labels``, and ``annotations``, and exactly the ``taints`` given (the ``not-ready``
        taint that admission adds to new nodes is removed). Without kube-controller-manager it stays so.
        """
        capacity = {"cpu": cpu, "memory": memory, "pods": pods}
        capacity |= {key: str(value) for key, value in (extended or {}).items()}
        allocatable_all = capacity | {key: str(value) for key, value in (allocatable or {}).items()}
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {
            "capacity": capacity,
            "allocatable": allocatable_all,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "fake node created by hami's e2e tests",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v0.0.0-fake",
                "containerRuntimeVersion": "fake://0",
                "kernelVersion": "",
                "osImage": "",
                "kubeProxyVersion": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        }
        node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})},
                "annotations": dict(annotations or {}),
            },
            "spec": {"taints": taints} if taints else {},
            "status": status,
        }
        created: dict[str, Any] = self.post("/api/v1/nodes", node)
        stored = created.get("status") or {}
        if stored.get("allocatable") != allocatable_all or not stored.get("conditions"):
            # The API server keeps status on create today; this keeps the helper right if it stops.
            created = self.patch(f"/api/v1/nodes/{name}/status", {"status": status})
        if (created.get("spec") or {}).get("taints") != (taints or None):
            # The TaintNodesByCondition admission plugin adds node.kubernetes.io/not-ready:NoSchedule to
            # every new node; the node lifecycle controller (not running here) would lift it once the
            # node reports Ready. Do its job: leave exactly the taints asked for.
            created = self.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": taints or None}})
        return created

    def set_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> dict[str, Any]:
        """Merge-patch node annotations (a ``None`` value removes the key)."""
        patched: dict[str, Any] = self.patch(f"/api/v1/nodes/{name}", {"metadata": {"annotations": annotations}})
        return patched

    def delete_node(self, name: str, *, missing_ok: bool = True) -> None:
        try:
            self.delete(f"/api/v1/nodes/{name}")
        except ApiError as err:
            if not (missing_ok and err.status == 404):
                raise

    # -- pods --------------------------------------------------------------------------------------

    def create_pod(
        self,
        namespace: str,
        name: str,
        *,
        requests: Mapping[str, str | int] | None = None,
        limits: Mapping[str, str | int] | None = None,
        scheduler_name: str | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        node_name: str | None = None,
        containers: list[dict[str, Any]] | None = None,
        spec: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Create a bare pod with one container (image never pulled: there is no kubelet).

        ``requests``/``limits`` become that container's resources (e.g. ``limits={"nvidia.com/gpu": 1}``);
        ``containers`` replaces the container list entirely; ``spec`` keys are merged over the spec.
        """
        resources: dict[str, dict[str, str]] = {}
        if requests:
            resources["requests"] = {key: str(value) for key, value in requests.items()}
        if limits:
            resources["limits"] = {key: str(value) for key, value in limits.items()}
        pod_spec: dict[str, Any] = {
            "containers": containers
            or [{"name": "main", "image": "registry.invalid/hami-e2e:none", "resources": resources}],
            "terminationGracePeriodSeconds": 0,
        }
        if scheduler_name:
            pod_spec["schedulerName"] = scheduler_name
        if node_name:
            pod_spec["nodeName"] = node_name
        pod_spec |= dict(spec or {})
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})},
            "spec": pod_spec,
        }
        created: dict[str, Any] = self.post(f"/api/v1/namespaces/{namespace}/pods", pod)
        return created

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        pod: dict[str, Any] = self.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return pod

    def list_pods(self, namespace: str | None = None, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Pods in ``namespace`` (all namespaces when None), optionally filtered by a label selector."""
        path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        params = {"labelSelector": label_selector} if label_selector else {}
        items: list[dict[str, Any]] = self.get(path, **params)["items"]
        return items

    def delete_pod(self, namespace: str, name: str, *, missing_ok: bool = True) -> None:
        """Delete with grace period 0: without a kubelet a graceful delete of a bound pod never ends."""
        try:
            self.delete(
                f"/api/v1/namespaces/{namespace}/pods/{name}",
                {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
            )
        except ApiError as err:
            if not (missing_ok and err.status == 404):
                raise

    def wait_for_pod(
        self,
        namespace: str,
        name: str,
        condition: Callable[[dict[str, Any]], bool],
        *,
        timeout: float = WAIT_TIMEOUT_S,
        description: str = "",
    ) -> dict[str, Any]:
        """Poll the pod until ``condition(pod)`` holds and return it."""

        def probe() -> dict[str, Any] | None:
            pod = self.get_pod(namespace, name)
            return pod if condition(pod) else None

        return wait_until(probe, timeout=timeout, description=description or f"pod {namespace}/{name}")

    def wait_for_pod_scheduled(self, namespace: str, name: str, *, timeout: float = WAIT_TIMEOUT_S) -> dict[str, Any]:
        """Wait until the pod has ``spec.nodeName`` (bound); return the pod."""
        return self.wait_for_pod(
            namespace,
            name,
            lambda pod: bool(pod["spec"].get("nodeName")),
            timeout=timeout,
            description=f"pod {namespace}/{name} to be bound to a node",
        )

    def wait_for_pod_unschedulable(
        self, namespace: str, name: str, *, timeout: float = WAIT_TIMEOUT_S
    ) -> dict[str, Any]:
        """Wait until the scheduler marks the pod ``PodScheduled=False`` (reason Unschedulable etc.)."""

        def unschedulable(pod: dict[str, Any]) -> bool:
            conditions = pod.get("status", {}).get("conditions") or []
            return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)

        return self.wait_for_pod(
            namespace,
            name,
            unschedulable,
            timeout=timeout,
            description=f"pod {namespace}/{name} unschedulable",
        )


# ----------------------------------------------------------------------------------------------------
# control plane


@dataclass
class Scheduler:
    """A running kube-scheduler (see ``ControlPlane.start_scheduler``)."""

    process: ManagedProcess
    config_file: Path
    port: int

    @property
    def log_file(self) -> Path:
        return self.process.log_file

    def stop(self) -> None:
        self.process.stop()

    def cached_nodes(self, token: str) -> int | None:
        """How many nodes kube-scheduler's own cache holds (its ``scheduler_cache_size{type="nodes"}`` gauge), or
        None when the metric cannot be read. kube-scheduler serves /metrics on its secure port with a
        self-signed certificate of its own (loopback only)."""
        try:
            response = httpx.get(
                f"https://127.0.0.1:{self.port}/metrics",
                headers={"Authorization": f"Bearer {token}"},
                verify=False,
                timeout=10,
            )
        except httpx.HTTPError:
            return None
        for line in response.text.splitlines():
            if line.startswith("scheduler_cache_size{") and 'type="nodes"' in line:
                return int(float(line.rsplit(" ", 1)[1]))
        return None


@dataclass
class ControlPlane:
    """etcd + kube-apiserver on loopback; see the module docstring.

    Attributes used by tests: ``server`` (``https://127.0.0.1:<port>``), ``ca`` (``ca.cert_file``,
    ``ca.cert_pem``, ``ca.issue_serving_cert(...)`` for webhook servers), ``token`` (admin bearer
    token, group ``system:masters``), ``kubeconfig`` (file using that token and CA), ``workdir``,
    ``log_dir``, ``binaries`` (versions), ``startup_seconds``.
    """

    workdir: Path
    binaries: Binaries
    ca: CertificateAuthority
    token: str
    server: str
    kubeconfig: Path
    etcd: ManagedProcess
    apiserver: ManagedProcess
    startup_seconds: float = 0.0
    schedulers: list[Scheduler] = field(default_factory=list)
    controller_manager: ManagedProcess | None = None
    """kube-controller-manager, when ``start_control_plane(controllers=...)`` started one."""
    feature_gates: dict[str, bool] = field(default_factory=dict)
    """The feature gates kube-apiserver runs with; kube-schedulers started here get them too."""

    @property
    def ca_file(self) -> Path:
        return self.ca.cert_file

    @property
    def ca_pem(self) -> bytes:
        return self.ca.cert_pem

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    def client(self, timeout: float = 30.0) -> KubeClient:
        """A new admin KubeClient (close it, or use it as a context manager)."""
        return KubeClient(self.server, self.ca.cert_file, self.token, timeout=timeout)

    def start_scheduler(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        extra_args: list[str] | None = None,
        timeout: float = START_TIMEOUT_S,
        wrapper: Sequence[str] = (),
    ) -> Scheduler:
        """Start kube-scheduler with a KubeSchedulerConfiguration (``kubescheduler.config.k8s.io/v1``).

        ``config`` is the configuration as a dict (``None``: the default profile). Missing keys are
        filled in: ``apiVersion``/``kind``, ``clientConnection.kubeconfig`` (this control plane's admin
        kubeconfig) and ``leaderElection.leaderElect: false``. Waits until ``/healthz`` and ``/readyz``
        answer 200 on its https port. Stop it with ``Scheduler.stop()`` (``stop()`` of the control
        plane stops it too). ``wrapper`` runs it through another command (``unshare --uts …``: a host name of
        its own, which kube-scheduler's leader election uses as its identity).
        """
        name = name or f"kube-scheduler-{len(self.schedulers) + 1}"
        document: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            **dict(config or {}),
        }
        client_connection = dict(document.get("clientConnection") or {})
        client_connection.setdefault("kubeconfig", str(self.kubeconfig))
        document["clientConnection"] = client_connection
        leader_election = dict(document.get("leaderElection") or {})
        leader_election.setdefault("leaderElect", False)
        document["leaderElection"] = leader_election
        config_file = self.workdir / f"{name}.yaml"
        config_file.write_text(yaml.safe_dump(document, sort_keys=False))
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            port = free_port()
            process = ManagedProcess(
                name,
                [
                    *wrapper,
                    str(self.binaries.kube_scheduler),
                    f"--config={config_file}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={port}",
                    f"--authentication-kubeconfig={self.kubeconfig}",
                    f"--authorization-kubeconfig={self.kubeconfig}",
                    "--v=2",
                    *(
                        _gate_args(self.feature_gates)
                        if not any(a.startswith("--feature-gates") for a in extra_args or [])
                        else ()
                    ),
                    *(extra_args or []),
                ],
                self.log_dir / f"{name}.log",
            )
            process.start()
            scheduler = Scheduler(process=process, config_file=config_file, port=port)
            self.schedulers.append(scheduler)
            try:
                for endpoint in ("healthz", "readyz"):
                    wait_until(
                        functools.partial(_unverified_ok, f"https://127.0.0.1:{port}/{endpoint}"),
                        timeout=timeout,
                        interval=0.25,
                        description=f"{name} /{endpoint}",
                        check=functools.partial(_check_alive, process),
                    )
            except BaseException as err:
                scheduler.stop()
                if not isinstance(err, Exception):
                    raise
                if attempt < _PORT_ATTEMPTS and _port_clash(process):
                    continue
                raise ControlPlaneError(_failure_message(f"{name} did not become healthy: {err}", [process])) from err
            return scheduler
        raise AssertionError("unreachable")

    def pause_apiserver(self) -> None:
        """SIGSTOP kube-apiserver: connections stay open and nothing answers (a hung or swapped-out server)."""
        _signal_group(self._apiserver_pid(), signal.SIGSTOP)

    def resume_apiserver(self) -> None:
        _signal_group(self._apiserver_pid(), signal.SIGCONT)

    def kill_apiserver(self) -> None:
        """SIGKILL kube-apiserver (a crash: connections reset, nothing finished); etcd keeps the data."""
        popen = self.apiserver.popen
        if popen is not None and popen.poll() is None:
            _signal_group(popen.pid, signal.SIGKILL)
            popen.wait()
        self.apiserver.stop()  # reaps and forgets it

    def start_apiserver(self, timeout: float = START_TIMEOUT_S) -> float:
        """Start kube-apiserver again on the same port and etcd; returns the seconds until ``/readyz`` said 200."""
        started = time.monotonic()
        self.apiserver.start()
        with self.client(timeout=10.0) as client:
            wait_until(
                functools.partial(client.healthy, "readyz"),
                timeout=timeout,
                interval=0.1,
                description="kube-apiserver /readyz after a restart",
                check=functools.partial(_check_alive, self.etcd, self.apiserver),
            )
        return time.monotonic() - started

    def _apiserver_pid(self) -> int:
        pid = self.apiserver.pid
        if pid is None or self.apiserver.exited() is not None:
            raise ControlPlaneError("kube-apiserver is not running")
        return pid

    def stop(self) -> None:
        """Stop schedulers, kube-apiserver, then etcd (each by its own process group); idempotent."""
        for scheduler in self.schedulers:
            scheduler.stop()
        if self.controller_manager is not None:
            self.controller_manager.stop()
        self.apiserver.stop()
        self.etcd.stop()

    def describe_logs(self) -> str:
        lines = [f"control plane workdir: {self.workdir}"]
        lines += [f"  {path.stem}: {path}" for path in sorted(self.log_dir.glob("*.log"))]
        return "\n".join(lines)


def _check_alive(*processes: ManagedProcess) -> None:
    for process in processes:
        code = process.exited()
        if code is not None:
            raise ControlPlaneError(f"{process.name} exited with status {code}")


_PORT_ATTEMPTS = 3


def _port_clash(*processes: ManagedProcess) -> bool:
    """Whether a process died because its port was taken between ``free_port()`` and its bind."""
    return any(
        process.exited() is not None and "address already in use" in process.log_tail(60) for process in processes
    )


def _failure_message(headline: str, processes: list[ManagedProcess]) -> str:
    parts = [headline]
    for process in processes:
        parts.append(f"--- {process.name} log: {process.log_file} (last lines) ---\n{process.log_tail()}")
    return "\n".join(parts)


def _write_kubeconfig(path: Path, server: str, ca_pem: bytes, token: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "hami-e2e",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "hami-e2e", "context": {"cluster": "hami-e2e", "user": "admin"}}],
        "current-context": "hami-e2e",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def start_control_plane(
    workdir: Path,
    binaries: Binaries | None = None,
    *,
    timeout: float = START_TIMEOUT_S,
    apiserver_args: Sequence[str] = (),
    address: str = "127.0.0.1",
    service_ip: str | None = None,
    service_account_admission: bool = False,
    ca: CertificateAuthority | None = None,
    feature_gates: Mapping[str, bool] | None = None,
    runtime_config: Sequence[str] = (),
    controllers: Sequence[str] = (),
) -> ControlPlane:
    """Start etcd and kube-apiserver in ``workdir`` and wait until ``/readyz`` answers 200.

    ``feature_gates`` are set on kube-apiserver and, by default, on every kube-scheduler this plane starts
    (``GenericWorkload``: kube-scheduler's gang scheduling); ``runtime_config`` turns API versions on
    (``scheduling.k8s.io/v1beta1=true``: PodGroups are not served by default).

    ``apiserver_args`` are added to kube-apiserver's command line (say, ``--max-requests-inflight=1`` for a
    server that sheds load with 429s). ``address`` is where kube-apiserver listens and what it advertises (the real
    node's harness gives the address of the bridge it creates, which pods reach; ``tests/e2e/realnode.py``), and
    ``service_ip`` the ``kubernetes`` Service's address, both put in its serving certificate;
    ``service_account_admission`` turns the ServiceAccount admission plugin on (pods get their tokens mounted);
    ``ca`` is the CA to use (default: a new one in ``workdir/pki``), so that certificates named in ``apiserver_args``
    can be issued before the start. ``controllers`` (kube-controller-manager's names, e.g.
    ``garbage-collector-controller``): start kube-controller-manager running only those (none: it does not run).

    Ports are picked free just before use; if another process grabs one first, the start is retried
    on new ports (up to 3 times). On any failure (or KeyboardInterrupt) what was started is stopped
    again; the raised ControlPlaneError carries the log paths and their last lines.
    """
    started = time.monotonic()
    binaries = binaries or locate_binaries()
    workdir.mkdir(parents=True, exist_ok=True)
    pki = workdir / "pki"
    ca = ca or CertificateAuthority.create(pki)
    serving_cert, serving_key = ca.issue_serving_cert(
        pki,
        "kube-apiserver",
        ips=tuple(dict.fromkeys(ip for ip in ("127.0.0.1", address, service_ip) if ip)),
        dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
    )
    sa_key_file = pki / "service-account.key"
    _write_private_key(sa_key_file, rsa.generate_private_key(public_exponent=65537, key_size=2048))
    token = secrets.token_urlsafe(32)
    token_file = pki / "tokens.csv"
    token_file.write_text(f'{token},hami-e2e-admin,hami-e2e-admin,"system:masters"\n')
    token_file.chmod(0o600)
    logs = workdir / "logs"
    kubeconfig = workdir / "kubeconfig"

    for attempt in range(1, _PORT_ATTEMPTS + 1):
        etcd_client_port, etcd_peer_port, api_port = free_port(), free_port(), free_port()
        server = f"https://{address}:{api_port}"
        _write_kubeconfig(kubeconfig, server, ca.cert_pem, token)
        etcd = ManagedProcess(
            "etcd",
            [
                str(binaries.etcd),
                "--name=e2e",
                f"--data-dir={workdir / f'etcd-data-{attempt}'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_client_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_client_port}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer_port}",
                f"--initial-cluster=e2e=http://127.0.0.1:{etcd_peer_port}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            logs / "etcd.log",
        )
        apiserver = ManagedProcess(
            "kube-apiserver",
            [
                str(binaries.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{etcd_client_port}",
                f"--bind-address={address}",
                f"--advertise-address={address}",
                f"--secure-port={api_port}",
                f"--cert-dir={workdir / 'apiserver-certs'}",
                f"--tls-cert-file={serving_cert}",
                f"--tls-private-key-file={serving_key}",
                f"--client-ca-file={ca.cert_file}",
                f"--token-auth-file={token_file}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={sa_key_file}",
                f"--service-account-signing-key-file={sa_key_file}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--endpoint-reconciler-type=none",
                "--authorization-mode=RBAC",
                "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
                *(() if service_account_admission else ("--disable-admission-plugins=ServiceAccount",)),
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
                *_gate_args(feature_gates),
                *((f"--runtime-config={','.join(runtime_config)}",) if runtime_config else ()),
                *apiserver_args,
            ],
            logs / "kube-apiserver.log",
        )
        plane = ControlPlane(
            workdir=workdir,
            binaries=binaries,
            ca=ca,
            token=token,
            server=server,
            kubeconfig=kubeconfig,
            etcd=etcd,
            apiserver=apiserver,
            feature_gates=dict(feature_gates or {}),
        )
        try:
            etcd.start()
            wait_until(
                functools.partial(_etcd_healthy, etcd_client_port),
                timeout=timeout,
                description="etcd /health",
                check=functools.partial(_check_alive, etcd),
            )
            apiserver.start()
            with KubeClient(server, ca.cert_file, token, timeout=10.0) as client:
                wait_until(
                    functools.partial(client.healthy, "readyz"),
                    timeout=timeout,
                    interval=0.25,
                    description="kube-apiserver /readyz",
                    check=functools.partial(_check_alive, etcd, apiserver),
                )
        except BaseException as err:
            plane.stop()
            if not isinstance(err, Exception):
                raise
            if attempt < _PORT_ATTEMPTS and _port_clash(etcd, apiserver):
                continue
            raise ControlPlaneError(
                _failure_message(f"the control plane did not come up: {err}", [etcd, apiserver])
            ) from err
        if controllers:
            try:
                start_controller_manager(plane, controllers, timeout=timeout)
            except BaseException:
                plane.stop()
                raise
        plane.startup_seconds = time.monotonic() - started
        return plane
    raise AssertionError("unreachable")


def start_controller_manager(
    plane: ControlPlane, controllers: Sequence[str], *, timeout: float = START_TIMEOUT_S
) -> None:
    """kube-controller-manager of the node binaries' build (``scripts/k8s-testenv node``, as ``tests/e2e/realnode.py``
    starts it) with only ``controllers``, as the admin; waits until ``/healthz`` answers. ``plane.stop()`` stops it."""
    from tests.e2e.realnode import locate_node_binaries  # realnode imports this module

    binary = locate_node_binaries(plane.binaries) / "kube-controller-manager"
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        port = free_port()
        process = ManagedProcess(
            "kube-controller-manager",
            [
                str(binary),
                f"--kubeconfig={plane.kubeconfig}",
                f"--authentication-kubeconfig={plane.kubeconfig}",
                f"--authorization-kubeconfig={plane.kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--leader-elect=false",
                f"--root-ca-file={plane.ca_file}",
                f"--service-account-private-key-file={plane.workdir / 'pki' / 'service-account.key'}",
                f"--controllers={','.join(controllers)}",
                "--v=1",
                *_gate_args(plane.feature_gates),
            ],
            plane.log_dir / "kube-controller-manager.log",
        )
        process.start()
        plane.controller_manager = process
        try:
            wait_until(
                functools.partial(_unverified_ok, f"https://127.0.0.1:{port}/healthz"),
                timeout=timeout,
                interval=0.25,
                description="kube-controller-manager /healthz",
                check=functools.partial(_check_alive, process),
            )
        except BaseException as err:
            process.stop()
            plane.controller_manager = None
            if not isinstance(err, Exception):
                raise
            if attempt < _PORT_ATTEMPTS and _port_clash(process):
                continue
            raise ControlPlaneError(
                _failure_message(f"kube-controller-manager did not become healthy: {err}", [process])
            ) from err
        return


def _gate_args(gates: Mapping[str, bool] | None) -> tuple[str, ...]:
    """``--feature-gates=A=true,B=false`` (nothing without gates)."""
    if not gates:
        return ()
    return (f"--feature-gates={','.join(f'{k}={str(v).lower()}' for k, v in sorted(gates.items()))}",)


def _etcd_healthy(port: int) -> bool:
    response = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5.0)
    return response.status_code == 200 and response.json().get("health") == "true"
