"""NVIDIA in DRA mode: one container's HAMi request and the pod's NVIDIA annotations as a claim asks for them.

The CEL selectors are checked two ways: their exact text for the documented examples, and (hypothesis) that the
regular expression and the UUID list they carry select exactly the cards the extender's ``Selector`` selects,
against the card type hami's device plugin registers for the same product name. (That the text compiles as CEL is
checked by the API server in the e2e tests: there is no CEL implementation for Python in the environment.)
"""

from __future__ import annotations

import json
import re

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.config import default_device_config
from hami.deviceplugin.inventory import card_type
from hami.devices.base import Selector
from hami.devices.dra import DraModeSettings, DraRefused, DraRequest, DraTranslation, cel_string
from hami.devices.nvidia import NvidiaConfig, NvidiaVendor
from hami.devices.nvidia.dra import type_selector, uuid_selector
from hami.errors import InvalidInput, QuantityError
from hami.protocol import keys
from hami.protocol.dra import hami_core_config
from hami.protocol.inventory import DeviceInfo
from hami.protocol.objects import Container

PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GPU = "nvidia.com/gpu"
MEM = "nvidia.com/gpumem"
PCT = "nvidia.com/gpumem-percentage"
CORES = "nvidia.com/gpucores"
PRIO = "nvidia.com/priority"
ATTR = 'device.attributes["hami-core-gpu.project-hami.io"]'
DRA = DraModeSettings()
VENDOR = NvidiaVendor(default_device_config().nvidia)
FIELD = "containers[0](main)"


def container(limits: dict[str, str] | None = None, requests: dict[str, str] | None = None) -> Container:
    return msgspec.convert(
        {"name": "main", "resources": {"limits": limits or {}, "requests": requests or {}}}, type=Container
    )


def translate(
    limits: dict[str, str],
    annotations: dict[str, str] | None = None,
    vendor: NvidiaVendor = VENDOR,
    dra: DraModeSettings = DRA,
) -> DraRequest | None:
    return vendor.dra_request(container(limits), FIELD, annotations or {}, dra)


def test_the_nvidia_vendor_is_translatable_and_names_its_five_resources() -> None:
    assert isinstance(VENDOR, DraTranslation)
    assert VENDOR.dra_resources() == (GPU, MEM, PCT, CORES, PRIO)
    cfg = NvidiaConfig(resource_priority_name="", resource_count_name="example.com/gpu")
    assert NvidiaVendor(cfg).dra_resources() == ("example.com/gpu", MEM, PCT, CORES)


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        pytest.param(
            {GPU: "1", MEM: "3000", CORES: "30"},
            DraRequest(count=1, cores=30, memory_mib=3000, resources={GPU: "1", MEM: "3000", CORES: "30"}),
            id="memory and cores",
        ),
        pytest.param(
            {GPU: "2", CORES: "100"},
            DraRequest(count=2, cores=100, resources={GPU: "2", CORES: "100"}),
            id="no memory: the whole card (the device's default)",
        ),
        pytest.param(
            {GPU: "1", PCT: "100", CORES: "100"},
            DraRequest(count=1, cores=100, resources={GPU: "1", PCT: "100", CORES: "100"}),
            id="percentage 100: the whole card",
        ),
        pytest.param(
            {GPU: "1", MEM: "1000", PCT: "50", CORES: "5"},
            DraRequest(count=1, cores=5, memory_mib=1000, resources={GPU: "1", MEM: "1000", PCT: "50", CORES: "5"}),
            id="memory wins over a percentage, as in HAMi",
        ),
        pytest.param(
            {GPU: "1", MEM: "1k"},
            DraRequest(
                count=1,
                cores=0,
                memory_mib=1000,
                parameters=hami_core_config("none"),
                resources={GPU: "1", MEM: "1k"},
            ),
            id="no cores: 0 booked and no SM limit",
        ),
        pytest.param(
            {GPU: "1", MEM: "10", CORES: "0", PRIO: "2"},
            DraRequest(
                count=1,
                cores=0,
                memory_mib=10,
                parameters=hami_core_config("none"),
                resources={GPU: "1", MEM: "10", CORES: "0", PRIO: "2"},
            ),
            id="cores 0 written out: the same",
        ),
    ],
)
def test_a_request_becomes_count_memory_and_cores_per_card(limits: dict[str, str], expected: DraRequest) -> None:
    assert translate(limits) == expected


def test_no_count_no_request() -> None:
    assert translate({MEM: "3000"}) is None
    assert translate({GPU: "0", MEM: "3000"}) is None


