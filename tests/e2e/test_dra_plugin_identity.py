"""hami dra-plugin under the chart's identity on the real API server: it publishes its node's ResourceSlice (the
API server validates the shape: capacities, request policies, taint-free devices), and the chart's
ValidatingAdmissionPolicy keeps it to slices of its own node and driver.

The chart is rendered with ``draPlugin.enabled=true``; only the plugin's ServiceAccount, ClusterRole(Binding) and
policy are applied. A stand-in for the DaemonSet pod on node ``mine`` gives a token that names the node, as the
kubelet's projected token does (tests/e2e/identities.py). No kubelet runs: only the publisher is exercised.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import ApiError, ControlPlane, KubeClient, ManagedProcess, _write_kubeconfig, wait_until
from tests.e2e.identities import IDENTITY_KINDS, RELEASE_NAMESPACE, apply
from tests.helm import template

DRIVER = "hami-core-gpu.project-hami.io"
SA = "hami-dra-plugin"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
FIXTURE = "devices:\n  - {uuid: GPU-id-0, name: Tesla T4, memory_mib: 15360, minor: 0}\n"


@pytest.fixture(scope="module")
def dra_identity(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    with control_plane.client() as kube:
        version = kube.get("/version")["gitVersion"].lstrip("v").split("-")[0]
        docs = [
            d for d in template(RELEASE_NAMESPACE, version, "draPlugin.enabled=true") if SA in d["metadata"]["name"]
        ]
        assert {d["kind"] for d in docs} >= {"ServiceAccount", "ClusterRole", "ValidatingAdmissionPolicy"}
        try:
            kube.create_namespace(RELEASE_NAMESPACE)
        except ApiError as err:
            if err.status != 409:
                raise
        for obj in docs:
            if obj["kind"] in IDENTITY_KINDS:
                apply(kube, obj, RELEASE_NAMESPACE)
    return control_plane


def slice_body(name: str, node: str, driver: str = DRIVER) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": []},
    }  # fmt: skip


def token_on(plane: ControlPlane, kube: KubeClient, node: str) -> tuple[str, str]:
    """A token of the plugin's ServiceAccount bound to a stand-in pod on ``node``; returns (token, pod name)."""
    pod = kube.create_pod(RELEASE_NAMESPACE, f"{SA}-{uuid.uuid4().hex[:8]}", node_name=node,
                          spec={"serviceAccountName": SA})  # fmt: skip
    meta = pod["metadata"]
    bound = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600, "boundObjectRef": bound}}  # fmt: skip
    answer = kube.post(f"/api/v1/namespaces/{RELEASE_NAMESPACE}/serviceaccounts/{SA}/token", body)
    return answer["status"]["token"], meta["name"]


def sockets_dir(run: str) -> Path:
    """The plugin's socket directories' parent: a short /tmp path (a Unix socket path has at most 107 bytes)."""
    return Path(f"/tmp/hdra-{run}")


def plugin_process(node: str, kubeconfig: Path, tmp_path: Path, run: str, *extra: str) -> ManagedProcess:
    """``hami dra-plugin`` for ``node`` on the fake NVML fixture in ``tmp_path/fake.yaml``, its sockets under
    :func:`sockets_dir`."""
    short = sockets_dir(run)
    args = [
        str(Path(sys.executable).parent / "hami"),
        "dra-plugin",
        f"--node-name={node}",
        f"--kubeconfig={kubeconfig}",
        f"--plugin-dir={short}/p",
        f"--registry-dir={short}/r",
        f"--cdi-dir={tmp_path}/cdi",
        f"--hook-path={tmp_path}/hook",
        f"--fake-nvml={tmp_path}/fake.yaml",
        "--rediscover-seconds=0.5",
        *extra,
    ]
    return ManagedProcess("hami-dra-plugin", args, tmp_path / "plugin.log")


def refused(call: Callable[..., object], *args: object) -> str:
    with pytest.raises(ApiError) as caught:
        call(*args)
    assert caught.value.status in (403, 422), caught.value
    return str(caught.value)


