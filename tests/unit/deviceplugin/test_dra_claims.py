"""Prepare and unprepare of DRA claims: the CDI spec per claim, HAMi-core's env, the checkpoint and restarts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest

from hami.deviceplugin.discovery import GpuInfo
from hami.deviceplugin.dra import checkpoint
from hami.deviceplugin.dra.claims import PrepareRefused, cdi_device_id, claim_spec, plan_claim, spec_file_name
from hami.deviceplugin.dra.slices import SliceDevice, slice_devices
from hami.deviceplugin.dra.state import ClaimStore, StoreOptions
from hami.deviceplugin.response import HostFiles
from hami.protocol.dra import ResourceClaim

SCHEMA = json.loads((Path(__file__).parents[2] / "data" / "cdi-spec.schema.json").read_text())
DRIVER = "hami-core-gpu.project-hami.io"
GPUS = [
    GpuInfo(uuid="GPU-b", index=0, name="T4", memory_mib=15360, bus_id="00000000:5E:00.0", minor=0),
    GpuInfo(uuid="GPU-a", index=1, name="T4", memory_mib=15360, bus_id="00000000:3B:00.0", minor=1),
]
DEVICES: dict[str, SliceDevice] = {d.name: d for d in slice_devices(GPUS, details={}, pcie_roots={})}
HOST = HostFiles(hook_path="/usr/local", libvgpu_version="")


def result(
    device: str,
    *,
    memory: str | None = None,
    cores: str | None = None,
    share: str | None = "s1",
    request: str = "gpu",
    driver: str = DRIVER,
    pool: str = "node-1",
) -> dict[str, Any]:
    consumed = {k: v for k, v in (("memory", memory), ("cores", cores)) if v is not None}
    entry: dict[str, Any] = {"request": request, "driver": driver, "pool": pool, "device": device}
    if share is not None:
        entry["shareID"] = share
    if consumed:
        entry["consumedCapacity"] = consumed
    return entry


def claim(*results: dict[str, Any], uid: str = "uid-1", allocated: bool = True) -> ResourceClaim:
    status = {"allocation": {"devices": {"results": list(results)}}} if allocated else {}
    return msgspec.convert(
        {"metadata": {"name": "c", "namespace": "ns", "uid": uid}, "status": status}, type=ResourceClaim
    )


def env_of(spec: dict[str, Any]) -> dict[str, str]:
    """What a container that gets every device of the spec sees."""
    entries = [e for d in spec["devices"] for e in d["containerEdits"].get("env", [])]
    entries += spec["containerEdits"]["env"]
    assert len({e.split("=", 1)[0] for e in entries}) == len(entries), "a variable set twice"
    return dict(entry.split("=", 1) for entry in entries)


def test_a_share_gets_hami_core_env_mounts_and_a_valid_cdi_spec() -> None:
    plan = plan_claim(claim(result("hami-gpu-0", memory="3000Mi", cores="30")), "node-1", DEVICES)
    spec = claim_spec(plan, HOST, "c0ffee.cache")
    jsonschema.Draft202012Validator(SCHEMA).validate(spec)
    assert spec["kind"] == "k8s.hami-core-gpu.project-hami.io/claim"
    assert [d["name"] for d in spec["devices"]] == ["uid-1-hami-gpu-0"]
    assert spec["devices"][0]["containerEdits"] == {
        "deviceNodes": [{"path": "/dev/nvidia0"}],
        "env": ["CUDA_DEVICE_MEMORY_LIMIT_0=3000m", "CUDA_DEVICE_SM_LIMIT_0=30"],
    }
    assert env_of(spec) == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-b",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
        "CUDA_DEVICE_SM_LIMIT_0": "30",
        "CUDA_DEVICE_SM_LIMIT": "30",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/claims/uid-1/c0ffee.cache",
    }
    mounts = {m["containerPath"]: (m["hostPath"], m["options"][0]) for m in spec["containerEdits"]["mounts"]}
    assert mounts == {
        "/usr/local/vgpu/claims/uid-1": ("/usr/local/vgpu/claims/uid-1", "rw"),
        "/usr/local/vgpu/libvgpu.so": ("/usr/local/vgpu/libvgpu.so", "ro"),
        "/etc/ld.so.preload": ("/usr/local/vgpu/ld.so.preload", "ro"),
        "/tmp/vgpulock": ("/tmp/vgpulock", "rw"),
    }
    assert cdi_device_id("uid-1", "hami-gpu-0") == "k8s.hami-core-gpu.project-hami.io/claim=uid-1-hami-gpu-0"
    assert spec_file_name("uid-1") == "k8s.hami-core-gpu.project-hami.io-claim_uid-1.yaml"


def test_limits_are_indexed_in_pci_bus_order_not_result_order() -> None:
    plan = plan_claim(
        claim(result("hami-gpu-0", memory="1000Mi", cores="10"), result("hami-gpu-1", memory="2000Mi", cores="20")),
        "node-1",
        DEVICES,
    )
    env = env_of(claim_spec(plan, HOST, "x.cache"))
    # hami-gpu-1 sits on bus 3B, before hami-gpu-0 on 5E: it is the container's GPU 0
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-a,GPU-b"
    assert (env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["CUDA_DEVICE_SM_LIMIT_0"]) == ("2000m", "20")
    assert (env["CUDA_DEVICE_MEMORY_LIMIT_1"], env["CUDA_DEVICE_SM_LIMIT_1"]) == ("1000m", "10")


def test_two_results_on_one_card_are_summed_not_collapsed() -> None:
    plan = plan_claim(
        claim(
            result("hami-gpu-0", memory="1Gi", cores="30", share="a"),
            result("hami-gpu-0", memory="2Gi", cores="40", share="b"),
        ),
        "node-1",
        DEVICES,
    )
    spec = claim_spec(plan, HOST, "x.cache")
    jsonschema.Draft202012Validator(SCHEMA).validate(spec)
    assert len(spec["devices"]) == 1  # unique CDI names
    env = env_of(spec)
    assert (env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["CUDA_DEVICE_SM_LIMIT_0"]) == ("3072m", "70")
    assert [(s.device, s.share_id) for s in plan.shares] == [("hami-gpu-0", "a"), ("hami-gpu-0", "b")]


def test_absent_consumed_capacity_means_the_whole_card_never_a_fallback_of_60() -> None:
    env = env_of(claim_spec(plan_claim(claim(result("hami-gpu-0", share=None)), "node-1", DEVICES), HOST, "x"))
    assert (env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["CUDA_DEVICE_SM_LIMIT_0"]) == ("15360m", "100")


def test_zero_cores_is_the_smallest_limit_hami_core_enforces_not_unlimited() -> None:
    env = env_of(
        claim_spec(plan_claim(claim(result("hami-gpu-0", memory="1Gi", cores="0")), "node-1", DEVICES), HOST, "x")
    )
    assert env["CUDA_DEVICE_SM_LIMIT_0"] == "1"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "1"


@pytest.mark.parametrize(
    ("the_claim", "field"),
    [
        (claim(allocated=False), "status.allocation"),
        (claim(result("hami-gpu-0", driver="gpu.nvidia.com")), "results"),
        (claim(result("hami-gpu-0", pool="node-2")), "node-2"),
        (claim(result("hami-gpu-9")), "hami-gpu-9"),
        (claim(result("hami-gpu-0", memory="lots")), "consumedCapacity.memory"),
    ],
    ids=["unallocated", "other-driver", "other-node", "unknown-device", "bad-quantity"],
)
def test_claims_that_cannot_be_prepared_are_refused_with_the_field(the_claim: ResourceClaim, field: str) -> None:
    with pytest.raises(PrepareRefused, match=field) as caught:
        plan_claim(the_claim, "node-1", DEVICES)
    assert "ns/c" in str(caught.value)


# --- the store: files, checkpoint, restarts ------------------------------------------------------------------


@pytest.fixture
def options(tmp_path: Path) -> StoreOptions:
    return StoreOptions(
        plugin_dir=tmp_path / "plugin",
        cdi_dir=tmp_path / "cdi",
        host=HostFiles(libvgpu_version="", root=tmp_path / "host"),
    )


def ids() -> Any:
    counter = iter(range(1000))
    return lambda: f"cache{next(counter)}"


def test_prepare_writes_spec_dir_and_checkpoint_and_is_idempotent(options: StoreOptions) -> None:
    store = ClaimStore(options, ids())
    the_claim = claim(result("hami-gpu-0", memory="3000Mi", cores="30"))
    first = store.prepare(the_claim, "node-1", DEVICES)
    assert [(d.device, d.cdi_ids, d.share_id, d.requests) for d in first] == [
        ("hami-gpu-0", ("k8s.hami-core-gpu.project-hami.io/claim=uid-1-hami-gpu-0",), "s1", ("gpu",))
    ]
    spec_path = options.cdi_dir / "k8s.hami-core-gpu.project-hami.io-claim_uid-1.yaml"
    spec = json.loads(spec_path.read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(spec)
    directory = options.host.root / "usr/local/vgpu/claims/uid-1"
    assert directory.is_dir()
    assert directory.stat().st_mode & 0o777 == 0o777
    # a second prepare (kubelet retry, second pod of a shared claim) gives the same answer and the same cache
    assert store.prepare(the_claim, "node-1", DEVICES) == first
    assert json.loads(spec_path.read_text()) == spec
    spec_path.unlink()
    assert store.prepare(the_claim, "node-1", DEVICES) == first
    assert json.loads(spec_path.read_text()) == spec  # rewritten, same cache file name
    assert store.prepared() == {"uid-1": "PrepareCompleted"}


def test_unprepare_frees_everything_and_unknown_claims_are_a_no_op(options: StoreOptions) -> None:
    store = ClaimStore(options, ids())
    store.prepare(claim(result("hami-gpu-0")), "node-1", DEVICES)
    assert store.unprepare("uid-1") is True
    assert list(options.cdi_dir.iterdir()) == []
    assert not (options.host.root / "usr/local/vgpu/claims/uid-1").exists()
    assert checkpoint.load(options.plugin_dir / "checkpoint.json") == {}
    assert store.unprepare("uid-1") is False
    assert store.unprepare("never-seen") is False


def test_a_restarted_plugin_keeps_prepared_claims_and_does_not_prepare_twice(options: StoreOptions) -> None:
    store = ClaimStore(options, ids())
    one = store.prepare(claim(result("hami-gpu-0", memory="1Gi"), uid="u1"), "node-1", DEVICES)
    store.prepare(claim(result("hami-gpu-0", memory="2Gi"), uid="u2"), "node-1", DEVICES)
    spec = (options.cdi_dir / spec_file_name("u1")).read_text()

    restarted = ClaimStore(options, ids())  # new cache ids: a second preparation would show
    assert restarted.prepared() == {"u1": "PrepareCompleted", "u2": "PrepareCompleted"}
    assert restarted.prepare(claim(result("hami-gpu-0", memory="1Gi"), uid="u1"), "node-1", DEVICES) == one
    assert (options.cdi_dir / spec_file_name("u1")).read_text() == spec
    assert restarted.unprepare("u2") is True
    assert ClaimStore(options, ids()).prepared() == {"u1": "PrepareCompleted"}


def test_a_crash_mid_prepare_is_finished_by_the_next_prepare(options: StoreOptions) -> None:
    checkpoint.save(
        options.plugin_dir / "checkpoint.json",
        {"uid-1": {"state": "PrepareStarted", "devices": [], "spec": {}, "namespace": "ns", "name": "c"}},
    )
    stale = options.host.root / "usr/local/vgpu/claims/uid-1"
    stale.mkdir(parents=True)
    (stale / "old.cache").write_text("x")
    store = ClaimStore(options, ids())
    devices = store.prepare(claim(result("hami-gpu-0")), "node-1", DEVICES)
    assert [d.device for d in devices] == ["hami-gpu-0"]
    assert store.prepared() == {"uid-1": "PrepareCompleted"}
    assert list(stale.iterdir()) == []


def test_a_corrupt_checkpoint_is_refused_by_name(options: StoreOptions) -> None:
    path = options.plugin_dir / "checkpoint.json"
    checkpoint.save(path, {"u": {"state": "PrepareCompleted"}})
    path.write_text(path.read_text().replace("Completed", "Started"))
    with pytest.raises(checkpoint.CheckpointError, match="checksum"):
        ClaimStore(options)


def test_fake_nvml_specs_carry_no_device_nodes(options: StoreOptions) -> None:
    plan = plan_claim(claim(result("hami-gpu-0")), "node-1", DEVICES)
    spec = claim_spec(plan, HOST, "x", device_nodes=False)
    jsonschema.Draft202012Validator(SCHEMA).validate(spec)
    assert "deviceNodes" not in spec["containerEdits"]
    assert spec["devices"][0]["containerEdits"] == {
        "env": ["CUDA_DEVICE_MEMORY_LIMIT_0=15360m", "CUDA_DEVICE_SM_LIMIT_0=100"]
    }
