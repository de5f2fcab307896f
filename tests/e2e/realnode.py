"""A real node for end-to-end tests: containerd + runc + a CNI bridge + kubelet + kube-proxy, and a control plane
its pods can reach (kube-apiserver, kube-controller-manager, the default kube-scheduler).

``start_real_cluster()`` builds this, for one pytest session, in ``BASE`` (``/tmp/hami-realnode``):

* a bridge ``hami-cni0`` with the gateway address ``10.233.77.1/24`` that the harness creates; kube-apiserver
  listens and advertises there (``--endpoint-reconciler-type=lease``, ``--kubelet-preferred-address-types=
  InternalIP``), so pods reach it through the ``kubernetes`` Service (``10.233.78.1``) and kube-apiserver reaches
  webhooks through their Services; no traffic goes to any other address than that bridge, the pods on it and
  loopback;
* kube-controller-manager (Deployments, DaemonSets, Jobs, the garbage collector, ``kube-root-ca.crt``) and the
  default kube-scheduler, as the admin;
* containerd with its own configuration, root, state and socket (CRI ``restrict_oom_score_adj = true``: the VMs
  these tests run on lack ``CAP_SYS_RESOURCE``; the sandbox image is the locally built pause image; cgroupfs), and
  the images given (OCI archives, imported with ``ctr``; pods use ``imagePullPolicy: Never``: no registry);
* a CNI bridge network (bridge + host-local IPAM on ``10.233.77.0/24``, its state in ``BASE``);
* kubelet (``failCgroupV1: false``, ``cgroupDriver: cgroupfs``, ``failSwapOn: false``, root and pod-log
  directories in ``BASE``, serving a certificate of the test CA on the bridge address, Webhook authentication and
  authorization) registering node ``hami-e2e-node`` labelled ``gpu=on``. Its device-plugin socket is always
  ``/var/lib/kubelet/device-plugins/kubelet.sock``, so one real node runs per machine: a lock file serializes
  sessions of different checkouts;
* kube-proxy in iptables mode (conntrack limits left alone, NodePorts only on the bridge address).

What these change on the host is recorded first and put back by :mod:`tests.e2e.hoststate` when the session ends,
also on failure; the record is saved to ``BASE/host-state.json`` before anything starts (and again with each process
the harness launches), so a run that was killed is cleaned up by the next one before it starts
(``cleanup_leftovers``). Only what the harness made is ended and removed: the ``kubepods`` cgroup tree of its kubelet,
the processes it launched, the shims of its containerd. Anything else that appeared on the host meanwhile (a login
session, a service, another runtime's containers) is reported on the terminal and in ``LEFT_ALONE_FILE``, and left
alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import yaml

from tests.e2e import hoststate
from tests.e2e.cluster import (
    START_TIMEOUT_S,
    ApiError,
    Binaries,
    CertificateAuthority,
    ControlPlane,
    ControlPlaneError,
    KubeClient,
    ManagedProcess,
    free_port,
    locate_binaries,
    start_control_plane,
    wait_until,
)

BASE = Path(os.environ.get("HAMI_E2E_NODE_DIR", "/tmp/hami-realnode"))
LOCK_FILE = Path("/tmp/hami-realnode.lock")
STATE_FILE_NAME = "host-state.json"
LEFT_ALONE_FILE = Path("/tmp/hami-realnode-left-alone.log")
"""What the host clean-up found new on the host but left alone (not the harness's), one line each, appended."""
NODE_NAME = "hami-e2e-node"
BRIDGE = "hami-cni0"
POD_CIDR = "10.233.77.0/24"
GATEWAY = "10.233.77.1"
SERVICE_CIDR = "10.233.78.0/24"
SERVICE_IP = "10.233.78.1"
CNI_BIN_DIR = "/usr/lib/cni"
LOCK_WAIT_S = float(os.environ.get("HAMI_E2E_NODE_LOCK_WAIT", "900"))
NODE_BINARIES = ("kubelet", "kube-proxy", "kube-controller-manager")
CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")

#: Host paths the node (or the chart's hostPath volumes) may create; removed afterwards when they were absent.
TOUCHED_PATHS = (
    "/var/lib/kubelet",
    "/var/lib/kubelet/device-plugins",
    "/var/log/containers",
    "/var/log/pods",
    "/run/containerd",
    "/run/netns",
    "/var/lib/cni",
    "/usr/local/vgpu",
    "/tmp/vgpulock",
    "/var/run/cdi",
    str(BASE),
)
REQUIRED_COMMANDS = (
    "containerd",
    "containerd-shim-runc-v2",
    "runc",
    "ctr",
    "iptables",
    "ip6tables",
    "conntrack",
    "ip",
    "cc",
)


class RealNodeError(ControlPlaneError):
    """The real node could not be set up; the message says why (and what to install or run)."""


# ----------------------------------------------------------------------------------------------------
# prerequisites


def locate_node_binaries(control_plane: Binaries) -> Path:
    """kubelet, kube-proxy and kube-controller-manager of the control plane's version (``scripts/k8s-testenv
    node``; ``HAMI_K8S_NODE_BIN_DIR`` overrides)."""
    override = os.environ.get("HAMI_K8S_NODE_BIN_DIR")
    if override:
        directory = Path(override)
    else:
        script = Path(__file__).resolve().parents[2] / "scripts" / "k8s-testenv"
        version = control_plane.kubernetes_version
        args = [sys.executable, str(script), "locate", "--node"]
        if version.startswith("v"):
            args.append(f"--k8s-version={version}")
        proc = subprocess.run(args, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RealNodeError(f"the real node's binaries are not built: {proc.stderr.strip()}")
        directory = Path(proc.stdout.strip())
    missing = [name for name in NODE_BINARIES if not os.access(directory / name, os.X_OK)]
    if missing:
        raise RealNodeError(f"{directory} lacks {', '.join(missing)}; run `make testenv`")
    return directory


def locate_containerd(control_plane: Binaries) -> Path | None:
    """The containerd 2.x build the node's kubelet needs (``scripts/k8s-testenv locate --containerd``), or None when
    Debian's containerd (on PATH) will do. ``HAMI_CONTAINERD_BIN_DIR`` names a directory with ``containerd``,
    ``containerd-shim-runc-v2`` and ``ctr`` to use instead, whatever the version."""
    override = os.environ.get("HAMI_CONTAINERD_BIN_DIR")
    if override:
        directory = Path(override)
    else:
        script = Path(__file__).resolve().parents[2] / "scripts" / "k8s-testenv"
        args = [sys.executable, str(script), "locate", "--containerd"]
        if control_plane.kubernetes_version.startswith("v"):
            args.append(f"--k8s-version={control_plane.kubernetes_version}")
        proc = subprocess.run(args, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RealNodeError(f"the real node's containerd is not built: {proc.stderr.strip()}")
        if not proc.stdout.strip():
            return None
        directory = Path(proc.stdout.strip())
    missing = [name for name in CONTAINERD_BINARIES if not os.access(directory / name, os.X_OK)]
    if missing:
        raise RealNodeError(f"{directory} lacks {', '.join(missing)}; run `make testenv`")
    return directory


def check_machine() -> None:
    """Root, the Debian packages (``scripts/test-deps``) and no other kubelet on this machine."""
    if os.geteuid() != 0:
        raise RealNodeError("the real node (kubelet, containerd) needs root; run the end-to-end tests as root")
    missing = [name for name in REQUIRED_COMMANDS if shutil.which(name) is None]
    missing += [f"{CNI_BIN_DIR}/{p}" for p in ("bridge", "host-local", "loopback") if not Path(CNI_BIN_DIR, p).exists()]
    if missing:
        raise RealNodeError(f"missing {', '.join(missing)}: run `make test-deps` (containerd, runc, CNI plugins)")
    socket_path = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
    if socket_path.exists() and _socket_answers(socket_path):
        raise RealNodeError(f"another kubelet serves {socket_path}; one real test node runs per machine")
    for network in (POD_CIDR, SERVICE_CIDR):
        _check_free_network(ipaddress.ip_network(network))


def _socket_answers(path: Path) -> bool:
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(path))
        except OSError:
            return False
        return True


def _check_free_network(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> None:
    """Refuse to start when the host already routes an overlapping network (other than our own bridge)."""
    for line in hoststate.run_command(["ip", "-o", "-4", "route", "show"]).splitlines():
        destination = line.split()[0]
        if destination == "default" or f"dev {BRIDGE} " in line + " ":
            continue
        with contextlib.suppress(ValueError):
            if ipaddress.ip_network(destination, strict=False).overlaps(network):
                raise RealNodeError(f"the host already routes {destination}, which overlaps the test node's {network}")


# ----------------------------------------------------------------------------------------------------
# host state


@contextlib.contextmanager
def machine_lock(path: Path = LOCK_FILE, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """One real node per machine: wait (up to ``wait_s``) for another session's node to finish."""
    with path.open("a+") as handle:
        _take_lock(handle, path, wait_s)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _take_lock(handle: IO[str], path: Path, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise RealNodeError(
                    f"another test session holds the real node ({path}) for more than {wait_s:.0f}s"
                ) from None
            time.sleep(1.0)


def cleanup_leftovers(base: Path = BASE) -> list[str]:
    """Finish the clean-up of a run that was killed: restore from its saved record, if any. Returns the problems
    (empty: nothing was left, or everything was put back)."""
    state_file = base / STATE_FILE_NAME
    if not state_file.is_file():
        return []
    problems = _restore(hoststate.Snapshot.load(state_file))
    if not problems:
        with contextlib.suppress(FileNotFoundError):
            state_file.unlink()
    return problems


def record_host(base: Path, containerd_socket: Path) -> hoststate.Snapshot:
    snapshot = hoststate.take(
        hoststate.run_command,
        Path("/"),
        paths=TOUCHED_PATHS,
        owned_prefixes=[str(base)],
        process_markers=[f"-address {containerd_socket}"],
    )
    snapshot.save(base / STATE_FILE_NAME)
    return snapshot


def restore_host(snapshot: hoststate.Snapshot, base: Path) -> list[str]:
    """Put the host back; the saved record goes only when that worked (else the next run tries again)."""
    state_copy = base.parent / f".{base.name}-{STATE_FILE_NAME}"
    snapshot.save(state_copy)  # base itself is removed by the restore
    problems = _restore(snapshot)
    if problems:
        base.mkdir(parents=True, exist_ok=True)
        state_copy.replace(base / STATE_FILE_NAME)
    else:
        state_copy.unlink()
    return problems


def _restore(snapshot: hoststate.Snapshot) -> list[str]:
    """Run the restore; report what it left alone (new cgroups that are not the harness's, and their processes) on
    the terminal, past pytest's capture, and in ``LEFT_ALONE_FILE``. Returns the problems."""
    restorer = hoststate.Restorer(snapshot)
    problems = restorer.run()
    if restorer.notes:
        text = "".join(f"hami real node clean-up: {note}\n" for note in restorer.notes)
        with contextlib.suppress(OSError), LEFT_ALONE_FILE.open("a") as handle:
            handle.write(text)
        if sys.__stderr__ is not None:
            sys.__stderr__.write(text)
    return problems


def remember_launched(snapshot: hoststate.Snapshot, base: Path, pid: int | None) -> None:
    """Add a process the harness launched to the record (pid and start time), saved at once: a run that is killed
    leaves its record for the next run's ``cleanup_leftovers``, which ends the process by that pid only while it is
    still that process."""
    start = hoststate.process_start(Path("/"), pid) if pid is not None else None
    if pid is not None and start is not None:
        snapshot.launched.append([pid, start])
        snapshot.save(base / STATE_FILE_NAME)


# ----------------------------------------------------------------------------------------------------
# images


def image_name(archive: Path) -> str:
    """The image reference an OCI archive carries (``io.containerd.image.name``, else the ref name)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise RealNodeError(f"{archive} has no index.json: not an OCI image archive")
        index = json.load(member)
    for manifest in index.get("manifests", []):
        annotations = manifest.get("annotations") or {}
        name = annotations.get("io.containerd.image.name") or annotations.get("org.opencontainers.image.ref.name")
        if name:
            return str(name)
    raise RealNodeError(f"{archive} names no image (no io.containerd.image.name annotation in index.json)")


def build_images(out: Path, kube_scheduler: Path) -> dict[str, tuple[Path, str]]:
    """The images the node and the chart need, built with ``scripts/build-image`` (no Docker, no registry):
    ``{"pause" | "kube-scheduler" | "hami" | "hami-core-standin": (archive, reference)}`` (the last: HAMi's image
    layout with a stand-in ``libvgpu.so``, for the chart's HAMi-core install)."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "build-image"
    built: dict[str, tuple[Path, str]] = {}
    images: tuple[tuple[str, list[str]], ...] = (
        ("pause", []),
        ("kube-scheduler", ["--binary", str(kube_scheduler)]),
        ("hami", []),
        ("hami-core-standin", []),
    )
    for image, extra in images:
        proc = subprocess.run(
            [sys.executable, str(script), image, "--out", str(out), *extra], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise RealNodeError(f"scripts/build-image {image} failed:\n{proc.stderr.strip()[-3000:]}")
        archive, reference, _digest = proc.stdout.strip().splitlines()[-1].split("\t")
        built[image] = (Path(archive), reference)
    return built


def install_hami_core_stub(vgpu_dir: Path = Path("/usr/local/vgpu")) -> None:
    """Play HAMi-core's install on the node: an empty shared library at ``<hook>/vgpu/libvgpu.so`` (the plugin mounts
    it into GPU containers and preloads it; the real one needs CUDA). Only when the directory is absent: the
    snapshot records that, and the restore removes it."""
    if vgpu_dir.exists():
        return
    vgpu_dir.mkdir(parents=True)
    hoststate.run_command(["cc", "-shared", "-o", str(vgpu_dir / "libvgpu.so"), "-x", "c", "/dev/null"])


# ----------------------------------------------------------------------------------------------------
# configuration files


def containerd_config(base: Path, sandbox_image: str) -> str:
    socket = base / "containerd" / "containerd.sock"
    return f"""version = 2
root = "{base}/containerd/root"
state = "{base}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{base}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{base}/cni/net.d"
"""


def cni_config(base: Path) -> dict[str, Any]:
    return {
        "cniVersion": "0.4.0",
        "name": "hami-e2e",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR, "gateway": GATEWAY}]],
                    # Services through the bridge's address; no default route: pods reach nothing else
                    "routes": [{"dst": SERVICE_CIDR}],
                    "dataDir": str(base / "cni" / "ipam"),
                },
            }
        ],
    }


def kubelet_config(
    base: Path, ca: CertificateAuthority, port: int, healthz_port: int, pod_logs: Path
) -> dict[str, Any]:
    serving_cert, serving_key = ca.issue_serving_cert(base / "pki", "kubelet", ips=(GATEWAY, "127.0.0.1"))
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{base}/containerd/containerd.sock",
        "address": GATEWAY,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(serving_cert),
        "tlsPrivateKeyFile": str(serving_key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca.cert_file)},
        },
        "authorization": {"mode": "Webhook"},
        "podLogsDir": str(pod_logs),  # beside the components' logs: kept after the session, for failures
        "clusterDomain": "cluster.local",
        "resolvConf": "",
        "serializeImagePulls": False,
        # a shared test machine's disk is not this node's: never evict test pods for it
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "5s",
        "maxPods": 30,
    }


