"""Device profiles of node groups: the inventory of a node that does not exist yet (Cluster Autoscaler's cold-zero
groups, see docs/autoscaler.md).

A template node of a group that has no node yet carries no registration annotation: no device plugin has run on it.
The operator declares what a new node of each group registers, once per group, keyed by the value of one node
label (by default ``node.kubernetes.io/instance-type``, which every cloud provider's template sets). A profile is a
set of node annotations in HAMi's registration format, exactly what the device plugin of such a node writes
(``hami.io/node-nvidia-register: '[{"id": …, "count": 10, "devmem": 81920, …}]'``), so every vendor's own decoder
reads it and the core names no vendor.

The source is a ConfigMap (the chart's ``autoscaler.profiles``) mounted as a directory: one file per group, named by
the label value, holding a YAML (or JSON) mapping of annotation names to string values. :func:`parse_profile` is
pure (text in, annotations out); the shell lists the directory.

A profile only fills in: an annotation the template carries itself wins (a warm group's template copied from a live
node keeps that node's registration).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import msgspec
import yaml

from hami.errors import ConfigError
from hami.protocol.objects import Node

__all__ = ["DEFAULT_PROFILE_LABEL", "DeviceProfiles", "parse_profile"]

DEFAULT_PROFILE_LABEL = "node.kubernetes.io/instance-type"
"""The label that names a node's group for its profile, unless configured otherwise."""


def parse_profile(name: str, text: str) -> dict[str, str]:
    """One group's profile: a YAML or JSON mapping of annotation names to strings. Raises ``ConfigError`` naming
    the group and the entry that is wrong."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"device profile {name}", text[:80], f"is not YAML or JSON: {err}") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"device profile {name}", type(data).__name__, "expected a mapping of node annotations")
    out: dict[str, str] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"device profile {name}", key, "an annotation name is not a non-empty string")
        if not isinstance(value, str):
            raise ConfigError(
                f"device profile {name}: {key}",
                type(value).__name__,
                "expected the annotation's text (a string, as the device plugin writes it; quote a JSON value)",
            )
        out[key] = value
    return out


@dataclass(frozen=True, slots=True)
class DeviceProfiles:
    """The operator's profiles by group (``profiles``: label value → annotations) and the label naming the group."""

    profiles: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    label: str = DEFAULT_PROFILE_LABEL

    @classmethod
    def parse(cls, files: Mapping[str, str], label: str = DEFAULT_PROFILE_LABEL) -> DeviceProfiles:
        """From ``{group: text}`` (a mounted ConfigMap's files); ``ConfigError`` on the first bad one."""
        if not label:
            raise ConfigError("--device-profile-label", label, "the group label is empty")
        return cls({name: parse_profile(name, text) for name, text in sorted(files.items())}, label)

    def profile_of(self, node: Node) -> Mapping[str, str] | None:
        """The profile of ``node``'s group, or None (no such label on the node, or no profile for its value)."""
        group = node.metadata.labels.get(self.label)
        return self.profiles.get(group) if group is not None else None

    def fill(self, node: Node) -> Node:
        """``node`` with its group's profile filled in under its own annotations; the node itself when it has no
        profile. The input is not changed."""
        profile = self.profile_of(node)
        if not profile:
            return node
        meta = node.metadata
        filled = msgspec.structs.replace(meta, annotations={**profile, **meta.annotations})
        return msgspec.structs.replace(node, metadata=filled)
