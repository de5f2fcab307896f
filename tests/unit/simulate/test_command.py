"""``hami simulate`` end to end through the command line: exit codes, streams, options."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.simulate.helpers import DATA, run_cli


def test_json_output_is_exactly_one_document_and_warnings_go_to_stderr() -> None:
    result = run_cli("--snapshot", DATA / "malformed-node.yaml", DATA / "pods-web.yaml", "-o", "json", "--now", "42")
    assert result.code == 0
    doc = json.loads(result.stdout)  # the whole of stdout is one JSON document
    assert list(doc) == ["summary", "decisions", "utilization", "fragmentation"]  # fixed order
    assert doc["summary"] == {
        "nodes": 2,
        "devices": 1,
        "pods": 1,
        "placed": 1,
        "pending": 0,
        "invalid": 0,
        "denied": 0,
        "noDevices": 0,
    }
    assert doc["utilization"] == [
        {
            "node": "healthy",
            "uuid": "GPU-healthy-0",
            "index": 0,
            "vendor": "NVIDIA",
            "model": "NVIDIA-Tesla T4",
            "slots": {"used": 1, "total": 10},  # after the placement
            "memoryMiB": {"used": 3000, "total": 15360},
            "cores": {"used": 30, "total": 100},
            "health": "healthy",
            "cordoned": False,
            "unschedulable": False,
            "mig": None,
            "blocked": None,
            "slices": None,
            "dra": None,
        }
    ]
    assert {"decisions": doc["decisions"]} == {
        "decisions": [
            {
                "pod": "default/web",
                "status": "placed",
                "node": "healthy",
                "devices": [[{"uuid": "GPU-healthy-0", "vendor": "NVIDIA", "memoryMiB": 3000, "cores": 30}]],
                "annotations": {
                    "hami.io/vgpu-devices-allocated": "GPU-healthy-0,NVIDIA,3000,30:;",
                    "hami.io/vgpu-devices-to-allocate": "GPU-healthy-0,NVIDIA,3000,30:;",
                    "hami.io/vgpu-node": "healthy",
                    "hami.io/vgpu-time": "42",
                },
                "reasons": doc["decisions"][0]["reasons"],  # "broken": quarantined once the real codecs land
                "message": doc["decisions"][0]["message"],
                "admission": [{"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}],
                "warnings": [],
            }
        ]
    }
    assert doc["decisions"][0]["reasons"] in ({}, {"broken": {"NodeQuarantined": 1}})
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"warning: {DATA / 'malformed-node.yaml'}: document 1 (Node broken): ")
    assert "hami.io/node-nvidia-register" in lines[0]


def test_several_snapshots_and_pod_files_in_order_with_table_output() -> None:
    result = run_cli(
        "-s",
        DATA / "kubectl-list.json",
        "-s",
        DATA / "snapshot-multi.yaml",
        DATA / "pods-web.yaml",
        DATA / "pods-zones.yaml",
    )
    assert result.code == 0
    assert result.stderr == ""
    assert result.stdout.splitlines() == [
        "hami simulate: 6 nodes, 7 devices; 4 pods in order: 2 placed, 2 pending",
        "",
        "Placements",
        # binpack: alpha (running a 20000 MiB pod) is the busiest node; then it has 17960 MiB left
        "POD               NODE   DEVICES",
        "default/web       alpha  GPU-alpha-0 (3000 MiB, 30%)",
        "default/east-1    -      pending (see below)",
        "default/east-2    -      pending (see below)",
        "default/anywhere  beta   GPU-beta-0 (20000 MiB, unlimited cores)",
        "",
        "Per-device utilization after placement",
        "NODE        DEVICE       TYPE                SLOTS  MEMORY MiB   CORES   NOTE",
        "alpha       GPU-alpha-0  NVIDIA-NVIDIA L40S  2/4    23000/40960  80/100",
        "beta        GPU-beta-0   NVIDIA-NVIDIA L40S  1/4    20000/40960  0/100",
        "gamma       GPU-gamma-0  NVIDIA-NVIDIA L40S  0/4    0/40960      0/100",
        "gpu-node-1  GPU-1a       NVIDIA-Tesla T4     1/10   10000/15360  50/100",
        "gpu-node-1  GPU-1b       NVIDIA-Tesla T4     0/10   0/15360      0/100",
        "gpu-node-2  GPU-2a       NVIDIA-Tesla T4     0/10   0/15360      0/100",
        "gpu-node-2  GPU-2b       NVIDIA-Tesla T4     0/10   0/15360      0/100",
        "",
        "Pending pods and why each node was rejected",
        "default/east-1: no available node, 1 nodes do not meet "
        "(5 more excluded: 4 not matching nodeSelector zone=east, 1 unschedulable)",
        "  alpha: 1/1 CardInsufficientMemory",
        "default/east-2: no available node, 1 nodes do not meet "
        "(5 more excluded: 4 not matching nodeSelector zone=east, 1 unschedulable)",
        "  alpha: 1/1 CardInsufficientMemory",
    ]


def test_default_policies_come_from_the_options() -> None:
    binpack = run_cli("-s", DATA / "kubectl-list.json", DATA / "pods-web.yaml", "-o", "json")
    spread = run_cli("-s", DATA / "kubectl-list.json", "--node-policy", "spread", DATA / "pods-web.yaml", "-o", "json")
    assert json.loads(binpack.stdout)["decisions"][0]["node"] == "gpu-node-1"  # the busier node
    assert json.loads(spread.stdout)["decisions"][0]["node"] == "gpu-node-2"  # the idle one
    gpu_binpack = run_cli(
        "-s", DATA / "kubectl-list.json", "--gpu-policy", "binpack", DATA / "pods-web.yaml", "-o", "json"
    )
    assert json.loads(gpu_binpack.stdout)["decisions"][0]["devices"][0][0]["uuid"] == "GPU-1a"  # the busier GPU


def test_unknown_kind_exits_1_naming_file_and_object() -> None:
    result = run_cli("-s", DATA / "unknown-kind.yaml", DATA / "pods-web.yaml")
    assert result.code == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"error: {DATA / 'unknown-kind.yaml'}: document 2 (Deployment shop/web): unknown kind in a snapshot; "
        "expected DeviceClass, Node, Pod, ResourceClaim, ResourceQuota, ResourceSlice or a List\n"
    )


def test_an_undecodable_pods_file_exits_1_naming_file_object_and_field() -> None:
    result = run_cli("-s", DATA / "kubectl-list.json", DATA / "pods-bad-field.yaml")
    assert result.code == 1
    assert result.stderr == (
        f"error: {DATA / 'pods-bad-field.yaml'}: document 1 (Pod default/flags): "
        "metadata.annotations[nvidia.com/numa-bind]: Expected `str`, got `bool` (got true)\n"
    )


def test_an_unparsable_quantity_is_reported_for_that_pod_only() -> None:
    result = run_cli("-s", DATA / "malformed-node.yaml", DATA / "pods-bad-quantity.yaml", "-o", "json")
    assert result.code == 0
    bad, good = json.loads(result.stdout)["decisions"]
    assert (bad["pod"], bad["node"], bad["devices"], bad["reasons"]) == ("default/bad", None, [], {})
    assert bad["message"].startswith(f"{DATA / 'pods-bad-quantity.yaml'}: document 1 (Pod default/bad): ")
    assert (good["pod"], good["node"]) == ("default/good", "healthy")


def test_unreadable_files_exit_1(tmp_path: Path) -> None:
    missing = tmp_path / "snapshot.json"
    result = run_cli("-s", missing, DATA / "pods-web.yaml")
    assert result.code == 1
    assert result.stderr == f"error: {missing}: cannot read the file: No such file or directory\n"
    result = run_cli("-s", DATA / "kubectl-list.json", "--config", missing, DATA / "pods-web.yaml")
    assert result.code == 1
    assert str(missing) in result.stderr


def test_usage_errors_exit_2() -> None:
    assert run_cli(DATA / "pods-web.yaml").code == 2  # no snapshot
    assert run_cli("-s", DATA / "kubectl-list.json").code == 2  # no pods
    bad_policy = run_cli("-s", DATA / "kubectl-list.json", "--gpu-policy", "fastest", DATA / "pods-web.yaml")
    assert bad_policy.code == 2
    assert "unknown GPU policy 'fastest'" in bad_policy.stderr
    assert run_cli("-s", DATA / "kubectl-list.json", "--node-policy", "random", DATA / "pods-web.yaml").code == 2
    yml = run_cli("-s", DATA / "kubectl-list.json", "-o", "yml", DATA / "pods-web.yaml")
    assert yml.code == 2
    assert "'yml' is not one of table, json, yaml; did you mean yaml?" in yml.stderr
    assert "Value error" not in yml.stderr


def test_help_says_what_is_out_of_scope() -> None:
    result = run_cli("--help")
    assert result.code == 0
    text = " ".join(result.stdout.split())
    assert "nodeSelector" in text
    assert "taints and tolerations, affinity" in text
    assert "are out of scope" in text


def test_a_snapshot_without_nodes_is_an_error(tmp_path: Path) -> None:
    empty, array = tmp_path / "empty.yaml", tmp_path / "array.json"
    empty.write_text("")
    array.write_text("[]")
    for snapshot in (empty, array):
        result = run_cli("-s", snapshot, DATA / "pods-web.yaml")
        assert result.code == 1
        assert result.stdout == ""
        assert result.stderr == (
            f"error: {snapshot}: the snapshot holds no Kubernetes object (a snapshot is what "
            "`kubectl get nodes,pods,resourcequotas -A -o json` prints)\n"
        )
    swapped = run_cli("-s", DATA / "pods-web.yaml", DATA / "pods-web.yaml")
    assert swapped.code == 1
    assert swapped.stderr.startswith(
        f"error: {DATA / 'pods-web.yaml'}: the snapshot holds 1 pod but no Node; is this the pods file?"
    )


def test_a_misspelt_vendor_resource_is_a_warning_naming_the_closest_name(tmp_path: Path) -> None:
    pods = tmp_path / "pods.yaml"
    pods.write_text(
        "kind: Pod\nmetadata: {name: typo}\nspec:\n  containers:\n  - name: c\n    resources:\n"
        "      limits: {nvidia.com/gpu: 1, nvidia.com/gpumemory: 1000, example.com/thing: 1}\n"
    )
    result = run_cli("-s", DATA / "kubectl-list.json", pods, "-o", "json")
    assert result.code == 0
    assert result.stderr == (
        f"warning: {pods}: document 1 (Pod typo): containers[0](c).limits[nvidia.com/gpumemory]: no vendor "
        "hami schedules owns this resource, so hami ignores it; did you mean nvidia.com/gpumem?\n"
    )  # example.com is no vendor's domain: not hami's business


def test_gpumem_in_bytes_suggests_mebibytes(tmp_path: Path) -> None:
    pods = tmp_path / "pods.yaml"
    pods.write_text(
        "kind: Pod\nmetadata: {name: big}\nspec:\n  containers:\n  - name: c\n    resources:\n"
        "      limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 16Gi}\n"
    )
    result = run_cli("-s", DATA / "kubectl-list.json", pods, "-o", "json")
    message = json.loads(result.stdout)["decisions"][0]["message"]
    assert message.endswith("it counts MiB: did you mean 16384? (got '16Gi')")


def test_the_docs_show_real_output_for_a_snapshot() -> None:
    page = (Path(__file__).parents[3] / "docs/cli.md").read_text(encoding="utf-8")
    shown = page.split("$ hami simulate --snapshot cluster.json web.yaml fill.yaml\n", 1)[1].split("\n```", 1)[0]
    result = run_cli("-s", DATA / "kubectl-list.json", DATA / "pods-web.yaml", DATA / "pods-fill.yaml")
    assert shown == result.stdout.rstrip("\n")