def kube_proxy_config(kubeconfig: Path, healthz_port: int, metrics_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "clusterCIDR": POD_CIDR,
        "nodePortAddresses": [f"{GATEWAY}/32"],
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "iptables": {"syncPeriod": "10s", "minSyncPeriod": "0s"},
    }


# ----------------------------------------------------------------------------------------------------
# the cluster


@dataclass
class RealCluster:
    """The control plane (``plane``) and the real node; ``kube`` is an admin client."""

    base: Path
    plane: ControlPlane
    snapshot: hoststate.Snapshot
    node_binaries: Path
    containerd_binaries: Path | None = None
    """containerd 2.x built by ``scripts/k8s-testenv`` for kubelet 1.38+; None: Debian's containerd on PATH"""
    processes: list[ManagedProcess] = field(default_factory=list)
    images: dict[str, str] = field(default_factory=dict)
    """archive file name (``hami.oci.tar``) → the image reference imported from it"""
    restore_problems: list[str] = field(default_factory=list)

    @property
    def node_name(self) -> str:
        return NODE_NAME

    @property
    def containerd_socket(self) -> Path:
        return self.base / "containerd" / "containerd.sock"

    @property
    def log_dir(self) -> Path:
        return self.plane.log_dir

    def client(self, timeout: float = 30.0) -> KubeClient:
        return self.plane.client(timeout=timeout)

    def containerd_command(self, name: str) -> str:
        """``containerd`` / ``ctr``: the build of ``containerd_binaries`` when there is one, else the one on PATH."""
        return str(self.containerd_binaries / name) if self.containerd_binaries else name

    def ctr(self, *args: str) -> str:
        command = [self.containerd_command("ctr"), "--address", str(self.containerd_socket), "-n", "k8s.io", *args]
        return hoststate.run_command(command)

    def import_image(self, archive: Path) -> str:
        """Import an OCI archive into containerd's ``k8s.io`` namespace; return its reference."""
        name = image_name(archive)
        self.ctr("images", "import", str(archive))
        self.images[archive.name] = name
        return name

    def start(self, process: ManagedProcess) -> ManagedProcess:
        process.start()
        self.processes.append(process)
        remember_launched(self.snapshot, self.base, process.pid)
        return process

    def check_alive(self) -> None:
        for process in self.processes:
            code = process.exited()
            if code is not None:
                raise RealNodeError(
                    f"{process.name} exited with status {code}; log {process.log_file}:\n{process.log_tail(30)}"
                )

    def describe_logs(self) -> str:
        return self.plane.describe_logs()

    def stop(self) -> list[str]:
        """Remove every pod (through kubelet, so CNI and mounts are torn down), stop everything, restore the
        host. Returns the restore problems (also kept in ``restore_problems``)."""
        with contextlib.suppress(Exception):
            self._drain()
        for process in reversed(self.processes):
            process.stop()
        self.plane.stop()
        # containers and their shims outlive containerd: the restore ends them (by the kubepods cgroups kubelet made
        # and by the socket path in the shims' command lines), unmounts what is left and puts the host back
        self.restore_problems = restore_host(self.snapshot, self.base)
        return self.restore_problems

    def _drain(self) -> None:
        kubelet = next((p for p in self.processes if p.name == "kubelet"), None)
        if kubelet is None or kubelet.exited() is not None:
            return
        with self.client(timeout=10.0) as kube:
            for pod in kube.get("/api/v1/pods")["items"]:
                meta = pod["metadata"]
                with contextlib.suppress(ApiError):
                    kube.delete(
                        f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", {"gracePeriodSeconds": 0}
                    )
        wait_until(
            lambda: not self.ctr("tasks", "list", "-q").split(),
            timeout=60,
            interval=0.5,
            description="kubelet to stop every container",
        )


