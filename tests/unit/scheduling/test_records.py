"""From a placed pod's annotations to its ledger record (spec §7.1, §7.2)."""

from __future__ import annotations

from typing import Any

import pytest

from hami.protocol import keys
from hami.protocol.allocation import ContainerDevice
from hami.protocol.inventory import MigPlacement
from hami.scheduling.decide import decide, reserve
from hami.scheduling.records import holds_devices, init_containers_done, is_terminal, record_from_pod
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.usage import Charge
from tests.unit.scheduling.builders import DCU, NVIDIA, container, gpu, gpus, pod, state, vendors

ALLOCATED, TO_ALLOCATE = "hami.io/vgpu-devices-allocated", "hami.io/vgpu-devices-to-allocate"
GPU, GPUMEM, GPUCORES = "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"
P = MigPlacement
DONE = {"terminated": {"exitCode": 0}}


def cd(uuid: str, mem: int, cores: int = 0, vendor: str = NVIDIA) -> ContainerDevice:
    return ContainerDevice(uuid, vendor, mem, cores)


def placed(annotations: dict[str, str], node: str = "node-1", **kwargs: Any) -> Any:
    kwargs.setdefault("containers", [container({GPU: 1})])
    containers = kwargs.pop("containers")
    return pod(containers, annotations={keys.VGPU_NODE: node, **annotations}, **kwargs)


def test_pod_without_vgpu_node_holds_nothing() -> None:
    p = pod([container({GPU: 1})], annotations={ALLOCATED: "GPU-0,NVIDIA,1000,0:;"})
    assert (holds_devices(p), record_from_pod(p, vendors())) == (False, None)


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_pod_holds_nothing(phase: str) -> None:
    p = placed({ALLOCATED: "GPU-0,NVIDIA,1000,0:;"}, phase=phase)
    assert (is_terminal(p), record_from_pod(p, vendors())) == (True, None)


def test_record_reads_the_allocated_annotation() -> None:
    # The device plugin empties to-allocate entry by entry; allocated is what the pod holds.
    p = placed({ALLOCATED: "GPU-0,NVIDIA,3000,30:;", TO_ALLOCATE: ";"}, uid="u-7", namespace="ns", name="web")
    r = record_from_pod(p, vendors())
    assert r is not None
    assert (r.uid, r.namespace, r.name, r.node, r.key, r.problem) == ("u-7", "ns", "web", "node-1", "ns/web", None)
    assert r.devices == {NVIDIA: ((cd("GPU-0", 3000, 30),),)}
    assert r.charges == (Charge(NVIDIA, "GPU-0", 1, 3000, 30),)
    assert r.slices == ()


def test_an_undecodable_allocation_is_charged_from_an_intact_to_allocate() -> None:
    p = placed({ALLOCATED: "GPU-0,NVIDIA,lots,30:;", TO_ALLOCATE: "GPU-0,NVIDIA,3000,30:;"})
    r = record_from_pod(p, vendors())
    assert r is not None
    assert r.charges == (Charge(NVIDIA, "GPU-0", 1, 3000, 30),)
    assert r.problem is not None
    assert "invalid memory field" in r.problem
    assert r.problem.endswith("charged from hami.io/vgpu-devices-to-allocate instead")


@pytest.mark.parametrize("to_allocate", [None, ";", "GPU-0,NVIDIA,x,30:;"], ids=["absent", "consumed", "broken"])
def test_an_undecodable_allocation_without_a_usable_to_allocate_is_kept_and_reported(to_allocate: str | None) -> None:
    annotations = {ALLOCATED: "GPU-0,NVIDIA,lots,30:;"} | ({TO_ALLOCATE: to_allocate} if to_allocate else {})
    r = record_from_pod(placed(annotations), vendors())
    assert r is not None
    assert (r.node, r.charges) == ("node-1", ())
    assert r.problem is not None
    assert "invalid memory field" in r.problem


def test_positional_empty_containers() -> None:
    p = placed(
        {ALLOCATED: ";GPU-0,NVIDIA,1000,0:;"},
        containers=[container(name="sidecar"), container({GPU: 1}, name="main")],
    )
    r = record_from_pod(p, vendors())
    assert r is not None
    assert r.devices == {NVIDIA: ((), (cd("GPU-0", 1000),))}


def test_init_usage_until_init_containers_finished() -> None:
    annotations = {ALLOCATED: "GPU-0,NVIDIA,5000,50:;GPU-0,NVIDIA,1000,10:;"}
    init = [container({GPU: 1}, name="warm")]
    running = record_from_pod(placed(annotations, init=init), vendors())
    done = record_from_pod(placed(annotations, init=init, init_statuses=[{"name": "warm", "state": DONE}]), vendors())
    assert running is not None
    assert done is not None
    assert running.charges == (Charge(NVIDIA, "GPU-0", 1, 5000, 50),)
    assert done.charges == (Charge(NVIDIA, "GPU-0", 1, 1000, 10),)


