"""``RecordReader`` (the watch's way of reading a pod's record, issue 19 cold start) against the per-vendor walk it
replaced, kept here as the reference: the same record — devices, charges, slices, problem text — for varied pods,
malformed annotations included."""

from __future__ import annotations

import random
import sys
from collections.abc import Hashable, Mapping

import pytest

from hami.devices.base import Vendor
from hami.devices.common import SharedDeviceVendor, reads_slices
from hami.errors import InvalidInput
from hami.protocol import keys
from hami.protocol._gostrconv import GoNumError, parse_int
from hami.protocol.allocation import ContainerDevice, PodDevices, decode_pod_devices
from hami.protocol.objects import Pod
from hami.scheduling.records import RecordReader, init_containers_done, is_terminal, record_from_pod
from hami.scheduling.state import PodRecord
from hami.scheduling.usage import Kind, app_charges, container_kinds, effective_charges
from tests.toyvendor import ToyVendor
from tests.unit.scheduling.builders import container, pod, vendors

NV_ALLOC, NV_TO = "hami.io/vgpu-devices-allocated", "hami.io/vgpu-devices-to-allocate"
DCU_ALLOC = "hami.io/dcu-devices-allocated"
SGPU_ALLOC = "hami.io/metax-sgpu-devices-allocated"
MIG_OK = '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-0","profile":"1g.5gb","placement":{"start":6,"size":1}}]'


def reference_record(pod: Pod, vendors: Mapping[str, Vendor]) -> PodRecord | None:
    """The record as ``record_from_pod`` built it before the reader: every vendor asked, in turn."""
    annotations = pod.metadata.annotations
    node = annotations.get(keys.VGPU_NODE)
    if not node or is_terminal(pod):
        return None
    devices: dict[str, PodDevices] = {}
    problems: list[str] = []
    for name, vendor in vendors.items():
        key = vendor.keys.allocated
        value = annotations.get(key)
        if value is None:
            continue
        try:
            devices[name] = vendor.decode(value, key)
        except InvalidInput as err:
            problems.append(str(err))
            fallback = _to_allocate(pod, vendor)
            if fallback is not None:
                devices[name] = fallback
                problems.append(f"charged from {vendor.keys.to_allocate} instead")
    slices: list[tuple[str, str, Hashable]] = []
    for name, vendor in sorted(vendors.items()):
        try:
            slices += [(name, uuid, position) for uuid, position in vendor.decode_slices(annotations)]
        except InvalidInput as err:
            problems.append(str(err))
    charges = effective_charges(devices, container_kinds(pod), init_done=init_containers_done(pod))
    return PodRecord(
        uid=pod.metadata.uid,
        namespace=sys.intern(pod.metadata.namespace),
        name=pod.metadata.name,
        node=sys.intern(node),
        devices=devices,
        charges=charges,
        slices=tuple(slices),
        problem="; ".join(problems) or None,
    )


def _to_allocate(pod: Pod, vendor: Vendor) -> PodDevices | None:
    key = vendor.keys.to_allocate
    value = pod.metadata.annotations.get(key) if key else None
    if not key or not value:
        return None
    try:
        decoded = vendor.decode(value, key)
    except InvalidInput:
        return None
    return decoded if any(decoded) else None


def _entry(rng: random.Random, vendor: str, prefix: str) -> str:
    uuid = f"{prefix}-{rng.randrange(3)}" + ("[7-9]" if vendor == "NVIDIA" and rng.random() < 0.1 else "")
    mem = rng.choice(["1024", "0", "-5", "000000012", "999999999", "2147483647", "4864", "+7"])
    cores = rng.choice(["10", "0", "100", "-1", "30"])
    return f"{uuid},{vendor},{mem},{cores}"


def _allocation(rng: random.Random, vendor: str, prefix: str, containers: int) -> str:
    pieces = [":".join(_entry(rng, vendor, prefix) for _ in range(rng.randrange(3))) for _ in range(containers)]
    return "".join(f"{p}:;" if p else ";" for p in pieces)


BROKEN = [
    "GPU-0,NVIDIA,1000:;",  # missing fields
    "GPU-0,NVIDIA,x,10:;",  # memory not a number
    "GPU-0,NVIDIA,1000,99999999999:;",  # cores out of int32
    "GPU-0,NVIDIA,\u0663,10:;",  # an Arabic-Indic digit: Python's int() reads it, Go's ParseInt does not
    "GPU-0,NVIDIA,1_0,10:;",
]


