"""Targeted RFC 6902 JSON patches against the raw JSON of a pod, as the admission webhook returns them.

HAMi answers with a diff between the incoming pod and a re-marshalled typed copy, so its patches carry
incidental changes (``creationTimestamp: null``, normalised quantities, dropped unknown fields; spec §11
item 9). hami emits only the operations it means: each builder method looks at the raw pod as it arrived and
adds the smallest ``add``/``replace`` that makes the change, creating a missing parent object or array in the
same operation. Nothing is emitted for a value that is already there, so an unchanged pod has no patch.

Paths are JSON pointers (RFC 6901): ``~`` and ``/`` inside a key are written ``~0`` and ``~1``, so the limit
``nvidia.com/gpucores`` lives at ``/spec/containers/0/resources/limits/nvidia.com~1gpucores``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from hami.errors import InvalidInput

__all__ = ["PatchOp", "PodPatch", "Resources", "Section", "pointer"]

PatchOp = dict[str, Any]
"""One operation: ``{"op": "add" | "replace", "path": ..., "value": ...}``."""

Section = Literal["initContainers", "containers"]
Resources = Literal["limits", "requests"]

_MISSING: Final = object()


def pointer(*tokens: str | int) -> str:
    """A JSON pointer from unescaped tokens: ``pointer("a/b", 0)`` → ``/a~1b/0``."""
    return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)


class PodPatch:
    """Collects the operations that turn the raw pod into the admitted one.

    The raw pod is only read, never modified; ``ops`` is the patch. Each method is idempotent within one
    patch for the same arguments only in the sense that it compares against the *incoming* pod: call it once
    per change.
    """

    __slots__ = ("_pod", "ops")

    def __init__(self, pod: Mapping[str, Any]) -> None:
        self._pod = pod
        self.ops: list[PatchOp] = []

    def _spec(self) -> Mapping[str, Any]:
        spec = self._pod.get("spec")
        if not isinstance(spec, Mapping):
            raise InvalidInput("request.object.spec", spec, "the pod has no spec object")
        return spec

    def _container(self, section: Section, index: int) -> Mapping[str, Any]:
        containers = self._spec().get(section)
        if not isinstance(containers, list) or not 0 <= index < len(containers):
            raise InvalidInput(f"request.object.spec.{section}", index, "no such container")
        container = containers[index]
        if not isinstance(container, Mapping):
            raise InvalidInput(f"request.object.spec.{section}[{index}]", container, "a container must be an object")
        return container

    def set_spec_field(self, key: str, value: str) -> None:
        """``spec.<key> = value``: ``replace`` when the key is present with another value, ``add`` when absent."""
        current = self._spec().get(key, _MISSING)
        if current == value:
            return
        op = "add" if current is _MISSING else "replace"
        self.ops.append({"op": op, "path": pointer("spec", key), "value": value})

    def add_limits(self, section: Section, index: int, limits: Mapping[str, str]) -> None:
        """Add ``resources.limits`` entries that the container does not have (existing keys are left alone)."""
        if not limits:
            return
        base = ("spec", section, index)
        container = self._container(section, index)
        resources = container.get("resources")
        if not isinstance(resources, Mapping):
            self.ops.append({"op": "add", "path": pointer(*base, "resources"), "value": {"limits": dict(limits)}})
            return
        current = resources.get("limits")
        if not isinstance(current, Mapping):
            self.ops.append({"op": "add", "path": pointer(*base, "resources", "limits"), "value": dict(limits)})
            return
        for name, value in limits.items():
            if name not in current:
                self.ops.append({"op": "add", "path": pointer(*base, "resources", "limits", name), "value": value})

    def set_resources(self, section: Section, index: int, kind: Resources, values: Mapping[str, str]) -> None:
        """Make each ``name: value`` an entry of the container's ``resources.<kind>`` (``limits``/``requests``):
        ``add`` when absent (creating ``resources`` or ``resources.<kind>`` in the same operation), ``replace``
        when present with another value; an equal value (as text: ``1`` and ``"1"`` are equal) is left alone."""
        if not values:
            return
        base = ("spec", section, index)
        container = self._container(section, index)
        resources = container.get("resources")
        if not isinstance(resources, Mapping):
            self.ops.append({"op": "add", "path": pointer(*base, "resources"), "value": {kind: dict(values)}})
            return
        current = resources.get(kind)
        if not isinstance(current, Mapping):
            self.ops.append({"op": "add", "path": pointer(*base, "resources", kind), "value": dict(values)})
            return
        for name, value in values.items():
            path = pointer(*base, "resources", kind, name)
            if name not in current:
                self.ops.append({"op": "add", "path": path, "value": value})
            elif str(current[name]) != value:
                self.ops.append({"op": "replace", "path": path, "value": value})

    def set_annotations(self, annotations: Mapping[str, str]) -> None:
        """Make each ``name: value`` a pod annotation: ``add`` when absent (creating ``metadata`` or
        ``metadata.annotations`` in the same operation), ``replace`` when present with another value."""
        if not annotations:
            return
        metadata = self._pod.get("metadata")
        if not isinstance(metadata, Mapping):
            self.ops.append({"op": "add", "path": pointer("metadata"), "value": {"annotations": dict(annotations)}})
            return
        current = metadata.get("annotations")
        if not isinstance(current, Mapping):
            self.ops.append({"op": "add", "path": pointer("metadata", "annotations"), "value": dict(annotations)})
            return
        for name, value in annotations.items():
            path = pointer("metadata", "annotations", name)
            if name not in current:
                self.ops.append({"op": "add", "path": path, "value": value})
            elif current[name] != value:
                self.ops.append({"op": "replace", "path": path, "value": value})

    def set_env(self, section: Section, index: int, env: Mapping[str, str]) -> None:
        """Make each ``name=value`` the container's environment entry of that name.

        A missing ``env`` array is created; a missing entry is appended; an entry with the same name but
        another value (or a ``valueFrom``) is replaced whole; an identical entry is left alone. (HAMi always
        appends, so reinvocation or a user-set variable gives duplicates; spec §1.3, §11 item 7.)
        """
        if not env:
            return
        base = ("spec", section, index, "env")
        container = self._container(section, index)
        current = container.get("env")
        if current is None:
            entries = [{"name": name, "value": value} for name, value in env.items()]
            self.ops.append({"op": "add", "path": pointer(*base), "value": entries})
            return
        if not isinstance(current, list):
            raise InvalidInput(f"request.object.spec.{section}[{index}].env", current, "env must be an array")
        for name, value in env.items():
            wanted = {"name": name, "value": value}
            at = next(
                (i for i, e in enumerate(current) if isinstance(e, Mapping) and e.get("name") == name),
                None,
            )
            if at is None:
                self.ops.append({"op": "add", "path": pointer(*base, "-"), "value": wanted})
            elif dict(current[at]) != wanted:
                self.ops.append({"op": "replace", "path": pointer(*base, at), "value": wanted})