def _wait_http(url: str, process: ManagedProcess, cluster: RealCluster, what: str, verify: bool | str = False) -> None:
    def ok() -> bool:
        with httpx.Client(verify=verify, timeout=5.0) as client:
            return client.get(url).status_code == 200

    wait_until(ok, timeout=START_TIMEOUT_S, interval=0.25, description=what, check=cluster.check_alive)


def start_real_cluster(workdir: Path, images: Sequence[Path], base: Path = BASE) -> RealCluster:
    """Start everything (see the module docstring) and return it; on failure stop what started and restore the
    host before raising. ``images``: OCI archives to import; the first must be the pause (sandbox) image."""
    check_machine()
    problems = cleanup_leftovers(base)
    if problems:
        raise RealNodeError("a previous run's leftovers could not be removed:\n  " + "\n  ".join(problems))
    binaries = locate_binaries()
    node_binaries = locate_node_binaries(binaries)
    containerd_binaries = locate_containerd(binaries)
    socket = base / "containerd" / "containerd.sock"
    snapshot = record_host(base, socket)
    cluster: RealCluster | None = None
    try:
        _make_bridge()
        install_hami_core_stub()
        ca = CertificateAuthority.create(workdir / "pki")
        client_cert, client_key = ca.issue_serving_cert(workdir / "pki", "kube-apiserver-kubelet-client", ips=())
        plane = start_control_plane(
            workdir,
            binaries,
            address=GATEWAY,
            service_ip=SERVICE_IP,
            service_account_admission=True,
            ca=ca,
            apiserver_args=[
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--endpoint-reconciler-type=lease",
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-client-certificate={client_cert}",
                f"--kubelet-client-key={client_key}",
                f"--kubelet-certificate-authority={ca.cert_file}",
            ],
        )
        cluster = RealCluster(
            base=base,
            plane=plane,
            snapshot=snapshot,
            node_binaries=node_binaries,
            containerd_binaries=containerd_binaries,
        )
        _start_controllers(cluster)
        _start_containerd(cluster, images)
        _start_kubelet(cluster)
        _start_kube_proxy(cluster)
        return cluster
    except BaseException:
        if cluster is not None:
            cluster.stop()
        else:
            restore_host(snapshot, base)
        raise


