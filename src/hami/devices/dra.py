"""DRA mode, the vendor's part: what a container's request becomes in a ResourceClaim (issue 38, pure).

In DRA mode a pod written for HAMi is translated at admission into one ResourceClaim per container
(``hami.scheduling.dra.translate``). The core names no vendor: a vendor that can be translated implements the
optional :class:`DraTranslation` protocol and answers, per container, with a :class:`DraRequest` — how many
devices, how much memory and how many cores of each, which CEL selectors its pod annotations become, and what its
resources and annotations were (stored on the pod, so the claim can be built again from them). A vendor without
the protocol is not translated: its pods stay on the extender path.

Anything the allocator cannot express is a :class:`DraRefused` naming the container, the field and the value; the
webhook refuses the pod with that message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

from hami.errors import InvalidInput
from hami.protocol.objects import Container

__all__ = [
    "DEFAULT_DRA_DRIVER",
    "MAX_ALTERNATIVES",
    "DraModeSettings",
    "DraRefused",
    "DraRequest",
    "DraTranslation",
    "cel_string",
]

DEFAULT_DRA_DRIVER: Final = "hami-core-gpu.project-hami.io"
"""hami's (and HAMi's) DRA driver: the attribute domain in CEL and the driver of the opaque configuration."""
MAX_ALTERNATIVES: Final = 8
"""A claim request's ``firstAvailable`` holds at most 8 alternatives (resource.k8s.io/v1)."""


@dataclass(frozen=True, slots=True)
class DraModeSettings:
    """Where DRA-mode claims point: the DeviceClass they request and the driver whose attributes they select on.

    ``card_memory_mib`` lists the memory sizes (MiB) of the cards in the cluster; with it a
    ``gpumem-percentage`` request becomes one alternative per size (``firstAvailable``), without it such a request
    is refused (a percentage is no amount until the card is known).
    """

    device_class: str = DEFAULT_DRA_DRIVER
    driver: str = DEFAULT_DRA_DRIVER
    card_memory_mib: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        sizes = self.card_memory_mib
        if len(set(sizes)) > MAX_ALTERNATIVES or any(size <= 0 for size in sizes):
            raise InvalidInput(
                "card memory sizes", list(sizes), f"must be at most {MAX_ALTERNATIVES} sizes in MiB, each above 0"
            )


class DraRefused(InvalidInput):
    """A request DRA mode cannot express; ``field`` names the container and the resource or annotation."""


@dataclass(frozen=True, slots=True)
class DraRequest:
    """One container's devices as a claim asks for them (per device, as HAMi counts):

    * ``count`` — how many devices, all distinct (``distinct`` names the attribute that tells devices apart);
    * ``memory_mib`` — MiB of each device, ``None`` for the device's default (the whole card);
    * ``memory_percent`` — a percentage of each device's memory (1..99), ``None`` when none was asked;
    * ``cores`` — percent of each device's compute;
    * ``selectors`` — CEL expressions every device must satisfy (the pod's type and UUID filters);
    * ``parameters`` — the opaque configuration for the driver, ``None`` for none;
    * ``resources`` — the vendor's resources of the container as written (after admission defaults), which the
      translation removes from the container and stores on the pod; ``annotations`` — the vendor's pod
      annotations the claim depends on, stored beside them.
    """

    count: int
    cores: int
    memory_mib: int | None = None
    memory_percent: int | None = None
    selectors: tuple[str, ...] = ()
    parameters: Mapping[str, Any] | None = None
    distinct: str = "uuid"
    resources: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class DraTranslation(Protocol):
    """Optional for a vendor: its requests can be translated into ResourceClaims (DRA mode)."""

    def dra_resources(self) -> tuple[str, ...]:
        """Every resource name of the vendor that a translated container must no longer ask for."""

    def dra_request(
        self, container: Container, field: str, annotations: Mapping[str, str], settings: DraModeSettings
    ) -> DraRequest | None:
        """The container's request as a claim asks for it, ``None`` when it asks for none of the vendor's devices.
        ``field`` names the container in errors (``containers[0](main)``); raises :class:`DraRefused` for what a
        claim cannot express and ``InvalidInput`` for a request that is invalid in any mode."""


def cel_string(value: str, field: str = "value") -> str:
    """``value`` as a CEL string literal: double-quoted, with JSON's escapes (``\\"``, ``\\\\``, ``\\n``,
    ``\\u0001``), every one of which CEL reads the same way; non-ASCII characters stay as they are. Raises
    ``InvalidInput`` for text that is not valid Unicode (a lone surrogate)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(field, value, "is not valid Unicode text") from None
    return json.dumps(value, ensure_ascii=False)
