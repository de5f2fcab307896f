"""PodGroups (docs/gangs.md): the version read is the newest the cluster serves podgroups in (API discovery), and a
PodGroup of either kind gives its minimum and whether kube-scheduler gave up on it."""

from __future__ import annotations

import msgspec
import pytest

from hami.k8s.client import KubeClient
from hami.k8s.resources import Resource
from hami.protocol.podgroup import PodGroup, pod_group_state
from hami.server.podgroups import served_pod_groups
from tests.unit.k8s.fakeapi import FakeApi, Reply, status_body


def group_list(*versions: str) -> Reply:
    listed = [{"groupVersion": f"scheduling.k8s.io/{v}", "version": v} for v in versions]
    return Reply(body={"kind": "APIGroup", "name": "scheduling.k8s.io", "versions": listed})


def resources(*names: str) -> Reply:
    return Reply(body={"kind": "APIResourceList", "resources": [{"name": n, "namespaced": True} for n in names]})


async def test_the_newest_version_serving_podgroups_is_read(api: FakeApi, client: KubeClient) -> None:
    api.script("GET", "/apis/scheduling.k8s.io", group_list("v1", "v1beta1", "v1alpha3"))
    api.script("GET", "/apis/scheduling.k8s.io/v1", resources("priorityclasses"))
    api.script("GET", "/apis/scheduling.k8s.io/v1beta1", resources("podgroups", "podgroups/status", "workloads"))
    api.script("GET", "/apis/scheduling.k8s.io/v1alpha3", resources("podgroups"))

    found = await served_pod_groups(client, "scheduling.k8s.io")

    assert found == Resource("scheduling.k8s.io", "v1beta1", "podgroups", namespaced=True)


async def test_a_cluster_without_podgroups_is_not_watched(api: FakeApi, client: KubeClient) -> None:
    api.script("GET", "/apis/scheduling.k8s.io", group_list("v1"))
    api.script("GET", "/apis/scheduling.k8s.io/v1", resources("priorityclasses"))
    api.script("GET", "/apis/scheduling.x-k8s.io", Reply(404, status_body(404, "the server could not find it")))

    assert await served_pod_groups(client, "scheduling.k8s.io") is None
    assert await served_pod_groups(client, "scheduling.x-k8s.io") is None


def group(spec: object, status: object = None) -> PodGroup:
    return msgspec.convert({"metadata": {"name": "g"}, "spec": spec, "status": status or {}}, type=PodGroup)


@pytest.mark.parametrize(
    ("spec", "status", "expected"),
    [
        ({"schedulingPolicy": {"gang": {"minCount": 3}}}, {}, (3, False)),
        ({"schedulingPolicy": {"basic": {}}}, {}, (None, False)),
        ({"minMember": 2}, {}, (2, False)),
        ({"minMember": 0}, {}, (None, False)),
        ({"minMember": True}, {}, (None, False)),
        (
            {"schedulingPolicy": {"gang": {"minCount": 3}}},
            {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable"}]},
            (3, True),
        ),
        (
            {"schedulingPolicy": {"gang": {"minCount": 3}}},
            {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True"}]},
            (3, False),
        ),
    ],
)
def test_a_podgroup_gives_its_minimum_and_whether_it_failed(
    spec: object, status: object, expected: tuple[int | None, bool]
) -> None:
    assert pod_group_state(group(spec, status)) == expected
