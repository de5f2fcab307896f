"""NVIDIA's admission rules on one container (the pod-level flow is tested in tests/unit/scheduling)."""

from __future__ import annotations

import msgspec
import pytest

from hami.config import default_device_config
from hami.devices.admission import ContainerEdit, CountInLimits, PodContext
from hami.devices.nvidia.admission import NvidiaAdmission, NvidiaAdmitter
from hami.errors import QuantityError
from hami.protocol.objects import Container


def container(limits: dict[str, str] | None = None, requests: dict[str, str] | None = None) -> Container:
    return msgspec.convert(
        {"name": "c", "resources": {"limits": limits or {}, "requests": requests or {}}}, type=Container
    )


def admit(settings: NvidiaAdmission, c: Container) -> tuple[bool, ContainerEdit]:
    edit = ContainerEdit()
    found = NvidiaAdmitter(settings).admit(c, "containers[0](c)", edit, PodContext())
    return found, edit


def test_settings_come_from_the_nvidia_config_with_hamis_defaults() -> None:
    settings = NvidiaAdmission.from_config(default_device_config().nvidia)
    assert settings == NvidiaAdmission()


@pytest.mark.parametrize(
    ("limits", "requests", "found", "edit"),
    [
        pytest.param({}, {}, False, ContainerEdit(), id="nothing asked: not found, no edit"),
        pytest.param(
            {"nvidia.com/gpu": "1"},
            {},
            True,
            ContainerEdit({"nvidia.com/gpucores": "100"}),
            id="count alone: exclusive",
        ),
        pytest.param(
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10"}, {}, True, ContainerEdit(), id="count and memory: shared"
        ),
        pytest.param(
            {"nvidia.com/gpumem-percentage": "100"},
            {},
            True,
            ContainerEdit({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}),
            id="a full percentage alone: one exclusive GPU",
        ),
        pytest.param(
            {"nvidia.com/gpucores": "0"},
            {},
            True,
            ContainerEdit({"nvidia.com/gpu": "1"}),
            id="zero cores still asks for a GPU",
        ),
    ],
)
def test_found_and_edits(limits: dict[str, str], requests: dict[str, str], found: bool, edit: ContainerEdit) -> None:
    assert admit(NvidiaAdmission(), container(limits, requests)) == (found, edit)


def test_no_memory_resource_configured_makes_any_count_exclusive() -> None:
    found, edit = admit(NvidiaAdmission(memory=""), container({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "5"}))
    assert found
    assert edit.limits == {"nvidia.com/gpucores": "100"}


def test_no_core_resource_configured_adds_no_cores() -> None:
    assert admit(NvidiaAdmission(cores=""), container({"nvidia.com/gpu": "1"})) == (True, ContainerEdit())


def test_environment_order_is_priority_then_policy() -> None:
    settings = NvidiaAdmission(gpu_core_policy="disable")
    _, edit = admit(
        settings, container({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "5", "nvidia.com/priority": "1"})
    )
    assert list(edit.env.items()) == [("CUDA_TASK_PRIORITY", "1"), ("GPU_CORE_UTILIZATION_POLICY", "disable")]


def test_priority_only_in_requests_sets_no_variable() -> None:
    _, edit = admit(NvidiaAdmission(), container({"nvidia.com/gpu": "1"}, {"nvidia.com/priority": "1"}))
    assert edit.env == {}


def test_percentage_errors_name_where_the_value_was() -> None:
    with pytest.raises(QuantityError) as caught:
        admit(NvidiaAdmission(), container({}, {"nvidia.com/gpumem-percentage": "101"}))
    assert str(caught.value) == (
        "containers[0](c).requests[nvidia.com/gpumem-percentage]: must be an integer between 0 and 100 (got '101')"
    )


def test_other_vendors_are_found_by_their_count_in_limits() -> None:
    dcu = CountInLimits("hygon.com/dcunum")
    assert dcu.admit(container({"hygon.com/dcunum": "1"}), "f", ContainerEdit(), PodContext())
    assert not dcu.admit(container({}, {"hygon.com/dcunum": "1"}), "f", ContainerEdit(), PodContext())
    assert not CountInLimits("").admit(container({"": "1"}), "f", ContainerEdit(), PodContext())
