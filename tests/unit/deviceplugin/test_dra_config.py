"""The driver's opaque configuration (``HAMiCoreConfig``): ``smLimit: none`` is HAMi's "no cores asked, no SM limit".

DRA mode's translation puts it on a claim whose container asked for no ``gpucores`` (HAMi books 0 cores and sets no
limit then); without it ``cores: 0`` stays the smallest enforced limit (test_dra_claims.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hami.deviceplugin.dra.claims import PrepareRefused, claim_spec, plan_claim
from hami.deviceplugin.dra.state import ClaimStore, StoreOptions
from hami.deviceplugin.response import HostFiles
from hami.protocol.dra import ResourceClaim, hami_core_config
from tests.unit.deviceplugin.test_dra_claims import DEVICES, DRIVER, HOST, env_of, result


def configured(*results: dict[str, Any], config: list[dict[str, Any]]) -> ResourceClaim:
    status = {"allocation": {"devices": {"results": list(results), "config": config}}}
    return msgspec.convert(
        {"metadata": {"name": "c", "namespace": "ns", "uid": "uid-1"}, "status": status}, type=ResourceClaim
    )


def opaque(parameters: Any, *, requests: tuple[str, ...] = ("gpu",), driver: str = DRIVER) -> dict[str, Any]:
    return {"source": "FromClaim", "requests": list(requests), "opaque": {"driver": driver, "parameters": parameters}}


def env(claim: ResourceClaim) -> dict[str, str]:
    return env_of(claim_spec(plan_claim(claim, "node-1", DEVICES), HOST, "x.cache"))


NONE = hami_core_config("none")


def test_sm_limit_none_sets_no_limit_as_hami_does_for_a_task_without_cores() -> None:
    got = env(configured(result("hami-gpu-0", memory="1Gi", cores="0"), config=[opaque(NONE)]))
    assert got["CUDA_DEVICE_SM_LIMIT_0"] == "0"
    assert got["CUDA_DEVICE_SM_LIMIT"] == "0"
    assert got["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1024m"


@pytest.mark.parametrize(
    "config",
    [
        pytest.param([], id="no configuration"),
        pytest.param([opaque(hami_core_config("booked"))], id="smLimit booked"),
        pytest.param([opaque(NONE, driver="gpu.nvidia.com")], id="another driver's configuration"),
        pytest.param([opaque(NONE, requests=("other",))], id="a configuration for another request"),
        pytest.param([opaque(NONE), opaque(hami_core_config("booked"))], id="the last configuration counts"),
    ],
)
def test_otherwise_zero_cores_stay_the_smallest_enforced_limit(config: list[dict[str, Any]]) -> None:
    got = env(configured(result("hami-gpu-0", memory="1Gi", cores="0"), config=config))
    assert got["CUDA_DEVICE_SM_LIMIT_0"] == "1"


def test_a_configuration_without_requests_covers_every_request_and_subrequests_are_covered() -> None:
    everything = configured(result("hami-gpu-0", cores="0"), config=[opaque(NONE, requests=())])
    assert env(everything)["CUDA_DEVICE_SM_LIMIT_0"] == "0"
    sub = configured(result("hami-gpu-0", cores="0", request="gpu/mem-15360"), config=[opaque(NONE)])
    assert env(sub)["CUDA_DEVICE_SM_LIMIT_0"] == "0"


def test_only_the_configured_requests_cards_lose_their_limit() -> None:
    claim = configured(
        result("hami-gpu-0", cores="0", request="a", share="s1"),
        result("hami-gpu-1", cores="30", request="b", share="s2"),
        config=[opaque(NONE, requests=("a",))],
    )
    got = env(claim)  # cards by PCI bus: hami-gpu-1 (3B) is 0, hami-gpu-0 (5E) is 1
    assert (got["CUDA_DEVICE_SM_LIMIT_0"], got["CUDA_DEVICE_SM_LIMIT_1"]) == ("30", "0")


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        pytest.param("none", "must be a HAMiCoreConfig object", id="not an object"),
        pytest.param({"apiVersion": "hami.io/v1", "kind": "HAMiCoreConfig"}, "is not hami.io/v1alpha1/HAMiCoreConfig"),
        pytest.param({**NONE, "smLimit": "off"}, "smLimit: must be booked or none"),
        pytest.param({**NONE, "memLimit": "none"}, "holds fields this driver does not know"),
    ],
)
def test_a_configuration_this_driver_cannot_read_is_refused_never_ignored(parameters: Any, message: str) -> None:
    with pytest.raises(PrepareRefused, match=message) as err:
        plan_claim(configured(result("hami-gpu-0", cores="0"), config=[opaque(parameters)]), "node-1", DEVICES)
    assert "ResourceClaim ns/c status.allocation.devices.config[0].opaque.parameters" in str(err.value)


@pytest.fixture
def options(tmp_path: Path) -> StoreOptions:
    return StoreOptions(
        plugin_dir=tmp_path / "plugin", cdi_dir=tmp_path / "cdi", host=HostFiles(libvgpu_version="", root=tmp_path)
    )


def test_the_prepared_spec_keeps_no_limit_across_a_restart(options: StoreOptions) -> None:
    claim = configured(result("hami-gpu-0", memory="1Gi", cores="0"), config=[opaque(NONE)])
    first = ClaimStore(options).prepare(claim, "node-1", DEVICES)
    again = ClaimStore(options).prepare(claim, "node-1", DEVICES)
    assert first == again
    spec = json.loads((options.cdi_dir / "k8s.hami-core-gpu.project-hami.io-claim_uid-1.yaml").read_text())
    assert spec["devices"][0]["containerEdits"]["env"] == [
        "CUDA_DEVICE_MEMORY_LIMIT_0=1024m",
        "CUDA_DEVICE_SM_LIMIT_0=0",
    ]
