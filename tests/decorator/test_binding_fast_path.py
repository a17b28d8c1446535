"""A tool's call binds to the same arguments mapping, or the same error, on the fast path.

``ToolShape.bind`` binds the calls of a tool with only named parameters
without ``inspect``; every answer (the mapping, its order, the default
objects, or the ``TypeError``) must be the one ``inspect.Signature.bind`` gives.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from effectguard._decorator import ToolShape

SHARED_DEFAULT: list[int] = []


def named(a: int, b: str = "x", *, c: float = 1.5, d: list[int] = SHARED_DEFAULT) -> None:
    """Positional-or-keyword and keyword-only parameters, some with defaults."""


def with_key(amount: int, currency: str = "EUR", *, idempotency_key: str | None = None) -> None:
    """A tool that takes the provider key the executor supplies."""


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((1,), {}),
    ((1, "y"), {}),
    ((), {"a": 1}),
    ((), {"b": "y", "a": 1}),
    ((1,), {"d": [2], "c": 2.5}),
    ((1, "y"), {"c": 0.0}),
    ((), {"d": [1], "c": 0.5, "b": "z", "a": 3}),
    # Each of these fails to bind: too many, unknown, repeated, missing, keyword-only by position.
    ((1, "y", 2.0), {}),
    ((1,), {"e": 1}),
    ((1,), {"a": 2}),
    ((), {"b": "y"}),
    ((), {}),
]


def _by_inspect(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        bound = inspect.signature(func).bind(*args, **kwargs)
    except TypeError as exc:
        return TypeError, str(exc)
    bound.apply_defaults()
    bound.arguments.pop("idempotency_key", None)
    return dict(bound.arguments)


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
def test_the_fast_path_binds_exactly_as_inspect_does(args, kwargs):
    """Same mapping, same key order, same default objects; or the same TypeError message."""
    shape = ToolShape(named, tool="named")
    expected = _by_inspect(named, args, kwargs)
    try:
        got: Any = shape.bind(None, args, kwargs)
    except TypeError as exc:
        got = TypeError, str(exc).removeprefix("named(): ")
    assert got == expected
    if isinstance(expected, dict):
        assert list(got) == list(expected)
        assert all(got[name] is expected[name] for name in expected)


def test_the_key_the_executor_supplies_is_refused_and_never_bound():
    """Passing idempotency_key is refused; without it, the mapping holds no key."""
    shape = ToolShape(with_key, tool="with_key")
    assert shape.bind(None, (100,), {}) == {"amount": 100, "currency": "EUR"}
    with pytest.raises(TypeError, match="idempotency_key"):
        shape.bind(None, (100,), {"idempotency_key": "k"})


def test_a_signature_with_positional_only_or_variadic_parts_still_binds():
    """Those take inspect's path, with the same answers."""

    def positional_only(a: int, /, b: int = 2, *rest: int, **more: int) -> None:
        del a, b, rest, more

    shape = ToolShape(positional_only, tool="positional_only")
    assert shape.bind(None, (1, 3, 4), {"z": 5}) == {"a": 1, "b": 3, "rest": (4,), "more": {"z": 5}}
    with pytest.raises(TypeError):
        shape.bind(None, (), {"a": 1})
