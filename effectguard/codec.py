"""Output codecs: outputs that are not plain JSON, stored losslessly and replayed as themselves.

The ledger stores outputs as canonical JSON. A tool returning a dataclass or a
pydantic model names a codec (or lets ``@effect`` infer one from its return
annotation) so that a replay returns an equal object of the same type, not a
dict. A codec refuses, when it is made, a type it cannot store losslessly: the
alternative is finding out after the provider committed the effect, when an
unstorable output leaves the operation unconfirmed.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
import types
import typing
import uuid
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Generic, Literal, TypeVar, Union

from effectguard.contract import OutputCodec
from effectguard.errors import ConfigurationError

__all__ = ["DataclassCodec", "PydanticCodec", "codec_for"]

T = TypeVar("T")

_Encode = Callable[[Any], Any]
_Decode = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


_IDENTITY = (_identity, _identity)
_SCALARS = (str, int, float, bool, type(None))
#: Types stored as their string form and rebuilt from it.
_TEXT: dict[type, _Decode] = {
    datetime: datetime.fromisoformat,
    date: date.fromisoformat,
    Decimal: Decimal,
    uuid.UUID: uuid.UUID,
}


class _Fields:
    """Converts one dataclass, field by field; made before its fields so it may recur."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.fields: list[tuple[str, _Encode, _Decode]] = []

    def encode(self, value: Any) -> Any:
        if type(value) is not self.cls:
            msg = f"expected a {self.cls.__qualname__}, got a {type(value).__qualname__}"
            raise TypeError(msg)
        return {name: enc(getattr(value, name)) for name, enc, _ in self.fields}

    def decode(self, data: Any) -> Any:
        return self.cls(**{name: dec(data[name]) for name, _, dec in self.fields if name in data})


class _Converters:
    """Builds an (encode, decode) pair for a type annotation, refusing what it cannot store."""

    def __init__(self, root: type) -> None:
        self.root = root
        self.dataclasses: dict[type, _Fields] = {}

    def refuse(self, tp: Any, where: str) -> ConfigurationError:
        msg = (
            f"DataclassCodec({self.root.__qualname__}): {where} is {tp!r}, which it cannot "
            "store losslessly; use PydanticCodec or a codec of your own"
        )
        return ConfigurationError(msg)

    def build(self, tp: Any, where: str) -> tuple[_Encode, _Decode]:
        if tp is Any or tp is object or tp in _SCALARS:
            return _IDENTITY
        if isinstance(tp, type) and tp in _TEXT:
            return str, _TEXT[tp]
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return (lambda value: value.value), tp
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            fields = self.dataclass(tp)
            return fields.encode, fields.decode
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is Literal or tp in (list, dict, tuple):
            return _IDENTITY
        if origin is Union or origin is types.UnionType:
            return self.union(tp, args, where)
        if origin is list:
            enc, dec = self.build(args[0], f"{where}[]")
            return (lambda v: [enc(x) for x in v]), (lambda v: [dec(x) for x in v])
        if origin is tuple:
            return self.tuple(args, where)
        if origin is dict and args and args[0] is str:
            enc, dec = self.build(args[1], f"{where}[]")
            return (
                (lambda v: {k: enc(x) for k, x in v.items()}),
                (lambda v: {k: dec(x) for k, x in v.items()}),
            )
        raise self.refuse(tp, where)

    def union(self, tp: Any, args: tuple[Any, ...], where: str) -> tuple[_Encode, _Decode]:
        others = [arg for arg in args if arg is not type(None)]
        if all(arg in _SCALARS or arg is Any for arg in others):
            return _IDENTITY
        if len(others) == 1:
            enc, dec = self.build(others[0], where)
            return (
                (lambda v: None if v is None else enc(v)),
                (lambda v: None if v is None else dec(v)),
            )
        raise self.refuse(tp, where)

    def tuple(self, args: tuple[Any, ...], where: str) -> tuple[_Encode, _Decode]:
        if len(args) == 2 and args[1] is Ellipsis:  # noqa: PLR2004 - tuple[X, ...]
            enc, dec = self.build(args[0], f"{where}[]")
            return (lambda v: [enc(x) for x in v]), (lambda v: tuple(dec(x) for x in v))
        pairs = [self.build(arg, f"{where}[{i}]") for i, arg in enumerate(args)]
        return (
            (lambda v: [enc(x) for (enc, _), x in zip(pairs, v, strict=True)]),
            (lambda v: tuple(dec(x) for (_, dec), x in zip(pairs, v, strict=True))),
        )

    def dataclass(self, cls: type) -> _Fields:
        known = self.dataclasses.get(cls)
        if known is not None:
            return known
        fields = self.dataclasses[cls] = _Fields(cls)
        try:
            hints = typing.get_type_hints(cls)
        except Exception as exc:
            msg = f"DataclassCodec: cannot resolve the annotations of {cls.__qualname__}: {exc}"
            raise ConfigurationError(msg) from exc
        for field in dataclasses.fields(cls):
            if field.init:  # fields outside __init__ are rebuilt by the class itself
                enc, dec = self.build(hints[field.name], f"{cls.__qualname__}.{field.name}")
                fields.fields.append((field.name, enc, dec))
        return fields


