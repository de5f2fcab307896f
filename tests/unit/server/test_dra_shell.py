"""The DRA shell (``hami.server.dra``): problem reports (log, Warning event, counter), the ``hami_dra_*`` gauges,
and the probe that decides whether the DRA watches can run (404 and 403: log once, release readiness, ask again).

The extender and its ledger are the real ones over a ``MemoryCluster`` (``tests/unit/server/support.py``); the
probe talks HTTP to the scripted API server of ``tests/unit/k8s/fakeapi.py``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from prometheus_client import CollectorRegistry, Counter

from hami.k8s.client import ClientSettings, KubeClient
from hami.k8s.config import KubeConfig
from hami.protocol.dra import ResourceClaim, ResourceSlice
from hami.protocol.kubeversion import parse_kube_version, server_profile
from hami.scheduling.dra import ProblemKind
from hami.server.dra import REPROBE_S, DraCollector, DraReports, DraWatches, dra_mode, event_reason
from tests.unit.k8s.fakeapi import FakeApi, Reply, serve, status_body
from tests.unit.server.support import NS, World, gpu_node, make_world, plain_pod

MIB = 1 << 20
DRIVER = "gpu.nvidia.com"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"


def resource_slice(node: str, uuids: list[str]) -> ResourceSlice:
    devices = [
        {
            "name": f"gpu-{i}",
            "allowMultipleAllocations": True,
            "attributes": {"uuid": {"string": uuid}},
            "capacity": {
                "memory": {"value": "24000Mi", "requestPolicy": {"default": "1Gi"}},
                "cores": {"value": "100", "requestPolicy": {"default": "100"}},
            },
        }
        for i, uuid in enumerate(uuids)
    ]
    raw = {
        "metadata": {"name": f"{node}-{DRIVER}", "uid": f"uid-slice-{node}", "resourceVersion": "1"},
        "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1}, "devices": devices},
    }
    return msgspec.convert(raw, type=ResourceSlice)


def claim(name: str, node: str, device: str, pod: str, memory: str = "20000Mi", cores: str = "40") -> ResourceClaim:
    raw: dict[str, Any] = {
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "1"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": DRIVER,
                            "pool": node,
                            "device": device,
                            "shareID": f"share-{name}",
                            "consumedCapacity": {"memory": memory, "cores": cores},
                        }
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}],
        },
    }
    return msgspec.convert(raw, type=ResourceClaim)


def counter() -> Counter:
    return Counter("hami_dra_problems_raised", "test", ["kind"], registry=CollectorRegistry())


def world_with_slice() -> World:
    """Node n1 registers GPU-n1-0 and GPU-n1-1; its slice publishes them and gpu-2, a UUID hami does not know."""
    world = make_world()
    world.add_node(gpu_node("n1"))
    world.add_pod(plain_pod("user"))
    world.extender.on_resource_slice(resource_slice("n1", ["GPU-n1-0", "GPU-n1-1", "GPU-elsewhere"]))
    return world


def test_event_reasons_are_camel_case_per_kind() -> None:
    reasons = {str(k): event_reason(str(k)) for k in ProblemKind}
    assert reasons["unknown-uuid"] == "DRAUnknownUuid"
    assert reasons["stale-allocation"] == "DRAStaleAllocation"
    assert reasons["unit-mismatch"] == "DRAUnitMismatch"
    assert all(r.startswith("DRA") and "-" not in r for r in reasons.values())
    assert len(set(reasons.values())) == len(reasons)


async def test_a_problem_is_logged_and_written_once_as_a_warning_event_on_its_claim(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = world_with_slice()
    unknown = claim("lost", "n1", "gpu-2", "user", memory="1Gi", cores="10")
    reports = DraReports(world.recorder, counter(), claims={f"{NS}/lost": unknown})
    caplog.set_level(logging.WARNING, logger="hami.dra")

    raised = world.extender.on_resource_claim(unknown)
    reports.problems(raised)
    reports.problems(raised)  # the same problem again (a later event re-derived it): nothing new
    reports.sweep(world.extender.dra_problems())

    assert [p.kind for p in raised] == [ProblemKind.UNKNOWN_UUID]
    await world.recorder.flush()
    [event] = world.cluster.events
    assert (event.involved.kind, event.involved.api_version) == ("ResourceClaim", "resource.k8s.io/v1")
    assert (event.involved.namespace, event.involved.name, event.involved.uid) == (NS, "lost", "uid-lost")
    assert (event.type, event.reason, event.component) == ("Warning", "DRAUnknownUuid", "hami-scheduler")
    assert "GPU-elsewhere" in event.message
    assert reports.raised.labels("unknown-uuid")._value.get() == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "hami.dra"]
    assert len(lines) == 1
    assert lines[0].startswith(f"DRA unknown-uuid: ResourceClaim {NS}/lost on node n1: ")


async def test_a_follower_logs_and_counts_a_problem_but_only_the_leader_writes_its_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = world_with_slice()
    unknown = claim("lost", "n1", "gpu-2", "user", memory="1Gi", cores="10")
    leading = False
    reports = DraReports(world.recorder, counter(), claims={f"{NS}/lost": unknown}, is_leader=lambda: leading)
    caplog.set_level(logging.WARNING, logger="hami.dra")

    reports.problems(world.extender.on_resource_claim(unknown))
    await world.recorder.flush()

    assert world.cluster.events == []
    assert reports.raised.labels("unknown-uuid")._value.get() == 1
    [line] = [r.getMessage() for r in caplog.records if r.name == "hami.dra"]
    assert line.startswith("DRA unknown-uuid:")
    leading = True
    other = claim("lost2", "n1", "gpu-2", "user", memory="2Gi", cores="10")
    reports.claims = {f"{NS}/lost2": other}
    reports.problems(world.extender.on_resource_claim(other))
    await world.recorder.flush()
    assert [(e.involved.name, e.reason) for e in world.cluster.events] == [("lost2", "DRAUnknownUuid")]


async def test_the_sweep_reports_problems_raised_by_pod_events_and_again_after_they_cleared(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = world_with_slice()
    held = claim("held", "n1", "gpu-0", "user")
    reports = DraReports(world.recorder, counter(), claims={f"{NS}/held": held})
    reports.problems(world.extender.on_resource_claim(held))
    assert reports.reported == set()

    world.remove_pod("user")  # the claim's only pod is gone: stale (the extender logs it)
    caplog.set_level(logging.WARNING, logger="hami.dra")
    reports.sweep(world.extender.dra_problems())
    assert [p.kind for p in reports.reported] == [ProblemKind.STALE_ALLOCATION]
    assert [r for r in caplog.records if r.name == "hami.dra"] == []  # not logged twice

    world.add_pod(plain_pod("user"))  # back (a new pod of the same name and UID): no longer stale
    world.extender.on_resource_claim(held)
    reports.sweep(world.extender.dra_problems())
    assert reports.reported == set()
    world.remove_pod("user")
    reports.sweep(world.extender.dra_problems())

    await world.recorder.flush()
    assert [(e.reason, e.count) for e in world.cluster.events] == [("DRAStaleAllocation", 2)]  # folded
    assert reports.raised.labels("stale-allocation")._value.get() == 2


async def test_new_warnings_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    world = world_with_slice()  # its devices default cores to the whole card
    reports = DraReports(world.recorder, counter())
    caplog.set_level(logging.WARNING, logger="hami.dra")
    reports.warnings(world.extender.dra_warnings())
    reports.warnings(world.extender.dra_warnings())
    lines = [r.getMessage() for r in caplog.records if r.name == "hami.dra"]
    assert len(lines) == 1
    assert lines[0].startswith(f"DRA cores-whole-card: ResourceSlice n1-{DRIVER}: ")


def test_the_gauges_show_what_claims_hold_per_card_with_the_device_labels_and_problems_by_kind() -> None:
    world = world_with_slice()
    world.extender.on_resource_claim(claim("held", "n1", "gpu-0", "user"))
    world.extender.on_resource_claim(claim("lost", "n1", "gpu-2", "user", memory="1Gi", cores="10"))
    registry = CollectorRegistry()
    extender = world.extender
    registry.register(DraCollector(lambda: world.state, extender.dra_problems, extender.dra_warnings, lambda: True))

    card = {"node": "n1", "device_uuid": "GPU-n1-0", "device_index": "0", "device_type": "NVIDIA-A100", "zone": "vGPU"}
    assert registry.get_sample_value("hami_dra_memory_held_bytes", card) == 20000 * MIB
    assert registry.get_sample_value("hami_dra_core_held_ratio", card) == 40
    assert registry.get_sample_value("hami_dra_shared_count", card) == 1
    assert registry.get_sample_value("hami_dra_claims", card) == 1
    assert registry.get_sample_value("hami_dra_memory_held_bytes", card | {"device_uuid": "GPU-n1-1"}) is None
    problems = {str(k): registry.get_sample_value("hami_dra_problems", {"kind": str(k)}) for k in ProblemKind}
    assert problems == {k: (1 if k == "unknown-uuid" else 0) for k in problems}
    assert registry.get_sample_value("hami_dra_warnings", {"kind": "cores-whole-card"}) == 1
    assert registry.get_sample_value("hami_dra_watching") == 1
    assert world.usage()["GPU-n1-0"] == (1, 20000, 40)  # charged in the ledger /filter reads


# --- the probe: is resource.k8s.io/v1 there? --------------------------------------------------------------


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
async def api() -> AsyncIterator[FakeApi]:
    fake = FakeApi()
    async with serve(fake.app) as url:
        fake.url = url
        yield fake


@pytest.fixture
async def client(api: FakeApi) -> AsyncIterator[KubeClient]:
    settings = ClientSettings(request_timeout=5, retry_jitter=0.0, max_retries=0)
    async with KubeClient(KubeConfig(server=api.url, token="t0ken"), settings) as kube:
        yield kube


EMPTY_LIST = {"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1", "metadata": {"resourceVersion": "7"}}


@pytest.mark.parametrize(
    ("status", "said"),
    [
        pytest.param(
            404,
            "not served: the API server has no resourceslices.resource.k8s.io (resource.k8s.io/v1, HTTP 404)",
            id="not-served",
        ),
        pytest.param(
            403,
            "not allowed: listing resourceslices.resource.k8s.io was refused (HTTP 403); hami's ClusterRole needs",
            id="forbidden",
        ),
    ],
)
async def test_an_api_that_is_not_there_is_logged_once_releases_readiness_and_is_asked_again(
    api: FakeApi, client: KubeClient, caplog: pytest.LogCaptureFixture, status: int, said: str
) -> None:
    api.script("GET", SLICES, Reply(status, status_body(status, "no")), Reply(status, status_body(status, "no")))
    api.script("GET", SLICES, Reply(200, EMPTY_LIST))
    api.script("GET", CLAIMS, Reply(200, EMPTY_LIST))
    api.script("GET", CLASSES, Reply(200, EMPTY_LIST))
    synced: list[bool] = []
    sleeps = Sleeps()
    watches = DraWatches(
        client, make_world().extender, DraReports(make_world().recorder, counter()), lambda: synced.append(True), sleeps
    )
    caplog.set_level(logging.WARNING, logger="hami.dra")

    await watches._until_served()

    assert sleeps.delays == [REPROBE_S, REPROBE_S]
    assert synced == [True, True]  # readiness released at once, not after the API appeared
    lines = [r.getMessage() for r in caplog.records if r.name == "hami.dra"]
    assert len(lines) == 1
    assert lines[0].startswith(f"DRA: {said}")
    assert "ResourceClaims are NOT counted" in lines[0]
    assert [r.query["limit"] for r in api.calls("GET", SLICES)] == ["1", "1", "1"]
    assert [r.path for r in api.calls("GET")][-2:] == [CLAIMS, CLASSES]


async def test_a_passing_failure_holds_readiness_and_asks_again_soon(api: FakeApi, client: KubeClient) -> None:
    api.script("GET", SLICES, Reply(503, status_body(503, "etcd is restarting")), Reply(200, EMPTY_LIST))
    api.script("GET", CLAIMS, Reply(200, EMPTY_LIST))
    api.script("GET", CLASSES, Reply(200, EMPTY_LIST))
    synced: list[bool] = []
    sleeps = Sleeps()
    world = make_world()
    watches = DraWatches(
        client, world.extender, DraReports(world.recorder, counter()), lambda: synced.append(True), sleeps
    )

    await watches._until_served()

    assert synced == []  # the watches will sync: readiness waits for them
    assert sleeps.delays == [1.0]


async def test_claims_refused_while_slices_are_readable_do_not_hold_readiness_either(
    api: FakeApi, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    api.script("GET", SLICES, Reply(200, EMPTY_LIST))
    api.script("GET", CLAIMS, Reply(403, status_body(403, "resourceclaims is forbidden")))
    api.script("GET", SLICES, Reply(200, EMPTY_LIST))
    api.script("GET", CLAIMS, Reply(200, EMPTY_LIST))
    api.script("GET", CLASSES, Reply(200, EMPTY_LIST))
    synced: list[bool] = []
    sleeps = Sleeps()
    world = make_world()
    reports = DraReports(world.recorder, counter())
    watches = DraWatches(client, world.extender, reports, lambda: synced.append(True), sleeps)
    caplog.set_level(logging.WARNING, logger="hami.dra")

    await watches._until_served()

    assert (synced, sleeps.delays) == ([True], [REPROBE_S])
    [line] = [r.getMessage() for r in caplog.records if r.name == "hami.dra"]
    assert "not allowed: listing resourceclaims.resource.k8s.io was refused (HTTP 403)" in line


@pytest.mark.parametrize(
    ("configured", "version", "mode"),
    [
        (True, "v1.37.2", "watch"),
        (True, None, "watch"),  # the version could not be read: the probe tells whether the API is served
        (True, "v1.33.4", "not watched: Kubernetes v1.33.4 has no resource.k8s.io/v1 (1.34+)"),
        (False, "v1.37.2", "off (dra.enabled is false or no driver is listed)"),
    ],
)
def test_dra_is_watched_when_configured_and_the_servers_release_has_the_api(
    configured: bool, version: str | None, mode: str
) -> None:
    server = None if version is None else server_profile(parse_kube_version(version))
    assert dra_mode(configured, server) == mode
