"""``@effect``: an ordinary function made a guarded side effect.

Read top to bottom: which executor a call runs on; operation-id and key
templates, checked at decoration time and formatted per call; ``@effect``'s
options mapped onto the contract; a call bound to the signature (arguments
without ``self``/``cls`` or ``idempotency_key``); the decorated tool, a
``wrapt`` proxy that picks its sync or async form once, at decoration; the
decorator itself; and finding decorated tools by contract name.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib
import inspect
import itertools
import os
import re
import shlex
import string
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, overload

import wrapt

from effectguard._codec import codec_for
from effectguard._contract import (
    DEFAULT_MAX_OUTPUT_BYTES,
    DURATION_FIELDS,
    WAIT_FIELDS,
    Arguments,
    EffectContract,
    OutputCodec,
    UnknownOutcomePolicy,
    redacted_names,
)
from effectguard._executor._machine import EffectExecutor
from effectguard._fingerprint import check_json_value, redact_arguments, request_fingerprint
from effectguard._model import EffectResult, EffectStatus
from effectguard._scope import SCOPE_FIELDS, require_scope
from effectguard.errors import (
    ConfigurationError,
    EffectAwaitingApproval,
    EffectInProgress,
    EffectNotConfirmed,
    EffectNotSent,
    EffectOutcomeUnknown,
    EffectQuarantined,
    EffectRejected,
)

__all__ = [
    "AS_RESULT",
    "DECORATOR_ONLY",
    "DEFAULT_WAIT_FOR_PEER",
    "INJECTED",
    "KEY_PARAMETER",
    "RENAMED",
    "TOOLS_VARIABLE",
    "AsyncEffectFunction",
    "EffectDecorator",
    "EffectFunction",
    "FoundTool",
    "IdentityTemplate",
    "Options",
    "ProbeShape",
    "Request",
    "Tool",
    "ToolIndex",
    "ToolShape",
    "compile_identity",
    "contract_field",
    "effect",
    "executor_of",
    "get_contract",
    "is_effect",
    "keyword_for",
    "known_tools",
    "load_tools",
    "operation_id_of",
    "outcome_of",
    "remember",
    "request_of",
    "unwrap_descriptor",
    "use_executor",
    "visible_annotations",
    "visible_signature",
]


# -- which executor a call runs on ------------------------------------------------------
# Given to the tool (``executor=``), lent by a runtime through a context variable this
# module owns (use_executor), or the process default that effectguard.configure installs.

_lent: contextvars.ContextVar[EffectExecutor | None] = contextvars.ContextVar(
    "effectguard_lent_executor", default=None
)
_default: list[EffectExecutor | None] = [None]


@contextlib.contextmanager
def use_executor(executor: EffectExecutor) -> Iterator[EffectExecutor]:
    """Lend ``executor`` to every decorated tool called in this context.

    An agent runtime wraps the tools it runs in this; threads started with
    ``asyncio.to_thread`` and tasks created inside inherit it. A tool decorated
    with its own ``executor=`` keeps that one.
    """
    if not isinstance(executor, EffectExecutor):
        msg = f"use_executor() needs an EffectExecutor, not {type(executor).__name__}"
        raise TypeError(msg)
    token = _lent.set(executor)
    try:
        yield executor
    finally:
        _lent.reset(token)


def set_default_executor(executor: EffectExecutor | None) -> None:
    """Make ``executor`` the process default (None: no default); what configure() calls."""
    _default[0] = executor


def default_executor() -> EffectExecutor | None:
    """Return the executor :func:`effectguard.configure` set, or None."""
    return _default[0]


def resolve_executor(explicit: EffectExecutor | None, tool: str) -> EffectExecutor:
    """Return the executor a call of ``tool`` runs on: explicit, else lent, else the default.

    Raises :class:`ConfigurationError` naming the three ways to provide one.
    """
    executor = explicit
    if executor is None:
        executor = _lent.get()
    if executor is None:
        executor = _default[0]
    if executor is None:
        msg = (
            f"no effect executor for {tool}: pass @effect(executor=...), "
            "run the tool under an agent runtime (effectguard.use_executor), "
            "or call effectguard.configure(ledger=...)"
        )
        raise ConfigurationError(msg)
    return executor


# ---- Operation-id and key templates ----

_ROOT = re.compile(r"[.\[]")


def _fields(template: str) -> Iterator[str]:
    """Yield every replacement field of ``template``, nested ones in format specs too."""
    for _, field, spec, _ in string.Formatter().parse(template):
        if field is not None:
            yield field
        if spec:
            yield from _fields(spec)


class IdentityTemplate:
    """A ``str.format`` template over a call's arguments, e.g. ``"invoice:{invoice_id}:capture"``.

    Fields name parameters, optionally with index access (``"{order[id]}"``),
    or the ``scoped`` fields of the call scope. Formatting never fails for a
    field the tool does not have: that was refused when the template was made.
    """

    __slots__ = ("scoped", "template", "tool", "what")

    def __init__(
        self, template: str, what: str, scoped: Collection[str] = (), tool: str = "a tool"
    ) -> None:
        self.template = template
        self.what = what
        self.scoped = tuple(scoped)
        self.tool = tool

    def __call__(self, arguments: Arguments) -> str:
        """Return the template filled from ``arguments``; a missing name is a ConfigurationError."""
        if self.scoped:
            scope = require_scope(f"{self.tool}: {self.what} template {self.template!r}")
            arguments = {**{name: getattr(scope, name) for name in self.scoped}, **arguments}
        try:
            return self.template.format_map(arguments)
        except (LookupError, AttributeError, TypeError, ValueError) as exc:
            msg = f"{self.what} template {self.template!r} cannot be formatted for this call: {exc}"
            raise ConfigurationError(msg) from exc

    def __repr__(self) -> str:
        return f"IdentityTemplate({self.template!r})"


def compile_identity(
    spec: str | Callable[[Arguments], str],
    *,
    what: str,
    tool: str,
    parameters: Collection[str],
    redacted: Collection[str],
) -> Callable[[Arguments], str]:
    """Return the callable computing ``what`` (an operation id or a key) from the arguments.

    ``spec`` is a template or a callable taking the arguments mapping. A
    template that is malformed, uses positional fields, names something that is
    neither one of ``parameters`` nor a call-scope field (``run_id``,
    ``call_id``), or names a ``redacted`` one (whose value would then be stored
    in the clear) is a :class:`ConfigurationError`.
    """
    if callable(spec):
        return spec
    if not isinstance(spec, str) or not spec:
        msg = (
            f"{tool}: {what} must be a non-empty str.format template or a callable "
            f"taking the arguments mapping, not {spec!r}"
        )
        raise ConfigurationError(msg)
    try:
        fields = list(_fields(spec))
    except ValueError as exc:
        msg = f"{tool}: {what} template {spec!r} is malformed: {exc}"
        raise ConfigurationError(msg) from exc
    scoped: set[str] = set()
    for field in fields:
        root = _ROOT.split(field, maxsplit=1)[0]
        if not root or root.isdigit():
            msg = (
                f"{tool}: {what} template {spec!r} has a positional field {{{field}}}; "
                "name a parameter instead"
            )
            raise ConfigurationError(msg)
        if root not in parameters and root in SCOPE_FIELDS:
            scoped.add(root)  # a parameter of that name wins: the tool's own value
            continue
        if root not in parameters:
            known = ", ".join(parameters) or "none"
            msg = (
                f"{tool}: {what} template {spec!r} names {root!r}, which is not a parameter "
                f"(parameters: {known}) nor a call-scope field ({', '.join(SCOPE_FIELDS)})"
            )
            raise ConfigurationError(msg)
        if root in redacted:
            msg = (
                f"{tool}: {what} template {spec!r} names the redacted parameter {root!r}, "
                "whose value would then be stored in the clear"
            )
            raise ConfigurationError(msg)
    return IdentityTemplate(spec, what, sorted(scoped), tool)


# ---- @effect's keywords mapped onto EffectContract's fields ----

#: ``@effect`` keywords whose contract field has a longer name.
RENAMED: Mapping[str, str] = MappingProxyType(
    {
        "idempotency_key": "provider_idempotency_key",
        "idempotency_guaranteed": "provider_idempotency_guaranteed",
        "probe": "outcome_probe",
        "timeout": "handler_timeout",
        "lease": "lease_seconds",
        "provider_key_retention": "provider_key_retention_seconds",
    }
)


#: ``@effect`` keywords that are about the decorated tool, not its contract.
DECORATOR_ONLY = frozenset({"executor"})


_KEYWORDS = MappingProxyType({field: keyword for keyword, field in RENAMED.items()})


def contract_field(keyword: str) -> str:
    """Return the :class:`EffectContract` field the ``@effect`` keyword ``keyword`` sets."""
    return RENAMED.get(keyword, keyword)


def keyword_for(field: str) -> str:
    """Return the ``@effect`` keyword that sets the contract field ``field``."""
    return _KEYWORDS.get(field, field)


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    """One ``@effect(...)``'s settings, as given: contract fields by name, and the executor."""

    fields: Mapping[str, Any]
    executor: Any

    @classmethod
    def from_keywords(cls, keywords: Mapping[str, Any]) -> Options:
        """Sort ``@effect``'s keyword arguments into contract fields and the executor."""
        fields = {contract_field(k): v for k, v in keywords.items() if k not in DECORATOR_ONLY}
        return cls(MappingProxyType(fields), keywords.get("executor"))