def test_the_plugin_publishes_its_nodes_slice_and_may_write_no_other(
    dra_identity: ControlPlane, kube: KubeClient, make_node: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    plane = dra_identity
    run = uuid.uuid4().hex[:8]
    mine, theirs = f"dra-mine-{run}", f"dra-theirs-{run}"
    make_node(mine)
    make_node(theirs)
    kube.post(SLICES, slice_body(f"{theirs}-{DRIVER}", theirs))
    token, pod = token_on(plane, kube, mine)
    config = tmp_path / "plugin.kubeconfig"
    _write_kubeconfig(config, plane.server, plane.ca_pem, token)
    (tmp_path / "fake.yaml").write_text(FIXTURE)
    process = plugin_process(mine, config, tmp_path, run, "--log-level=debug")
    process.start()
    try:
        published = wait_until(
            lambda: _get(kube, f"{SLICES}/{mine}-{DRIVER}"), timeout=60, description="the plugin's slice",
            check=lambda: _alive(process),
        )  # fmt: skip
        # the API server's canonical quantities are the plugin's own: later rounds find nothing to write
        wait_until(lambda: process.log_file.read_text().count("unchanged") >= 2, timeout=60,
                   description="two publishing rounds that wrote nothing", check=lambda: _alive(process))  # fmt: skip
        again = kube.get(f"{SLICES}/{mine}-{DRIVER}")
        assert again["metadata"]["resourceVersion"] == published["metadata"]["resourceVersion"]
    finally:
        process.stop()
        shutil.rmtree(sockets_dir(run), ignore_errors=True)
        kube.delete_pod(RELEASE_NAMESPACE, pod)
    (device,) = published["spec"]["devices"]
    assert published["spec"]["nodeName"] == mine
    assert device["name"] == "hami-gpu-0"
    assert device["capacity"]["memory"] == {
        "value": "15Gi",
        "requestPolicy": {"default": "15Gi", "validRange": {"min": "1Mi", "max": "15Gi", "step": "1Mi"}},
    }
    assert published["metadata"]["ownerReferences"][0]["name"] == mine

    token, pod = token_on(plane, kube, mine)
    try:
        with KubeClient(plane.server, plane.ca_file, token) as plugin:
            plugin.post(SLICES, slice_body(f"{mine}-extra-{run}", mine))  # its own node and driver: allowed
            plugin.delete(f"{SLICES}/{mine}-extra-{run}")
            assert "may write only ResourceSlices" in refused(plugin.post, SLICES, slice_body(f"x-{run}", theirs))
            other = slice_body(f"y-{run}", mine, driver="gpu.nvidia.com")
            assert "may write only ResourceSlices" in refused(plugin.post, SLICES, other)
            assert "may not change or delete" in refused(plugin.delete, f"{SLICES}/{theirs}-{DRIVER}")
            patch = {"spec": {"nodeName": mine}}
            assert refused(plugin.patch, f"{SLICES}/{theirs}-{DRIVER}", patch)
    finally:
        kube.delete_pod(RELEASE_NAMESPACE, pod)
        for name in (f"{theirs}-{DRIVER}", f"{mine}-{DRIVER}"):
            with contextlib.suppress(ApiError):
                kube.delete(f"{SLICES}/{name}")


def test_a_token_without_a_node_name_may_write_no_slice(dra_identity: ControlPlane, kube: KubeClient) -> None:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}}
    token = kube.post(f"/api/v1/namespaces/{RELEASE_NAMESPACE}/serviceaccounts/{SA}/token", body)["status"]["token"]
    with KubeClient(dra_identity.server, dra_identity.ca_file, token) as unbound:

        def policy_refuses() -> bool:
            try:
                unbound.post(SLICES, slice_body(f"probe-{uuid.uuid4().hex[:6]}", "any-node"))
            except ApiError as err:
                return "carries no node name" in str(err)
            raise AssertionError("a token without a node name created a ResourceSlice")

        wait_until(policy_refuses, timeout=30, interval=0.25, description="the DRA plugin's admission policy")


def _get(kube: KubeClient, path: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = kube.get(path)
    except ApiError:
        return None
    return found


def _alive(process: ManagedProcess) -> None:
    if process.exited() is not None:
        raise AssertionError(f"hami dra-plugin exited:\n{process.log_tail()}")


def test_an_unhealthy_gpu_is_published_tainted_and_untainted_when_it_recovers(
    control_plane: ControlPlane, kube: KubeClient, make_node: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    """A critical XID (79, fallen off the bus) taints the device in the real API server; after the quiet period
    (2 s here) with NVML still answering, the taint is gone. An application XID (13) changes nothing."""
    run = uuid.uuid4().hex[:8]
    node = f"dra-sick-{run}"
    make_node(node)
    fixture = FIXTURE + "xids:\n  - {uuid: GPU-id-0, xid: 13}\n  - {uuid: GPU-id-0, xid: 79}\n"
    (tmp_path / "fake.yaml").write_text(fixture)
    process = plugin_process(node, Path(control_plane.kubeconfig), tmp_path, run, "--recover-after-seconds=2")
    path = f"{SLICES}/{node}-{DRIVER}"

    def taints() -> list[dict[str, Any]] | None:
        found = _get(kube, path)
        return None if found is None else found["spec"]["devices"][0].get("taints", [])

    process.start()
    try:
        tainted = wait_until(taints, timeout=60, description="the tainted device", check=lambda: _alive(process))
        (taint,) = tainted
        assert (taint["key"], taint["value"], taint["effect"]) == (f"{DRIVER}/unhealthy", "true", "NoSchedule")
        assert "timeAdded" in taint  # the API server stamps it
        wait_until(lambda: taints() == [], timeout=60, description="the taint removed", check=lambda: _alive(process))
        assert "healthy again" in process.log_file.read_text()
    finally:
        process.stop()
        shutil.rmtree(sockets_dir(run), ignore_errors=True)
        with contextlib.suppress(ApiError):
            kube.delete(path)
