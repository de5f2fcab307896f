"""The Hygon DCU vendor: requests, selector, fit through the shared loop (webhook-bind-plugin-vendors.md §7)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from hami.devices import registered_keys
from hami.devices.admission import ContainerEdit, CountInLimits, PodContext
from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    AnnotationContext,
    ContainerRequest,
    Fitted,
    NodeInventory,
    Placement,
)
from hami.devices.hygon import HYGON_KEYS, HygonVendor
from hami.errors import QuantityError
from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice
from hami.protocol.objects import Container, Node
from tests.unit.scheduling.builders import DCU, ctx, gpu, req, table, vendors

COUNT, MEM, CORES = "hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"


@pytest.fixture
def dcu() -> HygonVendor:
    v = vendors()[DCU]
    assert isinstance(v, HygonVendor)
    return v


def _container(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> Container:
    return msgspec.convert({"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}, Container)


@pytest.mark.parametrize(
    ("limits", "requests", "expected"),
    [
        pytest.param({COUNT: 1}, {}, ContainerRequest(DCU, 1, 0, 100, 100), id="count-only-is-a-whole-card"),
        pytest.param(
            {COUNT: 2, MEM: 2048},
            {},
            ContainerRequest(DCU, 2, 2048, MEM_PERCENTAGE_UNSET, 100),
            id="memory-given-cores-default-100",
        ),
        pytest.param({COUNT: 1, CORES: 30}, {}, ContainerRequest(DCU, 1, 0, 100, 30), id="cores-given"),
        pytest.param({COUNT: 1, MEM: 0}, {}, ContainerRequest(DCU, 1, 0, 100, 100), id="zero-memory-is-whole-card"),
        pytest.param({}, {COUNT: 1, MEM: 1000}, ContainerRequest(DCU, 1, 1000, 101, 100), id="requests-fallback"),
        pytest.param({COUNT: 1, MEM: 500}, {MEM: 9000}, ContainerRequest(DCU, 1, 500, 101, 100), id="limits-win"),
        pytest.param({COUNT: 0, MEM: 500}, {}, None, id="zero-count-no-request"),
        pytest.param({MEM: 500}, {}, None, id="no-count-no-request"),
    ],
)
def test_parse_request(
    dcu: HygonVendor, limits: dict[str, Any], requests: dict[str, Any], expected: ContainerRequest | None
) -> None:
    assert dcu.parse_request(_container(limits, requests), "containers[0](c)") == expected


@pytest.mark.parametrize(
    ("limits", "field", "reason"),
    [
        pytest.param({COUNT: -1}, f"f.limits[{COUNT}]", "must not be negative", id="negative-count"),
        pytest.param({COUNT: 1, MEM: -5}, f"f.limits[{MEM}]", "must not be negative", id="negative-memory"),
        pytest.param(
            {COUNT: 1, MEM: 2**31},
            f"f.limits[{MEM}]",
            "exceeds the int32 range HAMi's annotations can carry",
            id="memory-over-int32",
        ),
        pytest.param(
            {COUNT: 1, CORES: 101},
            f"f.limits[{CORES}]",
            "cores are a percentage of one DCU and cannot exceed 100",
            id="cores-over-100",
        ),
    ],
)
def test_parse_request_rejects(dcu: HygonVendor, limits: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(QuantityError) as info:
        dcu.parse_request(_container(limits), "f")
    assert (info.value.field, info.value.reason) == (field, reason)


def test_identity(dcu: HygonVendor) -> None:
    assert (dcu.name, dcu.keys) == (DCU, HYGON_KEYS)
    assert (dcu.resources.count, dcu.resources.memory, dcu.resources.core) == (COUNT, MEM, CORES)


def test_selector_reads_hygon_keys_with_whole_words(dcu: HygonVendor) -> None:
    sel = dcu.selector(
        {
            "hygon.com/use-dcutype": "Z100",
            "hygon.com/nouse-gpuuuid": "DCU-1",
            "nvidia.com/use-gpuuuid": "DCU-9",  # another vendor's key: ignored
        }
    )
    assert sel.type_ok(gpu("DCU-0", type="DCU-Z100")) is True
    assert sel.type_ok(gpu("DCU-0", type="DCU-Z100L")) is False
    assert (sel.uuid_ok("DCU-0"), sel.uuid_ok("DCU-1")) == (True, False)


def test_fit_records_the_vendor_key(dcu: HygonVendor) -> None:
    t = table(gpu("DCU-0", type="DCU-Z100", devmem=16384), vendor=DCU)
    outcome = dcu.fit(t, req(pct=100, cores=100, vendor=DCU), ctx(), dcu.selector({}))
    assert outcome == Fitted((Placement(0, ContainerDevice("DCU-0", DCU, 16384, 100)),))


def test_decode_inventory(dcu: HygonVendor) -> None:
    assert dcu.decode_inventory(Node()) is None
    node = msgspec.convert(
        {"metadata": {"annotations": {HYGON_KEYS.register: "DCU-a,4,16384,100,DCU-Z100,1,true,0,hami-core:"}}},
        Node,
    )
    assert dcu.decode_inventory(node) == NodeInventory((gpu("DCU-a", count=4, devmem=16384, type="DCU-Z100", numa=1),))


def test_what_it_owns_behind_the_interface(dcu: HygonVendor) -> None:
    # HAMi's default admission (found iff the count is in limits), no NUMA annotation, no partitions or slices.
    admitter = dcu.admitter()
    assert isinstance(admitter, CountInLimits)
    assert admitter.admit(_container({COUNT: 1}), "containers[0](c)", ContainerEdit(), PodContext()) is True
    assert admitter.admit(_container(requests={COUNT: 1}), "containers[0](c)", ContainerEdit(), PodContext()) is False
    ctx = AnnotationContext("n", ((),), (), ("c",), 0)
    assert (dcu.partitions, dcu.numa_bind({keys.NVIDIA_NUMA_BIND: "not read"}), dcu.extra_annotations(ctx)) == (
        None,
        False,
        {},
    )
    assert dcu.decode_slices({"hami.io/vgpu-mig-allocations": "not read"}) == ()
    assert (dcu.keys.extra, dcu.keys.lock) == ((), "hami.io/mutex.lock")


def test_its_keys_are_registered_for_the_node_agent() -> None:
    # The node agent learns every vendor's allocation keys from the registry, not from a central list.
    assert registered_keys()[:2] == (keys.NVIDIA_KEYS, HYGON_KEYS)
