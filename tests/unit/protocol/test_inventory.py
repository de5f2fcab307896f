from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.devices.hygon import HYGON_KEYS
from hami.errors import AnnotationError, InvalidInput
from hami.protocol import keys
from hami.protocol.inventory import (
    DeviceInfo,
    MigPlacement,
    MigProfile,
    decode_inventory_json,
    decode_inventory_legacy,
    encode_inventory_json,
    encode_inventory_legacy,
)

from .support import HAMI, WIRE_TEXT, decodes_or_rejects, device_infos, mutated

DCU = HYGON_KEYS.register

TWO_T4 = (
    '[{"id":"GPU-0a1","count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4","mode":"hami-core",'
    '"health":true},{"id":"GPU-0a2","index":1,"count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4",'
    '"numa":1,"mode":"hami-core","health":true}]'
)
MIG_GPU = (
    '[{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","mode":"mig",'
    '"migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"placements":[{"start":6,"size":1}]}],'
    '"health":true}]'
)
P4_LEGACY = "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true,1,hami-core:"


def t4(id_: str, index: int, numa: int) -> DeviceInfo:
    return DeviceInfo(
        id=id_, index=index, count=10, devmem=15360, devcore=100, type="NVIDIA-Tesla T4", numa=numa,
        mode="hami-core", health=True,
    )  # fmt: skip


# --- JSON: the spec's examples and HAMi's encoder output --------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(TWO_T4, [t4("GPU-0a1", 0, 0), t4("GPU-0a2", 1, 1)], id="two-t4s-zero-index-and-numa-omitted"),
        pytest.param(
            MIG_GPU,
            [
                DeviceInfo(
                    id="GPU-0",
                    count=7,
                    devmem=40960,
                    devcore=100,
                    type="NVIDIA A100-SXM4-40GB",
                    mode="mig",
                    mig_profiles=(MigProfile("1g.5gb", 4864, 15, 1, (MigPlacement(6, 1),)),),
                    health=True,
                )
            ],
            id="mig-gpu-with-profiles",
        ),
        pytest.param("[]", [], id="empty-array-is-not-an-error-here"),
        pytest.param("null", [], id="null-is-empty-as-in-go"),
    ],
)
def test_spec_examples_decode_and_reencode_byte_identically(value: str, expected: list[DeviceInfo]) -> None:
    assert decode_inventory_json(value) == expected
    assert encode_inventory_json(expected) == ("[]" if value == "null" else value)


@pytest.mark.parametrize("case", sorted(HAMI["register"]))
def test_go_encoder_output_round_trips_byte_for_byte(case: str) -> None:
    value = HAMI["register"][case]
    assert encode_inventory_json(decode_inventory_json(value)) == value


def test_a100_fixture_decodes_to_eight_gpus_on_two_numa_nodes() -> None:
    devices = decode_inventory_json(HAMI["register"]["a100_8gpu_numa"])
    assert [(d.index, d.numa, d.health) for d in devices] == [
        (0, 0, True), (1, 0, True), (2, 0, True), (3, 0, True),
        (4, 1, True), (5, 1, False), (6, 1, True), (7, 1, True),
    ]  # fmt: skip
    assert {(d.count, d.devmem, d.devcore, d.type, d.mode) for d in devices} == {
        (10, 40960, 100, "NVIDIA A100-SXM4-40GB", "hami-core")
    }


def test_mig_fixture_keeps_profiles_and_empty_placements() -> None:
    mig, plain, edge = decode_inventory_json(HAMI["register"]["mig_node"])
    assert [p.name for p in mig.mig_profiles] == ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    assert mig.mig_profiles[3] == MigProfile("3g.20gb", 19968, 43, 3, (MigPlacement(0, 4), MigPlacement(4, 4)))
    assert (plain.mode, plain.mig_profiles, plain.numa) == ("hami-core", (), 1)
    assert edge.mig_profiles == (MigProfile("7g.40gb", 40192, 100, 7, ()),)


def test_go_html_escapes_and_extreme_numbers_survive() -> None:
    value = HAMI["register"]["strange_values"]
    assert "\\u003cx\\u003e\\u0026" in value
    assert "\\u2028\\u2029" in value
    first, second, third = decode_inventory_json(value)
    assert first.id == 'GPU-<x>&"y"\\'
    assert first.mode == "ctl\x00\x01\b\f\n\r\t\x1f\x7f\u2028\u2029"
    assert (first.count, first.devmem, first.devcore, first.numa) == (-1, 2**31 - 1, -(2**31), -1)
    assert (second.index, second.numa) == (2**64 - 1, 2**63 - 1)
    assert third == DeviceInfo()


