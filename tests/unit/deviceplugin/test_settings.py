from __future__ import annotations

import json
import re

import pytest

from hami.config import parse_device_config
from hami.deviceplugin.settings import MigAllowEntry, NodeSettings, apply_node_config, settings_from_device_config
from hami.errors import ConfigError

# The node config HAMi's chart ships (devicePlugin.nodeConfiguration), with one entry per node.
CHART_STYLE = json.dumps(
    {
        "nodeconfig": [
            {
                "name": "gpu-1",
                "operatingmode": "hami-core",
                "devicememoryscaling": 1.8,
                "devicesplitcount": 5,
                "migstrategy": "none",
                "filterdevices": {"uuid": ["GPU-x"], "index": [3]},
            },
            {"name": "gpu-1", "devicesplitcount": 99},
            {"name": "gpu-2", "operatingmode": "mig", "enablegetpreferredallocation": True},
        ]
    }
)


def test_the_entry_naming_this_node_overrides_the_defaults() -> None:
    settings = apply_node_config(NodeSettings(), CHART_STYLE, "gpu-1", "config.json")
    assert settings == NodeSettings(
        memory_scaling=1.8,
        split_count=5,  # the first entry for a node wins, as in HAMi
        filter_uuids=frozenset({"GPU-x"}),
        filter_indexes=frozenset({3}),
    )


def test_other_nodes_entries_are_ignored() -> None:
    assert apply_node_config(NodeSettings(split_count=7), CHART_STYLE, "cpu-1", "config.json") == NodeSettings(
        split_count=7
    )


def test_keys_match_case_insensitively_like_go_json() -> None:
    text = json.dumps({"NodeConfig": [{"Name": "n", "deviceMemoryScaling": 2, "EnableNumaTopology": True}]})
    settings = apply_node_config(NodeSettings(), text, "n", "config.json")
    assert (settings.memory_scaling, settings.enable_numa_topology) == (2.0, True)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        pytest.param({"devicesplitcount": "ten"}, "nodeconfig[0].devicesplitcount: must be a whole number", id="count"),
        pytest.param({"devicememoryscaling": True}, "devicememoryscaling: must be a number", id="bool-scaling"),
        pytest.param({"devicesplitcount": 0}, "devicesplitcount: must be 1..1024", id="zero-split"),
        pytest.param({"devicesplitcount": 1025}, "the scheduler refuses a registration with more", id="huge-split"),
        pytest.param({"devicecorescaling": 101}, "devicecorescaling: must be at most 100", id="huge-core-scaling"),
        pytest.param({"operatingmode": "mps"}, "mps is not implemented", id="mps"),
        pytest.param({"filterdevices": {"index": [-1]}}, "indexes are never negative", id="negative-index"),
        pytest.param({"filterdevices": {"uuid": "GPU-1"}}, "must be a list of GPU UUIDs", id="uuid-not-list"),
    ],
)
def test_bad_values_name_the_file_and_key(entry: dict[str, object], message: str) -> None:
    text = json.dumps({"nodeconfig": [{"name": "n", **entry}]})
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        apply_node_config(NodeSettings(), text, "n", "/config/config.json")
    assert "/config/config.json" in str(info.value)


def test_malformed_json_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not valid JSON"):
        apply_node_config(NodeSettings(), "{", "n", "config.json")


def test_device_config_supplies_the_plugin_keys() -> None:
    text = """
nvidia:
  resourceCountName: example.com/gpu
  deviceSplitCount: 4
  deviceMemoryScaling: 1.5
  deviceCoreScaling: 2
  preConfiguredDeviceMemory: 98304
  libCudaLogLevel: 3
  enableNumaTopology: true
  disableCoreLimit: true
  migProfileAllowlist:
    - models: ["A100-SXM4-40GB"]
      profiles: ["1g.5gb", "7g.40gb"]
"""
    nvidia = parse_device_config(text, "device-config.yaml").config.nvidia
    assert settings_from_device_config(nvidia) == NodeSettings(
        resource_name="example.com/gpu",
        split_count=4,
        memory_scaling=1.5,
        core_scaling=2.0,
        preconfigured_memory_mib=98304,
        lib_cuda_log_level=3,
        enable_numa_topology=True,
        disable_core_limit=True,
        mig_allowlist=(MigAllowEntry(("A100-SXM4-40GB",), ("1g.5gb", "7g.40gb")),),
    )
