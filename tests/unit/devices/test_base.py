"""The shared vocabulary of vendors: requests, selectors (scheduler-core.md §6.2 step 9, §6.11)."""

from __future__ import annotations

import pytest

from hami.devices.base import (
    MEM_PERCENTAGE_UNSET,
    ContainerRequest,
    Selector,
    parse_type_list,
    parse_uuid_list,
)
from tests.unit.scheduling.builders import A100, T4, gpu


@pytest.mark.parametrize(
    ("memreq", "pct", "devmem", "reserved"),
    [
        pytest.param(3000, MEM_PERCENTAGE_UNSET, 8192, 3000, id="absolute-memory"),
        pytest.param(2000, 50, 8192, 2000, id="absolute-memory-wins-over-percentage"),
        pytest.param(0, 10, 1280, 128, id="percentage-of-device-memory"),
        pytest.param(0, 100, 11264, 11264, id="whole-card-percentage"),
        pytest.param(0, 33, 1000, 330, id="percentage-truncates"),
        pytest.param(0, 0, 8192, 0, id="percentage-zero-reserves-nothing"),
        pytest.param(0, MEM_PERCENTAGE_UNSET, 8192, 0, id="nothing-given-reserves-nothing"),
    ],
)
def test_memory_on(memreq: int, pct: int, devmem: int, reserved: int) -> None:
    assert ContainerRequest("NVIDIA", 1, memreq, pct).memory_on(devmem) == reserved


def test_parse_type_list_splits_words_and_drops_blanks() -> None:
    assert parse_type_list(" , A100-SXM4 ,,Tesla T4,") == (("a100", "sxm4"), ("tesla", "t4"))
    assert parse_type_list(None) == ()
    assert parse_type_list("") == ()


def test_parse_uuid_list_trims_and_drops_blanks() -> None:
    assert parse_uuid_list(" GPU-a , ,GPU-b,") == frozenset({"GPU-a", "GPU-b"})
    assert parse_uuid_list(None) == frozenset()


@pytest.mark.parametrize(
    ("use", "nouse", "card", "ok"),
    [
        pytest.param("A100", "", A100, True, id="use-matches-whole-word"),
        pytest.param("A10", "", A100, False, id="use-A10-does-not-select-A100"),
        pytest.param("A10", "", "NVIDIA A10", True, id="use-A10-selects-A10"),
        pytest.param("a100", "", A100, True, id="case-insensitive"),
        pytest.param("Tesla T4", "", T4, True, id="multi-word-item-matches-a-run"),
        pytest.param("T4 Tesla", "", T4, False, id="multi-word-item-keeps-word-order"),
        pytest.param("SXM4-40", "", A100, False, id="partial-last-word-does-not-match"),
        pytest.param("V100,T4", "", T4, True, id="use-any-item-of-the-list"),
        pytest.param("V100, ,", "", T4, False, id="use-blank-items-ignored"),
        pytest.param("", "T4", T4, False, id="nouse-excludes"),
        pytest.param("", "T", T4, True, id="nouse-T-is-not-a-word-of-Tesla-T4"),
        pytest.param("", "A10", A100, True, id="nouse-A10-does-not-exclude-A100"),
        pytest.param("NVIDIA", "A100", A100, False, id="nouse-wins-over-use"),
    ],
)
def test_type_filters_match_whole_words(use: str, nouse: str, card: str, ok: bool) -> None:
    sel = Selector(use_types=parse_type_list(use), nouse_types=parse_type_list(nouse))
    assert sel.type_ok(gpu("GPU-0", type=card)) is ok


@pytest.mark.parametrize(
    ("modes", "device_mode", "ok"),
    [
        pytest.param(None, "mig", True, id="unrestricted"),
        pytest.param({"hami-core"}, "hami-core", True, id="exact-mode"),
        pytest.param({"hami-core"}, "mig", False, id="other-mode-refused"),
        pytest.param({"hami-core", "mig"}, "mig", True, id="any-listed-mode"),
        pytest.param({"hami"}, "hami-core", False, id="no-substring-match"),
        pytest.param({"hami-core"}, "", True, id="empty-device-mode-is-hami-core"),
        pytest.param({"mig"}, "", False, id="empty-device-mode-is-not-mig"),
    ],
)
def test_mode_filter_is_exact(modes: set[str] | None, device_mode: str, ok: bool) -> None:
    sel = Selector(modes=frozenset(modes) if modes is not None else None)
    assert sel.type_ok(gpu("GPU-0", mode=device_mode)) is ok


@pytest.mark.parametrize(
    ("use", "nouse", "uuid", "ok"),
    [
        pytest.param(set(), set(), "GPU-a", True, id="no-constraint"),
        pytest.param({"GPU-a"}, set(), "GPU-a", True, id="use-listed"),
        pytest.param({"GPU-a"}, set(), "GPU-ab", False, id="use-is-exact"),
        pytest.param(set(), {"GPU-a"}, "GPU-a", False, id="nouse-listed"),
        pytest.param(set(), {"GPU-a"}, "GPU-b", True, id="nouse-other"),
    ],
)
def test_uuid_filters(use: set[str], nouse: set[str], uuid: str, ok: bool) -> None:
    assert Selector(use_uuids=frozenset(use), nouse_uuids=frozenset(nouse)).uuid_ok(uuid) is ok
