"""``@effect``: put a guarded side effect on a function you already have.

::

    @effect(operation_id="invoice:{invoice_id}:capture",
            idempotency_key="capture:{invoice_id}",
            idempotency_guaranteed=True,
            probe=find_capture)
    def capture_payment(
        invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict:
        ...

The decorated function keeps its signature, name, docstring and
``__wrapped__`` (it is a ``wrapt`` function wrapper), and works as a method,
staticmethod, classmethod or ``async def``. Calling it returns the output once
the effect is CONFIRMED, fresh or replayed, and raises otherwise; its
``execute`` returns the :class:`EffectResult` instead. The ``INJECTED``
default only tells a type checker that callers do not pass the key; the
executor always does.

Each call finds its executor in this order: ``@effect(executor=...)``; the
executor an agent runtime lends with :func:`use_executor` (a context
variable, so the decorator never imports the runtime); the process default
of :func:`effectguard.configure`. Both live in :mod:`effectguard.config`.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Collection, Coroutine
from datetime import timedelta
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, overload

import wrapt

from effectguard.config import resolve_executor, use_executor
from effectguard.contract import (
    DEFAULT_MAX_OUTPUT_BYTES,
    Arguments,
    EffectContract,
    OutputCodec,
    UnknownOutcomePolicy,
)
from effectguard.decorator.binding import visible_annotations, visible_signature
from effectguard.decorator.options import Options
from effectguard.decorator.tool import AS_RESULT, Tool
from effectguard.executor import EffectExecutor
from effectguard.model import EffectResult

__all__ = [
    "INJECTED",
    "AsyncEffectFunction",
    "EffectDecorator",
    "EffectFunction",
    "effect",
    "executor_of",
    "get_contract",
    "is_effect",
    "operation_id_of",
    "use_executor",
]

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