# ---- A call bound to the tool's signature ----

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


# ---- The decorated tool: a wrapt proxy running each call through an executor ----

#: The keyword by which ``execute()`` asks, through wrapt's own binding, for the result.
AS_RESULT = "__effectguard_as_result__"


#: Seconds a decorated tool waits for an identical call already dispatching (a peer)
#: when neither ``@effect`` nor the executor says: long enough for a typical provider
#: call, so parallel identical calls share one dispatch, and bounded, so a stuck peer
#: still ends in EffectInProgress.
DEFAULT_WAIT_FOR_PEER = 30.0


def _seconds(value: Any) -> Any:
    """Return a timedelta in seconds; anything else as given, for the contract to judge."""
    return value.total_seconds() if isinstance(value, timedelta) else value


def _field(name: str) -> Callable[[Any], str | None]:
    def read(output: Any) -> str | None:
        value = output.get(name) if isinstance(output, dict) else getattr(output, name, None)
        return None if value is None else str(value)

    read.__qualname__ = f"provider_operation_id[{name!r}]"
    return read


def _return_annotation(func: Any) -> Any:
    try:
        return inspect.signature(func, eval_str=True).return_annotation
    except Exception:  # noqa: BLE001 - an unresolvable annotation just means "no inferred codec"
        return None


