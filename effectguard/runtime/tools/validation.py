"""Checking a model's tool arguments against the tool's JSON schema.

The runtime validates a documented subset of JSON Schema (2020-12), the part
tool schemas use: ``type``, ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties``, ``items``, ``prefixItems``, ``minItems``,
``maxItems``, ``minLength``, ``maxLength``, ``pattern``, ``minimum``,
``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``, ``anyOf``, ``oneOf``
and ``allOf``; ``title``, ``description``, ``default``, ``examples``,
``format`` and ``$schema`` are annotations. A schema using any other keyword
(``$ref``, ``if``, ``not``…) is refused when the tool is defined, so no tool
is ever validated less strictly than its schema says.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from effectguard.errors import ConfigurationError

__all__ = ["check_schema", "parse_arguments", "validate"]

_ASSERTIONS = frozenset(
    {
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "anyOf",
        "oneOf",
        "allOf",
    }
)
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "format", "$schema"})
_TYPES = frozenset({"string", "integer", "number", "boolean", "null", "array", "object"})
_MAX_PROBLEMS = 10


def check_schema(schema: Any, where: str) -> None:
    """Raise :class:`ConfigurationError` unless ``schema`` uses only the supported subset."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, Mapping):
        msg = f"{where}: a schema is a JSON object (or true/false), not {type(schema).__name__}"
        raise ConfigurationError(msg)
    unknown = sorted(set(schema) - _ASSERTIONS - _ANNOTATIONS)
    if unknown:
        msg = (
            f"{where}: unsupported JSON-schema keyword {', '.join(unknown)}; the runtime "
            "validates type, enum, const, properties, required, additionalProperties, items, "
            "prefixItems, min/max(Items|Length|imum), pattern, anyOf, oneOf and allOf"
        )
        raise ConfigurationError(msg)
    kinds = schema.get("type")
    for kind in [kinds] if isinstance(kinds, str) else kinds or []:
        if kind not in _TYPES:
            msg = f"{where}: unknown type {kind!r}"
            raise ConfigurationError(msg)
    if "pattern" in schema:
        try:
            re.compile(schema["pattern"])
        except (re.error, TypeError) as exc:
            msg = f"{where}: pattern {schema['pattern']!r} is not a regular expression: {exc}"
            raise ConfigurationError(msg) from exc
    for name, sub in (schema.get("properties") or {}).items():
        check_schema(sub, f"{where}.{name}")
    for key in ("additionalProperties", "items"):
        if key in schema:
            check_schema(schema[key], f"{where}[{key}]")
    for key in ("prefixItems", "anyOf", "oneOf", "allOf"):
        for index, sub in enumerate(schema.get(key) or ()):
            check_schema(sub, f"{where}[{key}][{index}]")


def parse_arguments(arguments: Mapping[str, Any] | str) -> tuple[dict[str, Any] | None, str]:
    """Return ``(arguments, "")``, or ``(None, problem)`` when they are not a JSON object.

    A model may send its arguments as JSON text; they are parsed here, and
    malformed text is a problem reported back to it, never an exception.
    """
    value: Any = arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except ValueError as exc:
            return None, f"arguments are not valid JSON: {exc}"
    if not isinstance(value, Mapping):
        return None, f"arguments must be a JSON object, not {_kind(value)}"
    if not all(isinstance(key, str) for key in value):
        return None, "argument names must be strings"
    return dict(value), ""


def validate(value: Any, schema: Any) -> list[str]:
    """Return the problems of ``value`` against ``schema`` (empty when it is valid)."""
    return _collect(value, schema, "arguments")[:_MAX_PROBLEMS]


def _collect(value: Any, schema: Any, path: str) -> list[str]:
    problems: list[str] = []
    _check(value, schema, path, problems)
    return problems


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Sequence):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _is(value: Any, kind: str) -> bool:
    actual = _kind(value)
    if kind == "number":
        return actual in ("integer", "number") and (actual == "integer" or math.isfinite(value))
    # An integral float is refused for "integer": 2.0 and 2 would fingerprint differently.
    return actual == kind