class DataclassCodec(Generic[T]):
    """Stores instances of one dataclass as JSON objects and rebuilds equal ones on replay.

    Field types may be JSON scalars, ``Any``, ``Literal``, enums (by value),
    ``datetime``, ``date``, ``Decimal`` and ``UUID`` (as text), nested
    dataclasses, ``list[X]``, ``tuple[X, ...]``, ``tuple[X, Y]``,
    ``dict[str, X]`` and ``X | None``. Any other field type is a
    :class:`ConfigurationError` when the codec is made. Only fields that
    ``__init__`` takes are stored.
    """

    def __init__(self, cls: type[T]) -> None:
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            msg = f"DataclassCodec needs a dataclass type, not {cls!r}"
            raise ConfigurationError(msg)
        self.type = cls
        self._fields = _Converters(cls).dataclass(cls)

    def __repr__(self) -> str:
        return f"DataclassCodec({self.type.__qualname__})"

    def encode(self, output: T) -> Any:
        """Return the JSON object for ``output``; ``TypeError`` if it is not exactly this type."""
        return self._fields.encode(output)

    def decode(self, data: Any) -> T:
        """Return the instance :meth:`encode` stored as ``data``."""
        value: T = self._fields.decode(data)
        return value


class PydanticCodec(Generic[T]):
    """Stores values of a pydantic-validated type (a model, or e.g. ``list[Model]``) as JSON.

    Needs pydantic 2 (an optional dependency). Values are dumped in JSON mode
    and validated back in JSON mode, so strict models replay too.
    """

    def __init__(self, type_: type[T]) -> None:
        try:
            from pydantic import TypeAdapter  # noqa: PLC0415 - pydantic is optional
        except ModuleNotFoundError as exc:
            msg = f"PydanticCodec needs pydantic 2: pip install pydantic ({exc})"
            raise ConfigurationError(msg) from exc
        try:
            self._adapter: Any = TypeAdapter(type_)
        except Exception as exc:
            msg = f"PydanticCodec cannot handle {type_!r}: {exc}"
            raise ConfigurationError(msg) from exc
        self.type = type_

    def __repr__(self) -> str:
        return f"PydanticCodec({getattr(self.type, '__qualname__', self.type)!r})"

    def encode(self, output: T) -> Any:
        """Return the JSON form of ``output``; ``TypeError`` if a model output is another type."""
        if isinstance(self.type, type) and not isinstance(output, self.type):
            msg = f"expected a {self.type.__qualname__}, got a {type(output).__qualname__}"
            raise TypeError(msg)
        return self._adapter.dump_python(output, mode="json")

    def decode(self, data: Any) -> T:
        """Return the value :meth:`encode` stored as ``data``, validated again."""
        value: T = self._adapter.validate_json(json.dumps(data))
        return value


def _is_pydantic_model(tp: Any) -> bool:
    # A pydantic model can exist only if pydantic is imported: never import it here.
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def codec_for(tp: Any) -> OutputCodec[Any] | None:
    """Return the codec for outputs of type ``tp``, or None when plain JSON needs none.

    A dataclass gets a :class:`DataclassCodec`, a pydantic model a
    :class:`PydanticCodec`; any other type gets None.
    """
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return DataclassCodec(tp)
    if _is_pydantic_model(tp):
        return PydanticCodec(tp)
    return None