def _declared_return(func: Any) -> Any:
    """The return annotation an operator's output is checked against; ``Any`` when unknown."""
    try:
        annotation = inspect.signature(func, eval_str=True).return_annotation
    except Exception:  # noqa: BLE001 - an unresolvable annotation cannot be checked against
        return Any
    return Any if annotation is inspect.Signature.empty else annotation


def _codec(given: OutputCodec[Any] | type | None, func: Any, tool: str) -> OutputCodec[Any] | None:
    """Return the codec ``given`` (a codec or a type) names, else the one the annotation implies."""
    if given is None:
        annotation = _return_annotation(func)
        try:
            return codec_for(annotation)
        except ConfigurationError as exc:
            msg = (
                f"{tool}: its outputs could never be stored, so a replay could not return "
                f"them: {exc}. Annotate the return type with a JSON or standard type "
                "(dict, datetime, Decimal, a dataclass…), or pass codec="
            )
            raise ConfigurationError(msg) from exc
    if not isinstance(given, type):
        return given
    codec = codec_for(given)
    if codec is None:
        msg = (
            f"{tool}: codec={given!r} is not a dataclass or a pydantic model, and "
            "the default codec already stores it"
        )
        raise ConfigurationError(msg)
    return codec


def _provider_key(
    given: str | Callable[[Arguments], str] | None,
    guaranteed: object,
    shape: ToolShape,
    operation_id: Callable[[Arguments], str],
    redact: frozenset[str],
) -> Callable[[Arguments], str] | None:
    """Return how the provider key is computed; None when the tool takes no key."""
    tool = shape.tool
    if given is None:
        if guaranteed is True and not shape.takes_key:
            msg = (
                f"{tool}: idempotency_guaranteed=True needs {tool}() to take an "
                f"{KEY_PARAMETER} parameter: a provider can only deduplicate a key it is sent"
            )
            raise ConfigurationError(msg)
        # The operation id is stable across attempts, as a provider key must be.
        return operation_id if shape.takes_key else None
    if not shape.takes_key:
        msg = (
            f"{tool}: idempotency_key= is given but {tool}() has no {KEY_PARAMETER} "
            "parameter, so the key would never reach the provider"
        )
        raise ConfigurationError(msg)
    return compile_identity(
        given,
        what="idempotency_key",
        tool=tool,
        parameters=shape.argument_names(),
        redacted=redact,
    )


def _identity(fields: dict[str, Any], shape: ToolShape) -> dict[str, Any]:
    """Return the contract's ``operation_id`` and ``provider_idempotency_key``, checked."""
    tool, names = shape.tool, shape.argument_names()
    # An invalid redact= is the contract's to report; the templates are checked without it.
    redact = redacted_names(fields["redact"]) or frozenset()
    unknown = sorted(redact.difference(names))
    if unknown:
        msg = f"{tool}: redact names {', '.join(unknown)}, which are not parameters"
        raise ConfigurationError(msg)
    operation_id = compile_identity(
        fields["operation_id"], what="operation_id", tool=tool, parameters=names, redacted=redact
    )
    key = _provider_key(
        fields["provider_idempotency_key"],
        fields["provider_idempotency_guaranteed"],
        shape,
        operation_id,
        redact,
    )
    return {"operation_id": operation_id, "provider_idempotency_key": key}


def _in_decorator_terms(message: str) -> str:
    """Name, beside each contract field the message mentions, the ``@effect`` keyword setting it."""
    notes = [
        f"@effect's {keyword}= sets {field}"
        for keyword, field in RENAMED.items()
        if re.search(rf"\b{field}\b", message)
    ]
    if any(field in message for field in DURATION_FIELDS):
        notes.append("durations are seconds or a timedelta")
    return f"{message} ({'; '.join(notes)})" if notes else message


