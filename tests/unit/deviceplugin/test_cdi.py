"""CDI specs (validated against the CDI JSON schema in ``tests/data``) and the device-list strategies."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from hami.deviceplugin import cdi
from hami.deviceplugin.discovery import GpuInfo
from hami.deviceplugin.launch import node_side_settings
from hami.deviceplugin.nvml import MigInstance
from hami.deviceplugin.response import device_list, mig_container_response
from hami.deviceplugin.settings import NodeSettings
from hami.errors import ConfigError

SCHEMA = json.loads((Path(__file__).parents[2] / "data" / "cdi-spec.schema.json").read_text())
GPUS = (
    GpuInfo(uuid="GPU-0a", index=0, name="Tesla T4", memory_mib=15360, minor=0),
    GpuInfo(uuid="GPU-1b", index=1, name="NVIDIA A100-SXM4-40GB", memory_mib=40960, mig_enabled=True, minor=3),
)
MIG = {"GPU-1b": [MigInstance(7, 19, (6, 1), 0, "MIG-5d1c"), MigInstance(8, 19, (5, 1))]}


def valid(spec: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(SCHEMA).validate(spec)


def test_the_gpu_spec_is_a_valid_cdi_spec_naming_every_gpu_and_mig_device() -> None:
    spec = cdi.gpu_spec(GPUS, MIG, driver_root="/run/nvidia/driver", hook_path="/usr/local/bin/nvidia-cdi-hook")
    valid(spec)
    assert spec["kind"] == "k8s.device-plugin.nvidia.com/gpu"
    by_name = {d["name"]: d["containerEdits"]["deviceNodes"] for d in spec["devices"]}
    assert list(by_name) == ["GPU-0a", "GPU-1b", "MIG-5d1c"]  # GI 8 has no compute instance: no MIG device
    assert by_name["GPU-0a"] == [{"path": "/dev/nvidia0", "hostPath": "/run/nvidia/driver/dev/nvidia0"}]
    assert by_name["MIG-5d1c"] == by_name["GPU-1b"]
    assert [n["path"] for n in spec["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    (hook,) = spec["containerEdits"]["hooks"]
    assert (hook["hookName"], hook["path"], hook["args"][:2]) == (
        "createContainer",
        "/usr/local/bin/nvidia-cdi-hook",
        ["nvidia-cdi-hook", "update-ldcache"],
    )


def test_the_default_driver_root_gives_no_host_paths() -> None:
    spec = cdi.gpu_spec(GPUS[:1], {})
    valid(spec)
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia0"}]
    assert "hooks" not in spec["containerEdits"]


def test_the_imex_spec_is_valid() -> None:
    spec = cdi.imex_spec([0, 5], driver_root="/driver")
    valid(spec)
    assert [d["name"] for d in spec["devices"]] == ["0", "5"]
    assert spec["devices"][1]["containerEdits"]["deviceNodes"] == [
        {
            "path": "/dev/nvidia-caps-imex-channels/channel5",
            "hostPath": "/driver/dev/nvidia-caps-imex-channels/channel5",
        }
    ]


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param({"kind": "no-slash"}, id="kind-without-class"),
        pytest.param({"devices": [{"name": "GPU-0a"}]}, id="device-without-edits"),
        pytest.param({"devices": [{"name": "-bad", "containerEdits": {}}]}, id="name-starting-with-a-dash"),
        pytest.param({"containerEdits": {"deviceNodes": [{"hostPath": "/dev/x"}]}}, id="node-without-path"),
        pytest.param({"containerEdits": {"env": ["NO_EQUALS"]}}, id="env-without-value"),
    ],
)
def test_the_schema_refuses_broken_specs(broken: dict[str, Any]) -> None:
    spec = {**cdi.gpu_spec(GPUS[:1], {}), **broken}
    with pytest.raises(jsonschema.ValidationError):
        valid(spec)


def test_write_spec_replaces_the_file_only_when_it_changes(tmp_path: Path) -> None:
    directory = tmp_path / "cdi"
    assert cdi.write_spec(directory, cdi.GPU_SPEC_FILE, cdi.gpu_spec(GPUS, {}))
    assert not cdi.write_spec(directory, cdi.GPU_SPEC_FILE, cdi.gpu_spec(GPUS, {}))
    assert cdi.write_spec(directory, cdi.GPU_SPEC_FILE, cdi.gpu_spec(GPUS, MIG))
    valid(json.loads((directory / cdi.GPU_SPEC_FILE).read_text()))
    assert sorted(p.name for p in directory.iterdir()) == [cdi.GPU_SPEC_FILE]  # no temporary file left


# --- device-list strategies --------------------------------------------------------------------------------


def settings(strategies: str, **changes: Any) -> NodeSettings:
    fields = node_side_settings({"device_list_strategy": strategies})
    return replace(NodeSettings(**fields), **changes).validate("test")


def test_envvar_lists_the_uuids() -> None:
    listing = device_list(["GPU-0a", "GPU-1b"], settings("envvar"))
    assert listing.envs == {"NVIDIA_VISIBLE_DEVICES": "GPU-0a,GPU-1b"}
    assert (listing.mounts, listing.annotations, listing.cdi_devices, listing.devices) == ([], {}, [], [])


def test_volume_mounts_mount_dev_null_per_device() -> None:
    listing = device_list(["GPU-0a"], settings("volume-mounts"))
    assert listing.envs == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    (mount,) = listing.mounts
    assert (mount.container_path, mount.host_path, mount.read_only) == (
        "/var/run/nvidia-container-devices/GPU-0a",
        "/dev/null",
        True,
    )


def test_cdi_annotations_name_the_cdi_devices() -> None:
    listing = device_list(["GPU-0a", "GPU-1b"], settings("cdi-annotations", cdi_annotation_prefix="cdi.example/"))
    assert listing.annotations == {
        "cdi.example/hami-nvidia": "k8s.device-plugin.nvidia.com/gpu=GPU-0a,k8s.device-plugin.nvidia.com/gpu=GPU-1b"
    }
    assert listing.envs == {"NVIDIA_VISIBLE_DEVICES": "void"}  # no legacy-hook fallback to "all"
    assert listing.cdi_devices == []


def test_cdi_cri_fills_the_cdi_devices_field_with_imex_channels() -> None:
    listing = device_list(["MIG-5d1c"], settings("cdi-cri,envvar", imex_channel_ids=(2,)))
    assert [d.name for d in listing.cdi_devices] == [
        "k8s.device-plugin.nvidia.com/gpu=MIG-5d1c",
        "k8s.device-plugin.nvidia.com/imex-channel=2",
    ]
    assert listing.envs == {"NVIDIA_VISIBLE_DEVICES": "MIG-5d1c", "NVIDIA_IMEX_CHANNELS": "2"}


def test_extra_features_and_device_specs() -> None:
    chosen = settings(
        "envvar",
        gds_enabled=True,
        mofed_enabled=True,
        gdrcopy_enabled=True,
        pass_device_specs=True,
        driver_root="/run/nvidia/driver",
    )
    listing = device_list(["GPU-1b"], chosen, {"GPU-1b": 3})
    assert listing.envs == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-1b",
        "NVIDIA_GDRCOPY": "enabled",
        "NVIDIA_GDS": "enabled",
        "NVIDIA_MOFED": "enabled",
    }
    assert [(d.container_path, d.host_path, d.permissions) for d in listing.devices] == [
        ("/dev/nvidiactl", "/run/nvidia/driver/dev/nvidiactl", "rw"),
        ("/dev/nvidia-uvm", "/run/nvidia/driver/dev/nvidia-uvm", "rw"),
        ("/dev/nvidia-uvm-tools", "/run/nvidia/driver/dev/nvidia-uvm-tools", "rw"),
        ("/dev/nvidia3", "/run/nvidia/driver/dev/nvidia3", "rw"),
    ]


def test_a_mig_answer_has_the_device_list_only() -> None:
    answer = mig_container_response(["MIG-5d1c"], settings("cdi-cri"))
    assert dict(answer.envs) == {"NVIDIA_VISIBLE_DEVICES": "void"}
    assert [d.name for d in answer.cdi_devices] == ["k8s.device-plugin.nvidia.com/gpu=MIG-5d1c"]
    assert list(answer.mounts) == []


@pytest.mark.parametrize(
    ("values", "where"),
    [
        pytest.param({"device_list_strategy": "envvar,cdi"}, "DEVICE_LIST_STRATEGY", id="unknown-strategy"),
        pytest.param({"device_list_strategy": " , "}, "DEVICE_LIST_STRATEGY", id="empty"),
        pytest.param({"imex_channel_ids": "0,x"}, "IMEX_CHANNEL_IDS", id="channel-not-a-number"),
        pytest.param({"imex_channel_ids": "-1"}, "IMEX_CHANNEL_IDS", id="negative-channel"),
    ],
)
def test_bad_node_side_settings_name_the_variable(values: dict[str, str], where: str) -> None:
    with pytest.raises(ConfigError, match=where):
        NodeSettings(**node_side_settings(values)).validate("env")
