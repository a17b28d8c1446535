"""Output codecs: how a handler's output is stored as JSON and rebuilt for a replay."""

from __future__ import annotations

import base64
import dataclasses
import enum
import inspect
import json
import math
import sys
import types
import typing
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, Generic, Literal, TypeVar, Union

from effectguard._contract import OutputCodec
from effectguard.errors import ConfigurationError

__all__ = [
    "TAGGED",
    "AnnotationCodec",
    "DataclassCodec",
    "PydanticCodec",
    "Tagged",
    "Unstorable",
    "b64",
    "codec_for",
    "holds_no_tag",
    "unb64",
]


# ---- Tagged forms of standard types the default codec stores ----


class Unstorable(TypeError):
    """A part of an output the codec cannot store; ``path`` names it (``$.when``, ``$[2]``)."""

    def __init__(self, path: str, value: Any, detail: str) -> None:
        self.relative = path
        self.value_type = type(value).__qualname__
        self.detail = detail
        super().__init__(f"{self.path} {detail}")

    @property
    def path(self) -> str:
        """Where in the output, from ``$`` (the whole output)."""
        return "$" + self.relative

    def under(self, step: str) -> Unstorable:
        """The same failure, seen from one level up (``step`` is ``.key`` or ``[i]``)."""
        moved = Unstorable(step + self.relative, None, self.detail)
        moved.value_type = self.value_type
        return moved


def b64(value: bytes) -> str:
    """``value`` as base64 text."""
    return base64.b64encode(value).decode("ascii")


def unb64(text: str) -> bytes:
    """The bytes :func:`b64` turned into ``text``."""
    return base64.b64decode(text.encode("ascii"), validate=True)


#: Tag name → how its text is rebuilt. ``$tuple`` and ``$dict`` hold JSON values instead.
_FROM_TEXT: dict[str, Callable[[Any], Any]] = {
    "$datetime": datetime.fromisoformat,
    "$date": date.fromisoformat,
    "$time": time.fromisoformat,
    "$decimal": Decimal,
    "$uuid": uuid.UUID,
    "$bytes": unb64,
}


_TAGS = frozenset({*_FROM_TEXT, "$tuple", "$dict"})


if not all(tag.startswith("$") for tag in _TAGS):  # pragma: no cover - a guard on edits here
    _msg = "every tag starts with '$': holds_no_tag() relies on it"
    raise AssertionError(_msg)


def holds_no_tag(json_text: str) -> bool:
    """True when ``json_text`` cannot hold a tag: its decoded value needs no :meth:`Tagged.decode`.

    Every tag is a key starting with ``$``, which JSON text spells literally.
    """
    return "$" not in json_text


def _text_tag(value: Any) -> tuple[str, str] | None:
    # datetime before date: a datetime is also a date.
    if isinstance(value, datetime):
        return "$datetime", str(value)
    if isinstance(value, date):
        return "$date", value.isoformat()
    if isinstance(value, time):
        return "$time", value.isoformat()
    if isinstance(value, Decimal):
        return "$decimal", str(value)
    if isinstance(value, uuid.UUID):
        return "$uuid", str(value)
    if isinstance(value, (bytes, bytearray)):
        return "$bytes", b64(bytes(value))
    return None


class Tagged:
    """Encodes any value it can into canonical-JSON-ready data, tagging standard types."""

    def encode(self, value: Any) -> Any:
        """Return the JSON data for ``value``; :class:`Unstorable` naming the part that has none."""
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, enum.Enum):
            if isinstance(value, (str, int)):
                return value.value
            detail = (
                f"is a {type(value).__qualname__} member; annotate the return type with "
                f"{type(value).__qualname__} so it can be stored"
            )
            raise Unstorable("", value, detail)
        if isinstance(value, (str, int)):
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise Unstorable("", value, f"is {value!r}; only finite numbers are JSON-encodable")
            return value
        tagged = _text_tag(value)
        if tagged is not None:
            return {tagged[0]: tagged[1]}
        if isinstance(value, Mapping):
            return self._mapping(value)
        if isinstance(value, list):
            return self._items(value)
        if isinstance(value, tuple):
            return {"$tuple": self._items(value)}
        detail = f"is a {type(value).__qualname__}, which is not JSON-encodable"
        raise Unstorable("", value, detail)

    def _items(self, values: Any) -> list[Any]:
        out = []
        for index, item in enumerate(values):
            try:
                out.append(self.encode(item))
            except Unstorable as exc:
                raise exc.under(f"[{index}]") from None
        return out

    def _mapping(self, value: Mapping[Any, Any]) -> Any:
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                detail = f"has a key {key!r} of type {type(key).__qualname__}; keys must be str"
                raise Unstorable("", value, detail)
            try:
                out[key] = self.encode(item)
            except Unstorable as exc:
                raise exc.under(f".{key}") from None
        # A dict of the caller's own that looks like a tag is wrapped, so it comes back as a dict.
        if len(out) == 1 and next(iter(out)) in _TAGS:
            return {"$dict": out}
        return out

    def decode(self, data: Any) -> Any:
        """Return the value :meth:`encode` turned into ``data``."""
        if isinstance(data, list):
            return [self.decode(item) for item in data]
        if not isinstance(data, dict):
            return data
        if len(data) == 1:
            ((tag, inner),) = data.items()
            if tag in _FROM_TEXT:
                return _FROM_TEXT[tag](inner)
            if tag == "$tuple":
                return tuple(self.decode(item) for item in inner)
            if tag == "$dict":
                return {key: self.decode(item) for key, item in inner.items()}
        return {key: self.decode(item) for key, item in data.items()}


