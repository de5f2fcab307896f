"""The read-only listing behind ``hami top``/``hami explain``, and a credential source asked again after a 401."""

from __future__ import annotations

from hami.k8s.client import KubeClient
from hami.k8s.config import KubeConfig
from hami.k8s.credentials import CredentialSource
from hami.k8s.listing import list_cluster
from hami.k8s.resources import NODES
from hami.protocol.objects import Node
from tests.unit.k8s.conftest import FakeClock, FakeSleep
from tests.unit.k8s.fakeapi import FakeApi, Reply, obj, status_body


def listing(*items: dict[str, object]) -> dict[str, object]:
    return {"kind": "List", "metadata": {"resourceVersion": "5"}, "items": list(items)}


async def test_nodes_live_pods_and_quotas_are_listed(api: FakeApi, client: KubeClient) -> None:
    api.script("GET", "/api/v1/nodes", Reply(body=listing(obj("n1", "1"))))
    api.script("GET", "/api/v1/pods", Reply(body=listing(obj("p1", "2", namespace="ml"))))
    api.script("GET", "/api/v1/resourcequotas", Reply(body=listing(obj("q", "3", namespace="ml"))))
    got = await list_cluster(client)
    assert [n.metadata.name for n in got.nodes] == ["n1"]
    assert [p.key for p in got.pods] == ["ml/p1"]
    assert [q.metadata.name for q in got.quotas] == ["q"]
    assert got.notes == []
    (pods,) = api.calls("GET", "/api/v1/pods")
    assert pods.query["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"


async def test_quotas_that_may_not_be_read_are_a_note(api: FakeApi, client: KubeClient) -> None:
    api.script("GET", "/api/v1/nodes", Reply(body=listing()))
    api.script("GET", "/api/v1/pods", Reply(body=listing()))
    api.script("GET", "/api/v1/resourcequotas", Reply(403, status_body(403, "forbidden", "Forbidden")))
    got = await list_cluster(client)
    assert got.quotas == []
    assert got.notes == ["resource quotas not readable with these credentials; quota limits are not applied"]


DRA = "/apis/resource.k8s.io/v1"


async def test_dra_classes_slices_and_claims_are_listed_too(api: FakeApi, client: KubeClient) -> None:
    for path in ("/api/v1/nodes", "/api/v1/pods", "/api/v1/resourcequotas"):
        api.script("GET", path, Reply(body=listing()))
    api.script("GET", f"{DRA}/deviceclasses", Reply(body=listing(obj("gpu.nvidia.com", "4", namespace=""))))
    api.script("GET", f"{DRA}/resourceslices", Reply(body=listing(obj("n1-gpu.nvidia.com", "5", namespace=""))))
    api.script("GET", f"{DRA}/resourceclaims", Reply(body=listing(obj("c1", "6", namespace="ml"))))
    got = await list_cluster(client)
    assert [c.metadata.name for c in got.classes] == ["gpu.nvidia.com"]
    assert [s.metadata.name for s in got.slices] == ["n1-gpu.nvidia.com"]
    assert [(c.metadata.namespace, c.metadata.name) for c in got.claims] == [("ml", "c1")]
    assert got.notes == []


async def test_dra_objects_not_served_are_left_out_and_not_readable_are_a_note(
    api: FakeApi, client: KubeClient
) -> None:
    for _ in range(2):
        for path in ("/api/v1/nodes", "/api/v1/pods", "/api/v1/resourcequotas"):
            api.script("GET", path, Reply(body=listing()))
    api.script("GET", f"{DRA}/deviceclasses", Reply(404, status_body(404, "the server could not find it", "NotFound")))
    served = await list_cluster(client)
    assert (served.classes, served.slices, served.claims, served.notes) == ([], [], [], [])

    api.script("GET", f"{DRA}/deviceclasses", Reply(body=listing(obj("gpu.nvidia.com", "4", namespace=""))))
    api.script("GET", f"{DRA}/resourceslices", Reply(403, status_body(403, "forbidden", "Forbidden")))
    refused = await list_cluster(client)
    assert (refused.classes, refused.slices, refused.claims) == ([], [], [])  # all three or none
    assert refused.notes == [
        "DRA objects (resource.k8s.io deviceclasses, resourceslices, resourceclaims) not readable with these "
        "credentials; what DRA claims hold is not shown"
    ]


class Rotating(CredentialSource):
    def __init__(self) -> None:
        self.tokens = ["stale", "fresh"]
        self.invalidated = 0

    def token(self) -> str | None:
        return self.tokens[min(self.invalidated, 1)]

    def invalidate(self) -> None:
        self.invalidated += 1


async def test_a_401_asks_the_credential_source_once_more(api: FakeApi, clock: FakeClock, sleep: FakeSleep) -> None:
    api.script("GET", "/api/v1/nodes/n1", Reply(401, status_body(401, "Unauthorized", "Unauthorized")), Reply(body={}))
    source = Rotating()
    async with KubeClient(KubeConfig(server=api.url, credential=source), clock=clock, sleep=sleep) as kube:
        await kube.get(NODES, "n1", type=Node)
    assert [r.headers["authorization"] for r in api.calls("GET")] == ["Bearer stale", "Bearer fresh"]
    assert source.invalidated == 1
