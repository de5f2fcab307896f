"""DRA mode's claim controller (``hami.server.draclaims``) against a scripted API server over HTTP: one create per
claim, owned by the pod; AlreadyExists settled by the owner's UID; passing failures sent again after a pause; the
Warning Events and the ``hami_dra_claims_created_total`` counter. Events go to a ``MemoryCluster``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import msgspec
import pytest
from prometheus_client import CollectorRegistry

from hami.errors import InvalidInput
from hami.k8s.client import ClientSettings, KubeClient
from hami.k8s.config import KubeConfig
from hami.k8s.events import EventRecorder
from hami.k8s.memory import MemoryCluster
from hami.k8s.tasks import Supervisor
from hami.protocol.dra import ResourceClaim
from hami.protocol.objects import Pod
from hami.server.draclaims import RESULTS, ClaimController, ClaimControllerSettings
from tests.unit.k8s.fakeapi import FakeApi, Reply, serve, status_body

NS = "team-a"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims"
GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}


def pod(name: str = "web", uid: str = "uid-web", claims: tuple[str, ...] = ("web-main-x2b4z",), **spec: Any) -> Pod:
    requests = {c: {"container": "main", "section": "containers", "resources": GPU} for c in claims}
    raw = {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid,
            "labels": {"hami.io/dra": "true"},
            "annotations": {"hami.io/dra-requests": json.dumps(requests)},
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{"name": "main"}],
            "resourceClaims": [{"name": f"hami-{i}", "resourceClaimName": c} for i, c in enumerate(claims)],
            **spec,
        },
    }
    return msgspec.convert(raw, type=Pod)


def translate(request: Mapping[str, Any]) -> Mapping[str, Any]:
    if "nvidia.com/gpu" not in request.get("resources", {}):
        raise InvalidInput("resources", request.get("resources"), "asks for no nvidia.com/gpu")
    return {"devices": {"requests": [{"name": "gpu"}]}}


def claim_json(name: str, owner_uid: str | None) -> dict[str, Any]:
    owners = [] if owner_uid is None else [{"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": owner_uid,
                                            "controller": True}]  # fmt: skip
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "ownerReferences": owners}}


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


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


class Rig:
    def __init__(self, client: KubeClient, leader: bool = True) -> None:
        self.memory = MemoryCluster()
        self.events = EventRecorder(self.memory, "hami-scheduler")
        self.registry = CollectorRegistry()
        self.sleeps = Sleeps()
        self.leader = leader
        self.controller = ClaimController(
            client,
            self.events,
            translate,
            "hami-scheduler",
            self.registry,
            is_leader=lambda: self.leader,
            settings=ClaimControllerSettings(attempts=3, backoff=0.5),
            sleep=self.sleeps,
        )
        self.tasks = Supervisor()
        self.controller._tasks = self.tasks  # what run() does first

    async def settle(self) -> None:
        await self.tasks.drain()
        await self.events.flush()

    def count(self, result: str) -> float:
        value = self.registry.get_sample_value("hami_dra_claims_created_total", {"result": result})
        return value or 0.0

    def counts(self) -> dict[str, float]:
        return {r: self.count(r) for r in RESULTS if self.count(r)}


async def test_a_pods_claim_is_created_once_owned_by_it(api: FakeApi, client: KubeClient) -> None:
    api.script("POST", CLAIMS, Reply(201, claim_json("web-main-x2b4z", "uid-web")))
    rig = Rig(client)
    rig.controller.pod_seen(pod(), deleted=False)
    await rig.settle()
    rig.controller.pod_seen(pod(), deleted=False)  # the pod's later updates: nothing more to write
    await rig.settle()
    [call] = api.calls("POST", CLAIMS)
    body = json.loads(call.body)
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "uid-web", "controller": True,
         "blockOwnerDeletion": True}
    ]  # fmt: skip
    assert body["spec"] == {"devices": {"requests": [{"name": "gpu"}]}}
    assert rig.counts() == {"created": 1}
    assert rig.memory.events == []


async def test_already_exists_as_the_pods_is_done_with_one_read(api: FakeApi, client: KubeClient) -> None:
    api.script("POST", CLAIMS, Reply(409, status_body(409, "already exists", "AlreadyExists")))
    api.script("GET", f"{CLAIMS}/web-main-x2b4z", Reply(200, claim_json("web-main-x2b4z", "uid-web")))
    rig = Rig(client)
    rig.controller.pod_seen(pod(), deleted=False)
    await rig.settle()
    assert rig.counts() == {"exists": 1}
    assert rig.memory.events == []


@pytest.mark.parametrize("owner", [pytest.param("uid-someone-else", id="another-owner"), pytest.param(None, id="none")])
async def test_already_exists_as_anothers_is_a_warning_never_adopted(
    api: FakeApi, client: KubeClient, owner: str | None
) -> None:
    api.script("POST", CLAIMS, Reply(409, status_body(409, "already exists", "AlreadyExists")))
    api.script("GET", f"{CLAIMS}/web-main-x2b4z", Reply(200, claim_json("web-main-x2b4z", owner)))
    rig = Rig(client)
    rig.controller.pod_seen(pod(), deleted=False)
    await rig.settle()
    rig.controller.pod_seen(pod(), deleted=False)
    await rig.settle()
    assert rig.counts() == {"conflict": 1}
    [event] = rig.memory.events
    assert (event.involved.name, event.type, event.reason) == ("web", "Warning", "DRAClaimConflict")
    holder = "no owner" if owner is None else f"Pod x (uid {owner})"
    assert event.message == (
        f"claim web-main-x2b4z already exists, owned by {holder}, not by this pod: hami does not adopt it; "
        "delete the claim or recreate the pod"
    )
    assert len(api.calls("POST", CLAIMS)) == 1
    assert [c.method for c in api.requests if c.method not in ("POST", "GET")] == []  # nothing patched or deleted


async def test_a_claim_the_watch_shows_as_anothers_is_reported_without_a_write(
    api: FakeApi, client: KubeClient
) -> None:
    rig = Rig(client)
    rig.controller.claim_seen(msgspec.convert(claim_json("web-main-x2b4z", "uid-other"), type=ResourceClaim), False)
    rig.controller.pod_seen(pod(), deleted=False)
    await rig.settle()
    rig.controller.pod_seen(pod(), deleted=False)
    await rig.settle()
    assert api.calls("POST", CLAIMS) == []
    assert [(e.involved.name, e.reason, e.count) for e in rig.memory.events] == [("web", "DRAClaimConflict", 1)]
    assert rig.counts() == {"conflict": 1}


@pytest.mark.parametrize("status", [503, 429, 500])
async def test_a_passing_failure_is_sent_again_after_a_pause(api: FakeApi, client: KubeClient, status: int) -> None:
    api.script(
        "POST",
        CLAIMS,
        Reply(status, status_body(status, "busy")),
        Reply(201, claim_json("web-main-x2b4z", "uid-web")),
    )
    rig = Rig(client)
    rig.controller.pod_seen(pod(), deleted=False)
    await rig.settle()
    assert len(api.calls("POST", CLAIMS)) == 2
    assert rig.counts() == {"created": 1}
    assert len(rig.sleeps.delays) == 1
    assert 0.5 <= rig.sleeps.delays[0] <= 0.75


async def test_a_create_refused_for_good_is_a_warning_and_not_sent_again(api: FakeApi, client: KubeClient) -> None:
    api.script("POST", CLAIMS, Reply(422, status_body(422, "spec.devices.requests[0].exactly.count: Invalid value")))
    rig = Rig(client)
    rig.controller.pod_seen(pod(), deleted=False)
    await rig.settle()
    rig.controller.pod_seen(pod(), deleted=False)
    await rig.settle()
    assert len(api.calls("POST", CLAIMS)) == 1
    assert rig.counts() == {"failed": 1}
    [event] = rig.memory.events
    assert event.reason == "DRAClaimFailed"
    assert event.message == (
        "claim web-main-x2b4z could not be created: spec.devices.requests[0].exactly.count: Invalid value"
    )


async def test_passing_failures_give_up_after_the_attempts(api: FakeApi, client: KubeClient) -> None:
    api.script("POST", CLAIMS, *(Reply(503, status_body(503, "down")) for _ in range(3)))
    rig = Rig(client)
    rig.controller.pod_seen(pod(), deleted=False)
    await rig.settle()
    assert len(api.calls("POST", CLAIMS)) == 3
    assert rig.sleeps.delays[1] >= 1.0  # doubled
    assert rig.counts() == {"failed": 1}


async def test_a_request_that_does_not_translate_is_a_warning_naming_field_and_value(
    api: FakeApi, client: KubeClient
) -> None:
    bad = pod()
    bad.metadata.annotations["hami.io/dra-requests"] = json.dumps({"web-main-x2b4z": {"resources": {"x.io/y": "1"}}})
    rig = Rig(client)
    rig.controller.pod_seen(bad, deleted=False)
    await rig.settle()
    assert api.calls("POST", CLAIMS) == []
    assert rig.counts() == {"refused": 1}
    [event] = rig.memory.events
    assert event.reason == "DRAClaimRefused"
    assert event.message == 'claim web-main-x2b4z: resources: asks for no nvidia.com/gpu (got {"x.io/y": "1"})'


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"nodeName": "n1"}, id="bound"),
        pytest.param({"schedulerName": "default-scheduler"}, id="other-scheduler"),
    ],
)
async def test_pods_not_served_cost_nothing(api: FakeApi, client: KubeClient, changes: dict[str, Any]) -> None:
    rig = Rig(client)
    rig.controller.pod_seen(pod(**changes), deleted=False)
    await rig.settle()
    assert api.requests == []


async def test_a_follower_writes_nothing(api: FakeApi, client: KubeClient) -> None:
    rig = Rig(client, leader=False)
    rig.controller.pod_seen(pod(), deleted=False)
    await rig.settle()
    assert api.requests == []


async def test_a_deleted_claim_of_a_waiting_pod_is_created_again(api: FakeApi, client: KubeClient) -> None:
    api.script(
        "POST",
        CLAIMS,
        Reply(201, claim_json("web-main-x2b4z", "uid-web")),
        Reply(201, claim_json("web-main-x2b4z", "uid-web")),
    )
    waiting = pod()
    rig = Rig(client)
    rig.controller.pods = lambda: {f"{NS}/web": waiting}
    rig.controller.pod_seen(waiting, deleted=False)
    await rig.settle()
    gone = claim_json("web-main-x2b4z", "uid-web")
    gone["metadata"]["labels"] = {"hami.io/dra": "true"}
    gone["metadata"]["annotations"] = {"hami.io/dra-pod": "web"}
    rig.controller.claim_seen(msgspec.convert(gone, type=ResourceClaim), deleted=True)
    await rig.settle()
    assert len(api.calls("POST", CLAIMS)) == 2
    assert rig.counts() == {"created": 2}


async def test_a_pod_deleted_before_its_create_is_not_served(api: FakeApi, client: KubeClient) -> None:
    rig = Rig(client)
    replaced = pod(uid="uid-web-2")
    rig.controller.pods = lambda: {f"{NS}/web": replaced}
    rig.controller.pod_seen(pod(), deleted=False)
    await rig.settle()
    assert api.calls("POST", CLAIMS) == []


async def test_the_sweep_serves_the_pods_a_new_leader_finds_waiting(api: FakeApi, client: KubeClient) -> None:
    api.script("POST", CLAIMS, Reply(201, claim_json("web-main-x2b4z", "uid-web")))
    waiting = pod()
    rig = Rig(client)
    rig.controller.pods = lambda: {f"{NS}/web": waiting}
    runner = asyncio.create_task(rig.controller.run(rig.tasks))
    while not rig.sleeps.delays:
        await asyncio.sleep(0)
    runner.cancel()
    await rig.settle()
    assert len(api.calls("POST", CLAIMS)) == 1
