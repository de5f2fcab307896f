from __future__ import annotations

import logging

import pytest

from hami.deviceplugin.discovery import GpuInfo, discover
from hami.deviceplugin.inventory import (
    card_type,
    mig_core,
    model_matches,
    node_devices,
    pair_scores,
    registered_gpus,
)
from hami.deviceplugin.nvml import TopologyLevel
from hami.deviceplugin.settings import MigAllowEntry, NodeSettings
from hami.protocol.inventory import encode_inventory_json
from hami.protocol.scores import encode_pair_scores

from .conftest import fake_lib

A100_ALLOW = (MigAllowEntry(models=("A100-SXM4-40GB",), profiles=("1g.5gb",)),)


def gpus(fixture: str) -> tuple[GpuInfo, ...]:
    lib = fake_lib(fixture)
    lib.init()
    return discover(lib, numa=lib.numa_of)


def register_value(fixture: str, settings: NodeSettings, unhealthy: frozenset[str] = frozenset()) -> str:
    return encode_inventory_json(node_devices(gpus(fixture), settings, unhealthy))


def test_two_t4s_match_the_documented_annotation_byte_for_byte() -> None:
    # scheduler-core.md §2.2, first example
    assert register_value("two-t4", NodeSettings()) == (
        '[{"id":"GPU-0a1","count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4","mode":"hami-core",'
        '"health":true},{"id":"GPU-0a2","index":1,"count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4",'
        '"numa":1,"mode":"hami-core","health":true}]'
    )


def test_a_mig_gpu_matches_the_documented_annotation_byte_for_byte() -> None:
    # scheduler-core.md §2.2, second example: only 1g.5gb is allowed; count is its instance count
    settings = NodeSettings(operating_mode="mig", mig_allowlist=A100_ALLOW, memory_scaling=2.0)
    assert register_value("a100-mig", settings) == (
        '[{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","mode":"mig",'
        '"migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"placements":[{"start":6,'
        '"size":1}]}],"health":true}]'
    )


@pytest.mark.parametrize(
    ("settings", "devmem", "devcore", "count"),
    [
        pytest.param(NodeSettings(memory_scaling=1.5), 23040, 100, 10, id="memory-x1.5"),
        pytest.param(NodeSettings(memory_scaling=0.33), 5068, 100, 10, id="memory-floor"),  # 5068.8
        pytest.param(NodeSettings(memory_scaling=1.1), 16896, 100, 10, id="float-noise-floors-like-go"),
        pytest.param(NodeSettings(core_scaling=2), 15360, 200, 10, id="cores-x2"),
        pytest.param(NodeSettings(core_scaling=0.7), 15360, 70, 10, id="cores-x0.7"),
        pytest.param(NodeSettings(split_count=3), 15360, 100, 3, id="split-3"),
    ],
)
def test_scaling_and_split_count(settings: NodeSettings, devmem: int, devcore: int, count: int) -> None:
    devices = node_devices(gpus("two-t4"), settings, frozenset())
    assert {(d.devmem, d.devcore, d.count) for d in devices} == {(devmem, devcore, count)}


@pytest.mark.parametrize(
    ("settings", "registered"),
    [
        pytest.param(NodeSettings(filter_uuids=frozenset({"GPU-0a1"})), ["GPU-0a2"], id="by-uuid"),
        pytest.param(NodeSettings(filter_indexes=frozenset({1})), ["GPU-0a1"], id="by-index"),
        pytest.param(NodeSettings(filter_uuids=frozenset({"GPU-0a1"}), filter_indexes=frozenset({1})), [], id="both"),
    ],
)
def test_filtered_devices_are_not_registered(settings: NodeSettings, registered: list[str]) -> None:
    assert [d.id for d in node_devices(gpus("two-t4"), settings, frozenset())] == registered


def test_unhealthy_gpus_register_with_health_omitted() -> None:
    value = register_value("two-t4", NodeSettings(split_count=2), frozenset({"GPU-0a2"}))
    assert value.endswith('"numa":1,"mode":"hami-core"}]')


