"""How a decorated tool's calls become arguments, handler calls and probe calls.

The executor speaks one calling convention, ``handler(arguments, *,
idempotency_key=...)``. A tool keeps its own signature: :class:`ToolShape`
reads that signature once, at decoration time, and translates each call both
ways. ``self`` (or ``cls``) is never part of the arguments: the instance is
who runs the tool, not what the tool is asked to do.
"""

from __future__ import annotations

import inspect
import types
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from effectguard.errors import ConfigurationError

__all__ = [
    "KEY_PARAMETER",
    "ProbeShape",
    "ToolShape",
    "unwrap_descriptor",
    "visible_annotations",
    "visible_signature",
]

#: The parameter through which the executor hands a tool its provider idempotency key.
KEY_PARAMETER = "idempotency_key"

_METHOD_FIRST = ("self", "cls")
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def unwrap_descriptor(obj: Any) -> Any:
    """Return the function inside a ``staticmethod`` or ``classmethod``, else ``obj``."""
    if isinstance(obj, (staticmethod, classmethod)):
        return obj.__func__
    return obj


def _without(signature: inspect.Signature, *names: str) -> inspect.Signature:
    kept = [p for p in signature.parameters.values() if p.name not in names]
    return signature.replace(parameters=kept)


def visible_signature(func: Any) -> inspect.Signature:
    """Return the signature of ``func`` as its callers see it: without the provider key.

    Frameworks build a tool's schema from it, so the key the executor supplies
    is never offered to a model, nor passed back as a default.
    """
    return _without(inspect.signature(unwrap_descriptor(func)), KEY_PARAMETER)


def visible_annotations(func: Any) -> dict[str, Any]:
    """Return a copy of ``func``'s ``__annotations__`` without the provider key."""
    annotations = getattr(unwrap_descriptor(func), "__annotations__", None) or {}
    return {name: hint for name, hint in annotations.items() if name != KEY_PARAMETER}


def _without_first(signature: inspect.Signature) -> inspect.Signature:
    return signature.replace(parameters=list(signature.parameters.values())[1:])


def _variant(full: inspect.Signature) -> _Variant:
    call = _without(full, KEY_PARAMETER)
    return _Variant(full, call, _FastBinder.of(call))


@dataclass(frozen=True, slots=True)
class _Variant:
    """The signatures of one way of calling the tool: as written, or bound to an instance."""

    full: inspect.Signature
    call: inspect.Signature
    fast: _FastBinder | None = None


_SIMPLE = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