#: The one default codec: used wherever a contract names no codec.
TAGGED = Tagged()


# ---- Output codecs for dataclasses and pydantic models ----

T = TypeVar("T")


_Encode = Callable[[Any], Any]


_Decode = Callable[[Any], Any]


_Pair = tuple[_Encode, _Decode]


def _identity(value: Any) -> Any:
    return value


_IDENTITY: _Pair = (_identity, _identity)


_TAGGED: _Pair = (TAGGED.encode, TAGGED.decode)


_SCALARS = (str, int, float, bool, type(None), None)


#: Annotations that say nothing of the value's type: the default (tagging) codec stores them.
_UNTYPED = (Any, object, dict, list, Mapping, Sequence)


#: Types stored as their string form and rebuilt from it.
_TEXT: dict[type, _Decode] = {
    datetime: datetime.fromisoformat,
    date: date.fromisoformat,
    time: time.fromisoformat,
    Decimal: Decimal,
    uuid.UUID: uuid.UUID,
}


def _checked(tp: type, encode: _Encode) -> _Encode:
    """``encode``, refusing a value that is not a ``tp``: it would not come back as itself."""

    def check(value: Any) -> Any:
        if not isinstance(value, tp):
            detail = f"is a {type(value).__qualname__}, not the {tp.__qualname__} annotated"
            raise Unstorable("", value, detail)
        return encode(value)

    return check


def _at(step: str, encode: _Encode) -> _Encode:
    """``encode`` for the part at ``step`` (``.field``): its failures name that path."""

    def at(value: Any) -> Any:
        try:
            return encode(value)
        except Unstorable as exc:
            raise exc.under(step) from None

    return at


def _each(encode: _Encode) -> Callable[[Any], list[Any]]:
    def each(values: Any) -> list[Any]:
        return [_at(f"[{i}]", encode)(item) for i, item in enumerate(values)]

    return each


