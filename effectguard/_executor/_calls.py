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
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from effectguard._contract import EffectContract
from effectguard._model import OutcomeProbeResult, ProbeStatus, frozen_builder
from effectguard.errors import EffectNotSent, EffectRejected

__all__ = [
    "HandlerOutcome",
    "Outcome",
    "call_async",
    "call_in_thread",
    "classify",
    "new_outcome",
    "not_sent",
    "probe_result",
    "run_handler",
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


#: A HandlerOutcome from its four fields, without the frozen ``__init__`` (every call makes one).
new_outcome = frozen_builder(HandlerOutcome)
_RETURNED, _REJECTED, _NOT_SENT, _RAISED, _INTERRUPTED = (
    Outcome.RETURNED,
    Outcome.REJECTED,
    Outcome.NOT_SENT,
    Outcome.RAISED,
    Outcome.INTERRUPTED,
)


def not_sent(error: BaseException) -> EffectNotSent:
    """The :class:`EffectNotSent` an exception a contract names in ``not_sent_on`` stands for."""
    reason = f"the request was not sent ({type(error).__name__}: {error})"
    return EffectNotSent(reason, evidence={"error": type(error).__name__})


def run_handler(
    handler: Callable[..., Any],
    arguments: Mapping[str, Any],
    key: str | None,
    contract: EffectContract,
) -> HandlerOutcome:
    """Call ``handler(arguments, idempotency_key=key)`` in this thread and classify what happened.

    An exception of the contract's ``not_sent_on`` counts as :class:`EffectNotSent`.
    """
    try:
        value = handler(arguments, idempotency_key=key)
    except EffectRejected as exc:
        return new_outcome(_REJECTED, None, exc, False)  # noqa: FBT003 - positional fields
    except EffectNotSent as exc:
        return new_outcome(_NOT_SENT, None, exc, False)  # noqa: FBT003 - positional fields
    except Exception as exc:  # noqa: BLE001 - any failure is an unknown outcome, recorded as such
        if contract.not_sent_on and isinstance(exc, contract.not_sent_on):
            unsent = not_sent(exc)
            unsent.__cause__ = exc
            return new_outcome(_NOT_SENT, None, unsent, False)  # noqa: FBT003 - positional fields
        return new_outcome(_RAISED, None, exc, False)  # noqa: FBT003 - positional fields
    except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt and kin: record, then re-raise
        return new_outcome(_INTERRUPTED, None, exc, False)  # noqa: FBT003 - positional fields
    if type(value) is dict or not inspect.isawaitable(value):
        return new_outcome(_RETURNED, value, None, False)  # noqa: FBT003 - positional fields
    _discard(value)
    error = TypeError("the handler returned an awaitable; use execute_async for async handlers")
    return new_outcome(_RAISED, None, error, False)  # noqa: FBT003 - positional fields


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


def _raise(error: BaseException) -> Any:
    raise error


def _discard(value: object) -> None:
    close = getattr(value, "close", None)
    if callable(close):
        close()


class _ThreadRun:
    """A call in its own daemon thread that its caller may stop waiting for.

    Until the caller abandons it, the outcome is handed to the caller; after
    that, to ``on_late``, in the call's own thread. A caller interrupted before
    the call began stops it from ever beginning. A daemon thread of its own,
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
        self._began = False
        self._cancelled = False

    def start(self, name: str) -> None:
        # A copy of the caller's context, so context variables (a lent executor) reach the call.
        context = contextvars.copy_context()
        threading.Thread(target=context.run, args=(self._run,), name=name, daemon=True).start()

    def _run(self) -> None:
        with self._lock:
            # Thread.start can be interrupted after the thread exists: which of the caller
            # and this thread takes the lock first decides whether the call runs at all.
            if self._cancelled:
                return
            self._began = True
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

    def abandon(
        self,
        interrupted: BaseException | None = None,
        late: Callable[[HandlerOutcome], None] | None = None,
    ) -> HandlerOutcome:
        """Stop waiting, ``interrupted`` by that exception if given, and say what the caller gets.

        ``late`` (default ``on_late``) receives the call's outcome exactly when
        the result has ``still_running=True``, once, now or when the call ends.
        Interrupted before the call began, the call never begins: INTERRUPTED
        with ``still_running=False``. A deadline does not stop a call that has
        not begun yet: TIMED_OUT with ``still_running=True``.
        """
        with self._lock:
            outcome = self._outcome
            if outcome is None:
                self._abandoned = True
                self._cancelled = interrupted is not None and not self._began
            running = outcome is None and not self._cancelled
        if interrupted is None:
            return outcome or HandlerOutcome(Outcome.TIMED_OUT, still_running=True)
        if outcome is not None:
            (late or self._on_late)(outcome)  # it ended just as the wait was interrupted
            running = True  # ``late`` owns the outcome now: the caller must not settle it too
        return HandlerOutcome(Outcome.INTERRUPTED, error=interrupted, still_running=running)

    def wait(self, timeout: float) -> HandlerOutcome:
        interrupted: BaseException | None = None
        try:
            self._done.wait(timeout)
        except BaseException as exc:  # noqa: BLE001 - Ctrl-C while waiting: a call begun goes on
            interrupted = exc
        return self.abandon(interrupted)


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

    Interrupted at any point, including inside ``Thread.start``, it returns
    INTERRUPTED rather than raising: with ``still_running=True`` if the call
    had begun, and ``on_late`` then receives its outcome; with
    ``still_running=False`` if not, and then it never runs. ``on_late`` is
    called exactly when the result has ``still_running=True``.
    """
    run = _ThreadRun(call, on_late)
    try:
        run.start(name)
    except BaseException as exc:  # noqa: BLE001 - Ctrl-C in Thread.start: the thread may exist
        return run.abandon(exc)
    return run.wait(timeout)


async def call_thread_async(
    call: Callable[[], Any],
    limit: float | None,
    on_late: Callable[[HandlerOutcome], None],
    *,
    name: str,
) -> HandlerOutcome:
    """Like :func:`call_in_thread`, awaited on the event loop (``limit`` None: no deadline).

    If the awaiting task is cancelled, or interrupted while the thread starts,
    a call that has begun cannot be stopped: the result is INTERRUPTED with
    ``still_running=True`` and ``on_late`` receives the real outcome. One that
    has not begun never will: INTERRUPTED with ``still_running=False``.
    ``on_late`` is called exactly when the result has ``still_running=True``.
    """
    loop = asyncio.get_running_loop()
    finished = asyncio.Event()

    def notify() -> None:
        loop.call_soon_threadsafe(finished.set)

    def late(outcome: HandlerOutcome) -> None:
        # It ended just as the caller was interrupted: record it off the event loop.
        threading.Thread(target=on_late, args=(outcome,), name=name, daemon=True).start()

    run = _ThreadRun(call, on_late, notify=notify)
    try:
        run.start(name)
    except BaseException as exc:  # noqa: BLE001 - Ctrl-C in Thread.start: the thread may exist
        return run.abandon(exc, late)
    try:
        await asyncio.wait_for(finished.wait(), limit)
    except TimeoutError:
        pass
    except asyncio.CancelledError as exc:
        return run.abandon(exc, late)
    return run.abandon()


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
    try:
        awaitable = make()
    except BaseException as exc:  # noqa: BLE001 - classified as if raised inside the handler
        # A handler can fail before its coroutine exists (a wrong signature): that is
        # its outcome too, never an escape that strands the row DISPATCHED.
        return classify(functools.partial(_raise, exc))
    task = asyncio.ensure_future(awaitable)
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