def _make_bridge() -> None:
    hoststate.run_command(["ip", "link", "add", BRIDGE, "type", "bridge"])
    hoststate.run_command(["ip", "addr", "add", f"{GATEWAY}/{POD_CIDR.split('/')[1]}", "dev", BRIDGE])
    hoststate.run_command(["ip", "link", "set", BRIDGE, "up"])


def _start_controllers(cluster: RealCluster) -> None:
    plane = cluster.plane
    with plane.client() as kube:
        # kube-apiserver's client certificate (CN kube-apiserver-kubelet-client) may use kubelet's API (logs, exec)
        kube.post(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "metadata": {"name": "hami-e2e-apiserver-kubelet"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:kubelet-api-admin",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kube-apiserver-kubelet-client"}
                ],
            },
        )
    port = free_port()
    kcm = cluster.start(
        ManagedProcess(
            "kube-controller-manager",
            [
                str(cluster.node_binaries / "kube-controller-manager"),
                f"--kubeconfig={plane.kubeconfig}",
                f"--authentication-kubeconfig={plane.kubeconfig}",
                f"--authorization-kubeconfig={plane.kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--leader-elect=false",
                f"--root-ca-file={plane.ca_file}",
                f"--service-account-private-key-file={plane.workdir / 'pki' / 'service-account.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--controllers=*",
                "--v=1",
            ],
            plane.log_dir / "kube-controller-manager.log",
        )
    )
    _wait_http(f"https://127.0.0.1:{port}/healthz", kcm, cluster, "kube-controller-manager /healthz")
    plane.start_scheduler(None, name="default-scheduler")


