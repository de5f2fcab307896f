from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.devices.hygon import HYGON_KEYS
from hami.errors import AnnotationError, InvalidInput
from hami.protocol import keys
from hami.protocol.allocation import (
    MISSING_FIELDS,
    ContainerDevice,
    MigAllocation,
    PodDevices,
    decode_mig_allocations,
    decode_pod_devices,
    encode_container_devices_of_type,
    encode_mig_allocations,
    encode_pod_devices,
    split_legacy_mig_uuid,
)
from hami.protocol.inventory import MigPlacement

from .support import HAMI, WIRE_TEXT, decodes_or_rejects, mig_allocation_lists, mutated, pod_devices

ALLOCATED = keys.NVIDIA_KEYS.allocated
U1 = ContainerDevice("UUID1", "NVIDIA", 1000, 30)
U2 = ContainerDevice("UUID2", "NVIDIA", 1000, 30)


def gpu(uuid: str, mem: int, cores: int) -> ContainerDevice:
    return ContainerDevice(uuid, "NVIDIA", mem, cores)


# --- pod devices ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(
            "GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76,NVIDIA,3000,30:;",
            ((gpu("GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76", 3000, 30),),),
            id="one-container-one-gpu",
        ),
        pytest.param("UUID1,NVIDIA,1000,30:UUID2,NVIDIA,1000,30:;", ((U1, U2),), id="one-container-two-gpus"),
        pytest.param(
            "UUID1,NVIDIA,500,3:;UUID2,NVIDIA,500,3:;",
            ((gpu("UUID1", 500, 3),), (gpu("UUID2", 500, 3),)),
            id="two-containers-one-gpu-each",
        ),
        pytest.param("UUID1,NVIDIA,1000,30:;;", ((U1,), ()), id="gpu-then-empty-container-kept"),
        pytest.param(";GPU-b,NVIDIA,2000,50:;", ((), (gpu("GPU-b", 2000, 50),)), id="empty-first-container-kept"),
        pytest.param(";", ((),), id="one-empty-container"),
        pytest.param("", (), id="empty-value-no-containers"),
        pytest.param(";;;;", ((), (), (), ()), id="plugin-rewrite-after-allocate"),
        pytest.param(";GPU-b,NVIDIA,2000,50:;;", ((), (gpu("GPU-b", 2000, 50),), ()), id="plugin-rewrite-grows"),
    ],
)
def test_spec_examples_decode_and_reencode_byte_identically(value: str, expected: PodDevices) -> None:
    assert decode_pod_devices(value) == expected
    assert encode_pod_devices(expected) == value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("a,NVIDIA,1,2", ((gpu("a", 1, 2),),), id="no-trailing-separators"),
        pytest.param("junk:a,NVIDIA,1,2::;", ((gpu("a", 1, 2),),), id="pieces-without-comma-ignored"),
        pytest.param("a,NVIDIA,1,2,extra,fields:;", ((gpu("a", 1, 2),),), id="fields-after-fourth-ignored"),
        pytest.param("a,NVIDIA,-1,+2:;", ((gpu("a", -1, 2),),), id="signs-accepted"),
        pytest.param(",,0,0:;", ((ContainerDevice("", "", 0, 0),),), id="empty-uuid-and-type-accepted"),
    ],
)
def test_lenient_decoding_as_hami(value: str, expected: PodDevices) -> None:
    assert decode_pod_devices(value) == expected


@pytest.mark.parametrize(
    ("value", "reason", "position"),
    [
        pytest.param("a,NVIDIA,1:;", MISSING_FIELDS, 0, id="three-fields"),
        pytest.param("a,NVIDIA,1,2:;b,c:;", MISSING_FIELDS, 14, id="second-container-two-fields"),
        pytest.param(
            "a,NVIDIA,1g,2:;", 'invalid memory field: strconv.ParseInt: parsing "1g": invalid syntax', 9, id="memory"
        ),
        pytest.param(
            "a,NVIDIA,1,2147483648:;",
            'invalid core field: strconv.ParseInt: parsing "2147483648": value out of range',
            11,
            id="cores-beyond-int32",
        ),
    ],
)
def test_rejections_name_field_and_position(value: str, reason: str, position: int) -> None:
    with pytest.raises(AnnotationError) as caught:
        decode_pod_devices(value)
    assert (caught.value.field, caught.value.reason, caught.value.position) == (ALLOCATED, reason, position)


def test_other_vendor_key_is_named_in_errors() -> None:
    with pytest.raises(AnnotationError, match=r"^hami\.io/dcu-devices-allocated: "):
        decode_pod_devices("x,y:;", HYGON_KEYS.allocated)


