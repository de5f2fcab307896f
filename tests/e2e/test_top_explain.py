"""``hami top``, ``kubectl-hami top`` and ``hami explain`` against the real control plane, as a person runs them:
subprocesses with a kubeconfig whose user is an ``exec`` credential plugin (a script this test writes, speaking
client.authentication.k8s.io/v1) handing out the token of a read-only ServiceAccount (list nodes, pods and
resourcequotas, nothing else). And the fragmentation gauges scraped from a real ``hami scheduler``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami.protocol import keys
from tests.e2e.cluster import ApiError, ControlPlane, KubeClient, wait_until
from tests.e2e.hami_stack import GPU, SCHEDULER_NAME, HamiScheduler, gpu_limits, register_annotation

BIN = Path(sys.executable).parent
PLUGIN = """#!{python}
import json, os, pathlib, sys
calls = pathlib.Path({calls!r})
n = len(calls.read_text().splitlines()) if calls.exists() else 0
with calls.open("a") as log:
    log.write(os.environ["KUBERNETES_EXEC_INFO"] + "\\n")
tokens = {tokens!r}
token = tokens[min(n, len(tokens) - 1)]
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {{"token": token, "expirationTimestamp": "2099-01-01T00:00:00Z"}}}}))
"""


@dataclass
class Viewer:
    """A read-only identity: its token, and a way to write exec-plugin kubeconfigs around it."""

    plane: ControlPlane
    token: str
    folder: Path

    def kubeconfig(
        self, tokens: list[str] | None = None, name: str = "viewer", namespace: str = ""
    ) -> tuple[Path, Path]:
        """A kubeconfig whose exec plugin prints ``tokens`` one per call (the last one from then on); its current
        context ``e2e`` names ``namespace`` (when given), its context ``elsewhere`` the namespace ``elsewhere``."""
        calls = self.folder / f"{name}.calls"
        plugin = self.folder / f"{name}-plugin"
        plugin.write_text(PLUGIN.format(python=sys.executable, calls=str(calls), tokens=tokens or [self.token]))
        plugin.chmod(0o755)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": self.plane.server, "certificate-authority": str(self.plane.ca_file)},
                }
            ],
            "users": [
                {
                    "name": "viewer",
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1",
                            "command": f"./{plugin.name}",  # relative to the kubeconfig, as kubectl resolves it
                            "interactiveMode": "Never",
                            "provideClusterInfo": True,
                        }
                    },
                }
            ],
            "contexts": [
                {
                    "name": "e2e",
                    "context": {"cluster": "e2e", "user": "viewer", **({"namespace": namespace} if namespace else {})},
                },
                {"name": "elsewhere", "context": {"cluster": "e2e", "user": "viewer", "namespace": "elsewhere"}},
            ],
            "current-context": "e2e",
        }
        path = self.folder / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        return path, calls


@pytest.fixture
def viewer(control_plane: ControlPlane, kube: KubeClient, namespace: str, tmp_path: Path) -> Iterator[Viewer]:
    role = f"hami-e2e-viewer-{uuid.uuid4().hex[:8]}"
    kube.post(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "viewer"}})
    kube.post(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {
            "metadata": {"name": role},
            "rules": [{"apiGroups": [""], "resources": ["nodes", "pods", "resourcequotas"], "verbs": ["list"]}],
        },
    )
    kube.post(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": namespace}],
        },
    )
    answer = kube.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/viewer/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )
    yield Viewer(control_plane, answer["status"]["token"], tmp_path)
    kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role}")
    kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}")


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    command = [str(BIN / str(args[0])), *map(str, args[1:])]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def placed(kube: KubeClient, namespace: str, name: str, node: str, card: str, mem: int, cores: int) -> None:
    """A pod hami placed earlier: its allocation annotations and spec.nodeName (no kubelet runs it)."""
    allocation = f"{card},NVIDIA,{mem},{cores}:;"
    kube.create_pod(
        namespace,
        name,
        limits=gpu_limits(gpu=1, mem=mem, cores=cores),
        node_name=node,
        scheduler_name=SCHEDULER_NAME,  # hami believes the allocations of its own scheduler's pods only
        annotations={
            keys.VGPU_NODE: node,
            keys.VGPU_TIME: "1700000000",
            keys.BIND_PHASE: "success",
            keys.NVIDIA_KEYS.allocated: allocation,
            keys.NVIDIA_KEYS.to_allocate: ";",
        },
    )


def cluster(kube: KubeClient, namespace: str, make_node: Callable[..., dict[str, Any]]) -> tuple[str, str]:
    """Two nodes of one 16000-MiB card each; three pods on the first, one on the second, one pending.

    Shapes seen (MiB/cores): 6000/20, 4000/20, 3000/20, 12000/90. The first card keeps 3000 MiB and 40 cores
    free (one 3000/20 pod fits: nothing stranded); the second 4000 MiB and 10 cores (no shape fits: all of it
    is stranded)."""
    a, b = f"{namespace}-a", f"{namespace}-b"
    for name in (a, b):
        make_node(name, extended={GPU: 10}, annotations={keys.NVIDIA_REGISTER: register_annotation(name, 1, 16000)})
    placed(kube, namespace, "p1", a, f"GPU-{a}-0", 6000, 20)
    placed(kube, namespace, "p2", a, f"GPU-{a}-0", 4000, 20)
    placed(kube, namespace, "p3", a, f"GPU-{a}-0", 3000, 20)
    placed(kube, namespace, "p4", b, f"GPU-{b}-0", 12000, 90)
    kube.create_pod(namespace, "want", limits=gpu_limits(gpu=1, mem=8000, cores=10), scheduler_name="nobody")
    return a, b


def wait_until_allowed(viewer: Viewer) -> None:
    """RBAC bindings take effect asynchronously: wait until the viewer may list nodes."""

    def allowed() -> bool:
        with KubeClient(viewer.plane.server, viewer.plane.ca_file, viewer.token, timeout=5.0) as probe:
            try:
                probe.get("/api/v1/nodes")
            except ApiError:
                return False
            return True

    wait_until(allowed, description="the viewer's ClusterRoleBinding in effect")


def test_top_and_explain_live_as_a_read_only_exec_plugin_user(
    viewer: Viewer, kube: KubeClient, namespace: str, make_node: Callable[..., dict[str, Any]]
) -> None:
    a, b = cluster(kube, namespace, make_node)
    wait_until_allowed(viewer)
    config, calls = viewer.kubeconfig()

    result = run("hami", "top", "--kubeconfig", config, "--node", f"{namespace}-*", "-o", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    cards = {n["node"]: n["cards"][0] for n in doc["nodes"]}
    assert cards[a]["memoryMiB"] == {"used": 13000, "total": 16000}
    assert cards[a]["slots"] == {"used": 3, "total": 10}
    assert [p["pod"] for p in cards[a]["pods"]] == [f"{namespace}/p1", f"{namespace}/p2", f"{namespace}/p3"]
    assert cards[b]["memoryMiB"] == {"used": 12000, "total": 16000}
    info = json.loads(calls.read_text().splitlines()[0])
    assert info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == viewer.plane.server

    # the same through kubectl's plug-in name, as text (piped: no colour)
    result = run("kubectl-hami", "top", "--kubeconfig", config, "--node", a)
    assert result.returncode == 0, result.stderr
    assert f"{namespace}/p1 (6000 MiB, 20%)" in result.stdout
    assert "13000/16000" in result.stdout
    assert "\033[" not in result.stdout

    result = run("hami", "explain", f"{namespace}/want", "--kubeconfig", config, "-o", "json")
    assert result.returncode == 0, result.stderr
    explained = json.loads(result.stdout)
    assert explained["status"] == "pending"
    verdicts = {v["node"]: v for v in explained["nodes"]}
    assert verdicts[a]["reasons"] == {"CardInsufficientMemory": 1}
    assert verdicts[a]["cards"][0]["freeMemoryMiB"] == 3000
    assert verdicts[a]["cards"][0]["needMemoryMiB"] == 8000
    assert verdicts[a]["eviction"] == {"pods": [f"{namespace}/p1"], "freedMemoryMiB": 6000}
    assert explained["suggestions"][0] == f"it would fit on {a} if {namespace}/p1 left (6000 MiB freed)"

    # the identity really is read-only
    with KubeClient(viewer.plane.server, viewer.plane.ca_file, viewer.token) as as_viewer:
        with pytest.raises(ApiError) as refused:
            as_viewer.create_pod(namespace, "sneaky")
        assert refused.value.status == 403


def test_simulate_live_places_a_deployment_on_the_cluster_read_only(
    viewer: Viewer, kube: KubeClient, namespace: str, make_node: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    """``hami simulate --live``: the cluster through the same read-only loader as top and explain; a Deployment
    expanded into its pods; the held pods charged; ``--fail-on-pending`` for the one that does not fit."""
    mem = "nvidia.com/gpumem"
    a, _ = cluster(kube, namespace, make_node)
    wait_until_allowed(viewer)
    config, _ = viewer.kubeconfig(name="live", namespace=namespace)  # its context names the namespace
    template = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": a},
            "containers": [{"name": "web", "image": "x", "resources": {"limits": {GPU: 1, mem: 2000}}}],
        },
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template},
    }
    solo = {  # names no namespace: it goes to the context's, as `kubectl apply -f` would put it
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "solo"},
        "spec": {**template["spec"], "containers": [{"name": "c", "resources": {"limits": {GPU: 1, mem: 1000}}}]},
    }
    pods = tmp_path / "web.yaml"
    pods.write_text(yaml.safe_dump_all([deployment, solo]))
    args = ("hami", "simulate", "--live", "--kubeconfig", config, "--request-timeout", "20s", pods, "-o", "json")
    result = run(*args)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    first, second, third = doc["decisions"]
    # card a holds 13000 of 16000 MiB: one 2000-MiB replica fits, the second does not
    assert (first["status"], first["node"]) == ("placed", a)
    assert first["pod"].startswith(f"{namespace}/web-")
    assert first["devices"] == [[{"uuid": f"GPU-{a}-0", "vendor": "NVIDIA", "memoryMiB": 2000, "cores": 0}]]
    assert second["status"] == "pending"
    assert (third["pod"], third["status"], third["node"]) == (f"{namespace}/solo", "placed", a)  # 16000 of 16000
    assert run(*args, "--fail-on-pending").returncode == 3
    assert run("hami", "simulate", "--live", "--snapshot", pods, pods).returncode == 2  # one source only


def test_explain_finds_a_pod_as_kubectl_would(
    viewer: Viewer, kube: KubeClient, namespace: str, make_node: Callable[..., dict[str, Any]]
) -> None:
    """A bare name is looked up in the kubeconfig context's namespace, -A looks everywhere, a name not found in
    the namespace looked in says where a pod of that name is; -o yaml is the JSON document."""
    cluster(kube, namespace, make_node)
    wait_until_allowed(viewer)
    config, _ = viewer.kubeconfig(name="scoped", namespace=namespace)

    result = run("hami", "explain", "want", "--kubeconfig", config, "-o", "yaml")
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["pod"] == f"{namespace}/want"

    result = run("hami", "explain", "want", "--kubeconfig", config, "--context", "elsewhere")
    assert result.returncode == 1
    assert "pod elsewhere/want not found" in result.stderr
    assert f"a pod of that name is in namespace {namespace}" in result.stderr

    result = run("hami", "explain", "want", "--kubeconfig", config, "--context", "elsewhere", "-A", "-o", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["pod"] == f"{namespace}/want"

    result = run("hami", "explain", f"{namespace}/want", "--kubeconfig", config, "-n", "elsewhere")
    assert result.returncode == 1
    assert f"names namespace '{namespace}' but --namespace is 'elsewhere'" in result.stderr


def test_exec_plugin_is_run_again_after_a_401(viewer: Viewer, make_node: Callable[..., dict[str, Any]]) -> None:
    wait_until_allowed(viewer)
    config, calls = viewer.kubeconfig(tokens=["stale-token", viewer.token], name="rotating")
    result = run("hami", "top", "--kubeconfig", config, "-o", "json")
    assert result.returncode == 0, result.stderr
    assert len(calls.read_text().splitlines()) == 2  # the stale token got a 401; the plugin ran once more

    config, calls = viewer.kubeconfig(tokens=["wrong"], name="wrong")
    result = run("hami", "top", "--kubeconfig", config)
    assert result.returncode == 1
    assert "error:" in result.stderr
    assert "401" in result.stderr or "Unauthorized" in result.stderr


def test_scheduler_exports_fragmentation_gauges(
    control_plane: ControlPlane, kube: KubeClient, namespace: str, make_node: Callable[..., dict[str, Any]]
) -> None:
    a, b = cluster(kube, namespace, make_node)
    hami = HamiScheduler(control_plane, ["--node-lock-timeout=60s"])
    hami.start()
    try:

        def stranded() -> dict[str, float] | None:
            samples = hami.metrics().get("hami_gpu_stranded_memory_bytes", [])
            got = {labels["device_uuid"]: value for labels, value in samples if labels["node"] in (a, b)}
            return got if len(got) == 2 and got[f"GPU-{b}-0"] else None

        mib = 1048576
        by_card = wait_until(stranded, description="fragmentation gauges for the test's nodes")
        assert by_card == {f"GPU-{a}-0": 0.0, f"GPU-{b}-0": 4000 * mib}
        samples = hami.metrics()

        def of_test_nodes(name: str) -> dict[str, float]:
            return {labels["device_uuid"]: value for labels, value in samples[name] if labels["node"] in (a, b)}

        assert of_test_nodes("hami_gpu_stranded_cores_ratio") == {f"GPU-{a}-0": 20.0, f"GPU-{b}-0": 10.0}
        assert of_test_nodes("hami_gpu_largest_slice_memory_bytes") == {
            f"GPU-{a}-0": 3000 * mib,
            f"GPU-{b}-0": 4000 * mib,
        }
        (index,) = samples["hami_fragmentation_index"]
        assert 0.0 < index[1] <= 1.0
        model = {"vendor": "NVIDIA", "device_type": "NVIDIA-A100"}
        assert any(
            labels == model and value >= 4000 * mib for labels, value in samples["hami_model_stranded_memory_bytes"]
        )
    finally:
        hami.stop()
    assert hami.problems() == []
