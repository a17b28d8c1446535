"""Spans for effects: ``effect {contract}`` per call, under ``execute_tool {tool}`` when needed.

:class:`EffectTelemetry` is an observer of the executor's hook and a call
watcher (see :mod:`effectguard.executor.observe`). For each call it starts an
INTERNAL span ``effect {contract}``, the child of the current span, and makes
it current while the call runs, so the handler's and the probe's own spans
(an HTTP client's) nest under it. When the current span is not a tool call's
(a framework's ``execute_tool`` span, or an effect's own), it first starts
``execute_tool {tool}`` with the GenAI attributes, the tool being the contract.
Each transition becomes a span event; the result sets the span's attributes
and, for anything not CONFIRMED, status ERROR with ``error.type``.

A transition reported after its call ended (a late handler's return) gets a
short span of its own, under whatever span is current where it is reported.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Self

from opentelemetry import context as otel_context
from opentelemetry import trace

from effectguard import __version__
from effectguard._executor import CallStart, Transition
from effectguard._scope import CallScope
from effectguard.otel import events, names
from effectguard.otel.metrics import AWAITING_A_PERSON, Instruments

__all__ = ["EffectTelemetry"]

#: Where the call being traced in a context is kept (an OpenTelemetry context key).
_CALL = otel_context.create_key("effectguard.call")


def _is_tool_span(span: trace.Span) -> bool:
    """Whether ``span`` is a tool call's (a framework's ``execute_tool``) or an effect's own.

    A tool call's span is one named ``execute_tool …``, or with the GenAI attribute
    ``gen_ai.operation.name=execute_tool`` or ``gen_ai.tool.name``.

    Read from the SDK's span (name, attributes); a span whose implementation
    exposes neither does not count, so the effect gets its own ``execute_tool``.
    """
    if not span.get_span_context().is_valid:
        return False
    attributes = getattr(span, "attributes", None) or {}
    if attributes.get(names.GEN_AI_OPERATION) == "execute_tool":
        return True
    # Pydantic AI's older "running tool" span names the tool only; an effect's own span counts.
    if names.GEN_AI_TOOL_NAME in attributes or names.OPERATION_ID in attributes:
        return True
    name = getattr(span, "name", "")
    return isinstance(name, str) and name.startswith("execute_tool")


class EffectTelemetry:
    """The observer and call watcher that turns effects into spans, events and metrics."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None,
        meter_provider: Any,
        record_arguments: Iterable[str],
    ) -> None:
        self.tracer = trace.get_tracer(
            names.INSTRUMENTATION_NAME, __version__, tracer_provider=tracer_provider
        )
        self.instruments = Instruments(meter_provider)
        self.record_arguments = frozenset(record_arguments)

    def __repr__(self) -> str:
        return "EffectTelemetry()"

    def watch_call(self, start: CallStart) -> _CallTrace:
        """The spans of the call ``start`` begins (a :class:`~effectguard.executor.CallWatcher`)."""
        return _CallTrace(self, start)

    def __call__(self, transition: Transition) -> None:
        """Add ``transition`` to its call's span, or give it a span of its own after the call."""
        current = otel_context.get_value(_CALL)
        if (
            isinstance(current, _CallTrace)
            and current.owner is self
            and current.start.operation_id == transition.operation_id
            and current.hear(transition)
        ):
            return
        if transition.final:
            return  # a result is only ever reported inside its call
        self._after_the_call(transition)

    def _after_the_call(self, transition: Transition) -> None:
        span = self.tracer.start_span(
            f"effect {transition.contract}",
            kind=trace.SpanKind.INTERNAL,
            attributes={
                names.OPERATION_ID: transition.operation_id,
                names.CONTRACT_NAME: transition.contract,
                names.CONTRACT_VERSION: transition.contract_version,
                names.STATUS: transition.to_status.value,
                names.ATTEMPTS: transition.attempt,
            },
        )
        for name, attributes in events.events_of(transition):
            span.add_event(name, attributes)
        span.end()
        if transition.to_status in AWAITING_A_PERSON:
            self.instruments.awaiting(1, transition.contract, transition.to_status)