def test_trailing_newline_and_unknown_keys_are_tolerated() -> None:
    value = '[{"id":"a","devicevendor":"NVIDIA","custominfo":{"x":1},"migtemplate":[],"health":true}]\n'
    assert decode_inventory_json(value) == [DeviceInfo(id="a", health=True)]


# --- JSON: rejections ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "reason", "position"),
    [
        pytest.param("", "invalid JSON: Input data was truncated", None, id="empty-string"),
        pytest.param('[{"id":"a"},]', "invalid JSON: trailing comma in array", 12, id="syntax-error-char-offset"),
        pytest.param('[{"id":"é"},x]', "invalid JSON: invalid character", 12, id="offset-counts-characters-not-bytes"),
        pytest.param("[]x", "invalid JSON: trailing characters", 3, id="trailing-garbage"),
        pytest.param('{"id":"a"}', "invalid JSON value: expected a list or null, got an object", None, id="not-array"),
        pytest.param(
            '[{"id":"a"},{"count":"10"}]',
            "invalid JSON value at [1].count: expected an integer, got a string",
            1,
            id="wrong-type-names-item-and-field",
        ),
        pytest.param(
            '[{"devmem":2147483648}]',
            "invalid JSON value at [0].devmem: expected an integer <= 2147483647",
            0,
            id="devmem-beyond-int32",
        ),
        pytest.param(
            '[{"index":-1}]', "invalid JSON value at [0].index: expected an integer >= 0", 0, id="negative-uint-index"
        ),
        pytest.param(
            '[{"id":"a"},{"index":18446744073709551616}]',
            "invalid JSON value: index 18446744073709551616 is outside the Go range 0..18446744073709551615",
            1,
            id="index-beyond-uint64",
        ),
        pytest.param(
            '[{"count":1.0}]', "invalid JSON value at [0].count: expected an integer, got a number", 0, id="float"
        ),
        pytest.param(
            '[{"health":null}]',
            "invalid JSON value at [0].health: expected true or false, got null",
            0,
            id="null-field",
        ),
    ],
)
def test_json_rejections_name_field_reason_and_position(value: str, reason: str, position: int | None) -> None:
    with pytest.raises(AnnotationError) as caught:
        decode_inventory_json(value)
    assert (caught.value.field, caught.value.reason, caught.value.position) == (keys.NVIDIA_REGISTER, reason, position)


def test_json_error_names_the_annotation_key_given() -> None:
    with pytest.raises(AnnotationError, match=r"^hami\.io/node-amd-register: invalid JSON"):
        decode_inventory_json("[", field="hami.io/node-amd-register")


@pytest.mark.parametrize(
    "device",
    [
        pytest.param(DeviceInfo(count=1 << 31), id="count-beyond-int32"),
        pytest.param(DeviceInfo(index=-1), id="negative-index"),
        pytest.param(DeviceInfo(id="\ud800"), id="lone-surrogate"),
        pytest.param(
            DeviceInfo(mig_profiles=(MigProfile(placements=(MigPlacement(size=-1),)),)), id="negative-placement"
        ),
    ],
)
def test_json_encoder_refuses_what_go_cannot_hold(device: DeviceInfo) -> None:
    with pytest.raises(InvalidInput):
        encode_inventory_json([device])


# --- legacy colon format -------------------------------------------------------------------------


def test_legacy_nine_field_p4_decodes_and_reencodes() -> None:
    devices = decode_inventory_legacy(P4_LEGACY, DCU)
    assert devices == [
        DeviceInfo(
            id="GPU-ebe7c3f7-303d-558d-435e-99a160631fe4", index=1, count=10, devmem=7680, devcore=100,
            type="NVIDIA-Tesla P4", numa=0, mode="hami-core", health=True,
        )
    ]  # fmt: skip
    assert encode_inventory_legacy(devices) == P4_LEGACY


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(
            "DCU-1,4,16384,100,DCU-Z100,1,false:",
            [DeviceInfo(id="DCU-1", count=4, devmem=16384, devcore=100, type="DCU-Z100", numa=1, mode="hami-core")],
            id="seven-fields-get-index-0-and-hami-core",
        ),
        pytest.param(":", [], id="lone-separator-is-empty"),
        pytest.param("::", [], id="empty-segments-skipped"),
        pytest.param(
            "a,+1,-2,3,t,-4,T,+5,:",
            [DeviceInfo(id="a", index=5, count=1, devmem=-2, devcore=3, type="t", numa=-4, health=True)],
            id="signs-and-go-bool-spelling-accepted-empty-mode-kept",
        ),
        pytest.param(
            "a,1,1,1,t,0,1:b,1,1,1,t,0,FALSE:",
            [
                DeviceInfo(id="a", count=1, devmem=1, devcore=1, type="t", mode="hami-core", health=True),
                DeviceInfo(id="b", count=1, devmem=1, devcore=1, type="t", mode="hami-core", health=False),
            ],
            id="two-devices",
        ),
    ],
)
def test_legacy_decoding(value: str, expected: list[DeviceInfo]) -> None:
    assert decode_inventory_legacy(value, DCU) == expected


