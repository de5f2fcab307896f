"""What every configuration model shares: YAML key aliases, unknown-key reporting, readable errors.

Vendor modules declare their ``device-config.yaml`` section on :class:`ConfigModel` (``hami.devices.hygon``'s
``HygonConfig``); ``hami.config`` assembles the sections and the scheduler's settings with the same helpers.

* :class:`ConfigModel` — frozen pydantic models whose YAML keys are the camelCase aliases HAMi uses
  (``resourceCountName``); Python code constructs them by field name. Values are type-strict (a quoted
  ``"1"`` is not an integer, ``yes`` in quotes is not a boolean), as Go's yaml.v2 is. Keys the model does not
  know are kept aside (``extra="allow"``) so :func:`unknown_keys` can report them instead of dropping them.
* :func:`config_error` — turns pydantic's ``ValidationError`` into one :class:`~hami.errors.ConfigError`
  naming the key path and the value (``nvidia.defaultGPUNum: must be >= 0 (got -1)``), never pydantic's
  multi-line text.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import AliasGenerator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from hami.errors import ConfigError
from hami.protocol.quantity import INT32_MAX, INT64_MAX

__all__ = ["ConfigModel", "Int32", "Int64", "config_error", "did_you_mean", "key_path", "unknown_keys", "yaml_key"]

Int32 = Annotated[int, Field(strict=True, ge=0, le=INT32_MAX)]
"""A non-negative Go ``int32`` key (strict: a quoted ``"1"`` is refused)."""
Int64 = Annotated[int, Field(strict=True, ge=0, le=INT64_MAX)]
"""A non-negative Go ``int64`` key."""


def yaml_key(key: str) -> Any:
    """A field whose YAML key is not the camelCase of its Python name (``resourceNameGCU``)."""
    return Field(validation_alias=key, serialization_alias=key)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean spread?"`` for the closest choice to a misspelt word, or nothing when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


class ConfigModel(BaseModel):
    """Base of every ``device-config.yaml`` section: camelCase YAML keys, frozen, unknown keys kept aside."""

    model_config = ConfigDict(
        alias_generator=AliasGenerator(validation_alias=to_camel, serialization_alias=to_camel),
        validate_by_alias=True,
        validate_by_name=True,  # Python code builds models by field name; YAML is read by alias only
        extra="allow",
        frozen=True,
        strict=False,  # lists become tuples; scalars are strict per field (see the Annotated types)
    )


def key_path(loc: tuple[int | str, ...], prefix: str = "", rename: Mapping[str, str] | None = None) -> str:
    """``("nvidia", "migProfileAllowlist", 0, "profiles", 1)`` → ``nvidia.migProfileAllowlist[0].profiles[1]``.

    ``rename`` maps a first element that is an alias (an environment variable name) back to the setting.
    """
    if loc and rename and isinstance(loc[0], str):
        loc = (rename.get(loc[0], loc[0]), *loc[1:])
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else part
    return path


def unknown_keys(model: BaseModel, path: str = "") -> list[str]:
    """Every key of ``model`` (recursively) that no field claimed, as warnings naming its full path."""
    found: list[str] = []
    for key in model.model_extra or {}:
        where = f"{path}.{key}" if path else key
        found.append(f"{where}: unknown key, ignored")
    for name, field in type(model).model_fields.items():
        alias = field.serialization_alias or name
        where = f"{path}.{alias}" if path else alias
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            found.extend(unknown_keys(value, where))
        elif isinstance(value, tuple):
            for index, item in enumerate(value):
                if isinstance(item, BaseModel):
                    found.extend(unknown_keys(item, f"{where}[{index}]"))
    return found


def _reason(error: Any) -> str:
    """A short, single-line reason for one pydantic error entry."""
    kind: str = error["type"]
    ctx: dict[str, Any] = error.get("ctx") or {}
    simple = {
        "int_type": "must be an integer",
        "int_parsing": "must be an integer",
        "int_from_float": "must be an integer",
        "float_type": "must be a number",
        "float_parsing": "must be a number",
        "bool_type": "must be true or false",
        "bool_parsing": "must be true or false",
        "string_type": "must be a string",
        "tuple_type": "must be a list",
        "list_type": "must be a list",
        "model_type": "must be a mapping",
        "model_attributes_type": "must be a mapping",
        "dict_type": "must be a mapping",
        "extra_forbidden": "unknown setting",
        "missing": "is required",
        "string_too_short": "must not be empty",
    }
    if kind in simple:
        return simple[kind]
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in bounds:
        limit = next(iter(ctx.values()))
        if isinstance(limit, float) and limit.is_integer():
            limit = int(limit)  # "must be > 0", not "> 0.0"
        return f"must be {bounds[kind]} {limit}"
    if kind == "literal_error":
        given = error.get("input")
        hint = did_you_mean(given, re.findall(r"'([^']*)'", str(ctx["expected"]))) if isinstance(given, str) else ""
        return f"must be one of {ctx['expected']}{hint}"
    if kind == "too_short":
        minimum = ctx.get("min_length", 1)
        return "must not be empty" if minimum == 1 else f"must have at least {minimum} items"
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    return str(error["msg"]).splitlines()[0]


def _spurious(error: Any) -> bool:
    """Pydantic adds "too short after validation" to a list whose items failed; the item error says it all."""
    items = error.get("input")
    minimum = (error.get("ctx") or {}).get("min_length", 0)
    return bool(error["type"] == "too_short" and isinstance(items, list | tuple) and len(items) >= minimum)


def config_error(exc: ValidationError, prefix: str = "", rename: Mapping[str, str] | None = None) -> ConfigError:
    """One ConfigError for a pydantic ValidationError: the first problem in full, the others by path."""
    errors = [err for err in exc.errors(include_url=False) if not _spurious(err)] or exc.errors(include_url=False)
    first = errors[0]
    reason = _reason(first)
    first_path = key_path(first["loc"], prefix, rename)
    others: list[str] = []
    for err in errors[1:]:
        path = key_path(err["loc"], prefix, rename)
        if path != first_path and path not in others:
            others.append(path)
    if others:
        reason += f" (also invalid: {', '.join(others)})"
    value = None if first["type"] == "missing" else first.get("input")
    return ConfigError(first_path or prefix or "config", value, reason)
