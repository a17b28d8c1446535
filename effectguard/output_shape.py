"""Whether an operator's output is what the tool declares it returns.

An operator who confirms an operation types its output as JSON; every later
call replays that output to code that trusts the tool's return annotation.
:func:`output_problem` reads the JSON through the contract's codec (so a
dataclass or pydantic output is rebuilt, and refused if it cannot be) and then
checks the value against the annotation: plain types, ``None``, unions,
``Literal``, ``list``/``tuple``/``set``/``dict`` and their abstract forms with
their parameters, ``TypedDict`` keys, and classes by ``isinstance``. A typing
construct it does not know is accepted: the check refuses only what it can
show is wrong.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any, Literal, Union

from effectguard.codec_tags import TAGGED
from effectguard.contract import OutputCodec

__all__ = ["output_problem"]

_SEQUENCES = (list, tuple, set, frozenset, collections.abc.Sequence, collections.abc.Set)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


def output_problem(output: Any, annotation: Any, codec: OutputCodec[Any] | None) -> str | None:
    """Return why ``output`` (a JSON value) is not a ``annotation``, or None when it is.

    ``codec`` is the contract's codec (None: the default one), which first
    reads the JSON back into the value a replay would return.
    """
    try:
        value = (TAGGED if codec is None else codec).decode(output)
    except Exception as exc:  # noqa: BLE001 - any decoding failure is the operator's mistake
        plain = _mismatch(output, annotation, "$") if typing.get_origin(annotation) else None
        if plain is not None:  # a container of the wrong kind: say so, not how decoding broke
            return plain
        return f"the output cannot be read as {_name(annotation)}: {type(exc).__name__}: {exc}"
    return _mismatch(value, annotation, "$")


def _name(annotation: Any) -> str:
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


def _kind(value: Any) -> str:
    return "null" if value is None else _a(type(value).__qualname__)


def _a(name: str) -> str:
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _mismatch(value: Any, annotation: Any, path: str) -> str | None:  # noqa: C901, PLR0911 - one branch per kind of annotation
    if annotation in (Any, object):
        return None
    if annotation is None or annotation is type(None):
        return None if value is None else f"{path} is {_kind(value)}, not null"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _mismatch(value, args[0], path)
    if origin in (Union, types.UnionType):
        if any(_mismatch(value, arm, path) is None for arm in args):
            return None
        return f"{path} is {_kind(value)}, not {_name(annotation)}"
    if origin is Literal:
        return None if value in args else f"{path} is {value!r}, not one of {list(args)!r}"
    if typing.is_typeddict(annotation):
        return _typed_dict(value, annotation, path)
    if origin in _MAPPINGS or annotation in _MAPPINGS:
        return _mapping(value, args, path)
    if origin in _SEQUENCES or annotation in _SEQUENCES:
        return _sequence(value, origin or annotation, args, path)
    if isinstance(annotation, type):
        if annotation is float and isinstance(value, int) and not isinstance(value, bool):
            return None
        if isinstance(value, annotation):
            return None
        return f"{path} is {_kind(value)}, not {_a(_name(annotation))}"
    return None


def _mapping(value: Any, args: tuple[Any, ...], path: str) -> str | None:
    if not isinstance(value, collections.abc.Mapping):
        return f"{path} is {_kind(value)}, not an object"
    if len(args) == 2:  # noqa: PLR2004 - a mapping's key and value types
        for key, item in value.items():
            problem = _mismatch(key, args[0], f"{path} key") or _mismatch(
                item, args[1], f"{path}.{key}"
            )
            if problem:
                return problem
    return None


def _sequence(value: Any, kind: Any, args: tuple[Any, ...], path: str) -> str | None:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        return f"{path} is {_kind(value)}, not an array"
    items = list(value)
    if kind is tuple and args and args[-1] is not Ellipsis:
        if len(items) != len(args):
            return f"{path} has {len(items)} items, not {len(args)}"
        pairs = list(zip(items, args, strict=True))
    else:
        item_type = args[0] if args else Any
        pairs = [(item, item_type) for item in items]
    for index, (item, item_type) in enumerate(pairs):
        problem = _mismatch(item, item_type, f"{path}[{index}]")
        if problem:
            return problem
    return None


def _typed_dict(value: Any, annotation: Any, path: str) -> str | None:
    if not isinstance(value, collections.abc.Mapping):
        return f"{path} is {_kind(value)}, not an object"
    missing = sorted(set(annotation.__required_keys__) - set(value))
    if missing:
        return f"{path} lacks the key(s) {', '.join(missing)}"
    hints = typing.get_type_hints(annotation)
    for key, item in value.items():
        if key in hints:
            problem = _mismatch(item, hints[key], f"{path}.{key}")
            if problem:
                return problem
    return None
