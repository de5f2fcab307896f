"""DRA mode's claim plan (``hami.scheduling.dra.podclaims``): which pods are served, which claims each one needs
created, their bodies (owned by the pod from birth), and what is never adopted or never trusted."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec
import pytest

from hami.errors import InvalidInput
from hami.protocol.dra import OwnerReference
from hami.protocol.objects import Pod
from hami.scheduling.dra.podclaims import PodClaims, Refusal, claim_body, owned_by, plan, requests_of, served

SCHEDULER = "hami-scheduler"
REQUEST = {
    "container": "main",
    "section": "containers",
    "resources": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"},
}


def pod(
    requests: Mapping[str, Any] | str | None = None,
    claims: tuple[str, ...] = ("web-main-x2b4z",),
    **spec: Any,
) -> Pod:
    """A translated pod: it refers to ``claims`` by name and records ``requests`` (default: one per claim)."""
    recorded = dict.fromkeys(claims, REQUEST) if requests is None else requests
    raw = {
        "metadata": {
            "name": "web",
            "namespace": "team-a",
            "uid": "uid-web",
            "labels": {"hami.io/dra": "true"},
            "annotations": {"hami.io/dra-requests": recorded if isinstance(recorded, str) else json.dumps(recorded)},
        },
        "spec": {
            "schedulerName": SCHEDULER,
            "containers": [{"name": "main"}],
            "resourceClaims": [{"name": f"hami-{i}", "resourceClaimName": name} for i, name in enumerate(claims)],
            **spec,
        },
    }
    return msgspec.convert(raw, type=Pod)


def translate(request: Mapping[str, Any]) -> Mapping[str, Any]:
    """A stand-in translation: the spec says which container's request it came from."""
    resources = request.get("resources")
    if not isinstance(resources, dict) or "nvidia.com/gpu" not in resources:
        raise InvalidInput("resources", resources, "asks for no nvidia.com/gpu")
    return {"devices": {"requests": [{"name": "gpu", "from": request["container"]}]}}


def mine(uid: str = "uid-web", **extra: Any) -> OwnerReference:
    return OwnerReference(api_version="v1", kind="Pod", name="web", uid=uid, controller=True, **extra)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param({}, True, id="translated-pending-pod"),
        pytest.param({"schedulerName": "default-scheduler"}, False, id="another-scheduler"),
        pytest.param({"nodeName": "n1"}, False, id="already-bound"),
    ],
)
def test_only_unbound_pods_of_hamis_scheduler_are_served(changes: dict[str, Any], expected: bool) -> None:
    assert served(pod(**changes), SCHEDULER) is expected


def test_a_pod_without_the_label_or_the_annotation_or_terminating_is_not_served() -> None:
    unlabelled = pod()
    unlabelled.metadata.labels = {}
    assert not served(unlabelled, SCHEDULER)
    bare = pod()
    bare.metadata.annotations = {}
    assert not served(bare, SCHEDULER)
    leaving = pod()
    leaving.metadata.deletion_timestamp = "2026-11-29T08:00:00Z"
    assert not served(leaving, SCHEDULER)


def test_each_missing_claim_is_created_owned_by_the_pod_from_birth() -> None:
    work = plan(pod(), {}, translate)
    assert work.refused == ()
    assert work.foreign == ()
    [item] = work.create
    assert item.name == "web-main-x2b4z"
    assert item.body == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "web-main-x2b4z",
            "namespace": "team-a",
            "labels": {"hami.io/dra": "true"},
            "annotations": {"hami.io/dra-pod": "web"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": "web",
                    "uid": "uid-web",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"devices": {"requests": [{"name": "gpu", "from": "main"}]}},
    }


def test_a_claim_that_exists_as_the_pods_is_done_and_one_of_another_owner_is_foreign() -> None:
    two = pod(claims=("web-a-bbbbb", "web-b-ccccc", "web-c-ddddd"))
    existing = {"web-a-bbbbb": [mine()], "web-b-ccccc": [mine(uid="uid-other")]}
    work = plan(two, existing, translate)
    assert [i.name for i in work.create] == ["web-c-ddddd"]
    assert work.foreign == ("web-b-ccccc",)


def test_a_claim_without_any_owner_is_foreign_never_adopted() -> None:
    assert plan(pod(), {"web-main-x2b4z": []}, translate) == PodClaims(foreign=("web-main-x2b4z",))


def test_only_claims_both_referenced_and_recorded_are_hamis_to_create() -> None:
    recorded = {"web-main-x2b4z": REQUEST, "stale-entry-zzzzz": REQUEST}
    users_own = pod(recorded, claims=("web-main-x2b4z", "users-own-claim"))
    assert [i.name for i in plan(users_own, {}, translate).create] == ["web-main-x2b4z"]


def test_the_spec_is_re_translated_from_the_recorded_request_never_taken_from_the_annotation() -> None:
    forged = {"web-main-x2b4z": {**REQUEST, "spec": {"devices": {"requests": [{"name": "gpu", "count": 64}]}}}}
    [item] = plan(pod(forged), {}, translate).create
    assert item.body["spec"] == {"devices": {"requests": [{"name": "gpu", "from": "main"}]}}


def test_a_request_that_does_not_translate_is_refused_naming_the_claim_field_and_value() -> None:
    bogus = {"web-main-x2b4z": {"container": "main", "resources": {"example.com/fpga": "1"}}}
    work = plan(pod(bogus), {}, translate)
    assert work.create == ()
    assert work.refused == (
        Refusal(
            "web-main-x2b4z",
            'claim web-main-x2b4z: resources: asks for no nvidia.com/gpu (got {"example.com/fpga": "1"})',
        ),
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param("{not json", "not JSON", id="not-json"),
        pytest.param("[1, 2]", "must be a JSON object: claim name → request", id="a-list"),
        pytest.param('{"web-main-x2b4z": 3}', "must be a JSON object (container, section, resources)", id="entry"),
    ],
)
def test_an_unreadable_annotation_is_refused_naming_it(text: str, said: str) -> None:
    [refusal] = plan(pod(text), {}, translate).refused
    assert refusal.message.startswith("metadata.annotations[hami.io/dra-requests")
    assert said in refusal.message
    with pytest.raises(InvalidInput):
        requests_of(pod(text))


@pytest.mark.parametrize(
    ("owner", "expected"),
    [
        pytest.param(mine(), True, id="the-pod-by-uid"),
        pytest.param(mine(uid="uid-web-before"), False, id="a-pod-of-the-same-name-before"),
        pytest.param(OwnerReference("v1", "Pod", "web", "uid-web", controller=False), False, id="not-controller"),
        pytest.param(OwnerReference("apps/v1", "ReplicaSet", "web", "uid-web", controller=True), False, id="kind"),
    ],
)
def test_a_claim_is_the_pods_only_when_its_controller_owner_is_that_pod(owner: OwnerReference, expected: bool) -> None:
    assert owned_by([owner], "uid-web") is expected


def test_claim_body_copies_the_spec() -> None:
    spec = {"devices": {"requests": []}}
    body = claim_body(pod(), "c", spec)
    assert body["spec"] == spec
    assert body["spec"] is not spec