def test_the_config_defaults_and_memory_factor_apply_as_in_extender_mode() -> None:
    vendor = NvidiaVendor(NvidiaConfig(memory_factor=4, default_cores=20))
    got = translate({GPU: "1", MEM: "100"}, vendor=vendor)
    assert got is not None
    assert (got.memory_mib, got.cores, got.parameters) == (400, 20, None)
    got = translate({GPU: "1"}, vendor=NvidiaVendor(NvidiaConfig(default_memory=2048)))
    assert got is not None
    assert got.memory_mib == 2048


def test_a_request_only_in_requests_is_read_and_recorded_from_there() -> None:
    got = VENDOR.dra_request(container(requests={GPU: "1", MEM: "10", CORES: "1"}), FIELD, {}, DRA)
    assert got is not None
    assert got.resources == {GPU: "1", MEM: "10", CORES: "1"}


def test_a_percentage_needs_the_card_sizes() -> None:
    with pytest.raises(DraRefused) as err:
        translate({GPU: "1", PCT: "25"})
    assert str(err.value).startswith(
        "containers[0](main).limits[nvidia.com/gpumem-percentage]: is a share of each card's memory, and a claim "
        "asks for an amount"
    )
    assert "ask for nvidia.com/gpumem in MiB instead (got '25')" in str(err.value)
    got = translate({GPU: "1", PCT: "25"}, dra=DraModeSettings(card_memory_mib=(15360,)))
    assert got is not None
    assert (got.memory_mib, got.memory_percent) == (None, 25)


def test_invalid_requests_keep_their_extender_mode_errors() -> None:
    with pytest.raises(QuantityError, match=r"limits\[nvidia.com/gpucores\]: must be at most 100"):
        translate({GPU: "1", CORES: "101"})


# --- annotations ------------------------------------------------------------------------------------------------------

TYPE_OF = f'({ATTR}.productName.startsWith("NVIDIA") ? {ATTR}.productName : "NVIDIA-" + {ATTR}.productName)'


@pytest.mark.parametrize(
    ("annotations", "selectors"),
    [
        pytest.param(
            {keys.NVIDIA_USE_GPUTYPE: "A10"},
            (f'{TYPE_OF}.lowerAscii().matches("(^|[^a-z0-9])(a10)($|[^a-z0-9])")',),
            id="use-gputype",
        ),
        pytest.param(
            {keys.NVIDIA_NOUSE_GPUTYPE: "Tesla V100, ,t4"},
            (f'!{TYPE_OF}.lowerAscii().matches("(^|[^a-z0-9])(t4|tesla[^a-z0-9]+v100)($|[^a-z0-9])")',),
            id="nouse-gputype: a list, blanks ignored, words",
        ),
        pytest.param(
            {keys.NVIDIA_USE_GPUUUID: "GPU-b, GPU-a", keys.NVIDIA_NOUSE_GPUUUID: "GPU-c"},
            (f'{ATTR}.uuid in ["GPU-a", "GPU-b"]', f'!({ATTR}.uuid in ["GPU-c"])'),
            id="use and nouse uuid",
        ),
        pytest.param({keys.NVIDIA_USE_GPUUUID: " , ", keys.NVIDIA_USE_GPUTYPE: ""}, (), id="blank lists: no filter"),
    ],
)
def test_annotations_become_cel_selectors(annotations: dict[str, str], selectors: tuple[str, ...]) -> None:
    got = translate({GPU: "1", CORES: "10"}, annotations)
    assert got is not None
    assert got.selectors == selectors
    assert got.annotations == annotations


def test_only_the_nvidia_annotations_are_recorded() -> None:
    annotations = {keys.NVIDIA_NUMA_BIND: "true", keys.NVIDIA_VGPU_MODE: "hami-core", "team": "a"}
    got = translate({GPU: "1", CORES: "10"}, annotations)
    assert got is not None
    assert got.annotations == {keys.NVIDIA_NUMA_BIND: "true", keys.NVIDIA_VGPU_MODE: "hami-core"}
    assert got.selectors == ()


def test_the_driver_domain_comes_from_the_settings() -> None:
    got = translate({GPU: "1", CORES: "10"}, {keys.NVIDIA_USE_GPUUUID: "GPU-a"}, dra=DraModeSettings(driver="x.io"))
    assert got is not None
    assert got.selectors == ('device.attributes["x.io"].uuid in ["GPU-a"]',)


