"""The default output codec: plain JSON, plus tags for standard types where no annotation says.

A tool annotated ``-> dict`` (or not annotated) that returns
``{"when": datetime(...)}`` still has its output stored and replayed as it was:
a value whose type JSON cannot say is stored as a one-key object naming it::

    {"$datetime": "2026-01-02 03:04:05+00:00"}   datetime (timezone kept)
    {"$date": "2026-01-02"}                      date
    {"$time": "03:04:05"}                        time
    {"$decimal": "12.30"}                        Decimal
    {"$uuid": "..."}                             UUID
    {"$bytes": "aGk="}                           bytes (base64)
    {"$tuple": [...]}                            tuple
    {"$dict": {...}}                             a dict of its own that looks like a tag

The text stays canonical JSON. Enum members whose class is also ``str`` or
``int`` are stored as their value (a replay returns the value); any other enum
member, dataclass or model in an untyped position cannot be rebuilt without its
class, so it is :class:`Unstorable` there: annotate the return type to store it.
A tag is used only where the annotation cannot say the type; a typed position
(``-> datetime``, a dataclass field) stores the plain text.
"""

from __future__ import annotations

import base64
import enum
import math
import uuid
from collections.abc import Callable, Mapping
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

__all__ = ["TAGGED", "Tagged", "Unstorable", "b64", "holds_no_tag", "unb64"]


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