class Tool:
    """One decorated tool: its contract, its shape, and how each call is run."""

    def __init__(self, func: Any, options: Options) -> None:
        raw = unwrap_descriptor(func)
        if inspect.isclass(raw) or not callable(raw):
            msg = f"@effect decorates a function or method, not {raw!r}"
            raise TypeError(msg)
        tool = getattr(raw, "__qualname__", type(raw).__qualname__)
        if inspect.isgeneratorfunction(raw) or inspect.isasyncgenfunction(raw):
            msg = (
                f"@effect cannot guard the generator function {tool}(): a side effect "
                "returns its output once, and a generator's output could not be replayed"
            )
            raise TypeError(msg)
        if options.executor is not None and not isinstance(options.executor, EffectExecutor):
            msg = f"executor must be an EffectExecutor, not {type(options.executor).__name__}"
            raise TypeError(msg)
        self.is_async = inspect.iscoroutinefunction(raw)
        self.executor: EffectExecutor | None = options.executor
        self.shape = shape = ToolShape(raw, tool=tool)
        self.probe: ProbeShape | None = None
        fields = dict(options.fields)
        if fields["outcome_probe"] is not None:
            self.probe = ProbeShape(fields["outcome_probe"], shape)
        fields["outcome_probe"] = self._probe_adapter(None)
        module = getattr(raw, "__module__", None) or "__main__"
        fields["name"] = fields["name"] or f"{module}.{tool}"
        fields.update(_identity(fields, shape))
        if isinstance(fields["provider_operation_id"], str):
            fields["provider_operation_id"] = _field(fields["provider_operation_id"])
        for name in (*DURATION_FIELDS, *WAIT_FIELDS):
            fields[name] = _seconds(fields[name])
        fields["codec"] = _codec(fields["codec"], raw, tool)
        try:
            self.contract = EffectContract(**fields)
        except ConfigurationError as exc:
            raise ConfigurationError(_in_decorator_terms(str(exc))) from exc
        self.func = raw
        self.returns = _declared_return(raw)
        remember(self)

    def contract_for(self, instance: object | None) -> EffectContract:
        """The contract of a call on ``instance``: a method probe is bound to it, as in a call."""
        if instance is not None and self.probe is not None and self.probe.binds:
            return dataclasses.replace(self.contract, outcome_probe=self._probe_adapter(instance))
        return self.contract

    def _probe_adapter(self, instance: object | None) -> Callable[..., Any] | None:
        """Return the probe in the executor's convention, for a call on ``instance``."""
        probe, shape = self.probe, self.shape
        if probe is None:
            return None
        target = probe.target(instance)

        def call(arguments: Arguments, key: str | None) -> Any:
            args, kwargs = shape.probe_call(instance, arguments)
            if probe.takes_key:
                kwargs[KEY_PARAMETER] = key
            return target(*args, **kwargs)

        if probe.is_async:

            async def async_probe(arguments: Arguments, *, idempotency_key: str | None) -> Any:
                return await call(arguments, idempotency_key)

            return async_probe

        def sync_probe(arguments: Arguments, *, idempotency_key: str | None) -> Any:
            return call(arguments, idempotency_key)

        return sync_probe

    def _handler(self, wrapped: Callable[..., Any], instance: object | None) -> Callable[..., Any]:
        shape = self.shape
        if self.is_async:

            async def async_handler(arguments: Arguments, *, idempotency_key: str | None) -> Any:
                args, kwargs = shape.tool_call(instance, arguments, idempotency_key)
                return await wrapped(*args, **kwargs)

            return async_handler

        def handler(arguments: Arguments, *, idempotency_key: str | None) -> Any:
            args, kwargs = shape.tool_call(instance, arguments, idempotency_key)
            return wrapped(*args, **kwargs)

        return handler

    def __call__(
        self,
        wrapped: Callable[..., Any],
        instance: object | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Run one call (as the wrapt wrapper); an async tool gets a coroutine to await."""
        as_result = False
        if AS_RESULT in kwargs:
            kwargs = dict(kwargs)
            as_result = bool(kwargs.pop(AS_RESULT))
        arguments = self.shape.bind(instance, args, kwargs)
        contract = self.contract_for(instance)
        handler = self._handler(wrapped, instance)
        executor = resolve_executor(self.executor, self.contract.name)
        wait = next(
            w
            for w in (contract.wait_for_peer, executor.wait_for_peer, DEFAULT_WAIT_FOR_PEER)
            if w is not None
        )
        if self.is_async:
            return _run_async(
                executor, contract, arguments, handler, as_result=as_result, wait=wait
            )
        result = executor.execute(contract, arguments, handler, wait_for_peer=wait)
        return result if as_result else outcome_of(result, executor)


async def _run_async(
    executor: EffectExecutor,
    contract: EffectContract,
    arguments: Arguments,
    handler: Callable[..., Any],
    *,
    as_result: bool,
    wait: float,
) -> Any:
    result = await executor.execute_async(contract, arguments, handler, wait_for_peer=wait)
    return result if as_result else outcome_of(result, executor)


def ledger_reference(ledger: object) -> str:
    """What ``agent-effect-ops --db`` takes to open ``ledger``, quoted for a shell.

    A file ledger (SQLite) is named by its absolute path; any other by the
    placeholder ``LEDGER_URL``, so no connection string (which can hold a
    password) ever lands in an error message, a log or a checkpoint.
    """
    path = getattr(ledger, "path", None)
    if isinstance(path, os.PathLike):
        return shlex.quote(os.path.abspath(path))  # noqa: PTH100 - any PathLike, not only Path
    return "LEDGER_URL"


def outcome_of(result: EffectResult[Any], executor: EffectExecutor | None = None) -> Any:
    """Return a CONFIRMED result's output; raise the exception that says why there is none.

    When the handler raised in this call, the exception raised here chains it
    (``raise … from``), so the traceback shows the handler's own failure. Its
    message names ``executor``'s ledger in the commands it suggests.
    """
    status = result.status
    if status is EffectStatus.CONFIRMED:
        return result.output
    if status is EffectStatus.REJECTED:
        reason = result.reason or f"operation {result.operation_id!r} was rejected"
        raise EffectRejected(reason, evidence=result.evidence, result=result)
    error: EffectNotConfirmed
    ledger = "LEDGER" if executor is None else ledger_reference(executor.ledger)
    if status is EffectStatus.QUARANTINED:
        error = EffectQuarantined(result, ledger=ledger)
    elif status is EffectStatus.AWAITING_APPROVAL:
        error = EffectAwaitingApproval(result, ledger=ledger)
    elif status is EffectStatus.PREPARED and not result.replayed:
        reason = f"operation {result.operation_id!r} was not sent: {result.reason}"
        error = EffectNotSent(reason, evidence=result.evidence, result=result)
    elif status in (EffectStatus.PREPARED, EffectStatus.DISPATCHED, EffectStatus.RECONCILING):
        error = EffectInProgress(result, ledger=ledger)
    else:
        error = EffectOutcomeUnknown(result, ledger=ledger)
    raise error from result.handler_error


# ---- @effect itself, get_contract, is_effect, use_executor ----

P = ParamSpec("P")


P2 = ParamSpec("P2")


R = TypeVar("R")


R2 = TypeVar("R2")


S = TypeVar("S")


class _Injected:
    def __repr__(self) -> str:
        return "effectguard.INJECTED"


#: A default for a tool's ``idempotency_key`` parameter. The executor always
#: passes the real key; the default only tells a type checker that callers
#: need not (and must not) pass one.
INJECTED: Any = _Injected()


_MAX_UNWRAP = 32


class EffectFunction(Protocol[P, R]):
    """A decorated tool: call it for its confirmed output, or ``execute`` it for the result."""

    @property
    def contract(self) -> EffectContract:
        """The contract every call of this tool runs under.

        A probe written as a method is bound to each call's instance, so this
        contract's own ``outcome_probe`` is only right for calls without one.
        """
        ...

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Return the output once the effect is CONFIRMED; raise when it is not."""
        ...

    def execute(self, *args: P.args, **kwargs: P.kwargs) -> EffectResult[R]:
        """Return the :class:`EffectResult` of the call, whatever its status."""
        ...

    @overload
    def __get__(self, instance: None, owner: type[Any] | None = None) -> EffectFunction[P, R]: ...
    @overload
    def __get__(
        self: EffectFunction[Concatenate[S, P2], R2], instance: S, owner: type[Any] | None = None
    ) -> EffectFunction[P2, R2]: ...


class AsyncEffectFunction(Protocol[P, R]):
    """A decorated ``async def`` tool: await it for its confirmed output, or ``execute`` it."""

    @property
    def contract(self) -> EffectContract:
        """The contract every call of this tool runs under."""
        ...

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        """Return the output once the effect is CONFIRMED; raise when it is not."""
        ...

    def execute(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, EffectResult[R]]:
        """Return the :class:`EffectResult` of the call, whatever its status."""
        ...

    @overload
    def __get__(
        self, instance: None, owner: type[Any] | None = None
    ) -> AsyncEffectFunction[P, R]: ...
    @overload
    def __get__(
        self: AsyncEffectFunction[Concatenate[S, P2], R2],
        instance: S,
        owner: type[Any] | None = None,
    ) -> AsyncEffectFunction[P2, R2]: ...


class _BoundEffectWrapper(wrapt.BoundFunctionWrapper[..., Any]):
    """A decorated tool bound to an instance or class."""

    @property
    def contract(self) -> EffectContract:
        # wrapt keeps a wrapper's own state in _self_* attributes; others reach the wrapped.
        tool: Tool = self._self_parent._self_tool  # noqa: SLF001 - wrapt keeps a proxy's state in its _self_ attributes
        return tool.contract

    # What frameworks read to build a schema: the parameters without idempotency_key.
    @property
    def __signature__(self) -> inspect.Signature:
        return visible_signature(self.__wrapped__)

    @property
    def __annotations__(self) -> dict[str, Any]:  # type: ignore[override]
        return visible_annotations(self.__wrapped__)

    @property
    def __func__(self) -> Any:
        # A wrapper bound to an instance passes isinstance(..., MethodType), so inspect
        # reads the signature of its __func__: the decorated tool, not the bare function.
        return self._self_parent

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        return self(*args, **kwargs, **{AS_RESULT: True})


class _EffectWrapper(wrapt.FunctionWrapper[..., Any]):
    """A decorated tool; binding it (as a method) gives a :class:`_BoundEffectWrapper`."""

    __bound_function_wrapper__ = _BoundEffectWrapper

    def __init__(self, wrapped: Any, tool: Tool) -> None:
        super().__init__(wrapped, tool)
        self._self_tool = tool

    @property
    def contract(self) -> EffectContract:
        return self._self_tool.contract

    @property
    def __signature__(self) -> inspect.Signature:
        return visible_signature(self.__wrapped__)

    @property
    def __annotations__(self) -> dict[str, Any]:  # type: ignore[override]
        return visible_annotations(self.__wrapped__)

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        return self(*args, **kwargs, **{AS_RESULT: True})


class EffectDecorator:
    """What ``effect(...)`` returns: apply it to one or more tool functions."""

    def __init__(self, options: Options) -> None:
        self._options = options

    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, func: Callable[P, Coroutine[Any, Any, R]], /
    ) -> AsyncEffectFunction[P, R]: ...
    @overload
    def __call__(self, func: Callable[P, R], /) -> EffectFunction[P, R]: ...
    def __call__(self, func: Any, /) -> Any:
        """Return ``func`` guarded by its own contract."""
        return _EffectWrapper(func, Tool(func, self._options))