def test_unknown_memory_uses_the_preconfigured_size_or_skips_the_gpu(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        assert [d.id for d in node_devices(gpus("broken"), NodeSettings(), frozenset())] == ["GPU-z"]
    assert "GPU-x: NVML cannot report its memory and preConfiguredDeviceMemory is not set" in caplog.text
    devices = node_devices(gpus("broken"), NodeSettings(preconfigured_memory_mib=97871), frozenset())
    assert [(d.id, d.devmem, d.type) for d in devices] == [
        ("GPU-x", 97871, "NVIDIA GH200 480GB"),
        ("GPU-z", 15360, "NVIDIA-Tesla T4"),
    ]


def test_mig_mode_and_gpu_state_must_agree(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        assert node_devices(gpus("a100-mig"), NodeSettings(), frozenset()) == []
        assert node_devices(gpus("two-t4"), NodeSettings(operating_mode="mig"), frozenset()) == []
        assert node_devices(gpus("a100-mig"), NodeSettings(operating_mode="mig"), frozenset()) == []
    assert "MIG is enabled but the node's operating mode is hami-core" in caplog.text
    assert "MIG is disabled but the node's operating mode is mig" in caplog.text
    assert "no MIG profile is allowed by migProfileAllowlist" in caplog.text


def test_every_allowed_profile_is_offered_with_its_share_of_cores() -> None:
    allow = (MigAllowEntry(models=("A100",), profiles=("1g.5gb", "3g.20gb", "7g.40gb")),)
    (device,) = node_devices(gpus("a100-mig"), NodeSettings(operating_mode="mig", mig_allowlist=allow), frozenset())
    assert [(p.name, p.core, p.memory_mb) for p in device.mig_profiles] == [
        ("1g.5gb", 15, 4864),
        ("3g.20gb", 43, 19968),
        ("7g.40gb", 100, 40192),
    ]
    assert device.count == 7


@pytest.mark.parametrize(
    ("model", "card", "matches"),
    [
        pytest.param("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", True, id="exact"),
        pytest.param("a100", "NVIDIA A100-SXM4-40GB", True, id="word-of-the-name"),
        pytest.param("A10", "NVIDIA A100-SXM4-40GB", False, id="a10-is-not-a100"),
        pytest.param("A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB", False, id="other-size"),
        pytest.param("RTX PRO 6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition", True, id="several-words"),
        pytest.param("H100", "NVIDIA GH100", False, id="not-a-suffix"),
        pytest.param("", "NVIDIA A100", False, id="empty"),
    ],
)
def test_allowlist_models_match_whole_words(model: str, card: str, matches: bool) -> None:
    assert model_matches(model, card) is matches


@pytest.mark.parametrize(
    ("name", "card"),
    [
        pytest.param("Tesla T4", "NVIDIA-Tesla T4", id="prefixed"),
        pytest.param("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", id="kept"),
        pytest.param("NVIDIA-Tesla P4", "NVIDIA-Tesla P4", id="already-prefixed"),
    ],
)
def test_card_type_prefix(name: str, card: str) -> None:
    assert card_type(name) == card


def test_mig_core_rounds_up_the_slice_share() -> None:
    assert [mig_core(s, 7) for s in (1, 2, 3, 4, 7)] == [15, 29, 43, 58, 100]


def test_pair_scores_follow_the_link_table() -> None:
    scores, asymmetric = pair_scores(gpus("dgx4"))
    table = {entry.uuid: entry.scores for entry in scores}
    assert table == {
        "GPU-a": {"GPU-b": 250, "GPU-c": 10, "GPU-d": 30},  # single switch 50 + 2 NVLinks
        "GPU-b": {"GPU-a": 250, "GPU-c": 40, "GPU-d": 0},  # b-d asymmetric
        "GPU-c": {"GPU-a": 10, "GPU-b": 40, "GPU-d": 1220},  # same CPU 20 + 12 NVLinks
        "GPU-d": {"GPU-a": 30, "GPU-b": 0, "GPU-c": 1220},
    }
    assert [(a.a, a.b) for a in asymmetric] == [("GPU-b", "GPU-d")]
    assert asymmetric[0].a_to_b.pcie is TopologyLevel.INTERNAL
    assert encode_pair_scores(scores[:1]) == '[{"uuid":"GPU-a","score":{"GPU-b":250,"GPU-c":10,"GPU-d":30}}]'


def test_pair_scores_cover_only_registered_gpus() -> None:
    kept = registered_gpus(gpus("dgx4"), NodeSettings(filter_indexes=frozenset({0, 1})))
    scores, _ = pair_scores(kept)
    assert {e.uuid: e.scores for e in scores} == {"GPU-c": {"GPU-d": 1220}, "GPU-d": {"GPU-c": 1220}}