@pytest.mark.parametrize(
    ("value", "reason", "position"),
    [
        pytest.param("", "node annotation missing device separator", None, id="empty"),
        pytest.param(",", "node annotation missing device separator", None, id="comma-only"),
        pytest.param("a", "node annotation missing device separator", None, id="no-separator"),
        pytest.param(P4_LEGACY + "junk:", 'malformed node annotation segment: "junk"', len(P4_LEGACY), id="no-comma"),
        pytest.param("a,b,c:", "unexpected field count 3 in node annotation", 0, id="three-fields"),
        pytest.param("a,1,1,1,t,0,true,0:", "unexpected field count 8 in node annotation", 0, id="eight-fields"),
        pytest.param(
            "a,x,1,1,t,0,true:", 'invalid count field: strconv.ParseInt: parsing "x": invalid syntax', 2, id="count"
        ),
        pytest.param(
            "a,1,2147483648,1,t,0,true:",
            'invalid memory field: strconv.ParseInt: parsing "2147483648": value out of range',
            4,
            id="memory-beyond-int32",
        ),
        pytest.param(
            "a,1,1, 1,t,0,true:",
            'invalid core field: strconv.ParseInt: parsing " 1": invalid syntax',
            6,
            id="core-space",
        ),
        pytest.param(
            "a,1,1,1,t,0,yes:",
            'invalid health field: strconv.ParseBool: parsing "yes": invalid syntax',
            12,
            id="health",
        ),
        pytest.param(
            "a,1,1,1,t,1_0,true:", 'invalid numa field: strconv.Atoi: parsing "1_0": invalid syntax', 10, id="numa"
        ),
        pytest.param(
            "a,1,1,1,t,0,true,x,m:", 'invalid index field: strconv.Atoi: parsing "x": invalid syntax', 17, id="index"
        ),
        pytest.param("a,1,1,1,t,0,true,-1,m:", "index field must not be negative: -1", 17, id="negative-index"),
        pytest.param(
            "a,x,y,z,t,n,h:",
            'invalid count field: strconv.ParseInt: parsing "x": invalid syntax',
            2,
            id="count-checked-first",
        ),
        pytest.param(
            "a,1,1,1,t,n,h:",
            'invalid health field: strconv.ParseBool: parsing "h": invalid syntax',
            12,
            id="health-checked-before-numa",
        ),
    ],
)
def test_legacy_rejections_follow_hamis_order_and_wording(value: str, reason: str, position: int | None) -> None:
    with pytest.raises(AnnotationError) as caught:
        decode_inventory_legacy(value, DCU)
    assert (caught.value.field, caught.value.reason, caught.value.position) == (DCU, reason, position)


def test_legacy_empty_inventory_encodes_to_a_value_hami_rejects() -> None:
    assert encode_inventory_legacy([]) == ""
    with pytest.raises(AnnotationError, match="missing device separator"):
        decode_inventory_legacy("", DCU)


def test_legacy_encoder_drops_mig_profiles_and_refuses_separators() -> None:
    mig = DeviceInfo(id="g", mode="mig", mig_profiles=(MigProfile("1g.5gb"),))
    assert encode_inventory_legacy([mig]) == "g,0,0,0,,0,false,0,mig:"
    with pytest.raises(InvalidInput, match=r"devices\[0\]\.type"):
        encode_inventory_legacy([DeviceInfo(type="a:b")])


# --- properties ---------------------------------------------------------------------------------


@given(st.lists(device_infos(), max_size=4))
def test_json_encode_then_decode_is_identity(devices: list[DeviceInfo]) -> None:
    assert decode_inventory_json(encode_inventory_json(devices)) == devices


@given(st.lists(device_infos(legacy=True), min_size=1, max_size=4))
def test_legacy_encode_then_decode_is_identity(devices: list[DeviceInfo]) -> None:
    assert decode_inventory_legacy(encode_inventory_legacy(devices), DCU) == devices


@given(WIRE_TEXT | mutated(st.lists(device_infos(), max_size=3).map(encode_inventory_json)))
def test_json_decoder_raises_only_annotation_error(text: str) -> None:
    decodes_or_rejects(decode_inventory_json, text)


@given(st.text() | mutated(st.lists(device_infos(legacy=True), max_size=3).map(encode_inventory_legacy)))
def test_legacy_decoder_raises_only_annotation_error(text: str) -> None:
    decodes_or_rejects(lambda value: decode_inventory_legacy(value, DCU), text)
