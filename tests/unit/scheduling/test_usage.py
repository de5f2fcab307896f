"""Collapsing a pod's per-container allocation into per-device charges (scheduler-core.md §7.2, plus sidecars)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from hami.protocol.allocation import ContainerDevice, PodDevices
from hami.scheduling.usage import Charge, Kind, container_kinds, effective_charges
from tests.unit.scheduling.builders import DCU, NVIDIA, container, pod

INIT, S, A = Kind.INIT, Kind.SIDECAR, Kind.APP


def d(uuid: str, mem: int, cores: int = 0, vendor: str = NVIDIA) -> ContainerDevice:
    return ContainerDevice(uuid, vendor, mem, cores)


def ch(uuid: str, slots: int, mem: int, cores: int, vendor: str = NVIDIA) -> Charge:
    return Charge(vendor, uuid, slots, mem, cores)


def test_container_kinds_init_first_sidecars_by_restart_policy() -> None:
    p = pod(
        [container(name="a"), container(name="b")],
        init=[container(name="i"), container(name="s", restart_policy="Always"), container(name="j")],
    )
    assert container_kinds(p) == (INIT, S, INIT, A, A)


@pytest.mark.parametrize(
    ("kinds", "devices", "expected"),
    [
        # The four worked examples of spec §7.2.
        pytest.param((A, A), ((d("g0", 100, 10),), (d("g0", 200, 20),)), (ch("g0", 2, 300, 30),), id="spec-2-apps-sum"),
        pytest.param(
            (INIT, A), ((d("g0", 500, 50),), (d("g0", 100, 10),)), (ch("g0", 1, 500, 50),), id="spec-init-peak-wins"
        ),
        pytest.param(
            (INIT, A, A),
            ((d("g0", 100, 10),), (d("g0", 200, 20),), (d("g0", 300, 30),)),
            (ch("g0", 2, 500, 50),),
            id="spec-apps-sum-beats-init",
        ),
        pytest.param(
            (INIT, INIT, INIT, A),
            ((d("g0", 100, 10),), (d("g0", 300, 30),), (d("g0", 200, 20),), (d("g0", 50, 5),)),
            (ch("g0", 1, 300, 30),),
            id="spec-init-containers-max-not-sum",
        ),
        pytest.param(
            (INIT, A), ((d("g0", 500, 10),), (d("g0", 100, 50),)), (ch("g0", 1, 500, 50),), id="max-per-dimension"
        ),
        pytest.param(
            (INIT, A),
            ((d("g1", 500, 50),), (d("g0", 100, 10),)),
            (ch("g0", 1, 100, 10), ch("g1", 1, 500, 50)),
            id="one-charge-per-device-sorted-by-uuid",
        ),
        pytest.param(
            (A,), ((d("g0", 4864, 14), d("g0", 4864, 14)),), (ch("g0", 2, 9728, 28),), id="two-mig-instances-two-slots"
        ),
        pytest.param(
            (S, A),
            ((d("g0", 1000, 10),), (d("g0", 2000, 20),)),
            (ch("g0", 2, 3000, 30),),
            id="sidecar-summed-with-apps",
        ),
        pytest.param(
            (S, INIT, A),
            ((d("g0", 1000, 10),), (d("g0", 3000, 30),), (d("g0", 2000, 20),)),
            (ch("g0", 2, 4000, 40),),
            id="sidecar-runs-beside-later-init-containers",
        ),
        pytest.param(
            (INIT, S, A),
            ((d("g0", 3000, 30),), (d("g0", 1000, 10),), (d("g0", 2000, 20),)),
            (ch("g0", 2, 3000, 30),),
            id="sidecar-starts-after-earlier-init-containers-finished",
        ),
        pytest.param(
            (INIT, A),
            ((d("g0", 4864, 14), d("g0", 4864, 14)), (d("g0", 4864, 14),)),
            (ch("g0", 2, 9728, 28),),
            id="init-container-with-two-mig-instances-holds-both",
        ),
        pytest.param(
            (INIT,),
            ((d("g0", 500, 50),), (d("g0", 100, 10),), (d("g0", 200, 20),)),
            (ch("g0", 2, 500, 50),),
            id="containers-beyond-the-known-kinds-are-apps",
        ),
        pytest.param((A, A), ((), ()), (), id="no-devices-no-charges"),
    ],
)
def test_effective_charges(kinds: Sequence[Kind], devices: PodDevices, expected: tuple[Charge, ...]) -> None:
    assert effective_charges({NVIDIA: devices}, kinds) == expected


@pytest.mark.parametrize(
    ("kinds", "devices", "expected"),
    [
        pytest.param(
            (INIT, A), ((d("g0", 3000, 30),), (d("g0", 100, 10),)), (ch("g0", 1, 100, 10),), id="init-usage-released"
        ),
        pytest.param(
            (INIT, A), ((d("g0", 3000, 30),), (d("g1", 100, 10),)), (ch("g1", 1, 100, 10),), id="init-only-device-freed"
        ),
        pytest.param(
            (S, INIT, A),
            ((d("g0", 1000, 10),), (d("g0", 3000, 30),), (d("g0", 100, 10),)),
            (ch("g0", 2, 1100, 20),),
            id="sidecars-still-count",
        ),
    ],
)
def test_effective_charges_after_init_containers_finished(
    kinds: Sequence[Kind], devices: PodDevices, expected: tuple[Charge, ...]
) -> None:
    assert effective_charges({NVIDIA: devices}, kinds, init_done=True) == expected


def test_vendors_are_collapsed_separately_and_sorted() -> None:
    devices = {
        NVIDIA: ((d("g0", 100, 10),), ()),
        DCU: ((), (d("dcu0", 2000, 100, DCU),)),
    }
    assert effective_charges(devices, (A, A)) == (ch("dcu0", 1, 2000, 100, DCU), ch("g0", 1, 100, 10))
    assert effective_charges({}, (A,)) == ()
