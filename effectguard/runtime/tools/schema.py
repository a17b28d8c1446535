"""A tool's JSON-schema parameters, read from its type hints and its docstring.

The description of a tool is its docstring up to the first section; each
parameter's description comes from the Google-style ``Args:`` section, or from
an ``Annotated[T, "description"]`` hint. Parameters with a default are not
required. ``idempotency_key`` is never part of the schema: an ``@effect``
tool's visible signature and hints leave it out (the executor supplies it,
never the model), and a plain function taking one is refused by
:meth:`ToolDefinition.from_function`.

Supported hints: ``str``, ``int``, ``float``, ``bool``, ``None``, ``Any``,
``list``/``Sequence``/``set``/``tuple`` (also fixed-length tuples), ``dict``/
``Mapping`` with ``str`` keys, ``Literal``, enums, ``TypedDict``, unions and
``Optional``. Anything else is a :class:`ConfigurationError` naming the
parameter: give a :class:`ToolDefinition` with your own schema instead.
"""

from __future__ import annotations

import collections.abc
import enum
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from effectguard._describe import parse_docstring
from effectguard.errors import ConfigurationError

__all__ = ["FunctionSchema", "function_schema", "parse_docstring"]

#: The parameter the executor fills in; never shown to a model.
HIDDEN = "idempotency_key"

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_ARRAYS = frozenset(
    {
        list,
        set,
        frozenset,
        collections.abc.Sequence,
        collections.abc.MutableSequence,
        collections.abc.Set,
        collections.abc.MutableSet,
        collections.abc.Collection,
        collections.abc.Iterable,
    }
)
_OBJECTS = frozenset({dict, collections.abc.Mapping, collections.abc.MutableMapping})


@dataclass(frozen=True, slots=True)
class FunctionSchema:
    """What a model is told about a function tool."""

    description: str
    parameters: dict[str, Any]


def _literal(values: tuple[Any, ...], where: str) -> dict[str, Any]:
    kinds = set()
    for value in values:
        if value is None:
            kinds.add("null")
        elif isinstance(value, bool):
            kinds.add("boolean")
        elif isinstance(value, int):
            kinds.add("integer")
        elif isinstance(value, str):
            kinds.add("string")
        else:
            msg = f"{where}: Literal values must be str, int, bool or None, not {value!r}"
            raise ConfigurationError(msg)
    schema: dict[str, Any] = {"enum": list(values)}
    if len(kinds) == 1:
        schema["type"] = kinds.pop()
    return schema


def _typed_dict(hint: Any, where: str) -> dict[str, Any]:
    hints = typing.get_type_hints(hint, include_extras=True)
    required = sorted(getattr(hint, "__required_keys__", hints))
    return {
        "type": "object",
        "properties": {
            name: type_schema(value, f"{where}.{name}") for name, value in hints.items()
        },
        "required": required,
        "additionalProperties": False,
    }


def _union(arguments: tuple[Any, ...], where: str) -> dict[str, Any]:
    options = [type_schema(argument, where) for argument in arguments]
    simple = [o.get("type") for o in options if set(o) == {"type"} and isinstance(o["type"], str)]
    if len(simple) == len(options):
        return {"type": simple}
    return {"anyOf": options}


def type_schema(hint: Any, where: str) -> dict[str, Any]:
    """Return the JSON schema of one type hint; ``where`` names it in errors."""
    if hint is Any or hint is inspect.Parameter.empty or hint is object:
        return {}
    if hint is None or hint is type(None):
        return {"type": "null"}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is typing.Annotated:
        schema = type_schema(arguments[0], where)
        notes = [note for note in arguments[1:] if isinstance(note, str)]
        if notes:
            schema["description"] = " ".join(notes)
        return schema
    if origin is typing.Literal:
        return _literal(arguments, where)
    if origin is typing.Union or origin is types.UnionType:
        return _union(arguments, where)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _literal(tuple(member.value for member in hint), where)
    if typing.is_typeddict(hint):
        return _typed_dict(hint, where)
    container = origin or hint
    if container is tuple:
        if not arguments:
            return {"type": "array"}
        if len(arguments) == 2 and arguments[1] is Ellipsis:  # noqa: PLR2004 - tuple[X, ...]
            return {"type": "array", "items": type_schema(arguments[0], where)}
        return {
            "type": "array",
            "prefixItems": [type_schema(argument, where) for argument in arguments],
            "minItems": len(arguments),
            "maxItems": len(arguments),
        }
    if container in _ARRAYS:
        schema = {"type": "array"}
        if arguments:
            schema["items"] = type_schema(arguments[0], where)
        return schema
    if container in _OBJECTS:
        if arguments and arguments[0] is not str:
            msg = f"{where}: JSON object keys are strings, so a mapping hint needs str keys"
            raise ConfigurationError(msg)
        schema = {"type": "object"}
        if len(arguments) == 2:  # noqa: PLR2004 - dict[str, X]
            schema["additionalProperties"] = type_schema(arguments[1], where)
        return schema
    msg = (
        f"{where}: cannot describe the type {hint!r} in JSON schema; use JSON types "
        "(str, int, float, bool, list, dict, Literal, TypedDict…) or give a ToolDefinition "
        "with your own parameters schema"
    )
    raise ConfigurationError(msg)


def _hints(func: Callable[..., Any], where: str) -> dict[str, Any]:
    try:
        return typing.get_type_hints(func, include_extras=True)
    except Exception as exc:
        msg = f"{where}: cannot resolve its type hints: {exc}"
        raise ConfigurationError(msg) from exc


def _json_default(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def function_schema(func: Callable[..., Any], *, name: str) -> FunctionSchema:
    """Return the description and JSON-schema parameters of ``func``, a tool named ``name``.

    Raises :class:`ConfigurationError` for ``*args`` (a JSON object has no
    positions) and for a hint with no JSON form.
    """
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        msg = f"tool {name}: cannot read the signature of {func!r}: {exc}"
        raise ConfigurationError(msg) from exc
    hints = _hints(func, f"tool {name}")
    description, documented = parse_docstring(inspect.getdoc(func))
    properties: dict[str, Any] = {}
    required: list[str] = []
    extra = False
    for parameter in signature.parameters.values():
        where = f"tool {name}, parameter {parameter.name}"
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            msg = f"{where}: a tool called with a JSON object cannot take *{parameter.name}"
            raise ConfigurationError(msg)
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            extra = True
            continue
        schema = type_schema(hints.get(parameter.name, inspect.Parameter.empty), where)
        if parameter.name in documented and "description" not in schema:
            schema["description"] = documented[parameter.name]
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
        elif _json_default(parameter.default):
            schema["default"] = parameter.default
        properties[parameter.name] = schema
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": extra,
    }
    return FunctionSchema(description=description, parameters=parameters)


def describes(parameters: Mapping[str, Any], name: str) -> bool:
    """True when the JSON-schema ``parameters`` has a property called ``name``."""
    properties = parameters.get("properties")
    return isinstance(properties, Mapping) and name in properties