class _CallTrace:
    """The spans of one call, open from before its first read to after its result."""

    def __init__(self, owner: EffectTelemetry, start: CallStart) -> None:
        self.owner = owner
        self.start = start
        self._lock = threading.Lock()
        self._open = False
        self._overlap = False
        self._result: Transition | None = None
        self._tool: trace.Span | None = None
        self._span: trace.Span = trace.INVALID_SPAN
        self._token: object = None
        self._began = 0.0
        self._recording = False

    def __enter__(self) -> Self:
        start, tracer = self.start, self.owner.tracer
        parent = otel_context.get_current()
        if not _is_tool_span(trace.get_current_span(parent)):
            tool: dict[str, Any] = {
                names.GEN_AI_OPERATION: "execute_tool",
                names.GEN_AI_TOOL_NAME: start.contract,
                names.GEN_AI_TOOL_TYPE: "function",
            }
            scope = CallScope.current()
            if scope is not None:
                tool[names.GEN_AI_TOOL_CALL_ID] = scope.call_id
            self._tool = tracer.start_span(
                f"execute_tool {start.contract}",
                parent,
                kind=trace.SpanKind.INTERNAL,
                attributes=tool,
            )
            parent = trace.set_span_in_context(self._tool, parent)
        attributes: dict[str, Any] = {
            names.OPERATION_ID: start.operation_id,
            names.CONTRACT_NAME: start.contract,
            names.CONTRACT_VERSION: start.contract_version,
            names.IDEMPOTENCY_GUARANTEED: start.idempotency_guaranteed,
        }
        if start.contract in self.owner.record_arguments:
            attributes.update(events.argument_attributes(start.arguments))
        self._span = tracer.start_span(
            f"effect {start.contract}", parent, kind=trace.SpanKind.INTERNAL, attributes=attributes
        )
        # A sampled-out or no-op span drops events: building them would be wasted work.
        self._recording = self._span.is_recording()
        current = trace.set_span_in_context(self._span, parent)
        self._token = otel_context.attach(otel_context.set_value(_CALL, self, current))
        self._open = True
        self._began = time.perf_counter()
        return self

    def paused(self, seconds: float) -> None:
        """A wait between attempts or probes: a ``retry_wait`` event."""
        with self._lock:
            if self._open:
                self._span.add_event("retry_wait", {names.WAIT_SECONDS: seconds})

    def hear(self, transition: Transition) -> bool:
        """Add ``transition`` to the span; False once the call has ended."""
        with self._lock:
            if not self._open:
                return False
            if self._recording:
                for name, attributes in events.events_of(transition):
                    self._span.add_event(name, attributes)
                overlap = transition.evidence.get("overlap_risk")
                if isinstance(overlap, bool) and not transition.final:
                    self._overlap = overlap
            if transition.final:
                self._result = transition
            elif transition.to_status in AWAITING_A_PERSON:
                self.owner.instruments.awaiting(1, transition.contract, transition.to_status)
            return True

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace_: TracebackType | None,
    ) -> None:
        with self._lock:
            self._open = False
        seconds = time.perf_counter() - self._began
        otel_context.detach(self._token)  # type: ignore[arg-type]  # the token attach() returned
        span, result = self._span, self._result
        measured: dict[str, Any] = {names.CONTRACT_NAME: self.start.contract}
        failure: str | None = None
        if result is not None:
            if self._recording:
                span.set_attributes(events.result_attributes(result, self._overlap))
            measured[names.STATUS] = result.to_status.value
            measured[names.REPLAYED] = result.replayed
            failure = events.error_type(result)
            if failure is not None and result.error_type is not None:
                # The handler's exception, by type only, as OpenTelemetry spells it.
                span.add_event("exception", {"exception.type": result.error_type})
        if error is not None:
            # The type only: an exception's message may quote what redact= keeps out.
            failure = f"{type(error).__module__}.{type(error).__qualname__}"
            span.add_event("exception", {"exception.type": failure})
            measured.setdefault(names.STATUS, "error")
        if failure is not None:
            measured[names.ERROR_TYPE] = failure
            self._fail(failure, result)
        span.end()
        if self._tool is not None:
            self._tool.end()
        self.owner.instruments.call(seconds, measured)

    def _fail(self, failure: str, result: Transition | None) -> None:
        description = failure
        if result is not None and result.reason:
            description = f"{result.to_status.value}: {result.reason}"
        for span in (self._span, self._tool):
            if span is not None:
                span.set_attribute(names.ERROR_TYPE, failure)
                span.set_status(trace.Status(trace.StatusCode.ERROR, description))