def _keywords_only(func: Callable[P, R]) -> Callable[P, R]:
    """Answer ``@effect`` without its settings with the library's message, not Python's."""

    @functools.wraps(func)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            name = getattr(args[0], "__qualname__", None) or repr(args[0])
            msg = (
                f"@effect needs its settings, in parentheses, above {name}: "
                '@effect(operation_id="order:{order_id}:pay") names each call\'s business '
                "operation, the same across retries (effectguard.call_scoped(prefix) derives "
                "one from the agent's run and tool call when the arguments hold none)"
            )
            raise TypeError(msg)
        if args:
            msg = '@effect takes keyword arguments only: write @effect(operation_id="...")'
            raise TypeError(msg)
        if "operation_id" not in kwargs:
            msg = (
                "@effect(...) needs operation_id=: a str.format template over the tool's "
                'parameters ("order:{order_id}:pay"), a callable taking the arguments, '
                "or effectguard.call_scoped(prefix)"
            )
            raise TypeError(msg)
        return func(*args, **kwargs)

    return checked


@_keywords_only
def effect(
    *,
    operation_id: str | Callable[[Arguments], str],
    idempotency_key: str | Callable[[Arguments], str] | None = None,
    idempotency_guaranteed: bool = False,
    probe: Callable[..., Any] | None = None,
    postcondition: Callable[[Any], bool] | None = None,
    provider_operation_id: str | Callable[[Any], str | None] | None = None,
    unknown_outcome: UnknownOutcomePolicy | str = UnknownOutcomePolicy.QUARANTINE,
    timeout: float | timedelta | None = None,
    lease: float | timedelta = 30.0,
    max_attempts: int = 3,
    redact: Collection[str] = (),
    codec: OutputCodec[Any] | type | None = None,
    name: str | None = None,
    version: int = 1,
    executor: EffectExecutor | None = None,
    provider_key_retention: float | timedelta | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    wait_for_peer: float | timedelta | None = None,
    not_sent_on: type[Exception] | Collection[type[Exception]] = (),
    retry_wait_initial: float | timedelta | None = None,
    retry_wait_max: float | timedelta | None = None,
    deadline: float | timedelta | None = None,
    requires_approval: bool | Callable[[Arguments], bool] = False,
) -> EffectDecorator:
    """Guard a tool function's side effect with an :class:`EffectContract`.

    Each keyword sets the contract field of the same name, except
    ``idempotency_key`` (``provider_idempotency_key``), ``idempotency_guaranteed``
    (``provider_idempotency_guaranteed``), ``probe`` (``outcome_probe``),
    ``timeout`` (``handler_timeout``), ``lease`` (``lease_seconds``),
    ``provider_key_retention`` (``provider_key_retention_seconds``) and
    ``executor``, which is the decorator's own; the contract checks every value.

    ``operation_id`` and ``idempotency_key`` are ``str.format`` templates over
    the arguments (``"invoice:{invoice_id}:capture"``) or callables taking the
    arguments mapping; a template naming a parameter the tool lacks is a
    :class:`ConfigurationError` here, not at the first call. A tool with an
    ``idempotency_key`` parameter receives the key from the executor (the
    operation id when no template is given), and a caller passing it gets a
    ``TypeError``; the tool's visible signature and annotations leave it out,
    so frameworks building a schema from them never offer it to a model.
    ``probe`` is called like the tool, plus ``idempotency_key=`` if it takes
    one, and returns an :class:`OutcomeProbeResult`; a probe written as a
    method of the tool's class runs on the same instance.

    ``codec`` is an :class:`OutputCodec`, or a dataclass or pydantic model type;
    by default it is inferred from a dataclass or pydantic return annotation.
    ``redact`` names arguments whose values are never stored (they still count
    in the fingerprint). ``timeout``, ``lease`` and ``provider_key_retention``
    are seconds or timedeltas. ``name`` defaults to the tool's module and
    qualified name: set it to keep operations matching across a rename.
    ``max_output_bytes`` bounds the stored output (its JSON text); a larger
    output cannot confirm the operation.

    ``wait_for_peer`` (seconds or a timedelta) is how long a call that finds
    another worker dispatching the same operation (an identical call running
    in parallel, as agent frameworks run one turn's tool calls) waits for its
    outcome and returns it; only then does it raise :class:`EffectInProgress`.
    Unset, it is the executor's ``wait_for_peer`` (see :func:`configure`), else
    :data:`DEFAULT_WAIT_FOR_PEER` (30 seconds). ``wait_for_peer=0`` never waits.

    ``not_sent_on`` names exception types the tool raises only before any of
    its request can reach the destination (``ConnectionRefusedError``): such an
    attempt is retried and never quarantined, and a call whose attempts or
    deadline run out raises :class:`~effectguard.EffectNotSent`.
    ``retry_wait_initial``, ``retry_wait_max`` and ``deadline`` (seconds or
    timedeltas) shape the waits between automatic attempts and re-probes; unset,
    they are the executor's (see :func:`effectguard.configure`).

    ``requires_approval`` (True, or a predicate on the arguments mapping such as
    ``lambda a: a["amount_cents"] > 10_000``) makes a new request wait for a
    person's approval of exactly that request: the call records it and raises
    :class:`~effectguard.EffectAwaitingApproval`, sending nothing; once
    ``agent-effect-ops approve`` (or the ledger's ``approve``) has approved it,
    the next call sends it once.
    """
    # Every parameter above, by name: the signature is the one list of the options.
    return EffectDecorator(Options.from_keywords(locals()))


