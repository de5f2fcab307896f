"""Device vendors behind one interface (``base.Vendor``). Pure: no I/O.

The registry is explicit: ``REGISTRY`` lists one ``VendorFamily`` per family (``hami.devices.family``), each
declared in its vendor's module with everything hami derives from it — its ``device-config.yaml`` section (model
and defaults; ``hami.config.DeviceConfig`` has one field per entry), how its vendors are built, its scheduler
switch (``hami scheduler --enable-ascend``, ``--disable-devices``) and its chart values. Adding a vendor means its
module, its test file, one line here and its chart values (``charts/hami``; checked against the entry by
``tests/unit/devices/test_family_lists.py``).

The order of ``REGISTRY`` is the order vendors are tried and listed, and the order families are named in messages.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final

from hami.devices.amd import AMD_FAMILY
from hami.devices.ascend import ASCEND_FAMILY
from hami.devices.awsneuron import AWSNEURON_FAMILY
from hami.devices.base import Vendor
from hami.devices.biren import BIREN_FAMILY
from hami.devices.cambricon import CAMBRICON_FAMILY
from hami.devices.enflame import ENFLAME_FAMILY
from hami.devices.family import VendorFamily
from hami.devices.hygon import HYGON_FAMILY
from hami.devices.iluvatar import ILUVATAR_FAMILY
from hami.devices.kunlun import KUNLUN_FAMILY
from hami.devices.metax import METAX_FAMILY
from hami.devices.mthreads import MTHREADS_FAMILY
from hami.devices.nvidia import NVIDIA_FAMILY
from hami.devices.vastai import VASTAI_FAMILY
from hami.protocol import keys
from hami.protocol.keys import VendorKeys

__all__ = [
    "FAMILIES",
    "REGISTRY",
    "Registry",
    "allocation_keys",
    "default_sections",
    "registered_keys",
    "vendors_from_config",
]

Registry = Sequence[VendorFamily[Any]]
"""Registry entries in order (``REGISTRY``, or a test's registry with a vendor of its own)."""

REGISTRY: Final[tuple[VendorFamily[Any], ...]] = (
    NVIDIA_FAMILY,
    HYGON_FAMILY,
    CAMBRICON_FAMILY,
    ASCEND_FAMILY,
    ILUVATAR_FAMILY,
    METAX_FAMILY,
    MTHREADS_FAMILY,
    ENFLAME_FAMILY,
    KUNLUN_FAMILY,
    AWSNEURON_FAMILY,
    AMD_FAMILY,
    VASTAI_FAMILY,
    BIREN_FAMILY,
)
"""Every vendor family hami schedules, one entry each."""

FAMILIES: Final[Mapping[str, Callable[[Any], Sequence[Vendor]]]] = {f.family: f.vendors for f in REGISTRY}
"""Family → how its vendors are built from a ``DeviceConfig``, in registry order (derived from ``REGISTRY``)."""


def vendors_from_config(
    config: object, enabled: Collection[str] | None = None, registry: Registry = REGISTRY
) -> dict[str, Vendor]:
    """The vendors of the ``enabled`` families (None: every family) of ``registry``, keyed by vendor key, in registry
    order; ``config`` is a ``hami.config.DeviceConfig``. A family switched off is not registered: its resources,
    registrations and allocations are not hami's (``hami scheduler``'s ``--enable-ascend``, ``--disable-devices``;
    see ``SchedulerSettings``)."""
    vendors = [v for f in registry if enabled is None or f.family in enabled for v in f.vendors(config)]
    return {v.name: v for v in vendors}


def default_sections(registry: Registry = REGISTRY) -> dict[str, object]:
    """Every family's section as a file that leaves it out gets it, by section key."""
    return {f.section: f.default() for f in registry}


class _Defaults:
    """The default sections as attributes, for building vendors without ``hami.config`` (which sits above)."""

    def __init__(self, registry: Registry) -> None:
        self.__dict__.update(default_sections(registry))


def registered_keys(registry: Registry = REGISTRY) -> tuple[VendorKeys, ...]:
    """Every registered vendor's annotation keys, in registry order (the node agent reads the other vendors'
    allocations to leave their work alone). Keys do not depend on the config."""
    return tuple(v.keys for v in vendors_from_config(_Defaults(registry), registry=registry).values())


def allocation_keys(registry: Registry = REGISTRY) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The pod annotations the chart's admission policy guards (docs/trust.md), sorted: (what only hami's scheduler
    writes: the chosen node, the decision and bind times, every vendor's allocation; what the device plugin of the
    pod's own node writes too: the bind phase, every vendor's to-allocate and its ``hami.io/`` extras). A vendor's
    extras outside ``hami.io/`` belong to that vendor's own device plugin and are not guarded.
    ``charts/hami/templates/scheduler/_allocation-keys.tpl`` holds these lists (tests/chart checks them)."""
    every = registered_keys(registry)
    scheduler = {keys.VGPU_NODE, keys.VGPU_TIME, keys.BIND_TIME, *(k.allocated for k in every)}
    plugin = {keys.BIND_PHASE, *(k.to_allocate for k in every if k.to_allocate)}
    plugin |= {extra for k in every for extra in k.extra if extra.startswith("hami.io/")}
    return tuple(sorted(scheduler)), tuple(sorted(plugin - scheduler))