def _start_containerd(cluster: RealCluster, images: Sequence[Path]) -> None:
    base = cluster.base
    for sub in ("containerd", "cni/net.d", "cni/ipam", "runc", "kubelet"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    (base / "cni" / "net.d" / "10-hami-e2e.conflist").write_text(json.dumps(cni_config(base), indent=1))
    pause = image_name(images[0])
    config = base / "containerd" / "config.toml"
    config.write_text(containerd_config(base, pause))
    # containerd 2.x reads this version-2 file too (it migrates it at start); its own shim comes first on PATH
    env = None
    if cluster.containerd_binaries is not None:
        env = {**os.environ, "PATH": f"{cluster.containerd_binaries}:{os.environ.get('PATH', '')}"}
    cluster.start(
        ManagedProcess(
            "containerd",
            [cluster.containerd_command("containerd"), "--config", str(config)],
            cluster.log_dir / "containerd.log",
            env=env,
        )
    )
    wait_until(
        lambda: cluster.containerd_socket.exists() and cluster.ctr("version"),
        timeout=START_TIMEOUT_S,
        description="containerd's socket",
        check=cluster.check_alive,
    )
    for archive in images:
        cluster.import_image(archive)


def _start_kubelet(cluster: RealCluster) -> None:
    plane = cluster.plane
    port, healthz = free_port(), free_port()
    config = cluster.base / "kubelet-config.yaml"
    pod_logs = plane.log_dir / "pods"
    pod_logs.mkdir(parents=True, exist_ok=True)
    document = kubelet_config(cluster.base, plane.ca, port, healthz, pod_logs)
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    process = cluster.start(
        ManagedProcess(
            "kubelet",
            [
                str(cluster.node_binaries / "kubelet"),
                f"--config={config}",
                f"--kubeconfig={plane.kubeconfig}",
                f"--root-dir={cluster.base / 'kubelet'}",
                f"--cert-dir={cluster.base / 'kubelet' / 'pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={GATEWAY}",
                "--node-labels=gpu=on",
                "--v=2",
            ],
            plane.log_dir / "kubelet.log",
        )
    )
    _wait_http(f"http://127.0.0.1:{healthz}/healthz", process, cluster, "kubelet /healthz")
    with plane.client() as kube:
        wait_until(
            functools.partial(_node_ready, kube),
            timeout=START_TIMEOUT_S,
            interval=0.5,
            description=f"node {NODE_NAME} Ready",
            check=cluster.check_alive,
        )


def _node_ready(kube: KubeClient) -> bool:
    node = kube.get(f"/api/v1/nodes/{NODE_NAME}")
    conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
    return conditions.get("Ready") == "True" and not node["spec"].get("taints")


def _start_kube_proxy(cluster: RealCluster) -> None:
    plane = cluster.plane
    healthz, metrics = free_port(), free_port()
    config = cluster.base / "kube-proxy-config.yaml"
    config.write_text(yaml.safe_dump(kube_proxy_config(plane.kubeconfig, healthz, metrics), sort_keys=False))
    process = cluster.start(
        ManagedProcess(
            "kube-proxy",
            [str(cluster.node_binaries / "kube-proxy"), f"--config={config}", "--v=1"],
            plane.log_dir / "kube-proxy.log",
        )
    )
    _wait_http(f"http://127.0.0.1:{healthz}/healthz", process, cluster, "kube-proxy /healthz")