def _equal(left: Any, right: Any) -> bool:
    # JSON equality: true is not 1, and 1 equals 1.0.
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    return bool(left == right)


def _check(value: Any, schema: Any, path: str, problems: list[str]) -> None:
    if schema is True or schema == {}:
        return
    if schema is False:
        problems.append(f"{path}: not allowed")
        return
    before = len(problems)
    kinds = schema.get("type")
    if kinds is not None:
        allowed = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_is(value, kind) for kind in allowed):
            problems.append(f"{path}: expected {' or '.join(allowed)}, got {_kind(value)}")
            return
    if "const" in schema and not _equal(value, schema["const"]):
        problems.append(f"{path}: must be {json.dumps(schema['const'])}")
    if "enum" in schema and not any(_equal(value, option) for option in schema["enum"]):
        options = ", ".join(json.dumps(option) for option in schema["enum"])
        problems.append(f"{path}: must be one of {options}")
    _check_string(value, schema, path, problems)
    _check_number(value, schema, path, problems)
    _check_array(value, schema, path, problems)
    _check_object(value, schema, path, problems)
    _check_combinators(value, schema, path, problems)
    del problems[before + _MAX_PROBLEMS :]


def _check_string(value: Any, schema: Mapping[str, Any], path: str, problems: list[str]) -> None:
    if not isinstance(value, str):
        return
    if "minLength" in schema and len(value) < schema["minLength"]:
        problems.append(f"{path}: shorter than {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        problems.append(f"{path}: longer than {schema['maxLength']} characters")
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        problems.append(f"{path}: does not match {schema['pattern']!r}")


def _check_number(value: Any, schema: Mapping[str, Any], path: str, problems: list[str]) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if "minimum" in schema and value < schema["minimum"]:
        problems.append(f"{path}: less than {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        problems.append(f"{path}: greater than {schema['maximum']}")
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        problems.append(f"{path}: not greater than {schema['exclusiveMinimum']}")
    if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
        problems.append(f"{path}: not less than {schema['exclusiveMaximum']}")


def _check_array(value: Any, schema: Mapping[str, Any], path: str, problems: list[str]) -> None:
    if _kind(value) != "array":
        return
    if "minItems" in schema and len(value) < schema["minItems"]:
        problems.append(f"{path}: fewer than {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        problems.append(f"{path}: more than {schema['maxItems']} items")
    prefix = schema.get("prefixItems") or []
    for index, item in enumerate(value):
        if index < len(prefix):
            _check(item, prefix[index], f"{path}[{index}]", problems)
        elif "items" in schema:
            _check(item, schema["items"], f"{path}[{index}]", problems)


def _check_object(value: Any, schema: Mapping[str, Any], path: str, problems: list[str]) -> None:
    if not isinstance(value, Mapping):
        return
    properties = schema.get("properties") or {}
    problems.extend(
        f"{path}: missing required {name!r}"
        for name in schema.get("required") or ()
        if name not in value
    )
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            _check(item, properties[name], f"{path}.{name}", problems)
        elif extra is False:
            problems.append(f"{path}: unexpected {name!r}")
        else:
            _check(item, extra, f"{path}.{name}", problems)


def _check_combinators(
    value: Any, schema: Mapping[str, Any], path: str, problems: list[str]
) -> None:
    for sub in schema.get("allOf") or ():
        _check(value, sub, path, problems)
    if "anyOf" in schema:
        failures = [_collect(value, sub, path) for sub in schema["anyOf"]]
        if all(failures):
            problems.append(f"{path}: matches none of the allowed forms ({failures[0][0]})")
    if "oneOf" in schema:
        matches = sum(1 for sub in schema["oneOf"] if not _collect(value, sub, path))
        if matches != 1:
            problems.append(f"{path}: must match exactly one allowed form, matches {matches}")