@pytest.mark.parametrize(
    "device",
    [
        pytest.param(ContainerDevice("a,b", "NVIDIA", 1, 1), id="comma-in-uuid"),
        pytest.param(ContainerDevice("a", "NVI;DIA", 1, 1), id="semicolon-in-type"),
        pytest.param(ContainerDevice("a", "NVIDIA", 1 << 31, 1), id="memory-beyond-int32"),
    ],
)
def test_encoder_refuses_what_would_not_decode_back(device: ContainerDevice) -> None:
    with pytest.raises(InvalidInput):
        encode_pod_devices(((device,),))


def test_container_devices_of_one_type_have_no_trailing_separator() -> None:
    devices = [gpu("GPU-a", 1000, 10), ContainerDevice("DCU-b", "DCU", 1, 1), gpu("GPU-c", 3000, 30)]
    assert encode_container_devices_of_type(devices, "NVIDIA") == "GPU-a,NVIDIA,1000,10:GPU-c,NVIDIA,3000,30"
    assert encode_container_devices_of_type(devices, "MLU") == ""


@given(pod_devices)
def test_pod_devices_encode_then_decode_is_identity(devices: PodDevices) -> None:
    assert decode_pod_devices(encode_pod_devices(devices)) == devices


@given(pod_devices)
def test_pod_devices_decode_then_encode_is_identity_on_hami_output(devices: PodDevices) -> None:
    value = encode_pod_devices(devices)
    assert encode_pod_devices(decode_pod_devices(value)) == value


@given(st.text() | mutated(pod_devices.map(encode_pod_devices)))
def test_pod_devices_decoder_raises_only_annotation_error(text: str) -> None:
    decodes_or_rejects(decode_pod_devices, text)


# --- MIG allocations ----------------------------------------------------------------------------

MIG_EXAMPLE = (
    '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":6,"size":1}}]'
)


def mig(container: int = 0, device: int = 0, **changes: object) -> MigAllocation:
    fields: dict[str, object] = {"gpu_uuid": "GPU-a", "profile": "1g.5gb", "placement": MigPlacement(6, 1)}
    fields.update(changes)
    return MigAllocation(container_index=container, device_index=device, **fields)  # type: ignore[arg-type]


def test_spec_mig_example_decodes_and_reencodes() -> None:
    assert decode_mig_allocations(MIG_EXAMPLE) == [mig()]
    assert encode_mig_allocations([mig()]) == MIG_EXAMPLE


@pytest.mark.parametrize("case", sorted(HAMI["mig_allocations"]))
def test_go_mig_fixtures_round_trip_byte_for_byte(case: str) -> None:
    value = HAMI["mig_allocations"][case]
    assert encode_mig_allocations(decode_mig_allocations(value)) == value


def test_runtime_identity_zero_ids_are_present_not_absent() -> None:
    first, second = decode_mig_allocations(HAMI["mig_allocations"]["runtime_ready"])
    assert (first.mig_uuid, first.gpu_instance_id, first.compute_instance_id) == (
        "MIG-3f2a1b0c-9d8e-5f7a-b6c5-d4e3f2a1b0c9",
        0,
        0,
    )
    assert first.runtime_ready
    assert second.gpu_instance_id == 2**32 - 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("", [], id="empty-string"),
        pytest.param("null", [], id="null"),
        pytest.param("[]", [], id="empty-array"),
        pytest.param(
            '[{"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":6,"size":1},"migUUID":""}]',
            [mig()],
            id="missing-indexes-are-zero-and-empty-mig-uuid-absent-as-in-go",
        ),
    ],
)
def test_mig_lenient_decoding_as_go(value: str, expected: list[MigAllocation]) -> None:
    assert decode_mig_allocations(value) == expected


def _entry(body: str) -> str:
    return '{"containerIndex":0,"deviceIndex":0,' + body + "}"


FULL = '"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":6,"size":1}'