def find_tool(obj: object) -> Tool | None:
    """Return the decorated tool behind ``obj``, or None (see :func:`get_contract`)."""
    for _ in range(_MAX_UNWRAP):
        kind = type(obj)  # not obj.__class__, which a wrapt proxy reports as the wrapped one's
        if issubclass(kind, _EffectWrapper):
            found: Tool = obj._self_tool  # type: ignore[attr-defined]  # noqa: SLF001 - wrapt keeps a proxy's state in its _self_ attributes
            return found
        if issubclass(kind, _BoundEffectWrapper):
            bound: Tool = obj._self_parent._self_tool  # type: ignore[attr-defined]  # noqa: SLF001 - wrapt keeps a proxy's state in its _self_ attributes
            return bound
        if isinstance(obj, (staticmethod, classmethod, types.MethodType)):
            obj = obj.__func__
            continue
        inner = getattr(obj, "__wrapped__", None)
        if inner is None or inner is obj:
            return None
        obj = inner
    return None


def get_contract(obj: object) -> EffectContract | None:
    """Return the contract of a decorated tool, or None if ``obj`` is not one.

    Finds it on the function, on a bound method, on a ``staticmethod`` or
    ``classmethod`` object, and through other decorators that set ``__wrapped__``.
    """
    found = find_tool(obj)
    return None if found is None else found.contract


