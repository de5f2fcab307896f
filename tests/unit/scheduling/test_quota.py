"""Namespace quotas on device memory and cores (scheduler-core.md §6.10)."""

from __future__ import annotations

import pytest

from hami.scheduling.quota import QuotaBook
from tests.unit.scheduling.builders import resource_quota

MEM, CORES = "nvidia.com/gpumem", "nvidia.com/gpucores"


def book() -> QuotaBook:
    return QuotaBook([MEM, CORES])


def test_only_tracked_limits_are_recorded() -> None:
    b = book()
    problems = b.upsert(
        resource_quota(
            "ns",
            "q",
            {
                f"limits.{MEM}": 8000,
                f"requests.{MEM}": 1,  # requests.* are not HAMi's quota keys
                "limits.cpu": 4,  # not a device resource
                f"limits.{CORES}": 200,
            },
        )
    )
    assert problems == []
    assert (b.limit("ns", MEM), b.limit("ns", CORES), b.limit("ns", "cpu")) == (8000, 200, None)
    assert (b.has_limits("ns"), b.has_limits("other")) == (True, False)


def test_smallest_limit_of_several_quotas_wins_and_each_can_be_removed() -> None:
    b = book()
    b.upsert(resource_quota("ns", "big", {f"limits.{MEM}": 8000}))
    b.upsert(resource_quota("ns", "small", {f"limits.{MEM}": 3000}))
    assert b.limit("ns", MEM) == 3000
    b.remove("ns", "small")
    assert b.limit("ns", MEM) == 8000
    b.remove("ns", "big")
    assert (b.limit("ns", MEM), b.has_limits("ns")) == (None, False)
    b.remove("ns", "never-there")


def test_update_without_device_limits_drops_the_quota() -> None:
    b = book()
    b.upsert(resource_quota("ns", "q", {f"limits.{MEM}": 8000}))
    b.upsert(resource_quota("ns", "q", {"limits.cpu": 4}))
    assert (b.limit("ns", MEM), b.has_limits("ns")) == (None, False)


@pytest.mark.parametrize(
    ("used", "amounts", "factors", "fits"),
    [
        pytest.param(0, {MEM: 8000}, {}, True, id="exactly-the-limit"),
        pytest.param(0, {MEM: 8001}, {}, False, id="one-over"),
        pytest.param(5000, {MEM: 3001}, {}, False, id="used-counts"),
        pytest.param(0, {MEM: 16000}, {MEM: 2}, True, id="memory-limit-times-factor"),
        pytest.param(0, {MEM: 8001}, {MEM: 1}, False, id="factor-1-no-change"),
        pytest.param(0, {CORES: 201}, {}, False, id="cores-limit"),
        pytest.param(0, {"other": 10**9}, {}, True, id="unlimited-resource"),
    ],
)
def test_fits(used: int, amounts: dict[str, int], factors: dict[str, int], fits: bool) -> None:
    b = book()
    b.upsert(resource_quota("ns", "q", {f"limits.{MEM}": 8000, f"limits.{CORES}": 200}))
    b.add_usage("ns", {MEM: used})
    assert b.fits("ns", amounts, factors) is fits


def test_explicit_zero_blocks_everything_and_no_quota_blocks_nothing() -> None:
    b = book()
    b.upsert(resource_quota("ns", "q", {f"limits.{MEM}": 0}))
    assert b.fits("ns", {MEM: 1}, {}) is False
    assert b.fits("ns", {MEM: 0}, {}) is True
    assert b.fits("free", {MEM: 10**9}, {}) is True


def test_usage_is_added_and_removed_without_leftovers() -> None:
    b = book()
    b.add_usage("ns", {MEM: 1000, CORES: 10})
    b.add_usage("ns", {MEM: 500})
    assert b.used == {"ns": {MEM: 1500, CORES: 10}}
    b.add_usage("ns", {MEM: 1500, CORES: 10}, sign=-1)
    assert b.used == {}
    b.add_usage("ns", {MEM: 0})
    assert b.used == {}
