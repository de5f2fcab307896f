"""Fixtures for end-to-end tests against a real local control plane (see ``cluster.py``).

Session scope:
    ``control_plane`` -- etcd + kube-apiserver on loopback (``ControlPlane``: ``server``, ``kubeconfig``,
    ``ca_file``/``ca_pem``, ``ca.issue_serving_cert(...)``, ``token``, ``client()``, ``start_scheduler()``).
    ``kube`` -- an admin ``KubeClient`` for that control plane.

    ``real_cluster`` -- a control plane with a real node (kubelet + containerd + kube-proxy, ``realnode.py``) and
    hami's images imported; only started by the tests that ask for it. The host is put back afterwards.

Function scope (cleaned up after each test):
    ``namespace`` -- a fresh namespace name; its pods are deleted (grace period 0) afterwards.
    ``make_node`` -- ``make_node(name, **create_node_kwargs)`` creates a fake node, deleted afterwards.
    ``start_scheduler`` -- ``start_scheduler(config_dict)`` starts kube-scheduler, stopped afterwards.
    ``vendor_stack`` -- ``vendor_stack(*families)``: hami + kube-scheduler + a node-lock releaser for binding pods of
    any vendor family (``tests/e2e/vendors.py``), stopped afterwards.

When the binaries are not built the tests *fail* (never skip) with a message saying to run
``make testenv``. When a test fails, its report gets a "control plane logs" section with the log paths.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from tests.e2e import cluster, hami_stack, realnode
from tests.e2e.cluster import ControlPlane, KubeClient, Scheduler
from tests.e2e.vendors import VendorStack, VendorStackFactory, start_vendor_stack, stop_vendor_stack

_PLANES: list[ControlPlane] = []


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver for the whole session, stopped at the end (also on failure or Ctrl-C)."""
    failure: str | None = None
    try:
        plane = cluster.start_control_plane(tmp_path_factory.mktemp("control-plane"))
    except cluster.ControlPlaneError as err:
        failure = str(err)
    if failure is not None:  # failed outside the except block, so no chained traceback
        pytest.fail(failure, pytrace=False)
    _PLANES.append(plane)
    try:
        yield plane
    finally:
        plane.stop()
        _PLANES.remove(plane)


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[realnode.RealCluster]:
    """The real node and its control plane for the whole session (one per machine: a lock serializes sessions).
    Everything is stopped and the host restored at the end; a restore that left something fails the session."""
    with contextlib.ExitStack() as stack:
        failure: str | None = None
        try:
            binaries = cluster.locate_binaries()
            images = realnode.build_images(tmp_path_factory.mktemp("images"), binaries.kube_scheduler)
            stack.enter_context(realnode.machine_lock())
            archives = [images[name][0] for name in ("pause", "kube-scheduler", "hami", "hami-core-standin")]
            started = realnode.start_real_cluster(tmp_path_factory.mktemp("real-cluster"), archives)
        except cluster.ControlPlaneError as err:
            failure = str(err)
        if failure is not None:
            pytest.fail(failure, pytrace=False)
        _PLANES.append(started.plane)
        try:
            yield started
        finally:
            _PLANES.remove(started.plane)
            problems = started.stop()
        if problems:
            pytest.fail("the real node's host clean-up left: " + "; ".join(problems), pytrace=False)


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Iterator[KubeClient]:
    """An admin client (bearer token in ``system:masters``) for the session's control plane."""
    with control_plane.client() as client:
        yield client


@pytest.fixture
def namespace(kube: KubeClient) -> Iterator[str]:
    """A new namespace for this test. Its pods are deleted with grace period 0 afterwards; the namespace
    itself is deleted too but stays Terminating (no namespace controller runs), which is harmless."""
    name = kube.create_namespace()
    yield name
    for pod in kube.list_pods(name):
        kube.delete_pod(name, pod["metadata"]["name"])
    kube.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture
def make_node(kube: KubeClient) -> Iterator[Callable[..., dict[str, Any]]]:
    """Factory: ``make_node("gpu-node-1", extended={"nvidia.com/gpu": 4}, annotations={...})`` creates a fake
    node (see ``KubeClient.create_node``) and returns it; every node made is deleted after the test."""
    created: list[str] = []

    def factory(name: str, **kwargs: Any) -> dict[str, Any]:
        node = kube.create_node(name, **kwargs)
        created.append(name)
        return node

    yield factory
    for name in created:
        kube.delete_node(name)


@pytest.fixture
def start_scheduler(control_plane: ControlPlane) -> Iterator[Callable[..., Scheduler]]:
    """Factory: ``start_scheduler(config)`` runs kube-scheduler with a KubeSchedulerConfiguration dict (see
    ``ControlPlane.start_scheduler``) and waits for /healthz and /readyz; stopped after the test."""
    started: list[Scheduler] = []

    def factory(config: dict[str, Any] | None = None, **kwargs: Any) -> Scheduler:
        scheduler = control_plane.start_scheduler(config, **kwargs)
        started.append(scheduler)
        return scheduler

    yield factory
    for scheduler in started:
        scheduler.stop()


@pytest.fixture(autouse=True)
def no_hami_left_running() -> Iterator[None]:
    """Fail a test whose ``hami scheduler`` still runs after its fixtures are torn down, and stop it. A fixture
    that starts hami and then fails before its clean-up is registered leaves it running for the rest of the
    session; it watches the same API server, so the next tests see every Warning event twice (one per
    process) and its log lines interleaved with theirs in the shared ``hami-scheduler.log``."""
    first = len(hami_stack.STARTED)
    yield
    left = [hami for hami in hami_stack.STARTED[first:] if hami.running()]
    for hami in left:
        hami.stop()
    del hami_stack.STARTED[first:]
    if left:
        logs = ", ".join(str(hami.log_file) for hami in left)
        pytest.fail(f"{len(left)} hami scheduler(s) started by this test were still running afterwards: {logs}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        lines = [plane.describe_logs() for plane in _PLANES]
        running = cluster.running_log_files()
        if running:
            lines.append("running components: " + ", ".join(f"{n} -> {p}" for n, p in sorted(running.items())))
        if lines:
            report.sections.append(("control plane logs", "\n".join(lines)))
    return report


@pytest.fixture
def vendor_stack(
    control_plane: ControlPlane,
    kube: KubeClient,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    start_scheduler: Callable[..., Scheduler],
) -> Iterator[VendorStackFactory]:
    """Factory: ``vendor_stack("nvidia", "ascend", flags=(...))`` starts hami with those families' switches (and
    ``flags``), kube-scheduler calling it and a node-lock releaser (``tests/e2e/vendors.py``); all stopped and
    checked afterwards."""
    made: list[VendorStack] = []

    def start(*families: str, flags: tuple[str, ...] = ()) -> VendorStack:
        stack = start_vendor_stack(control_plane, kube, namespace, make_node, start_scheduler, families, flags)
        made.append(stack)
        return stack

    yield start
    for stack in made:
        stop_vendor_stack(stack)