def is_effect(obj: object) -> bool:
    """True when ``obj`` is a decorated tool, however it was reached (see :func:`get_contract`)."""
    return find_tool(obj) is not None


def _tool_of(obj: object, needed_by: str) -> tuple[Tool, object | None]:
    """Return ``obj``'s tool and the instance it is bound to; TypeError when not decorated."""
    found = find_tool(obj)
    if found is None:
        msg = f"{needed_by} needs a function decorated with @effect, not {obj!r}"
        raise TypeError(msg)
    instance = obj._self_instance if isinstance(obj, _BoundEffectWrapper) else None  # noqa: SLF001 - wrapt keeps a proxy's state in its _self_ attributes
    return found, instance


def executor_of(obj: object) -> EffectExecutor:
    """Return the executor a call of the decorated tool ``obj`` would run on now.

    The same choice a call makes (``@effect(executor=...)``, else the one lent
    by a runtime, else :func:`effectguard.configure`'s); raises
    :class:`~effectguard.ConfigurationError` naming the three when there is none.
    """
    tool, _ = _tool_of(obj, "executor_of()")
    return resolve_executor(tool.executor, tool.contract.name)


def operation_id_of(obj: object, /, *args: Any, **kwargs: Any) -> str:
    """Return the operation id a call of ``obj`` with these arguments would have, now.

    Computed as the call computes it, under the active call scope, without
    recording or sending anything; raises what the call would for arguments
    that do not fit the signature (``TypeError``) or a missing scope.
    """
    tool, instance = _tool_of(obj, "operation_id_of()")
    return tool.contract.operation_id(tool.shape.bind(instance, args, kwargs))


@dataclass(frozen=True, slots=True)
class Request:
    """One call's request as the ledger identifies it: what an approval is bound to."""

    operation_id: str
    fingerprint: str
    needs_approval: bool
    #: The arguments as the ledger stores them: each redacted value replaced by ``"[redacted]"``.
    arguments: Mapping[str, Any]