class _FastBinder:
    """``Signature.bind`` plus ``apply_defaults`` for a signature of named parameters only.

    Gives the same mapping (parameter order, the same default objects) for every
    call that binds; for any call that would not (too many values, an unknown or
    repeated name, a missing one) it answers None, and the caller lets
    ``inspect`` bind it, which raises the ``TypeError`` Python would.
    """

    __slots__ = ("names", "parameters", "positional")

    def __init__(self, signature: inspect.Signature) -> None:
        values = list(signature.parameters.values())
        self.positional = tuple(
            p.name for p in values if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        self.names = frozenset(p.name for p in values)
        self.parameters = tuple((p.name, p.default) for p in values)

    @classmethod
    def of(cls, signature: inspect.Signature) -> _FastBinder | None:
        """A binder for ``signature``, or None when it has positional-only or variadic parts."""
        if all(p.kind in _SIMPLE for p in signature.parameters.values()):
            return cls(signature)
        return None

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
        """The arguments mapping of a call, defaults applied; None: let ``inspect`` bind it."""
        if len(args) > len(self.positional):
            return None
        given = dict(zip(self.positional, args, strict=False))
        for name, value in kwargs.items():
            if name not in self.names or name in given:
                return None
            given[name] = value
        if len(given) == len(self.parameters):
            return {name: given[name] for name, _ in self.parameters}
        bound: dict[str, Any] = {}
        for name, default in self.parameters:
            if name in given:
                bound[name] = given[name]
            elif default is inspect.Parameter.empty:
                return None
            else:
                bound[name] = default
        return bound


class ToolShape:
    """A tool's signature, read once: what callers pass, and what the tool receives."""

    def __init__(self, func: Callable[..., Any], *, tool: str) -> None:
        self.tool = tool
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError) as exc:
            msg = f"{tool}: cannot read the signature of {func!r}: {exc}"
            raise ConfigurationError(msg) from exc
        parameters = list(signature.parameters.values())
        key = signature.parameters.get(KEY_PARAMETER)
        if key is not None and key.kind not in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        ):
            msg = f"{tool}: the {KEY_PARAMETER} parameter must be passable by keyword"
            raise ConfigurationError(msg)
        self.takes_key = key is not None
        self.first = parameters[0].name if parameters else None
        self._plain = _variant(signature)
        self._bound = _variant(_without_first(signature) if parameters else signature)
        self.has_var_positional = any(
            p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters
        )
        self.has_var_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)

    @property
    def is_method_like(self) -> bool:
        """True when the first parameter is ``self`` or ``cls``, as in a method."""
        return self.first in _METHOD_FIRST

    def argument_names(self) -> list[str]:
        """Return the names the arguments mapping may hold, as templates may use them."""
        variant = self._bound if self.is_method_like else self._plain
        return list(variant.call.parameters)

    def named_parameters(self) -> list[str]:
        """Return the non-variadic names a probe is passed by keyword."""
        variant = self._bound if self.is_method_like else self._plain
        return [p.name for p in variant.call.parameters.values() if p.kind not in _VARIADIC]

    def _variant(self, instance: object | None) -> _Variant:
        return self._plain if instance is None else self._bound

    def bind(
        self, instance: object | None, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Return the arguments mapping of one call, defaults applied, without self and key.

        Raises ``TypeError`` as calling the tool would, and when the caller
        passes the idempotency key the executor supplies.
        """
        if self.takes_key and KEY_PARAMETER in kwargs:
            msg = (
                f"{self.tool}() got {KEY_PARAMETER}=, which the executor supplies "
                "from the contract; do not pass it"
            )
            raise TypeError(msg)
        variant = self._variant(instance)
        if variant.fast is not None:
            found = variant.fast.bind(args, kwargs)
            if found is not None:
                return found
        try:
            bound = variant.call.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.tool}(): {exc}") from None
        bound.apply_defaults()
        return dict(bound.arguments)

    def tool_call(
        self, instance: object | None, arguments: Mapping[str, Any], key: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Return ``(args, kwargs)`` calling the tool with ``arguments`` and the provider key."""
        values = dict(arguments)
        if self.takes_key:
            values[KEY_PARAMETER] = key
        bound = inspect.BoundArguments(self._variant(instance).full, OrderedDict(values))
        return bound.args, bound.kwargs

    def probe_call(
        self, instance: object | None, arguments: Mapping[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Return ``(args, kwargs)`` passing ``arguments`` on, by keyword wherever possible.

        Keywords keep a probe that orders its parameters differently correct;
        positional-only parameters and ``*args`` stay positional.
        """
        call = self._variant(instance).call
        if self.has_var_positional:
            bound = inspect.BoundArguments(call, OrderedDict(arguments))
            return bound.args, bound.kwargs
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for parameter in call.parameters.values():
            if parameter.name not in arguments:
                continue
            value = arguments[parameter.name]
            if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
                args.append(value)
            elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
                kwargs.update(value)
            else:
                kwargs[parameter.name] = value
        return tuple(args), kwargs


class ProbeShape:
    """How a probe is called "like the tool": same arguments, plus the key if it takes one.

    A probe written as a method of the tool's class (its first parameter is
    named like the tool's, ``self`` or ``cls``), or given as a ``classmethod``,
    is called on the same instance or class as the tool.
    """

    def __init__(self, probe: Any, tool: ToolShape) -> None:
        self.is_classmethod = isinstance(probe, classmethod)
        func = unwrap_descriptor(probe)
        if not callable(func):
            msg = f"{tool.tool}: probe must be callable, not {type(probe).__name__}"
            raise ConfigurationError(msg)
        self.func = func
        self.is_async = inspect.iscoroutinefunction(func)
        try:
            signature: inspect.Signature | None = inspect.signature(func)
        except (TypeError, ValueError):
            signature = None  # a builtin or C callable: take it on trust
        parameters = [] if signature is None else list(signature.parameters.values())
        first = parameters[0].name if parameters else None
        self.binds = not isinstance(probe, staticmethod) and (
            self.is_classmethod or (tool.is_method_like and first == tool.first)
        )
        if self.binds and parameters:
            parameters = parameters[1:]
        self.takes_key = any(p.name == KEY_PARAMETER for p in parameters)
        if signature is not None:
            _check_probe(tool, [p for p in parameters if p.name != KEY_PARAMETER], func)

    def target(self, instance: object | None) -> Callable[..., Any]:
        """Return the callable to invoke for a call of the tool on ``instance``."""
        if not self.binds or instance is None:
            return self.func  # type: ignore[no-any-return]
        if self.is_classmethod and not isinstance(instance, type):
            instance = type(instance)
        return types.MethodType(self.func, instance)


def _check_probe(tool: ToolShape, parameters: list[inspect.Parameter], probe: Any) -> None:
    """Refuse, at decoration time, a probe that cannot be called like the tool."""
    name = getattr(probe, "__qualname__", repr(probe))
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    own = {p.name for p in parameters if p.kind not in _VARIADIC}
    passed = tool.named_parameters()
    problems = []
    if not accepts_any:
        missing = [n for n in passed if n not in own]
        if missing:
            problems.append(
                f"it does not accept {', '.join(missing)} (add the parameters, or **_ "
                "to ignore those it does not need)"
            )
    if tool.has_var_positional and not any(
        p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters
    ):
        problems.append("the tool takes *args and the probe does not")
    if tool.has_var_keyword and not accepts_any:
        problems.append("the tool takes **kwargs and the probe does not")
    required = [
        p.name
        for p in parameters
        if p.kind not in _VARIADIC and p.default is inspect.Parameter.empty and p.name not in passed
    ]
    if required:
        problems.append(f"it requires {', '.join(required)}, which the tool does not take")
    if problems:
        msg = f"{tool.tool}: the probe {name}() is called like the tool, but " + "; ".join(problems)
        raise ConfigurationError(msg)