@pytest.mark.parametrize(
    ("annotations", "count", "message"),
    [
        pytest.param(
            {keys.NVIDIA_VGPU_MODE: "mig"},
            1,
            "containers[0](main): annotation nvidia.com/vgpu-mode: DRA mode offers hami-core shares only (hami's DRA "
            "driver has no MIG or MPS devices); run the pod in a namespace that uses the extender (got 'mig')",
            id="mig",
        ),
        pytest.param(
            {keys.NVIDIA_VGPU_MODE: "mps, mig"}, 1, "nvidia.com/vgpu-mode: DRA mode offers hami-core", id="mps"
        ),
        pytest.param(
            {keys.NVIDIA_NUMA_BIND: "true"},
            2,
            "containers[0](main): annotation nvidia.com/numa-bind: binding 2 GPUs to one NUMA node cannot be "
            "expressed in a claim (hami's DRA driver publishes no NUMA attribute)",
            id="numa-bind of 2",
        ),
    ],
)
def test_what_the_driver_cannot_offer_is_refused(annotations: dict[str, str], count: int, message: str) -> None:
    with pytest.raises(DraRefused) as err:
        translate({GPU: str(count), CORES: "10"}, annotations)
    assert message in str(err.value)


@pytest.mark.parametrize(
    "annotations",
    [
        {keys.NVIDIA_VGPU_MODE: "hami-core,mig"},
        {keys.NVIDIA_VGPU_MODE: " , "},
        {keys.NVIDIA_NUMA_BIND: "false"},
    ],
)
def test_what_holds_by_itself_is_accepted(annotations: dict[str, str]) -> None:
    assert translate({GPU: "2", CORES: "10"}, annotations) is not None
    assert translate({GPU: "1", CORES: "10"}, {keys.NVIDIA_NUMA_BIND: "true"}) is not None


def test_an_unreadable_numa_bind_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="not a boolean"):
        translate({GPU: "2"}, {keys.NVIDIA_NUMA_BIND: "yes"})


# --- the CEL selects what the extender selects --------------------------------------------------------------------

_WORD = st.text(alphabet="abcAB019", min_size=1, max_size=4)
_NAME = st.lists(st.sampled_from(["NVIDIA", "A10", "A100", "Tesla", "V100", "T4", "-", " ", "PCIE", "x"]), max_size=5)


def _regex_of(selector: str) -> tuple[bool, re.Pattern[str]]:
    found = re.fullmatch(r'(!?)\(.*\)\.lowerAscii\(\)\.matches\((".*")\)', selector)
    assert found is not None, selector
    return found.group(1) == "!", re.compile(json.loads(found.group(2)))


def _cel_type_test(selector: str, product: str) -> bool:
    negated, pattern = _regex_of(selector)
    typed = product if product.startswith("NVIDIA") else "NVIDIA-" + product
    hit = pattern.search(typed.lower()) is not None
    return not hit if negated else hit


@PROPS
@given(
    product=_NAME.map("".join),
    items=st.lists(st.one_of(_WORD, _NAME.map(" ".join)), min_size=1, max_size=3),
    negate=st.booleans(),
)
def test_type_selectors_select_what_the_extender_selects(product: str, items: list[str], negate: bool) -> None:
    value = ",".join(items)
    key = keys.NVIDIA_NOUSE_GPUTYPE if negate else keys.NVIDIA_USE_GPUTYPE
    selector = type_selector(value, DRA, negate=negate)
    extender = VENDOR.selector({key: value}).type_ok(DeviceInfo(id="GPU-x", type=card_type(product)))
    if selector is None:
        assert extender
    else:
        assert _cel_type_test(selector, product) == extender, (selector, card_type(product))


@PROPS
@given(uuids=st.lists(st.text(min_size=0, max_size=6), max_size=4), card=st.text(max_size=6), negate=st.booleans())
def test_uuid_selectors_select_what_the_extender_selects(uuids: list[str], card: str, negate: bool) -> None:
    value = ",".join(u.replace(",", "") for u in uuids)
    selector = uuid_selector(value, DRA, negate=negate, field="f")
    key = keys.NVIDIA_NOUSE_GPUUUID if negate else keys.NVIDIA_USE_GPUUUID
    extender = Selector.from_annotations({key: value}, (keys.NVIDIA_USE_GPUUUID, keys.NVIDIA_NOUSE_GPUUUID))
    if selector is None:
        assert extender.uuid_ok(card)
        return
    found = re.fullmatch(r"(!?)\(?" + re.escape(ATTR) + r"\.uuid in (\[.*\])\)?", selector)
    assert found is not None, selector
    listed = json.loads(found.group(2))
    negated = found.group(1) == "!"
    assert ((card in listed) != negated) == extender.uuid_ok(card)


@PROPS
@given(st.text())
def test_a_cel_string_literal_reads_back_as_the_same_text(text: str) -> None:
    """JSON's string escapes are a subset of CEL's, so a literal that reads back as JSON reads back as CEL."""
    literal = cel_string(text)
    assert literal.startswith('"')
    assert literal.endswith('"')
    assert json.loads(literal) == text
    assert "\n" not in literal


def test_text_that_is_not_unicode_is_refused() -> None:
    with pytest.raises(InvalidInput, match="not valid Unicode"):
        cel_string("\ud800", "annotation x")