def test_sidecar_usage_is_never_released() -> None:
    annotations = {ALLOCATED: "GPU-0,NVIDIA,2000,20:;GPU-0,NVIDIA,5000,50:;GPU-0,NVIDIA,1000,10:;"}
    init = [container({GPU: 1}, name="side", restart_policy="Always"), container({GPU: 1}, name="warm")]
    statuses = [{"name": "warm", "state": DONE}, {"name": "side", "state": {"running": {}}}]
    r = record_from_pod(placed(annotations, init=init, init_statuses=statuses), vendors())
    assert r is not None
    assert r.charges == (Charge(NVIDIA, "GPU-0", 2, 3000, 30),)


@pytest.mark.parametrize(
    ("init", "statuses", "done"),
    [
        pytest.param([], [], False, id="no-init-containers"),
        pytest.param([container(name="s", restart_policy="Always")], [], False, id="only-sidecars"),
        pytest.param([container(name="a")], [{"name": "a", "state": DONE}], True, id="all-succeeded"),
        pytest.param(
            [container(name="a"), container(name="b")], [{"name": "a", "state": DONE}], False, id="one-still-pending"
        ),
        pytest.param(
            [container(name="a")], [{"name": "a", "state": {"terminated": {"exitCode": 1}}}], False, id="failed"
        ),
        pytest.param([container(name="a")], [{"name": "a", "state": {"running": {}}}], False, id="running"),
    ],
)
def test_init_containers_done(init: list[dict[str, Any]], statuses: list[dict[str, Any]], done: bool) -> None:
    assert init_containers_done(pod([container()], init=init, init_statuses=statuses)) is done


def test_legacy_mig_uuid_is_charged_to_its_gpu() -> None:
    r = record_from_pod(placed({ALLOCATED: "GPU-936619fc[7-9],NVIDIA,4864,14:;"}), vendors())
    assert r is not None
    assert r.devices == {NVIDIA: ((cd("GPU-936619fc", 4864, 14),),)}
    assert r.charges == (Charge(NVIDIA, "GPU-936619fc", 1, 4864, 14),)


def test_mig_reservations_are_read() -> None:
    value = (
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-M","profile":"1g.5gb","placement":{"start":6,"size":1}},'
        '{"containerIndex":0,"deviceIndex":1,"gpuUUID":"GPU-M","profile":"1g.5gb","placement":{"start":5,"size":1}}]'
    )
    p = placed({ALLOCATED: "GPU-M,NVIDIA,4864,14:GPU-M,NVIDIA,4864,14:;", keys.NVIDIA_MIG_ALLOCATIONS: value})
    r = record_from_pod(p, vendors())
    assert r is not None
    assert r.slices == ((NVIDIA, "GPU-M", P(6, 1)), (NVIDIA, "GPU-M", P(5, 1)))
    assert r.charges == (Charge(NVIDIA, "GPU-M", 2, 9728, 28),)


def test_every_vendor_is_read() -> None:
    p = placed(
        {ALLOCATED: "GPU-0,NVIDIA,1000,10:;;", "hami.io/dcu-devices-allocated": ";DCU-0,DCU,2000,100:;"},
        containers=[container({GPU: 1}, name="a"), container({"hygon.com/dcunum": 1}, name="b")],
    )
    r = record_from_pod(p, vendors())
    assert r is not None
    assert r.devices == {NVIDIA: ((cd("GPU-0", 1000, 10),), ()), DCU: ((), (cd("DCU-0", 2000, 100, DCU),))}
    assert r.charges == (Charge(DCU, "DCU-0", 1, 2000, 100), Charge(NVIDIA, "GPU-0", 1, 1000, 10))


def test_a_placed_pod_reads_back_as_the_record_reserve_made() -> None:
    """decide → annotations on the pod → record_from_pod charges exactly what reserve charged."""
    s = state({"node-1": gpus(2)}, dcu={"node-1": [gpu("DCU-0", devmem=16384)]})
    spec = {
        "containers": [container({GPU: 2, GPUMEM: 1000, GPUCORES: 10}, name="main"), container(name="log")],
        "init": [
            container({GPU: 1, GPUMEM: 3000}, name="warm"),
            container({"hygon.com/dcunum": 1}, name="side", restart_policy="Always"),
        ],
    }
    request = prefilter(pod(**spec), vendors(), SchedulingDefaults())
    decision = decide(s, request, ["node-1"], 1)
    reserved = reserve(s, request, decision)
    assert reserved is not None
    read = record_from_pod(pod(**spec, annotations=dict(decision.annotations)), vendors())
    assert read is not None
    assert (read.node, read.devices, read.charges) == (reserved.node, reserved.devices, reserved.charges)