@pytest.mark.parametrize(
    ("value", "reason", "position"),
    [
        pytest.param(
            f'[{_entry(FULL)},{{"containerIndex":-1,"deviceIndex":1,{FULL}}}]',
            "MIG allocation 1 is incomplete",
            1,
            id="negative-container-index",
        ),
        pytest.param(
            f'[{{"containerIndex":0,"deviceIndex":-1,{FULL}}}]',
            "MIG allocation 0 is incomplete",
            0,
            id="negative-device-index",
        ),
        pytest.param(
            '[{"gpuUUID":"","profile":"1g.5gb","placement":{"start":6,"size":1}}]',
            "MIG allocation 0 is incomplete",
            0,
            id="empty-gpu-uuid",
        ),
        pytest.param(
            '[{"gpuUUID":"GPU-a","placement":{"start":6,"size":1}}]',
            "MIG allocation 0 is incomplete",
            0,
            id="missing-profile",
        ),
        pytest.param(
            '[{"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":6,"size":0}}]',
            "MIG allocation 0 is incomplete",
            0,
            id="zero-size-placement",
        ),
        pytest.param(
            '[{"gpuUUID":"GPU-a","profile":"1g.5gb"}]', "MIG allocation 0 is incomplete", 0, id="missing-placement"
        ),
        pytest.param(
            "[" + _entry(FULL + ',"migUUID":"MIG-x"') + "]",
            "MIG allocation 0 has partial runtime identity",
            0,
            id="only-mig-uuid",
        ),
        pytest.param(
            "[" + _entry(FULL + ',"gpuInstanceID":0,"computeInstanceID":0') + "]",
            "MIG allocation 0 has partial runtime identity",
            0,
            id="ids-without-mig-uuid",
        ),
        pytest.param(
            f"[{_entry(FULL)},{_entry(FULL)}]",
            "duplicate MIG allocation for container 0 device 0",
            1,
            id="duplicate-container-device",
        ),
        pytest.param(
            "[" + _entry(FULL + ',"gpuInstanceID":-1') + "]",
            "invalid JSON value at [0].gpuInstanceID: expected an integer >= 0",
            0,
            id="negative-instance-id",
        ),
    ],
)
def test_mig_rejections(value: str, reason: str, position: int) -> None:
    with pytest.raises(AnnotationError) as caught:
        decode_mig_allocations(value)
    assert (caught.value.field, caught.value.reason, caught.value.position) == (
        keys.NVIDIA_MIG_ALLOCATIONS,
        reason,
        position,
    )


def test_mig_encoder_writes_nothing_for_no_allocations() -> None:
    assert encode_mig_allocations([]) == ""


@pytest.mark.parametrize(
    ("allocations", "reason"),
    [
        pytest.param([mig(profile="")], "MIG allocation 0 is incomplete", id="incomplete"),
        pytest.param([mig(mig_uuid="MIG-x")], "MIG allocation 0 has partial runtime identity", id="partial"),
        pytest.param([mig(), mig()], "duplicate MIG allocation for container 0 device 0", id="duplicate"),
    ],
)
def test_mig_encoder_refuses_what_the_plugin_would_reject(allocations: list[MigAllocation], reason: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        encode_mig_allocations(allocations)
    assert caught.value.reason == reason


def test_mig_encoder_treats_empty_mig_uuid_as_absent() -> None:
    assert encode_mig_allocations([mig(mig_uuid="")]) == MIG_EXAMPLE


@given(mig_allocation_lists())
def test_mig_encode_then_decode_is_identity(allocations: list[MigAllocation]) -> None:
    assert decode_mig_allocations(encode_mig_allocations(allocations)) == allocations


@given(WIRE_TEXT | mutated(mig_allocation_lists().map(encode_mig_allocations)))
def test_mig_decoder_raises_only_annotation_error(text: str) -> None:
    decodes_or_rejects(decode_mig_allocations, text)


# --- legacy template MIG UUIDs --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uuid", "expected"),
    [
        pytest.param(
            "GPU-936619fc-f6a1-74a8-0bc6-ecf6b3269313[7-9]",
            ("GPU-936619fc-f6a1-74a8-0bc6-ecf6b3269313", (7, 9)),
            id="geometry-and-instance",
        ),
        pytest.param("GPU-plain", ("GPU-plain", None), id="no-suffix"),
        pytest.param("GPU-a[0-+1]tail", ("GPU-a", (0, 1)), id="atoi-sign-and-text-after-bracket-ignored"),
    ],
)
def test_legacy_mig_uuid_split(uuid: str, expected: tuple[str, tuple[int, int] | None]) -> None:
    assert split_legacy_mig_uuid(uuid) == expected


@pytest.mark.parametrize(
    ("uuid", "reason", "position"),
    [
        pytest.param("GPU-a[7-9", "invalid legacy MIG UUID: no ']' after '['", 5, id="unclosed"),
        pytest.param("GPU]-a[7-9]", "invalid legacy MIG UUID: no ']' after '['", 6, id="closing-before-opening"),
        pytest.param("GPU-a[7]", "invalid legacy MIG UUID: expected [<geometry>-<instance>]", 5, id="one-number"),
        pytest.param("GPU-a[7-8-9]", "invalid legacy MIG UUID: expected [<geometry>-<instance>]", 5, id="three"),
        pytest.param(
            "GPU-a[x-9]",
            'invalid legacy MIG UUID: strconv.Atoi: parsing "x": invalid syntax',
            5,
            id="not-a-number",
        ),
    ],
)
def test_legacy_mig_uuid_rejections(uuid: str, reason: str, position: int) -> None:
    with pytest.raises(AnnotationError) as caught:
        split_legacy_mig_uuid(uuid)
    assert (caught.value.reason, caught.value.position) == (reason, position)


@given(st.text())
def test_legacy_mig_uuid_split_raises_only_annotation_error(text: str) -> None:
    decodes_or_rejects(split_legacy_mig_uuid, text)
