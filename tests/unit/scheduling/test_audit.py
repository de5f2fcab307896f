"""The ledger against the API (``hami.scheduling.audit``): compare, confirm over two checks, repair."""

from __future__ import annotations

from hami.scheduling.audit import ApiDrift, DriftKind, compare_with_api, confirmed, repair
from hami.scheduling.state import ClusterState
from tests.unit.scheduling.builders import gpus, state
from tests.unit.scheduling.test_state import dev_usage, record


def ledger_with(*uids: str) -> ClusterState:
    s = state({"node-1": gpus(2)})
    for uid in uids:
        s.apply(record(uid), add=True)
    return s


def test_equal_ledger_and_api_have_no_differences() -> None:
    s = ledger_with("uid-1", "uid-2")
    api = {"uid-1": record("uid-1"), "uid-2": record("uid-2")}

    assert compare_with_api(s.pods, api, {}, pending=()) == []


def test_each_kind_of_difference_is_found_with_a_line_for_a_person() -> None:
    s = ledger_with("uid-gone", "uid-moved")
    api = {"uid-moved": record("uid-moved", "node-1", [("GPU-1", 5000, 50)]), "uid-new": record("uid-new")}
    versions = {"uid-moved": "41", "uid-new": "42"}

    drifts = compare_with_api(s.pods, api, versions, pending=())

    assert [(d.kind, d.uid, d.version) for d in drifts] == [
        (DriftKind.LEAKED, "uid-gone", ""),
        (DriftKind.CHANGED, "uid-moved", "41"),
        (DriftKind.MISSING, "uid-new", "42"),
    ]
    leaked, changed, missing = (d.describe() for d in drifts)
    assert leaked == (
        "leaked pod default/pod-gone (uid uid-gone): ledger charges GPU-0 (1000 MiB, 10 cores) on node-1; "
        "the API holds no devices (pod gone, finished, or without an allocation)"
    )
    assert "ledger charges GPU-0 (1000 MiB, 10 cores) on node-1; the API holds GPU-1 (5000 MiB, 50 cores)" in changed
    assert missing.startswith("missing pod default/pod-new (uid uid-new): ledger charges nothing; the API holds GPU-0")


def test_pending_reservations_are_never_compared() -> None:
    s = ledger_with("uid-reserved")
    api = {"uid-listed-before-the-watch": record("uid-listed-before-the-watch")}

    drifts = compare_with_api(s.pods, api, {}, pending={"uid-reserved", "uid-listed-before-the-watch"})

    assert drifts == []


def _leak() -> tuple[ClusterState, list[ApiDrift]]:
    s = ledger_with("uid-gone", "uid-kept")
    return s, compare_with_api(s.pods, {"uid-kept": record("uid-kept")}, {}, pending=())


def test_a_difference_counts_only_when_the_previous_check_found_it_unchanged() -> None:
    s, first = _leak()
    assert confirmed(frozenset(), first) == []

    second = compare_with_api(s.pods, {"uid-kept": record("uid-kept")}, {}, pending=())

    assert confirmed(frozenset(d.key for d in first), second) == second


def _changed(s: ClusterState, version: str) -> list[ApiDrift]:
    api = {"uid-p": record("uid-p", "node-1", [("GPU-1", 2000, 20)])}
    return compare_with_api(s.pods, api, {"uid-p": version}, pending=())


def test_a_difference_on_a_pod_whose_version_moved_between_two_checks_is_not_confirmed() -> None:
    s = ledger_with("uid-p")
    first = _changed(s, "10")

    second = _changed(s, "11")  # the pod was written again between the two lists

    assert [d.kind for d in second] == [DriftKind.CHANGED]
    assert confirmed(frozenset(d.key for d in first), second) == []


def test_a_difference_whose_ledger_record_moved_between_two_checks_is_not_confirmed() -> None:
    s = ledger_with("uid-p")
    first = _changed(s, "10")
    s.remove_pod("uid-p")  # the watch delivered another allocation meanwhile
    s.apply(record("uid-p", "node-1", [("GPU-0", 3000, 30)]), add=True)

    second = _changed(s, "10")

    assert [d.kind for d in second] == [DriftKind.CHANGED]
    assert confirmed(frozenset(d.key for d in first), second) == []


def test_repair_drops_a_leaked_record_and_frees_its_devices() -> None:
    s, drifts = _leak()

    applied = repair(s, drifts, pending=())

    assert applied == drifts
    assert set(s.pods) == {"uid-kept"}
    assert dev_usage(s) == [(1, 1000, 10), (0, 0, 0)]
    assert s.verify() == []


def test_repair_charges_a_missing_pod_and_replaces_a_changed_one() -> None:
    s = ledger_with("uid-moved")
    api = {"uid-moved": record("uid-moved", "node-1", [("GPU-1", 5000, 50)]), "uid-new": record("uid-new")}
    drifts = compare_with_api(s.pods, api, {}, pending=())

    repair(s, drifts, pending=())

    assert s.pods["uid-moved"].charges == api["uid-moved"].charges
    assert s.pods["uid-new"] == api["uid-new"]
    assert dev_usage(s) == [(1, 1000, 10), (1, 5000, 50)]
    assert s.verify() == []


def test_repair_leaves_a_pod_alone_when_it_became_pending_or_the_ledger_moved() -> None:
    s, drifts = _leak()
    s2, drifts2 = _leak()
    s2.remove_pod("uid-gone")
    s2.apply(record("uid-gone", "node-1", [("GPU-1", 700, 7)]), add=True)  # the watch delivered something newer

    assert repair(s, drifts, pending={"uid-gone"}) == []
    assert repair(s2, drifts2, pending=()) == []
    assert "uid-gone" in s.pods
    assert s2.pods["uid-gone"].charges[0].uuid == "GPU-1"
