"""The ledger's recount a slice of nodes at a time (the self-check's way) finds what the whole recount finds."""

from __future__ import annotations

from tests.unit.scheduling.builders import gpus, state
from tests.unit.scheduling.test_state import record


def test_the_recount_in_slices_finds_what_the_whole_recount_finds() -> None:
    names = [f"node-{n}" for n in range(7)]
    s = state({name: gpus(2) for name in names})
    for n, name in enumerate(names):
        s.apply(record(f"uid-{n}", name), add=True)
    assert s.verify() == []
    table = next(iter(s.nodes["node-4"].tables.values()))
    table.usedmem[0] += 512  # usage changed behind the ledger's back

    whole = s.verify()
    sliced = [line for start in range(0, 7, 3) for line in s.verify_nodes(names[start : start + 3])]

    assert whole == sliced + s.verify_rest()
    assert [line for part in s.verify_rest_sliced(2) for line in part] == s.verify_rest() == []
    assert len(whole) == 1
    assert whole[0].startswith("node-4/")
    assert s.verify_nodes(["no-such-node"]) == []


def test_the_quota_recount_in_slices_uses_the_records_of_its_start() -> None:
    """Records added between slices do not make the quota recount differ: it compares the records and the quota
    usage taken together at its start."""
    s = state({"node-1": gpus(2)})
    for n in range(5):
        s.apply(record(f"uid-{n}"), add=True)
    parts = s.verify_rest_sliced(2)
    assert next(parts) == []
    s.apply(record("uid-late"), add=True)  # the ledger moves on between two slices
    assert [line for part in parts for line in part] == []
    s.quotas.used["default"] = {"nvidia.com/gpumem": 1}  # usage changed behind the ledger's back
    assert any(line.startswith("quota usage") for line in s.verify_rest())
