"""A decorated tool: the contract it was given and how each of its calls is run.

``@effect`` turns its keyword arguments into an
:class:`~effectguard.decorator.options.Options`; :class:`Tool` checks them
against the function once, builds the :class:`EffectContract` (which checks
the values themselves), and then, per call, binds the arguments, finds the executor and maps the
:class:`EffectResult` onto a return value or an exception.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from effectguard.codec import codec_for
from effectguard.config import resolve_executor
from effectguard.contract import (
    DURATION_FIELDS,
    WAIT_FIELDS,
    Arguments,
    EffectContract,
    OutputCodec,
    redacted_names,
)
from effectguard.decorator.binding import KEY_PARAMETER, ProbeShape, ToolShape, unwrap_descriptor
from effectguard.decorator.discovery import remember
from effectguard.decorator.options import RENAMED, Options
from effectguard.decorator.templates import compile_identity
from effectguard.errors import (
    ConfigurationError,
    EffectInProgress,
    EffectNotConfirmed,
    EffectNotSent,
    EffectOutcomeUnknown,
    EffectQuarantined,
    EffectRejected,
)
from effectguard.executor import EffectExecutor
from effectguard.model import EffectResult, EffectStatus

__all__ = ["AS_RESULT", "DEFAULT_WAIT_FOR_PEER", "Tool", "outcome_of"]

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
        return result if as_result else outcome_of(result)


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
    return result if as_result else outcome_of(result)


def outcome_of(result: EffectResult[Any]) -> Any:
    """Return a CONFIRMED result's output; raise the exception that says why there is none.

    When the handler raised in this call, the exception raised here chains it
    (``raise … from``), so the traceback shows the handler's own failure.
    """
    status = result.status
    if status is EffectStatus.CONFIRMED:
        return result.output
    if status is EffectStatus.REJECTED:
        reason = result.reason or f"operation {result.operation_id!r} was rejected"
        raise EffectRejected(reason, evidence=result.evidence, result=result)
    error: EffectNotConfirmed
    if status is EffectStatus.QUARANTINED:
        error = EffectQuarantined(result)
    elif status is EffectStatus.PREPARED and not result.replayed:
        reason = f"operation {result.operation_id!r} was not sent: {result.reason}"
        error = EffectNotSent(reason, evidence=result.evidence, result=result)
    elif status in (EffectStatus.PREPARED, EffectStatus.DISPATCHED, EffectStatus.RECONCILING):
        error = EffectInProgress(result)
    else:
        error = EffectOutcomeUnknown(result)
    raise error from result.handler_error
