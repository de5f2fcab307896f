"""The claim controller's quota decision (``hami.scheduling.dra.claimquota``, ``QuotaBook.problem``): a recorded
request's demand as admission counts it, and claims created but not allocated yet counted as in use."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami.config import default_device_config
from hami.devices import vendors_from_config
from hami.devices.base import Vendor
from hami.errors import InvalidInput
from hami.protocol.objects import ObjectMeta, ResourceQuota, ResourceQuotaSpec
from hami.scheduling.dra.claimquota import PendingClaims, request_demand
from hami.scheduling.quota import QuotaBook

VENDORS: dict[str, Vendor] = vendors_from_config(default_device_config())
GPU, MEM, CORES = "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"


def entry(**resources: str) -> dict[str, object]:
    return {"container": "main", "section": "containers", "resources": resources, "annotations": {}}


def book(limit: int) -> QuotaBook:
    quotas = QuotaBook([MEM, CORES])
    quotas.upsert(
        ResourceQuota(ObjectMeta(name="q", namespace="team"), ResourceQuotaSpec(hard={f"limits.{MEM}": str(limit)}))
    )
    return quotas


def test_a_requests_demand_is_memory_and_cores_times_the_device_count() -> None:
    assert request_demand(entry(**{GPU: "2", MEM: "3000", CORES: "30"}), VENDORS) == {MEM: 6000, CORES: 60}


def test_a_request_for_no_device_demands_nothing() -> None:
    assert request_demand(entry(cpu="1"), VENDORS) == {}


def test_an_unreadable_entry_names_the_field() -> None:
    with pytest.raises(InvalidInput, match=r"entry\.section"):
        request_demand({"container": "main", "section": "sidecars", "resources": {}, "annotations": {}}, VENDORS)


def test_pending_claims_count_as_in_use_until_dropped() -> None:
    pending = PendingClaims()
    pending.add("team/a", "team", "uid-1", {MEM: 3000})
    pending.add("team/b", "team", "uid-2", {MEM: 3000})
    pending.add("other/c", "other", "uid-3", {MEM: 9000})
    quotas = book(8000)
    assert quotas.problem("team", {MEM: 2000}, {}, pending.used("team")) is None
    problem = quotas.problem("team", {MEM: 3000}, {}, pending.used("team"), asker="the pod's claims ask")
    assert problem == (
        f"namespace team has 6000 of {MEM} in use, the pod's claims ask for 3000 more, the limit is 8000"
    )
    pending.drop(["team/a"])
    pending.drop_pod("uid-2")
    assert pending.used("team") == {}
    assert pending.used("other") == {MEM: 9000}


def test_the_problem_reads_the_books_usage_and_the_memory_factor() -> None:
    quotas = book(1000)
    quotas.add_usage("team", {MEM: 1500})
    assert quotas.problem("team", {MEM: 400}, {MEM: 2}) is None  # limit 1000 x factor 2
    assert quotas.problem("team", {MEM: 600}, {MEM: 2}) == (
        f"namespace team has 1500 of {MEM} in use, the pod asks for 600 more, the limit is 2000"
    )
    assert quotas.problem("unlimited", {MEM: 10**9}, {}) is None


def test_a_pods_claims_are_dropped_with_it_and_only_its_own() -> None:
    """``drop_pod`` (called for every pod deletion) finds the pod's claims by its index, and a claim added again for
    another pod belongs to that pod only."""
    pending = PendingClaims()
    pending.add("team/a", "team", "uid-1", {MEM: 1000})
    pending.add("team/b", "team", "uid-1", {MEM: 1000})
    pending.add("team/a", "team", "uid-2", {MEM: 500})
    pending.drop_pod("uid-1")
    assert pending.claims == {"team/a": ("team", "uid-2", {MEM: 500})}
    pending.drop_pod("uid-2")
    pending.drop_pod("uid-unknown")
    assert (pending.claims, pending.by_pod) == ({}, {})


_STEPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            st.sampled_from(["a/x", "a/y", "b/x", "b/z"]),
            st.sampled_from(["uid-1", "uid-2"]),
            st.dictionaries(st.sampled_from([MEM, CORES]), st.integers(0, 50)),
        ),
        st.tuples(st.just("drop"), st.sampled_from(["a/x", "a/y", "b/x", "b/z", "c/none"])),
        st.tuples(st.just("drop_pod"), st.sampled_from(["uid-1", "uid-2", "uid-3"])),
    ),
    max_size=30,
)


@given(_STEPS)
def test_the_running_sums_and_the_pod_index_equal_a_recount(steps: list[tuple[object, ...]]) -> None:
    """``used`` and ``by_pod`` are kept as claims come and go; whatever the order, they equal a recount."""
    pending = PendingClaims()
    for step in steps:
        if step[0] == "add":
            key, uid, amounts = str(step[1]), str(step[2]), step[3]
            assert isinstance(amounts, dict)
            pending.add(key, key.split("/", maxsplit=1)[0], uid, amounts)
        elif step[0] == "drop":
            pending.drop([str(step[1])])
        else:
            pending.drop_pod(str(step[1]))
    for namespace in ("a", "b", "c"):
        recount: dict[str, int] = {}
        for ns, _, amounts in pending.claims.values():
            for resource, amount in amounts.items():
                if ns == namespace and amount:
                    recount[resource] = recount.get(resource, 0) + amount
        assert pending.used(namespace) == recount
    by_pod: dict[str, set[str]] = {}
    for key, (_, uid, _) in pending.claims.items():
        by_pod.setdefault(uid, set()).add(key)
    assert pending.by_pod == by_pod