def request_of(obj: object, /, *args: Any, **kwargs: Any) -> Request:
    """Return the operation id, fingerprint and approval need a call of ``obj`` would have, now.

    Computed as the executor computes them for that call (under the active
    call scope), without recording or sending anything: two calls whose
    requests are equal here are one request to the ledger, and an approval
    recorded for one fingerprint is never spent on another. Raises what the
    call would before recording (``TypeError`` for arguments that do not fit,
    :class:`~effectguard.ConfigurationError` for a predicate that fails).
    """
    tool, instance = _tool_of(obj, "request_of()")
    contract = tool.contract
    arguments = dict(tool.shape.bind(instance, args, kwargs))
    check_json_value(arguments)
    operation_id, key = contract.identity(arguments)
    fingerprint = request_fingerprint(
        contract.name, contract.version, arguments, key, contract.redact, checked=True
    )
    needs = contract.requires_approval is not False and contract.needs_approval(arguments)
    stored = redact_arguments(arguments, contract.redact) if contract.redact else arguments
    return Request(operation_id, fingerprint, needs, stored)


# ---- Finding decorated tools by contract name ----

#: The environment variable naming the tool modules when ``--tools`` is not given.
TOOLS_VARIABLE = "EFFECTGUARD_TOOLS"


# By order of decoration, so that of two tools of one contract the later one wins.
_REMEMBERED: weakref.WeakValueDictionary[int, Tool] = weakref.WeakValueDictionary()


_SEQUENCE = itertools.count()


@dataclass(frozen=True, slots=True)
class FoundTool:
    """A decorated tool's contract and its declared return type (``Any`` when it declares none)."""

    contract: EffectContract
    returns: Any
    where: str


class ToolIndex:
    """Decorated tools by contract name and version; the latest-decorated wins a tie."""

    def __init__(self, tools: Iterable[FoundTool] = ()) -> None:
        self._by_key: dict[tuple[str, int], FoundTool] = {}
        for tool in tools:
            self._by_key[(tool.contract.name, tool.contract.version)] = tool

    def __repr__(self) -> str:
        return f"ToolIndex({sorted(name for name, _ in self._by_key)})"

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[FoundTool]:
        return iter(self._by_key.values())

    def find(self, contract: str, version: int | None = None) -> FoundTool | None:
        """Return the tool of ``contract`` (at ``version``, if given), or None."""
        if version is not None:
            return self._by_key.get((contract, version))
        found = [tool for (name, _), tool in self._by_key.items() if name == contract]
        return max(found, key=lambda tool: tool.contract.version) if found else None

    def merged(self, other: ToolIndex) -> ToolIndex:
        """Return an index of both, ``other`` winning where they name the same contract."""
        return ToolIndex([*self, *other])


def remember(tool: Tool) -> None:
    """Note a tool decorated in this process (weakly: a discarded tool is forgotten)."""
    _REMEMBERED[next(_SEQUENCE)] = tool


def known_tools() -> ToolIndex:
    """Return every decorated tool of this process that is still alive."""
    tools = sorted(_REMEMBERED.items())
    return ToolIndex(_found(tool) for _, tool in tools)


def load_tools(modules: str | Sequence[object] | None = None) -> ToolIndex:
    """Index the decorated tools of ``modules``.

    ``modules`` is a comma-separated string of importable module names, a
    sequence of names, modules, classes, objects or decorated tools, or None
    for the :data:`TOOLS_VARIABLE` environment variable. Raises
    :class:`~effectguard.errors.ConfigurationError` naming a module that cannot
    be imported or that holds no decorated tool.
    """
    if modules is None:
        modules = os.environ.get(TOOLS_VARIABLE, "")
    sources: Sequence[object] = (
        [name.strip() for name in modules.split(",") if name.strip()]
        if isinstance(modules, str)
        else modules
    )
    found: list[FoundTool] = []
    for source in sources:
        resolved = _resolve(source)
        # Tools found on an object are its methods: their probes are bound to it, as a call's are.
        bound = not isinstance(resolved, types.ModuleType) and not inspect.isclass(resolved)
        tools = [_found(tool, resolved if bound else None) for tool in _tools_in(resolved)]
        if not tools:
            msg = f"{_label(source)} holds no @effect tool: name the module that defines them"
            raise ConfigurationError(msg)
        found.extend(tools)
    return ToolIndex(found)


def _label(source: object) -> str:
    if isinstance(source, str):
        return f"module {source!r}"
    return repr(source)


def _resolve(source: object) -> object:
    if not isinstance(source, str):
        return source
    try:
        return importlib.import_module(source)
    except Exception as exc:
        msg = f"cannot import tools module {source!r}: {type(exc).__name__}: {exc}"
        raise ConfigurationError(msg) from exc


def _tools_in(source: object) -> list[Tool]:
    """The decorated tools of a module, class or object, or the tool itself."""
    tool = find_tool(source)
    if tool is not None:
        return [tool]
    if isinstance(source, types.ModuleType):
        values: Iterable[Any] = vars(source).values()
    else:
        owner = source if inspect.isclass(source) else type(source)
        values = [
            inspect.getattr_static(source, name) for klass in owner.__mro__ for name in vars(klass)
        ]
    found: dict[int, Tool] = {}
    for value in values:
        tool = find_tool(value)
        if tool is not None:
            found[id(tool)] = tool
    return list(found.values())


def _found(tool: Tool, instance: object | None = None) -> FoundTool:
    raw = tool.func
    where = f"{getattr(raw, '__module__', '?')}.{tool.shape.tool}"
    return FoundTool(tool.contract_for(instance), tool.returns, where)
