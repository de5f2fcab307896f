"""A vendor family's registry entry: everything the rest of hami derives from a vendor, declared in its module.

One ``VendorFamily`` per family — the chart's ``devices.<family>`` key and ``--disable-devices`` name — holds:

* its ``device-config.yaml`` section: the key (``section``), the type pydantic validates it with (``model``; a
  ``ConfigModel`` subclass, or a tuple of them for a list section), its value when a file leaves it out
  (``default``), and optional hooks for an old form of the section (``read``) and for warnings about a parsed one
  (``notes``). ``hami.config.DeviceConfig`` has one field per entry;
* how its vendors are built from that section (``build``; one vendor for most families, one per chip where HAMi
  keys a vendor per chip);
* its scheduler switch when the family is off unless switched on (``gate``: HAMi's ``--enable-ascend``); every
  other family is on unless ``--disable-devices`` names it. ``hami scheduler``'s options, ``SchedulerSettings``
  and ``hami simulate``'s switches are derived from these;
* how the Helm chart renders the section from its values (``chart``), which the chart test checks key by key.

The registry itself is the explicit tuple ``hami.devices.REGISTRY`` (no import side effects). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from hami.devices.base import Vendor

__all__ = ["ChartValues", "Gate", "VendorFamily"]

C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class Gate:
    """A family off by default and its HAMi switch: ``setting`` is the ``SchedulerSettings`` field
    (``enable_ascend``; flag ``--enable-ascend``, variable ``HAMI_ENABLE_ASCEND``); ``help`` says what it schedules
    (``Schedule Huawei Ascend NPUs``)."""

    setting: str
    help: str

    @property
    def flag(self) -> str:
        """``--enable-ascend``."""
        return "--" + self.setting.replace("_", "-")


@dataclass(frozen=True, slots=True)
class ChartValues:
    """How the chart's ``hami.deviceConfigFromValues`` (``_helpers.tpl``) renders a family's section.

    * ``keys`` — every key the template writes under the section (for a list section, under each item), mapped
      to the ``values.yaml`` path it is rendered from (``dcuResourceName``, ``devices.hygon.memoryFactor``), or to
      None where the template writes a fixed value (the model's default);
    * ``managed`` — the keys whose values are resource names the extender manages (``hami.managedResources``).

    The chart test (``tests/chartcheck.py``) checks the chart against every entry: the section and its keys in
    the template, each path present in ``values.yaml`` and, for a scalar, equal to the model's default, the
    managed-resources row, ``devices.<family>.enabled`` and the family's switch in ``hami.familyArgs``.
    """

    keys: Mapping[str, str | None]
    managed: tuple[str, ...]


@dataclass(frozen=True)  # no slots: ``VendorFamily[X](...)`` records its type argument on the instance
class VendorFamily(Generic[C]):
    """One family's registry entry (see the module docstring)."""

    family: str
    section: str
    model: Any
    """The type of the section (a ``ConfigModel`` subclass or ``tuple[Model, ...]``, possibly ``Annotated``)."""
    default: Callable[[], C]
    build: Callable[[C], Sequence[Vendor]]
    chart: ChartValues
    gate: Gate | None = None
    read: Callable[[object], tuple[object, tuple[str, ...]]] | None = field(default=None)
    """The raw section as the model reads it, with warnings (HAMi's legacy forms); None: as written."""
    notes: Callable[[C], Sequence[str]] | None = field(default=None)
    """Warnings about a parsed section (keys hami reads that HAMi does not); None: none."""

    def section_of(self, config: object) -> C:
        """This family's section of a ``DeviceConfig`` (built by ``hami.config`` with one field per entry)."""
        return cast(C, getattr(config, self.section))

    def vendors(self, config: object) -> Sequence[Vendor]:
        """The family's vendors, built from its section of ``config``."""
        return self.build(self.section_of(config))


M = TypeVar("M")


def vendor_family(
    name: str, config: type[M], *vendors: Callable[[M], Vendor], chart: ChartValues, **more: Any
) -> VendorFamily[M]:
    """The common shape of an entry: a section named as the family, read by the ``config`` model (whose defaults
    are the section's default), making one vendor of each class of ``vendors`` from it; ``more``: the optional
    fields (``gate``, ``read``, ``notes``)."""
    return VendorFamily(
        family=name,
        section=name,
        model=config,
        default=config,
        build=lambda section: tuple(make(section) for make in vendors),
        chart=chart,
        **more,
    )
