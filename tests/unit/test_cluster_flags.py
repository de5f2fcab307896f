"""kubectl's habits on the commands that read the cluster: --kubeconfig, --context, -n (the context's namespace by
default), -A, --request-timeout (kubectl's syntax; an unreachable server fails at once), -o json|yaml|wide, and
``version -o json``."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hami import __version__
from hami.cli import app
from hami.clusterflags import ClusterFlags, pick_pod
from hami.config.duration import parse_request_timeout
from hami.errors import ApiError, ConfigError, HamiError, InvalidInput
from hami.k8s.client import KubeClient
from hami.k8s.config import load_kubeconfig
from hami.k8s.resources import NODES
from hami.protocol.objects import Node
from tests.unit.simulate.clusterfix import node, pod, snapshot_text


def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env={"KUBECONFIG": "", **(env or {})})
    return result.exit_code, result.stdout, result.stderr


def _kubeconfig(folder: Path, server: str, namespace: str = "") -> Path:
    ctx: dict[str, str] = {"cluster": "c", "user": "u"}
    other = {"cluster": "c", "user": "u", "namespace": "lab"}
    if namespace:
        ctx["namespace"] = namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "here", "context": ctx}, {"name": "lab", "context": other}],
        "current-context": "here",
    }
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def _snapshot(folder: Path) -> Path:
    snap = folder / "snap.json"
    snap.write_text(
        snapshot_text(
            node("gpu-a", [(16000, 4)]),
            pod("bert-serve-0", 6000, on="gpu-a", namespace="ml"),
            pod("web", 2000, on="gpu-a", namespace="shop"),
            pod("twin", 1000, namespace="ml"),
            pod("twin", 1000, namespace="shop"),
        )
    )
    return snap


# --- --request-timeout -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"), [("0", None), ("30", 30.0), ("500ms", 0.5), ("2m", 120.0), ("1h30m", 5400.0)]
)
def test_request_timeout_reads_kubectl_s_syntax(text: str, seconds: float | None) -> None:
    assert parse_request_timeout(text) == seconds


@pytest.mark.parametrize(("text", "why"), [("-1", "negative"), ("abc", "not a timeout"), ("5x", "not a timeout")])
def test_a_bad_request_timeout_names_the_flag(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as err:
        parse_request_timeout(text)
    assert err.value.field == "--request-timeout"
    code, _, stderr = _run("top", "--request-timeout", text)
    assert code == 2
    assert "--request-timeout" in stderr
    assert why in stderr


def test_the_command_line_fails_fast_where_servers_retry() -> None:
    settings = ClusterFlags(request_timeout=3.0).client_settings()
    assert (settings.request_timeout, settings.connect_timeout, settings.retry_unreachable) == (3.0, 3.0, False)
    unlimited = ClusterFlags().client_settings()
    assert unlimited.request_timeout is None
    assert unlimited.connect_timeout == 30.0


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


def test_a_refused_connection_is_not_retried_and_names_the_server(tmp_path: Path) -> None:
    server = f"http://127.0.0.1:{_closed_port()}"
    kube = load_kubeconfig(_kubeconfig(tmp_path, server))

    async def once() -> int:
        async with KubeClient(kube, ClusterFlags().client_settings()) as client:
            with pytest.raises(ApiError, match="ConnectError"):
                await client.list(NODES, type=Node)
            return client.retries

    assert asyncio.run(once()) == 0
    code, _, stderr = _run("top", "--kubeconfig", str(_kubeconfig(tmp_path, server)))
    assert code == 1
    assert f"cannot reach the API server {server}" in stderr
    assert "context here" in stderr  # where the server came from


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A server that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def test_request_timeout_bounds_a_request_the_server_never_answers(tmp_path: Path, silent_server: str) -> None:
    config = _kubeconfig(tmp_path, silent_server)
    code, _, stderr = _run("top", "--kubeconfig", str(config), "--request-timeout", "300ms")
    assert code == 1
    assert "no response within 0.3s" in stderr


# --- namespaces --------------------------------------------------------------------------------------------


def test_the_namespace_defaults_to_the_context_s(tmp_path: Path) -> None:
    config = _kubeconfig(tmp_path, "https://k.example", namespace="ml")
    assert ClusterFlags(kubeconfig=str(config)).default_namespace() == "ml"
    assert ClusterFlags(kubeconfig=str(config), context="lab").default_namespace() == "lab"
    assert ClusterFlags(kubeconfig=str(config), namespace="x").default_namespace() == "x"
    assert ClusterFlags(kubeconfig=str(tmp_path / "missing")).default_namespace() == "default"
    assert ClusterFlags(kubeconfig=str(config), all_namespaces=True, namespace="x").scope() is None


def test_explain_finds_a_pod_in_the_context_s_namespace(tmp_path: Path) -> None:
    snap, config = _snapshot(tmp_path), _kubeconfig(tmp_path, "https://k.example", namespace="ml")
    code, out, err = _run("explain", "bert-serve-0", "-s", str(snap), "--kubeconfig", str(config))
    assert code == 0, err
    assert out.startswith("ml/bert-serve-0: ")
    code, out, err = _run("explain", "bert-serve-0", "-s", str(snap), "--kubeconfig", str(config), "--context", "lab")
    assert code == 1
    assert "pod lab/bert-serve-0 not found" in err
    assert "a pod of that name is in namespace ml" in err


def test_explain_says_where_a_pod_of_that_name_is() -> None:
    import msgspec

    from hami.protocol.objects import Pod

    pods = [msgspec.convert(pod(n, 1000, namespace=ns), type=Pod) for n, ns in [("a", "ml"), ("t", "x"), ("t", "y")]]
    with pytest.raises(HamiError, match=r"pod default/a not found .*in namespace ml: try `-n ml` or ml/a"):
        pick_pod(pods, "a", ClusterFlags(namespace="default"))
    assert pick_pod(pods, "a", ClusterFlags(all_namespaces=True)).metadata.namespace == "ml"
    assert pick_pod(pods, "ml/a", ClusterFlags(namespace="ml")).metadata.name == "a"
    assert pick_pod(pods, "ml/a", ClusterFlags(namespace="lab", all_namespaces=True)).metadata.namespace == "ml"
    with pytest.raises(InvalidInput, match="names namespace 'ml' but --namespace is 'lab'"):
        pick_pod(pods, "ml/a", ClusterFlags(namespace="lab"))
    with pytest.raises(InvalidInput, match=r"several namespaces \(x, y\)"):
        pick_pod(pods, "t", ClusterFlags(all_namespaces=True))


def test_explain_ns_name_against_another_namespace_flag_is_an_error(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path)
    code, _, err = _run("explain", "ml/bert-serve-0", "-n", "lab", "-s", str(snap))
    assert code == 1
    assert "names namespace 'ml' but --namespace is 'lab'" in err
    code, out, _ = _run("explain", "bert-serve-0", "-A", "-s", str(snap))
    assert (code, out.split(":")[0]) == (0, "ml/bert-serve-0")


def test_top_shows_every_namespace_unless_n_is_given(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path)
    code, out, _ = _run("top", "-s", str(snap), "-o", "json")
    assert code == 0
    pods = {p["pod"] for p in json.loads(out)["nodes"][0]["cards"][0]["pods"]}
    assert pods == {"ml/bert-serve-0", "shop/web"}
    code, out, _ = _run("top", "-s", str(snap), "-n", "shop", "-o", "json")
    assert {p["pod"] for p in json.loads(out)["nodes"][0]["cards"][0]["pods"]} == {"shop/web"}
    code, out, _ = _run("top", "-s", str(snap), "-n", "shop", "-A", "-o", "json")
    assert len(json.loads(out)["nodes"][0]["cards"][0]["pods"]) == 2


# --- -o ------------------------------------------------------------------------------------------------


def test_output_yaml_is_the_json_document(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path)
    for command in (["top"], ["explain", "ml/bert-serve-0"]):
        _, as_json, _ = _run(*command, "-s", str(snap), "-o", "json")
        _, as_yaml, _ = _run(*command, "-s", str(snap), "-o", "yaml")
        assert yaml.safe_load(as_yaml) == json.loads(as_json)


def test_output_wide_adds_columns(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path)
    _, table, _ = _run("top", "-s", str(snap))
    _, wide, _ = _run("top", "-s", str(snap), "-o", "wide")
    header = next(line for line in wide.splitlines() if "DEVICE" in line).split()
    assert header[:4] == ["#", "DEVICE", "VENDOR", "MODEL"]
    assert "LARGEST" in header
    assert "VENDOR" not in next(line for line in table.splitlines() if "DEVICE" in line)
    _, explained, _ = _run("explain", "shop/web", "-s", str(snap), "-o", "wide")
    assert "VENDOR" in explained


def test_version_json_and_yaml() -> None:
    code, out, _ = _run("version", "-o", "json")
    doc = json.loads(out)
    assert code == 0
    assert doc["hamiVersion"] == __version__
    assert doc["pythonVersion"].count(".") == 2
    code, out, _ = _run("version", "-o", "yaml")
    assert yaml.safe_load(out) == doc


def test_every_command_that_reads_the_cluster_has_kubectl_s_flags() -> None:
    for command in ("top", "explain"):
        _, out, _ = _run(command, "-h")
        for flag in ("--kubeconfig", "--context", "--request-timeout", "-n, --namespace", "-A, --all-namespaces"):
            assert flag in out, (command, flag)
        assert "wide" in out
        assert "yaml" in out


def test_run_as_the_kubectl_plugin_it_calls_itself_kubectl_hami(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hami.cli import main

    monkeypatch.setattr("sys.argv", ["/usr/local/bin/kubectl-hami", "top", "-h"])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("Usage: kubectl hami top ")