class _Fields:
    """Converts one dataclass, field by field; made before its fields so it may recur."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.fields: list[tuple[str, _Encode, _Decode]] = []

    def encode(self, value: Any) -> Any:
        if type(value) is not self.cls:
            detail = f"is a {type(value).__qualname__}, not the {self.cls.__qualname__} annotated"
            raise Unstorable("", value, detail)
        return {name: enc(getattr(value, name)) for name, enc, _ in self.fields}

    def decode(self, data: Any) -> Any:
        return self.cls(**{name: dec(data[name]) for name, _, dec in self.fields if name in data})


class _Converters:
    """Builds an (encode, decode) pair for a type annotation, refusing what it cannot store."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.dataclasses: dict[type, _Fields] = {}

    def refuse(self, tp: Any, where: str) -> ConfigurationError:
        root = getattr(self.root, "__qualname__", None) or repr(self.root)
        msg = (
            f"the output codec for {root}: {where} is {tp!r}, which it cannot store "
            "losslessly; use PydanticCodec or a codec of your own"
        )
        return ConfigurationError(msg)

    def build(self, tp: Any, where: str) -> _Pair:
        if tp in _SCALARS:
            return _IDENTITY
        if tp in _UNTYPED:
            return _TAGGED
        if isinstance(tp, type) and tp in _TEXT:
            return _checked(tp, str), _TEXT[tp]
        if tp is bytes:
            return _checked(bytes, b64), unb64
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return _checked(tp, lambda value: value.value), tp
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            fields = self.dataclass(tp)
            return fields.encode, fields.decode
        if _is_pydantic_model(tp):
            model: PydanticCodec[Any] = PydanticCodec(tp)
            return model.encode, model.decode
        if typing.is_typeddict(tp):
            return self.typeddict(tp, where)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is Literal:
            return _IDENTITY
        if tp is tuple:
            return (lambda v: TAGGED.encode(list(v))), (lambda v: tuple(TAGGED.decode(v)))
        if origin is Union or origin is types.UnionType:
            return self.union(tp, args, where)
        if origin in (list, Sequence) and args:
            enc, dec = self.build(args[0], f"{where}[]")
            return _each(enc), (lambda v: [dec(x) for x in v])
        if origin is tuple:
            return self.tuple(args, where)
        if origin in (dict, Mapping) and args and args[0] is str:
            enc, dec = self.build(args[1], f"{where}[]")
            return (
                (lambda v: {k: _at(f".{k}", enc)(x) for k, x in v.items()}),
                (lambda v: {k: dec(x) for k, x in v.items()}),
            )
        raise self.refuse(tp, where)

    def typeddict(self, tp: Any, where: str) -> _Pair:
        hints = typing.get_type_hints(tp)
        pairs = {key: self.build(hint, f"{where}.{key}") for key, hint in hints.items()}

        def encode(value: Any) -> Any:
            return {
                key: _at(f".{key}", pairs[key][0] if key in pairs else TAGGED.encode)(item)
                for key, item in value.items()
            }

        def decode(data: Any) -> Any:
            return {
                key: (pairs[key][1] if key in pairs else TAGGED.decode)(item)
                for key, item in data.items()
            }

        return encode, decode

    def union(self, tp: Any, args: tuple[Any, ...], where: str) -> _Pair:
        others = [arg for arg in args if arg is not type(None)]
        if all(arg in _SCALARS for arg in others):
            return _IDENTITY
        if len(others) == 1:
            enc, dec = self.build(others[0], where)
            return (
                (lambda v: None if v is None else enc(v)),
                (lambda v: None if v is None else dec(v)),
            )
        raise self.refuse(tp, where)

    def tuple(self, args: tuple[Any, ...], where: str) -> _Pair:
        if len(args) == 2 and args[1] is Ellipsis:  # noqa: PLR2004 - tuple[X, ...]
            enc, dec = self.build(args[0], f"{where}[]")
            return _each(enc), (lambda v: tuple(dec(x) for x in v))
        pairs = [self.build(arg, f"{where}[{i}]") for i, arg in enumerate(args)]

        def encode(value: Any) -> Any:
            if len(value) != len(pairs):
                detail = f"has {len(value)} items, not the {len(pairs)} annotated"
                raise Unstorable("", value, detail)
            return [_at(f"[{i}]", enc)(x) for i, ((enc, _), x) in enumerate(zip(pairs, value))]  # noqa: B905 - lengths checked above

        return encode, (lambda v: tuple(dec(x) for (_, dec), x in zip(pairs, v, strict=True)))

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
                fields.fields.append((field.name, _at(f".{field.name}", enc), dec))
        return fields


class DataclassCodec(Generic[T]):
    """Stores instances of one dataclass as JSON objects and rebuilds equal ones on replay.

    Field types may be JSON scalars, ``Any`` (stored by the default codec),
    ``Literal``, enums (by value), ``datetime``, ``date``, ``time``,
    ``Decimal`` and ``UUID`` (as text), ``bytes`` (base64), nested dataclasses
    and pydantic models, TypedDicts, ``list[X]``, ``tuple[X, ...]``,
    ``tuple[X, Y]``, ``dict[str, X]`` and ``X | None``. Any other field type is
    a :class:`ConfigurationError` when the codec is made. Only fields that
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


class AnnotationCodec:
    """Stores values of an annotated type (``datetime``, ``dict[str, Decimal]``…) losslessly.

    Takes the types :class:`DataclassCodec` takes for fields. Refuses, when it
    is made, an annotation it cannot store: :class:`ConfigurationError`.
    """

    def __init__(self, annotation: Any) -> None:
        self.type = annotation
        self._encode, self._decode = _Converters(annotation).build(annotation, "the output")

    def __repr__(self) -> str:
        return f"AnnotationCodec({self.type!r})"

    def encode(self, output: Any) -> Any:
        """Return the JSON data for ``output``; ``TypeError`` naming the part that does not fit."""
        return self._encode(output)

    def decode(self, data: Any) -> Any:
        """Return the value :meth:`encode` stored as ``data``."""
        return self._decode(data)


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
            detail = f"is a {type(output).__qualname__}, not the {self.type.__qualname__} annotated"
            raise Unstorable("", output, detail)
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
    """Return the codec for outputs of type ``tp``, or None when the default codec does.

    A dataclass gets a :class:`DataclassCodec`, a pydantic model a
    :class:`PydanticCodec`, any other annotation naming a type JSON cannot
    say (``datetime``, ``dict[str, Decimal]``, ``tuple[int, str]``…) an
    :class:`AnnotationCodec`. JSON scalars and untyped annotations (``dict``,
    ``Any``, none at all) get None: the default codec stores them, with tags.
    An annotation no codec can store is a :class:`ConfigurationError`.
    """
    if tp is None or tp is inspect.Signature.empty:
        return None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return DataclassCodec(tp)
    if _is_pydantic_model(tp):
        return PydanticCodec(tp)
    pair = _Converters(tp).build(tp, "the output")
    if pair is _IDENTITY or pair is _TAGGED:
        return None
    return AnnotationCodec(tp)
