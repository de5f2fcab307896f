"""Targeted JSON-patch operations against a raw pod."""

from __future__ import annotations

from typing import Any

import pytest

from hami.errors import InvalidInput
from hami.protocol.podpatch import PodPatch, pointer
from tests.unit.jsonpatch import apply_patch


def raw(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": list(containers), **spec}}


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        pytest.param(("spec", "containers", 0), "/spec/containers/0", id="plain tokens and indexes"),
        pytest.param(("limits", "nvidia.com/gpucores"), "/limits/nvidia.com~1gpucores", id="a slash is ~1"),
        pytest.param(("a~b/c",), "/a~0b~1c", id="a tilde is ~0, escaped before the slash"),
    ],
)
def test_pointer_escapes_rfc6901(tokens: tuple[str | int, ...], expected: str) -> None:
    assert pointer(*tokens) == expected


def test_set_spec_field_adds_replaces_or_does_nothing() -> None:
    pod = raw({"name": "c"}, schedulerName="default-scheduler")
    patch = PodPatch(pod)
    patch.set_spec_field("schedulerName", "hami")
    patch.set_spec_field("runtimeClassName", "nvidia")
    assert patch.ops == [
        {"op": "replace", "path": "/spec/schedulerName", "value": "hami"},
        {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"},
    ]
    same = PodPatch(pod)
    same.set_spec_field("schedulerName", "default-scheduler")
    assert same.ops == []


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        pytest.param(
            {"name": "c"},
            [{"op": "add", "path": "/spec/containers/0/resources", "value": {"limits": {"a/b": "1"}}}],
            id="no resources: the whole object is added",
        ),
        pytest.param(
            {"name": "c", "resources": {"requests": {"cpu": "1"}}},
            [{"op": "add", "path": "/spec/containers/0/resources/limits", "value": {"a/b": "1"}}],
            id="no limits: the limits object is added",
        ),
        pytest.param(
            {"name": "c", "resources": {"limits": None}},
            [{"op": "add", "path": "/spec/containers/0/resources/limits", "value": {"a/b": "1"}}],
            id="null limits are replaced by an add",
        ),
        pytest.param(
            {"name": "c", "resources": {"limits": {"cpu": "1", "a/b": "7"}}},
            [],
            id="an existing limit is never overwritten",
        ),
        pytest.param(
            {"name": "c", "resources": {"limits": {"cpu": "1"}}},
            [{"op": "add", "path": "/spec/containers/0/resources/limits/a~1b", "value": "1"}],
            id="a missing limit is added alone",
        ),
    ],
)
def test_add_limits(container: dict[str, Any], expected: list[dict[str, Any]]) -> None:
    pod = raw(container)
    patch = PodPatch(pod)
    patch.add_limits("containers", 0, {"a/b": "1"})
    assert patch.ops == expected
    assert apply_patch(pod, patch.ops)["spec"]["containers"][0]["resources"]["limits"]["a/b"] in ("1", "7")


def test_set_env_creates_appends_replaces_and_keeps() -> None:
    pod = raw(
        {"name": "a"},
        {
            "name": "b",
            "env": [
                {"name": "KEEP", "value": "1"},
                {"name": "SWAP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            ],
        },
        initContainers=[{"name": "i", "env": None}],
    )
    patch = PodPatch(pod)
    patch.set_env("containers", 0, {"X": "1", "Y": "2"})
    patch.set_env("containers", 1, {"KEEP": "1", "SWAP": "v", "NEW": "n"})
    patch.set_env("initContainers", 0, {"X": "1"})
    assert patch.ops == [
        {
            "op": "add",
            "path": "/spec/containers/0/env",
            "value": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
        },
        {"op": "replace", "path": "/spec/containers/1/env/1", "value": {"name": "SWAP", "value": "v"}},
        {"op": "add", "path": "/spec/containers/1/env/-", "value": {"name": "NEW", "value": "n"}},
        {"op": "add", "path": "/spec/initContainers/0/env", "value": [{"name": "X", "value": "1"}]},
    ]
    patched = apply_patch(pod, patch.ops)
    assert patched["spec"]["containers"][1]["env"] == [
        {"name": "KEEP", "value": "1"},
        {"name": "SWAP", "value": "v"},
        {"name": "NEW", "value": "n"},
    ]


@pytest.mark.parametrize(
    ("pod", "call", "message"),
    [
        pytest.param({"spec": "x"}, lambda p: p.set_spec_field("a", "b"), "the pod has no spec object", id="no spec"),
        pytest.param(
            raw(), lambda p: p.add_limits("containers", 3, {"a": "1"}), "no such container", id="no container"
        ),
        pytest.param(
            raw({"name": "c", "env": "x"}),
            lambda p: p.set_env("containers", 0, {"a": "1"}),
            "env must be an array",
            id="env not an array",
        ),
    ],
)
def test_shapes_it_cannot_patch_are_invalid_input(pod: dict[str, Any], call: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        call(PodPatch(pod))


def test_nothing_to_change_makes_no_ops() -> None:
    patch = PodPatch(raw({"name": "c"}))
    patch.add_limits("containers", 0, {})
    patch.set_env("containers", 0, {})
    assert patch.ops == []


@pytest.mark.parametrize(
    ("container", "ops"),
    [
        pytest.param(
            {"name": "c"},
            [{"op": "add", "path": "/spec/containers/0/resources", "value": {"requests": {"x/n": "2"}}}],
            id="no resources",
        ),
        pytest.param(
            {"name": "c", "resources": {"limits": {"x/n": 2}}},
            [{"op": "add", "path": "/spec/containers/0/resources/requests", "value": {"x/n": "2"}}],
            id="no requests",
        ),
        pytest.param(
            {"name": "c", "resources": {"requests": {"x/n": 1}}},
            [{"op": "replace", "path": "/spec/containers/0/resources/requests/x~1n", "value": "2"}],
            id="another value is replaced",
        ),
        pytest.param({"name": "c", "resources": {"requests": {"x/n": 2}}}, [], id="an equal value (2 == '2') stays"),
    ],
)
def test_set_resources_adds_replaces_or_does_nothing(container: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    pod = raw(container)
    patch = PodPatch(pod)
    patch.set_resources("containers", 0, "requests", {"x/n": "2"})
    assert patch.ops == ops
    assert str(apply_patch(pod, patch.ops)["spec"]["containers"][0]["resources"]["requests"]["x/n"]) == "2"


@pytest.mark.parametrize(
    ("metadata", "ops"),
    [
        pytest.param(
            None, [{"op": "add", "path": "/metadata", "value": {"annotations": {"a/b": "1"}}}], id="no metadata"
        ),
        pytest.param(
            {"name": "p"}, [{"op": "add", "path": "/metadata/annotations", "value": {"a/b": "1"}}], id="none yet"
        ),
        pytest.param(
            {"annotations": {"a/b": "0"}},
            [{"op": "replace", "path": "/metadata/annotations/a~1b", "value": "1"}],
            id="another value is replaced",
        ),
        pytest.param({"annotations": {"a/b": "1"}}, [], id="an equal value stays"),
    ],
)
def test_set_annotations_adds_replaces_or_does_nothing(
    metadata: dict[str, Any] | None, ops: list[dict[str, Any]]
) -> None:
    pod: dict[str, Any] = {"spec": {"containers": [{"name": "c"}]}}
    if metadata is not None:
        pod["metadata"] = metadata
    patch = PodPatch(pod)
    patch.set_annotations({"a/b": "1"})
    assert patch.ops == ops
    assert apply_patch(pod, patch.ops)["metadata"]["annotations"]["a/b"] == "1"
