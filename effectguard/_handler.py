"""Calling handlers and probes: deadlines, late returns, and classifying what came back.

A local deadline is not cancellation. A thread handler that passes its
deadline keeps running and may still send; its eventual return is handed to a
callback as evidence. An async handler is cancelled at its deadline and, once
it has finished cancelling, can send nothing more.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from effectguard.errors import EffectRejected
from effectguard.model import OutcomeProbeResult

__all__ = [
    "HandlerOutcome",
    "Outcome",
    "call_async",
    "call_in_thread",
    "classify",
    "probe_result",
]


class Outcome(enum.StrEnum):
    """How a handler call ended, from the caller's point of view."""

    RETURNED = "returned"
    REJECTED = "rejected"
    RAISED = "raised"
    TIMED_OUT = "timed_out"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True)
class HandlerOutcome:
    """What one handler call produced; ``still_running`` only after a thread timeout."""

    kind: Outcome
    value: Any = None
    error: BaseException | None = None
    still_running: bool = False

    def describe(self) -> str:
        """One line for a ledger event."""
        if self.kind is Outcome.RETURNED:
            return "returned"
        if self.error is not None:
            return f"{self.kind.value}: {type(self.error).__name__}: {self.error}"
        return self.kind.value


def classify(call: Callable[[], Any]) -> HandlerOutcome:
    """Run ``call`` and classify its return or exception."""
    try:
        value = call()
    except EffectRejected as exc:
        return HandlerOutcome(Outcome.REJECTED, error=exc)
    except Exception as exc:  # noqa: BLE001 - any failure is an unknown outcome, recorded as such
        return HandlerOutcome(Outcome.RAISED, error=exc)
    except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt and kin: record, then re-raise
        return HandlerOutcome(Outcome.INTERRUPTED, error=exc)
    if inspect.isawaitable(value):
        _discard(value)
        error = TypeError("the handler returned an awaitable; use execute_async for async handlers")
        return HandlerOutcome(Outcome.RAISED, error=error)
    return HandlerOutcome(Outcome.RETURNED, value=value)


def _discard(value: object) -> None:
    close = getattr(value, "close", None)
    if callable(close):
        close()


class _ThreadRun:
    """A handler call in its own thread that a caller may stop waiting for."""

    def __init__(self, call: Callable[[], Any], on_late: Callable[[HandlerOutcome], None]) -> None:
        self._call = call
        self._on_late = on_late
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._outcome: HandlerOutcome | None = None
        self._abandoned = False

    def run(self) -> None:
        outcome = classify(self._call)
        with self._lock:
            if not self._abandoned:
                self._outcome = outcome
                self._done.set()
                return
        self._on_late(outcome)

    def wait(self, timeout: float) -> HandlerOutcome | None:
        self._done.wait(timeout)
        with self._lock:
            if self._outcome is None:
                self._abandoned = True
            return self._outcome


def call_in_thread(
    call: Callable[[], Any],
    timeout: float,
    on_late: Callable[[HandlerOutcome], None],
    *,
    name: str,
) -> HandlerOutcome:
    """Run ``call`` in a daemon thread, waiting at most ``timeout`` seconds.

    On time it returns the classified outcome. Past the deadline it returns
    TIMED_OUT with ``still_running=True``, and ``on_late`` receives the real
    outcome in that thread whenever the call finally ends.
    """
    run = _ThreadRun(call, on_late)
    thread = threading.Thread(target=run.run, name=name, daemon=True)
    thread.start()
    outcome = run.wait(timeout)
    if outcome is None:
        return HandlerOutcome(Outcome.TIMED_OUT, still_running=True)
    return outcome


async def call_async(make: Callable[[], Awaitable[Any]], limit: float | None) -> HandlerOutcome:
    """Await an async handler, cancelling it after ``limit`` seconds and waiting until it stops."""
    task = asyncio.ensure_future(make())
    try:
        done, _ = await asyncio.wait({task}, timeout=limit)
        if not done:
            task.cancel()
            await asyncio.wait({task})
    except asyncio.CancelledError as exc:
        # The caller itself is being cancelled: stop the handler and say whether it stopped.
        task.cancel()
        return HandlerOutcome(Outcome.INTERRUPTED, error=exc, still_running=not task.done())
    if task.cancelled():
        return HandlerOutcome(Outcome.TIMED_OUT, still_running=False)
    return classify(task.result)


def probe_result(value: Any) -> OutcomeProbeResult:
    """Return ``value`` if it is a probe result, else an UNKNOWN one saying what came back."""
    if isinstance(value, OutcomeProbeResult):
        return value
    return OutcomeProbeResult.unknown(
        {"error": f"probe returned {type(value).__name__}, not OutcomeProbeResult"}
    )
