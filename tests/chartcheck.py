"""The chart's hand-written vendor blocks checked against the vendor registry, key by key.

Each family's ``VendorFamily`` (``hami.devices.family``) says how the chart renders its ``device-config.yaml``
section (``ChartValues``); ``chart_problems`` reads ``values.yaml`` and ``_helpers.tpl`` as text and returns, per
family, everything that disagrees (an empty list: the chart matches the registry):

* ``devices.<family>.enabled`` exists, off exactly for a gated family;
* ``hami.deviceConfigFromValues`` renders the section with exactly the declared keys, each a key of the section's
  model; a key rendered from a value names that value (``.Values.<path>``, directly or through a ``$variable``),
  which exists in ``values.yaml`` and, for a scalar key of a mapping section, equals the model's default; a key
  written as a literal writes the default;
* ``hami.managedResources`` has the family's row: its section and the keys naming managed resources, in order;
* ``hami.familyArgs`` lists the family among the gated (``--enable-<family>``) or the others (``--disable-devices``);
* the chart has no ``devices.<family>`` block that no registry entry owns.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel

from hami.devices import Registry
from hami.devices.family import VendorFamily

__all__ = ["chart_problems", "define"]

_SCALARS = (str, bool, int, float)


def define(helpers: str, name: str) -> str:
    """The body of one ``{{- define "<name>" -}}`` block of ``_helpers.tpl``."""
    start = helpers.index(f'{{{{- define "{name}" -}}}}')
    return helpers[start : helpers.index("{{- end -}}\n\n", start)]


def chart_problems(registry: Registry, values: Mapping[str, Any], helpers: str) -> list[str]:
    """Every disagreement between the chart (``values.yaml`` parsed, ``_helpers.tpl`` as text) and ``registry``."""
    sections = _rendered_sections(define(helpers, "hami.deviceConfigFromValues"))
    managed = _managed_rows(define(helpers, "hami.managedResources"))
    ungated, gated = _family_args(define(helpers, "hami.familyArgs"))
    devices = values.get("devices") or {}
    problems = [
        f"{family}: values.yaml has devices.{family}, which no registry entry owns"
        for family in devices
        if family not in {f.family for f in registry} | {"dra"}
    ]
    for f in registry:
        problems += _switch_problems(f, devices, ungated, gated)
        problems += _section_problems(f, sections.get(f.section), values)
        row = managed.get(f.family)
        if row is None:
            problems.append(f"{f.family}: hami.managedResources has no row for the family")
        elif row != (f.section, f.chart.managed):
            problems.append(f"{f.family}: hami.managedResources row {row} is not {(f.section, f.chart.managed)}")
    return problems


def _switch_problems(
    f: VendorFamily[Any], devices: Mapping[str, Any], ungated: list[str], gated: list[str]
) -> list[str]:
    block = devices.get(f.family)
    if not isinstance(block, dict) or "enabled" not in block:
        return [f"{f.family}: values.yaml has no devices.{f.family}.enabled"]
    problems = []
    if block["enabled"] is not (f.gate is None):
        problems.append(f"{f.family}: devices.{f.family}.enabled is {block['enabled']}, not {f.gate is None}")
    if (f.family in gated, f.family in ungated) != (f.gate is not None, f.gate is None):
        problems.append(f"{f.family}: hami.familyArgs does not list it as {'gated' if f.gate else 'ungated'}")
    if f.gate is not None and f.gate.flag != f"--enable-{f.family}":
        problems.append(f"{f.family}: hami.familyArgs writes --enable-{f.family}, the switch is {f.gate.flag}")
    return problems


def _section_problems(f: VendorFamily[Any], lines: list[str] | None, values: Mapping[str, Any]) -> list[str]:
    if lines is None:
        return [f"{f.family}: hami.deviceConfigFromValues renders no {f.section}: section"]
    rendered = {key: line for line in lines if (key := _key(line)) is not None}
    problems = []
    if set(rendered) != set(f.chart.keys):
        problems.append(
            f"{f.family}: the template writes {sorted(rendered)} under {f.section}:, the entry declares "
            f"{sorted(f.chart.keys)}"
        )
    item, listed = _item_model(f.model)
    defaults = {} if listed else f.default().model_dump(by_alias=True)
    aliases = {field.serialization_alias or name for name, field in item.model_fields.items()}
    block = "\n".join(lines)
    for key, path in f.chart.keys.items():
        if key not in aliases:
            problems.append(f"{f.family}: {f.section}.{key} is no key of {item.__name__}")
        line = rendered.get(key)
        if line is None:
            continue
        problems += _value_problems(f"{f.family}: {f.section}.{key}", line, block, path, defaults.get(key), values)
    return problems


def _value_problems(
    where: str, line: str, block: str, path: str | None, default: object, values: Mapping[str, Any]
) -> list[str]:
    expression = line.split(":", 1)[1].strip()
    if path is None:
        if ".Values." in expression:
            return [f"{where}: declared as a fixed value, but the template renders {expression}"]
        if "{{" not in expression and isinstance(default, _SCALARS) and yaml.safe_load(expression) != default:
            return [f"{where}: the template writes {expression}, the model's default is {default!r}"]
        return []
    # the key's own line names the value, or (an item of a range, a nested list) the range over it does
    named = _names(expression, path) or (".Values." not in expression and _names(block, path))
    if not named:
        return [f"{where}: the template does not render it from .Values.{path}"]
    found, value = _lookup(values, path)
    if not found:
        return [f"{where}: values.yaml has no {path}"]
    if isinstance(default, _SCALARS) and not _same(value, default):
        return [f"{where}: values.yaml {path} is {value!r}, the model's default is {default!r}"]
    return []


def _names(text: str, path: str) -> bool:
    return re.search(rf"\.Values\.{re.escape(path)}(?![\w.])", text) is not None


def _same(value: object, default: object) -> bool:
    if isinstance(default, bool):
        return str(value).lower() == str(default).lower()  # the chart may quote a boolean ("false")
    if isinstance(default, float | int) and isinstance(value, float | int):
        return float(value) == float(default)
    return value == default


def _lookup(values: Mapping[str, Any], path: str) -> tuple[bool, object]:
    node: object = values
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _item_model(model: Any) -> tuple[type[BaseModel], bool]:
    """The model of a section, or of each item of a list section (``tuple[Model, ...]``, maybe ``Annotated``)."""
    if typing.get_origin(model) is typing.Annotated:
        model = typing.get_args(model)[0]
    if typing.get_origin(model) is tuple:
        return typing.get_args(model)[0], True
    return model, False


def _rendered_sections(body: str) -> dict[str, list[str]]:
    """Section key → its lines, ``$variables`` replaced by the ``.Values`` path they stand for."""
    variables = dict(re.findall(r"\$(\w+) := (\.Values\.[\w.]+)", body))
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in body.splitlines():
        line = raw
        for name, target in variables.items():
            line = re.sub(rf"\${name}\b", target, line)
        top = re.match(r"^(\w+):", line)
        if top:
            current = sections.setdefault(top.group(1), [])
        elif current is not None:  # a key's line, or a template line (a range over the section's items)
            current.append(line)
    return sections


def _key(line: str) -> str | None:
    found = re.match(r"^\s+(?:-\s+)?(\w+):", line)
    return found.group(1) if found else None


def _managed_rows(body: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Family → (section, managed keys) of the ``hami.managedResources`` table."""
    counts = re.search(r"\$counts := list ((?:\"\w+\" ?)+)", body)
    shared = tuple(re.findall(r'"(\w+)"', counts.group(1))) if counts else ()
    rows = re.findall(r'\(list "(\w+)" "(\w+)" (\$counts|\(list (?:"\w+" ?)+\))\)', body)
    return {
        family: (section, shared if keys == "$counts" else tuple(re.findall(r'"(\w+)"', keys)))
        for family, section, keys in rows
    }


def _family_args(body: str) -> tuple[list[str], list[str]]:
    """The families ``hami.familyArgs`` may pass to ``--disable-devices``, then those it may switch on."""
    lists = re.findall(r"range \$family := list ((?:\"\w+\" ?)+)", body)
    ungated, gated = (re.findall(r'"(\w+)"', found) for found in lists)
    return ungated, gated
