"""Device tables: usage lists beside a shared inventory, cheap scratch copies."""

from __future__ import annotations

from hami.devices.table import DeviceTable
from hami.protocol.inventory import MigPlacement
from tests.unit.scheduling.builders import gpu, gpus

P = MigPlacement


def test_new_table_is_idle_and_indexed_by_uuid() -> None:
    t = DeviceTable("NVIDIA", gpus(2))
    assert (len(t), t.index_of) == (2, {"GPU-0": 0, "GPU-1": 1})
    assert [t.usage_of(i) for i in range(2)] == [(0, 0, 0, ()), (0, 0, 0, ())]
    assert t.broken == [None, None]


def test_charge_and_uncharge_restore_the_usage() -> None:
    t = DeviceTable("NVIDIA", gpus(1))
    t.charge(0, 2, 3000, 30, [P(6, 1), P(5, 1)])
    assert t.usage_of(0) == (2, 3000, 30, (P(6, 1), P(5, 1)))
    t.charge(0, 1, 1000, 10, [P(6, 1)], sign=-1)
    assert t.usage_of(0) == (1, 2000, 20, (P(5, 1),))
    t.charge(0, 1, 2000, 20, [P(5, 1)], sign=-1)
    assert t.usage_of(0) == (0, 0, 0, ())


def test_uncharging_one_of_two_equal_placements_keeps_the_other() -> None:
    t = DeviceTable("NVIDIA", gpus(1))
    t.charge(0, 1, 0, 0, [P(6, 1)])
    t.charge(0, 1, 0, 0, [P(6, 1)])
    t.charge(0, 1, 0, 0, [P(6, 1)], sign=-1)
    assert t.slices[0] == (P(6, 1),)


def test_scratch_copies_usage_and_shares_inventory() -> None:
    t = DeviceTable("NVIDIA", gpus(2))
    t.charge(0, 1, 100, 10)
    t.broken[1] = "x"
    s = t.scratch()
    s.charge(0, 1, 100, 10, [P(0, 1)])
    s.broken[1] = None
    assert t.usage_of(0) == (1, 100, 10, ())
    assert t.broken == [None, "x"]
    assert s.usage_of(0) == (2, 200, 20, (P(0, 1),))
    assert s.infos is t.infos


def test_empty_drops_usage_and_broken_flags() -> None:
    t = DeviceTable("NVIDIA", gpus(1))
    t.charge(0, 1, 100, 10, [P(0, 1)])
    t.broken[0] = "x"
    e = t.empty()
    assert (e.usage_of(0), e.broken) == ((0, 0, 0, ()), [None])


def test_totals() -> None:
    t = DeviceTable("NVIDIA", (gpu("a", count=10, devmem=8000), gpu("b", count=5, devcore=200, devmem=2000)))
    t.charge(0, 3, 1000, 30)
    t.charge(1, 1, 500, 50)
    assert t.totals() == (4, 15, 80, 300, 1500, 10000)
