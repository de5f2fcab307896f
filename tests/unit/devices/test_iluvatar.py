"""Iluvatar, one vendor per chip (webhook-bind-plugin-vendors.md §0.3, §7): keys, 256 MiB units, default cores 0,
the webhook's whole cores and ``SOL_CONTINER_NAME``, fit reasons, and a decision's annotations byte for byte."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from hami.config import default_device_config, parse_device_config
from hami.devices import vendors_from_config
from hami.devices.admission import ContainerEdit, PodContext
from hami.devices.base import MEM_PERCENTAGE_UNSET, ContainerRequest, Fitted, NodeInventory, Unfit
from hami.devices.iluvatar import CONTAINER_NAME_ENV, IluvatarVendor
from hami.errors import AnnotationError, ConfigError, QuantityError
from hami.protocol.objects import Container, Node, Pod, ResourceQuota
from hami.protocol.reasons import Reason
from hami.scheduling.admission import Admission, AdmissionSettings, admitters_for
from hami.scheduling.decide import Decision, decide, reserve
from hami.scheduling.request import SchedulingDefaults, prefilter
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.builders import ctx, gpu, table

CHIP = "MR-V100"
COUNT, MEM, CORE = f"iluvatar.ai/{CHIP}-vgpu", f"iluvatar.ai/{CHIP}.vMem", f"iluvatar.ai/{CHIP}.vCore"
FIELD = "containers[0](c)"


@pytest.fixture
def chip() -> IluvatarVendor:
    v = vendors_from_config(default_device_config())[CHIP]
    assert isinstance(v, IluvatarVendor)
    return v


def _container(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None, **extra: Any) -> Container:
    spec = {"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}, **extra}
    return msgspec.convert(spec, Container)


def _node(name: str, register: str) -> Node:
    return msgspec.convert(
        {"metadata": {"name": name, "annotations": {f"hami.io/node-{CHIP}-register": register}}}, Node
    )


@pytest.mark.parametrize("word", ["MR-V100", "MR-V50", "BI-V150", "BI-V100"])
def test_every_chip_of_the_chart_is_its_own_vendor_with_its_keys(word: str) -> None:
    v = vendors_from_config(default_device_config())[word]
    k = v.keys
    assert (k.register, k.handshake) == (f"hami.io/node-{word}-register", f"hami.io/node-handshake-{word}")
    assert (k.to_allocate, k.allocated) == (f"hami.io/{word}-devices-to-allocate", f"hami.io/{word}-devices-allocated")
    assert (k.lock, k.extra) == ("hami.io/mutex.lock", ())
    r = v.resources
    assert r.memory_factor == 256  # a vMem quota counts vMem units
    assert (r.count, r.memory, r.core) == (
        f"iluvatar.ai/{word}-vgpu",
        f"iluvatar.ai/{word}.vMem",
        f"iluvatar.ai/{word}.vCore",
    )


@pytest.mark.parametrize(
    ("limits", "requests", "expected"),
    [
        pytest.param({COUNT: 1}, {}, ContainerRequest(CHIP, 1, 0, 100, 0), id="count-only-whole-memory-no-cores"),
        pytest.param(
            {COUNT: 1, MEM: 4}, {}, ContainerRequest(CHIP, 1, 1024, MEM_PERCENTAGE_UNSET, 0), id="vmem-256-mib-units"
        ),
        pytest.param({COUNT: 1, CORE: 30}, {}, ContainerRequest(CHIP, 1, 0, 100, 30), id="cores-given"),
        pytest.param({}, {COUNT: 1, MEM: 2}, ContainerRequest(CHIP, 1, 512, MEM_PERCENTAGE_UNSET, 0), id="requests"),
        pytest.param(
            {COUNT: 1, MEM: 1}, {MEM: 8}, ContainerRequest(CHIP, 1, 256, MEM_PERCENTAGE_UNSET, 0), id="limits"
        ),
        pytest.param({COUNT: 2, CORE: 200}, {}, ContainerRequest(CHIP, 2, 0, 100, 100), id="webhook-whole-cores"),
        pytest.param({COUNT: 0, MEM: 4}, {}, None, id="zero-count"),
        pytest.param({"iluvatar.ai/MR-V50-vgpu": 1}, {}, None, id="another-chip"),
    ],
)
def test_parse_request(
    chip: IluvatarVendor, limits: dict[str, Any], requests: dict[str, Any], expected: ContainerRequest | None
) -> None:
    assert chip.parse_request(_container(limits, requests), FIELD) == expected


@pytest.mark.parametrize(
    ("limits", "field", "reason"),
    [
        pytest.param({COUNT: -1}, f"f.limits[{COUNT}]", "must not be negative", id="negative-count"),
        pytest.param({COUNT: "1.5"}, f"f.limits[{COUNT}]", "must be a whole number", id="fractional-count"),
        pytest.param(
            {COUNT: 1, MEM: 2**23}, f"f.limits[{MEM}]", "× 256 MiB exceeds the int32 range", id="vmem-over-int32"
        ),
        pytest.param(
            {COUNT: 1, CORE: 150},
            f"f.limits[{CORE}]",
            "cores are a percentage of one card and cannot exceed 100 (or be 100 × the card count)",
            id="cores-over-100",
        ),
        pytest.param(
            {COUNT: 3, CORE: 200},
            f"f.limits[{CORE}]",
            "cores are a percentage of one card and cannot exceed 100 (or be 100 × the card count)",
            id="cores-not-whole-cards",
        ),
    ],
)
def test_parse_request_rejects(chip: IluvatarVendor, limits: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(QuantityError) as info:
        chip.parse_request(_container(limits), "f")
    assert (info.value.field, info.value.reason) == (field, reason)


def test_inventory_is_the_legacy_string(chip: IluvatarVendor) -> None:
    assert chip.decode_inventory(Node()) is None
    inv = chip.decode_inventory(
        _node("n", "ilu-0,4,32768,100,MR-V100,0,true,0,hami-core:ilu-1,4,32768,100,MR-V100,1,false:")
    )
    assert inv == NodeInventory(
        (
            gpu("ilu-0", count=4, devmem=32768, type="MR-V100"),
            gpu("ilu-1", count=4, devmem=32768, type="MR-V100", numa=1, health=False),
        )
    )


@pytest.mark.parametrize(
    ("register", "problem"),
    [
        pytest.param("ilu-0,4,32768,100,MR-V100,0,true", "node annotation missing device separator", id="no-colon"),
        pytest.param("ilu-0,4,32768:", "unexpected field count 3 in node annotation", id="field-count"),
        pytest.param("ilu-0,x,32768,100,MR-V100,0,true:", "invalid count field", id="bad-count"),
    ],
)
def test_a_malformed_registration_quarantines_the_chip_on_that_node(
    chip: IluvatarVendor, register: str, problem: str
) -> None:
    with pytest.raises(AnnotationError, match=problem):
        chip.decode_inventory(_node("n", register))
    state = ClusterState(vendors_from_config(default_device_config()))
    node = state.upsert_node(_node("n", register))
    assert CHIP not in node.tables
    assert problem in node.problems[CHIP]
    assert f"hami.io/node-{CHIP}-register" in node.problems[CHIP]


def test_selector_reads_the_chips_uuid_keys(chip: IluvatarVendor) -> None:
    sel = chip.selector(
        {f"hami.io/use-{CHIP}-uuid": "a,b", f"hami.io/no-use-{CHIP}-uuid": "b", "hami.io/use-MR-V50-uuid": "z"}
    )
    assert [sel.uuid_ok(u) for u in ("a", "b", "c")] == [True, False, False]


def _fit(
    chip: IluvatarVendor, req: ContainerRequest, usage: dict[int, tuple[int, int, int]], **ann: str
) -> Fitted | Unfit:
    t = table(gpu("ilu-0", devmem=32768), gpu("ilu-1", index=1, devmem=32768), vendor=CHIP, usage=usage)
    return chip.fit(t, req, ctx(), chip.selector(ann))


@pytest.mark.parametrize(
    ("req", "usage", "annotations", "counts"),
    [
        pytest.param(
            ContainerRequest(CHIP, 1, 1024, 101, 0),
            {0: (1, 32000, 0), 1: (1, 32000, 0)},
            {},
            {Reason.CARD_INSUFFICIENT_MEMORY: 2},
            id="memory",
        ),
        pytest.param(
            ContainerRequest(CHIP, 1, 1024, 101, 50),
            {0: (1, 0, 60), 1: (1, 0, 80)},
            {},
            {Reason.CARD_INSUFFICIENT_CORE: 2},
            id="cores",
        ),
        pytest.param(
            ContainerRequest(CHIP, 1, 0, 100, 0),
            {0: (10, 0, 0), 1: (1, 4096, 0)},
            {},
            {Reason.CARD_TIME_SLICING_EXHAUSTED: 1, Reason.CARD_INSUFFICIENT_MEMORY: 1},
            id="slots",
        ),
        pytest.param(
            ContainerRequest(CHIP, 1, 256, 101, 100),
            {0: (1, 256, 0), 1: (1, 256, 0)},
            {},
            {Reason.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT: 2},
            id="exclusive",
        ),
        pytest.param(
            ContainerRequest(CHIP, 1, 256, 101, 0),
            {0: (1, 256, 100), 1: (1, 256, 100)},
            {},
            {Reason.CARD_COMPUTE_UNITS_EXHAUSTED: 2},
            id="compute-units",
        ),
        pytest.param(
            ContainerRequest(CHIP, 1, 256, 101, 0),
            {},
            {f"hami.io/use-{CHIP}-uuid": "other"},
            {Reason.CARD_UUID_MISMATCH: 2},
            id="uuid",
        ),
        pytest.param(
            ContainerRequest(CHIP, 2, 256, 101, 0),
            {1: (10, 0, 0)},
            {},
            {Reason.CARD_TIME_SLICING_EXHAUSTED: 1, Reason.ALLOCATED_CARDS_INSUFFICIENT_REQUEST: 1},
            id="partial",
        ),
        pytest.param(ContainerRequest(CHIP, 3, 256, 101, 0), {}, {}, {Reason.NODE_INSUFFICIENT_DEVICE: 2}, id="count"),
    ],
)
def test_each_fit_reason(
    chip: IluvatarVendor,
    req: ContainerRequest,
    usage: dict[int, tuple[int, int, int]],
    annotations: dict[str, str],
    counts: dict[Reason, int],
) -> None:
    outcome = _fit(chip, req, usage, **annotations)
    assert isinstance(outcome, Unfit)
    assert dict(outcome.counts) == counts


# --- admission ---------------------------------------------------------------------------------------------------


def _admit(chip: IluvatarVendor, c: Container) -> tuple[bool, ContainerEdit]:
    edit = ContainerEdit()
    return chip.admitter().admit(c, FIELD, edit, PodContext("p", "ns")), edit


@pytest.mark.parametrize(
    ("limits", "requests", "env", "found", "edit"),
    [
        pytest.param({COUNT: 1}, {}, [], True, ContainerEdit(env={CONTAINER_NAME_ENV: "c"}), id="one-card"),
        pytest.param(
            {COUNT: 2, CORE: 30},
            {},
            [],
            True,
            ContainerEdit(limits={CORE: "200"}, env={CONTAINER_NAME_ENV: "c"}),
            id="several-cards-whole-cores",
        ),
        pytest.param(
            {COUNT: 3},
            {},
            [{"name": CONTAINER_NAME_ENV, "value": "mine"}],
            True,
            ContainerEdit(limits={CORE: "300"}),
            id="own-env-kept",
        ),
        pytest.param({}, {COUNT: 1}, [], False, ContainerEdit(), id="requests-only-not-found"),
    ],
)
def test_admission(
    chip: IluvatarVendor,
    limits: dict[str, Any],
    requests: dict[str, Any],
    env: list[dict[str, str]],
    found: bool,
    edit: ContainerEdit,
) -> None:
    assert _admit(chip, _container(limits, requests, env=env)) == (found, edit)


def test_the_webhook_patches_whole_cores_and_the_container_name() -> None:
    vendors = vendors_from_config(default_device_config())
    admission = Admission(
        vendors=vendors,
        admitters=admitters_for(vendors),
        defaults=SchedulingDefaults(),
        settings=AdmissionSettings("hami-scheduler", True),
    )
    raw = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team"},
        "spec": {"containers": [{"name": "train", "resources": {"limits": {COUNT: "2", CORE: "50"}}}]},
    }
    verdict = admission.review(raw)
    assert verdict.allowed
    assert list(verdict.patch) == [
        {"op": "replace", "path": "/spec/containers/0/resources/limits/iluvatar.ai~1MR-V100.vCore", "value": "200"},
        {"op": "add", "path": "/spec/containers/0/env", "value": [{"name": CONTAINER_NAME_ENV, "value": "train"}]},
        {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"},
    ]


# --- a decision, end to end through the pure core ---------------------------------------------------------------


def test_a_decision_writes_hamis_annotations_byte_for_byte() -> None:
    vendors = vendors_from_config(default_device_config())
    state = ClusterState(vendors)
    devices = "".join(f"ilu-{i},4,32768,100,MR-V100,0,true,{i},hami-core:" for i in range(3))
    state.upsert_node(_node("n1", devices))
    raw = {
        "metadata": {"name": "p", "namespace": "team", "uid": "u1"},
        "spec": {
            "initContainers": [{"name": "init"}],
            "containers": [
                {"name": "a", "resources": {"limits": {COUNT: 1, MEM: 8, CORE: 25}}},
                {"name": "b", "resources": {"limits": {COUNT: 2, CORE: 200}}},
            ],
        },
    }
    req = prefilter(msgspec.convert(raw, Pod), vendors, SchedulingDefaults())
    decision = decide(state, req, ["n1"], now=1700000000)
    assert decision.node == "n1"
    # Spread: a takes ilu-0; b's whole cards (vCore 200 = 100 each) cannot share it, so it takes ilu-1 and ilu-2.
    value = ";ilu-0,MR-V100,2048,25:;ilu-1,MR-V100,32768,100:ilu-2,MR-V100,32768,100:;"
    a = decision.annotations
    assert (a[f"hami.io/{CHIP}-devices-to-allocate"], a[f"hami.io/{CHIP}-devices-allocated"]) == (value, value)
    assert set(a) == {
        "hami.io/vgpu-node",
        "hami.io/vgpu-time",
        f"hami.io/{CHIP}-devices-to-allocate",
        f"hami.io/{CHIP}-devices-allocated",
    }


def test_a_vmem_quota_counts_vmem_units() -> None:
    vendors = vendors_from_config(default_device_config())
    state = ClusterState(vendors)
    state.upsert_node(_node("n1", "ilu-0,4,32768,100,MR-V100,0,true,0,hami-core:"))
    state.quotas.upsert(
        msgspec.convert(
            {"metadata": {"namespace": "team", "name": "q"}, "spec": {"hard": {f"limits.{MEM}": "16"}}}, ResourceQuota
        )
    )

    def place(uid: str, units: int) -> Decision:
        raw = {
            "metadata": {"name": uid, "namespace": "team", "uid": uid},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {COUNT: 1, MEM: units}}}]},
        }
        req = prefilter(msgspec.convert(raw, Pod), vendors, SchedulingDefaults())
        decision = decide(state, req, ["n1"], now=1700000000)
        reserve(state, req, decision)
        return decision

    assert place("u1", 16).node == "n1"  # 16 units = 4096 MiB: exactly the quota
    refused = place("u2", 1)
    assert refused.node is None
    assert dict(refused.rejected["n1"].counts) == {Reason.RESOURCE_QUOTA_NOT_FIT: 1}


def _chips(*words: str) -> str:
    rows = [
        f"- {{chipName: c{i}, commonWord: '{w}', resourceCountName: r{i}, resourceMemoryName: m{i}, "
        f"resourceCoreName: k{i}}}"
        for i, w in enumerate(words)
    ]
    return "iluvatars:\n" + "\n".join(rows) + "\n"


@pytest.mark.parametrize(
    ("words", "field", "reason"),
    [
        pytest.param(("MR V100",), "iluvatars[0].commonWord", "must be 1 to 43 letters", id="space"),
        pytest.param(("a/b",), "iluvatars[0].commonWord", "names the chip's annotation keys", id="slash"),
        pytest.param(("X" * 44,), "iluvatars[0].commonWord", "must be 1 to 43 letters", id="too-long"),
        pytest.param(("A", "B", "A"), "iluvatars", "commonWord 'A' is given twice", id="repeated"),
    ],
)
def test_a_chips_common_word_must_make_annotation_keys(words: tuple[str, ...], field: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_device_config(_chips(*words), "device-config.yaml")
    assert info.value.field == field
    assert reason in info.value.reason


def test_configured_chips_become_vendors() -> None:
    config = parse_device_config(_chips("X-1", "y.2"), "device-config.yaml").config
    vendors = vendors_from_config(config)
    assert [v for v in vendors if v in ("X-1", "y.2", CHIP)] == ["X-1", "y.2"]
    assert vendors["y.2"].resources.count == "r1"
    assert vendors["y.2"].keys.allocated == "hami.io/y.2-devices-allocated"
