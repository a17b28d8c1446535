"""A decorated tool: the contract it was given and how each of its calls is run.

``@effect`` turns its keyword arguments into an :class:`Options`; :class:`Tool`
checks them against the function once, builds the :class:`EffectContract`,
and then, per call, binds the arguments, finds the executor and maps the
:class:`EffectResult` onto a return value or an exception.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Collection
from datetime import timedelta
from typing import Any

from effectguard.codec import codec_for
from effectguard.config import report_effect, resolve_executor
from effectguard.contract import Arguments, EffectContract, OutputCodec, UnknownOutcomePolicy
from effectguard.decorator.binding import KEY_PARAMETER, ProbeShape, ToolShape, unwrap_descriptor
from effectguard.decorator.templates import compile_identity
from effectguard.errors import (
    ConfigurationError,
    EffectInProgress,
    EffectNotSent,
    EffectOutcomeUnknown,
    EffectQuarantined,
    EffectRejected,
)
from effectguard.executor import EffectExecutor
from effectguard.model import EffectResult, EffectStatus

__all__ = ["AS_RESULT", "Options", "Tool", "settle"]

#: The keyword by which ``execute()`` asks, through wrapt's own binding, for the result.
AS_RESULT = "__effectguard_as_result__"


def _seconds(value: float | timedelta | None, what: str) -> float | None:
    if value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, timedelta):
        return value.total_seconds()
    msg = f"{what} must be seconds (a number) or a timedelta, not {value!r}"
    raise ConfigurationError(msg)


def _exception_types(
    given: type[Exception] | Collection[type[Exception]],
) -> tuple[type[Exception], ...]:
    return (given,) if isinstance(given, type) else tuple(given)


def _field(name: str) -> Callable[[Any], str | None]:
    def read(output: Any) -> str | None:
        value = output.get(name) if isinstance(output, dict) else getattr(output, name, None)
        return None if value is None else str(value)

    read.__qualname__ = f"provider_operation_id[{name!r}]"
    return read


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    """The keyword arguments of one ``@effect(...)``, as given."""

    operation_id: str | Callable[[Arguments], str]
    idempotency_key: str | Callable[[Arguments], str] | None
    idempotency_guaranteed: bool
    probe: Any
    postcondition: Callable[[Any], bool] | None
    provider_operation_id: str | Callable[[Any], str | None] | None
    unknown_outcome: UnknownOutcomePolicy | str
    timeout: float | timedelta | None
    lease: float | timedelta
    max_attempts: int
    redact: Collection[str]
    codec: OutputCodec[Any] | type | None
    name: str | None
    version: int
    executor: EffectExecutor | None
    provider_key_retention: float | timedelta | None
    max_output_bytes: int
    not_sent_on: type[Exception] | Collection[type[Exception]] = ()
    retry_wait_initial: float | timedelta | None = None
    retry_wait_max: float | timedelta | None = None
    deadline: float | timedelta | None = None


def _return_annotation(func: Any) -> Any:
    try:
        return inspect.signature(func, eval_str=True).return_annotation
    except Exception:  # noqa: BLE001 - an unresolvable annotation just means "no inferred codec"
        return None


def _codec(given: OutputCodec[Any] | type | None, func: Any, tool: str) -> OutputCodec[Any] | None:
    """Return the codec ``given`` (a codec or a type) names, else the one the annotation implies."""
    if given is None:
        return codec_for(_return_annotation(func))
    if not isinstance(given, type):
        return given
    codec = codec_for(given)
    if codec is None:
        msg = f"{tool}: codec={given!r} is not a dataclass or a pydantic model"
        raise ConfigurationError(msg)
    return codec


def _policy(value: UnknownOutcomePolicy | str, tool: str) -> UnknownOutcomePolicy:
    try:
        return UnknownOutcomePolicy(str(value).upper().replace("-", "_"))
    except ValueError:
        choices = ", ".join(policy.value for policy in UnknownOutcomePolicy)
        msg = f"{tool}: unknown_outcome={value!r}; expected one of {choices}"
        raise ConfigurationError(msg) from None


def _provider_key(
    options: Options,
    shape: ToolShape,
    operation_id: Callable[[Arguments], str],
    redact: frozenset[str],
) -> Callable[[Arguments], str] | None:
    """Return how the provider key is computed; None when the tool takes no key."""
    tool = shape.tool
    if options.idempotency_key is None:
        if options.idempotency_guaranteed and not shape.takes_key:
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
        options.idempotency_key,
        what="idempotency_key",
        tool=tool,
        parameters=shape.argument_names(),
        redacted=redact,
    )


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
        self.executor = options.executor
        self.shape = shape = ToolShape(raw, tool=tool)
        names = shape.argument_names()
        redact = frozenset([options.redact] if isinstance(options.redact, str) else options.redact)
        unknown = sorted(redact.difference(names))
        if unknown:
            msg = f"{tool}: redact names {', '.join(unknown)}, which are not parameters"
            raise ConfigurationError(msg)
        operation_id = compile_identity(
            options.operation_id, what="operation_id", tool=tool, parameters=names, redacted=redact
        )
        key = _provider_key(options, shape, operation_id, redact)
        self.probe = None if options.probe is None else ProbeShape(options.probe, shape)
        provider_operation_id = options.provider_operation_id
        if isinstance(provider_operation_id, str):
            provider_operation_id = _field(provider_operation_id)
        lease = _seconds(options.lease, "lease")
        if lease is None:
            msg = f"{tool}: lease must be seconds > 0 or a timedelta, not None"
            raise ConfigurationError(msg)
        self.contract = EffectContract(
            name=options.name or f"{getattr(raw, '__module__', None) or '__main__'}.{tool}",
            version=options.version,
            operation_id=operation_id,
            provider_idempotency_key=key,
            provider_idempotency_guaranteed=options.idempotency_guaranteed,
            outcome_probe=self._probe_adapter(None),
            postcondition=options.postcondition,
            provider_operation_id=provider_operation_id,
            unknown_outcome=_policy(options.unknown_outcome, tool),
            handler_timeout=_seconds(options.timeout, "timeout"),
            lease_seconds=lease,
            max_attempts=options.max_attempts,
            provider_key_retention_seconds=_seconds(
                options.provider_key_retention, "provider_key_retention"
            ),
            redact=redact,
            codec=_codec(options.codec, raw, tool),
            max_output_bytes=options.max_output_bytes,
            not_sent_on=_exception_types(options.not_sent_on),
            retry_wait_initial=_seconds(options.retry_wait_initial, "retry_wait_initial"),
            retry_wait_max=_seconds(options.retry_wait_max, "retry_wait_max"),
            deadline=_seconds(options.deadline, "deadline"),
        )

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
        contract = self.contract
        if instance is not None and self.probe is not None and self.probe.binds:
            contract = dataclasses.replace(contract, outcome_probe=self._probe_adapter(instance))
        handler = self._handler(wrapped, instance)
        executor = resolve_executor(self.executor, self.contract.name)
        if self.is_async:
            return _run_async(executor, contract, arguments, handler, as_result=as_result)
        result = executor.execute(contract, arguments, handler)
        report_effect(result)
        return result if as_result else settle(result)


async def _run_async(
    executor: EffectExecutor,
    contract: EffectContract,
    arguments: Arguments,
    handler: Callable[..., Any],
    *,
    as_result: bool,
) -> Any:
    result = await executor.execute_async(contract, arguments, handler)
    report_effect(result)
    return result if as_result else settle(result)


def settle(result: EffectResult[Any]) -> Any:
    """Return a CONFIRMED result's output; raise the exception that says why there is none."""
    status = result.status
    if status is EffectStatus.CONFIRMED:
        return result.output
    if status is EffectStatus.REJECTED:
        reason = result.reason or f"operation {result.operation_id!r} was rejected"
        raise EffectRejected(reason, evidence=result.evidence, result=result)
    if status is EffectStatus.QUARANTINED:
        raise EffectQuarantined(result)
    if status is EffectStatus.PREPARED and not result.replayed:
        reason = f"operation {result.operation_id!r} was not sent: {result.reason}"
        raise EffectNotSent(reason, evidence=result.evidence, result=result)
    if status in (EffectStatus.PREPARED, EffectStatus.DISPATCHED, EffectStatus.RECONCILING):
        raise EffectInProgress(result)
    raise EffectOutcomeUnknown(result)
