"""Calling handlers and probes: deadlines, late returns, and classifying what came back.

A local deadline is not cancellation. A thread handler that passes its
deadline keeps running and may still send; its eventual return is handed to a
callback as evidence. An async handler is cancelled at its deadline and, once
it has finished cancelling, can send nothing more.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import enum
import inspect
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from effectguard.errors import EffectNotSent, EffectRejected
from effectguard.model import OutcomeProbeResult, ProbeStatus

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
    NOT_SENT = "not_sent"
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
    except EffectNotSent as exc:
        return HandlerOutcome(Outcome.NOT_SENT, error=exc)
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
    """A call in its own daemon thread that its caller may stop waiting for.

    Until the caller abandons it, the outcome is handed to the caller; after
    that, to ``on_late``, in the call's own thread. A daemon thread of its own,
    not an executor's pool, so that no event loop or pool shutdown waits for it
    or drops what it returns.
    """

    def __init__(
        self,
        call: Callable[[], Any],
        on_late: Callable[[HandlerOutcome], None],
        notify: Callable[[], None] | None = None,
    ) -> None:
        self._call = call
        self._on_late = on_late
        self._notify = notify
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._outcome: HandlerOutcome | None = None
        self._abandoned = False

    def start(self, name: str) -> None:
        # A copy of the caller's context, so context variables (a lent executor) reach the call.
        context = contextvars.copy_context()
        threading.Thread(target=context.run, args=(self._run,), name=name, daemon=True).start()

    def _run(self) -> None:
        outcome = classify(self._call)
        with self._lock:
            abandoned = self._abandoned
            if not abandoned:
                self._outcome = outcome
                self._done.set()
        if abandoned:
            self._on_late(outcome)
        elif self._notify is not None:
            self._notify()

    def abandon(self) -> HandlerOutcome | None:
        """Stop waiting: return the outcome if there is one, else hand it to ``on_late`` later."""
        with self._lock:
            if self._outcome is None:
                self._abandoned = True
            return self._outcome

    def wait(self, timeout: float) -> HandlerOutcome:
        interrupted: BaseException | None = None
        try:
            self._done.wait(timeout)
        except BaseException as exc:  # noqa: BLE001 - Ctrl-C while waiting: the call goes on
            interrupted = exc
        outcome = self.abandon()
        if interrupted is None:
            return outcome or HandlerOutcome(Outcome.TIMED_OUT, still_running=True)
        if outcome is not None:
            self._on_late(outcome)  # it ended just as the wait was interrupted
        return HandlerOutcome(Outcome.INTERRUPTED, error=interrupted, still_running=True)


def call_in_thread(
    call: Callable[[], Any],
    timeout: float,
    on_late: Callable[[HandlerOutcome], None],
    *,
    name: str,
) -> HandlerOutcome:
    """Run ``call`` in a daemon thread, waiting at most ``timeout`` seconds.

    On time it returns the classified outcome. Past the deadline it returns
    TIMED_OUT with ``still_running=True`` (INTERRUPTED, if the wait itself was
    interrupted), and ``on_late`` receives the real outcome whenever the call
    finally ends. The thread runs in a copy of the caller's context, so
    context variables (an executor lent by a runtime) reach it.
    """
    run = _ThreadRun(call, on_late)
    run.start(name)
    return run.wait(timeout)


async def call_thread_async(
    call: Callable[[], Any],
    limit: float | None,
    on_late: Callable[[HandlerOutcome], None],
    *,
    name: str,
) -> HandlerOutcome:
    """Like :func:`call_in_thread`, awaited on the event loop (``limit`` None: no deadline).

    If the awaiting task is cancelled, the thread cannot be: the result is
    INTERRUPTED with ``still_running=True`` and ``on_late`` receives the real outcome.
    """
    loop = asyncio.get_running_loop()
    finished = asyncio.Event()

    def notify() -> None:
        loop.call_soon_threadsafe(finished.set)

    run = _ThreadRun(call, on_late, notify=notify)
    run.start(name)
    try:
        await asyncio.wait_for(finished.wait(), limit)
    except TimeoutError:
        pass
    except asyncio.CancelledError as exc:
        outcome = run.abandon()
        if outcome is not None:
            # It ended just as the caller was cancelled: record it off the event loop.
            threading.Thread(target=on_late, args=(outcome,), name=name, daemon=True).start()
        return HandlerOutcome(Outcome.INTERRUPTED, error=exc, still_running=True)
    return run.abandon() or HandlerOutcome(Outcome.TIMED_OUT, still_running=True)


def _task_outcome(task: asyncio.Future[Any]) -> HandlerOutcome:
    if task.cancelled():
        return HandlerOutcome(Outcome.INTERRUPTED, error=asyncio.CancelledError())
    return classify(task.result)


async def call_async(
    make: Callable[[], Awaitable[Any]],
    limit: float | None,
    on_late: Callable[[HandlerOutcome], None] | None = None,
) -> HandlerOutcome:
    """Await an async handler, cancelling it after ``limit`` seconds and waiting until it stops.

    If the caller itself is cancelled, the handler is cancelled too, but it may
    not have stopped yet: the result is INTERRUPTED with ``still_running=True``
    and ``on_late`` receives the handler's real outcome once it has ended.
    """
    task = asyncio.ensure_future(make())
    try:
        done, _ = await asyncio.wait({task}, timeout=limit)
        if not done:
            task.cancel()
            await asyncio.wait({task})
    except asyncio.CancelledError as exc:
        task.cancel()
        if task.done():
            return HandlerOutcome(Outcome.INTERRUPTED, error=exc)
        if on_late is not None:
            late = on_late
            task.add_done_callback(lambda ended: late(_task_outcome(ended)))
        return HandlerOutcome(Outcome.INTERRUPTED, error=exc, still_running=True)
    if task.cancelled():
        return HandlerOutcome(Outcome.TIMED_OUT, still_running=False)
    return classify(task.result)


def probe_result(value: Any) -> OutcomeProbeResult:
    """Return ``value`` if it is a probe result, else an UNKNOWN one saying what came back."""
    if isinstance(value, OutcomeProbeResult):
        if isinstance(value.status, ProbeStatus):
            return value
        try:
            return dataclasses.replace(value, status=ProbeStatus(value.status))
        except ValueError:
            return OutcomeProbeResult.unknown(
                {"error": f"probe returned an unknown status {value.status!r}"}
            )
    return OutcomeProbeResult.unknown(
        {"error": f"probe returned {type(value).__name__}, not OutcomeProbeResult"}
    )