def _random_pod(rng: random.Random, i: int) -> Pod:
    init = [
        container(name=f"i{k}", restart_policy=rng.choice([None, "Always"])) for k in range(rng.choice([0, 0, 1, 2]))
    ]
    apps = [container(name=f"a{k}") for k in range(rng.choice([1, 1, 2, 3]))]
    n = len(init) + len(apps)
    annotations: dict[str, str] = {"other/annotation": "x"}
    if rng.random() < 0.9:
        annotations[keys.VGPU_NODE] = f"node-{rng.randrange(3)}"
    if rng.random() < 0.8:
        annotations[NV_ALLOC] = rng.choice(BROKEN) if rng.random() < 0.2 else _allocation(rng, "NVIDIA", "GPU", n)
        if rng.random() < 0.5:
            annotations[NV_TO] = rng.choice(["", ";", _allocation(rng, "NVIDIA", "GPU", n), BROKEN[0]])
    if rng.random() < 0.3:
        annotations[DCU_ALLOC] = _allocation(rng, "DCU", "DCU", n)
    if rng.random() < 0.15:
        annotations[SGPU_ALLOC] = rng.choice(["sg-0,Metax-SGPU:;", _allocation(rng, "Metax-SGPU", "sg", n)])
    if rng.random() < 0.15:
        annotations[keys.NVIDIA_MIG_ALLOCATIONS] = rng.choice([MIG_OK, '[{"containerIndex":0}]', "not json"])
    done = {"terminated": {"exitCode": 0}}
    statuses = [{"name": c["name"], "state": done} for c in init if rng.random() < 0.7]
    phase = rng.choice(["Running", "Running", "Pending", "Succeeded", "Failed"])
    return pod(apps, init=init, annotations=annotations, uid=f"u{i}", phase=phase, init_statuses=statuses)


def test_the_reader_reads_the_record_the_per_vendor_walk_read_for_varied_pods() -> None:
    rng = random.Random(19)
    vs = vendors()
    reader = RecordReader(vs)
    kinds_seen: set[str] = set()
    for i in range(3000):
        p = _random_pod(rng, i)
        want = reference_record(p, vs)
        assert reader.read(p) == want, p
        assert record_from_pod(p, vs) == want
        if want is not None:
            kinds_seen.add("problem" if want.problem else "clean")
            kinds_seen.add("init" if p.spec.init_containers else "apps-only")
            kinds_seen.add("slices" if want.slices else "no-slices")
            kinds_seen.add("several-vendors" if len(want.devices) > 1 else "one-vendor")
    # the generator reached every kind of pod the reader treats differently
    assert kinds_seen == {
        "problem",
        "clean",
        "init",
        "apps-only",
        "slices",
        "no-slices",
        "several-vendors",
        "one-vendor",
    }


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param({NV_ALLOC: "GPU-0,NVIDIA,1000:;", NV_TO: "GPU-1,NVIDIA,2000,10:;"}, id="fallback-to-allocate"),
        pytest.param({NV_ALLOC: "GPU-0,NVIDIA,x,10:;"}, id="undecodable-no-fallback"),
        pytest.param({NV_ALLOC: "GPU-0,NVIDIA,1000,10:;", keys.NVIDIA_MIG_ALLOCATIONS: "not json"}, id="bad-mig"),
        pytest.param({SGPU_ALLOC: "sg-0,Metax-SGPU:;", DCU_ALLOC: "DCU-0,DCU,1,2,3:;"}, id="two-vendors-one-bad"),
    ],
)
def test_malformed_annotations_are_reported_with_the_same_text(annotations: dict[str, str]) -> None:
    p = pod([container()], annotations={keys.VGPU_NODE: "node-1", **annotations})
    want = reference_record(p, vendors())
    got = RecordReader(vendors()).read(p)
    assert want is not None
    assert got is not None
    assert got.problem is not None
    assert (got.problem, got.devices, got.charges, got.slices) == (
        want.problem,
        want.devices,
        want.charges,
        want.slices,
    )


def test_app_charges_equal_the_phased_charges_of_app_containers() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        devices: dict[str, PodDevices] = {}
        for vendor in rng.sample(["NVIDIA", "DCU", "MLU"], rng.randrange(1, 4)):
            devices[vendor] = tuple(
                tuple(
                    ContainerDevice(
                        f"{vendor}-{rng.randrange(3)}",
                        vendor,
                        rng.choice([-5, 0, 1024, 4864]),
                        rng.choice([-3, 0, 10, 100]),
                    )
                    for _ in range(rng.randrange(3))
                )
                for _ in range(rng.randrange(4))
            )
        containers = max((len(v) for v in devices.values()), default=0)
        assert app_charges(devices) == effective_charges(devices, (Kind.APP,) * containers)


def test_only_vendors_with_their_own_slice_decoder_are_asked_for_slices() -> None:
    vs = vendors()
    asked = {name for name, vendor in vs.items() if reads_slices(vendor)}
    assert asked == {"NVIDIA", "Metax-SGPU"}
    assert reads_slices(ToyVendor())  # a SharedDeviceVendor subclass with its own decode_slices

    class Plugin:  # a vendor outside hami's base class: always asked
        def decode_slices(self, annotations: Mapping[str, str]) -> tuple[tuple[str, Hashable], ...]:
            return ()

    assert reads_slices(Plugin())
    assert not reads_slices(SharedDeviceVendor.__new__(SharedDeviceVendor))


@pytest.mark.parametrize(
    "text", ["0", "7", "000000010", "999999999", "1000000000", "2147483647", "2147483648", "-5", "+5", "", "1_0",
             " 1", "\u0663", "\uff11", "12a"],
)  # fmt: skip
def test_plain_digit_numbers_decode_as_go_parses_them(text: str) -> None:
    value = f"GPU-0,NVIDIA,{text},10:;"
    try:
        want = parse_int(text, 32)
    except GoNumError:
        with pytest.raises(InvalidInput, match="invalid memory field"):
            decode_pod_devices(value)
        return
    assert decode_pod_devices(value)[0][0].usedmem == want
