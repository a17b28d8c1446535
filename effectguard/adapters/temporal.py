"""``@effect`` tools in Temporal activities (``temporalio``): a retried activity never sends twice.

Temporal runs an activity at least once: an attempt that raised, timed out
(start-to-close, heartbeat) or whose worker was lost is scheduled again, by
the server, on any worker. That re-run is the duplicate effectguard stops,
provided every attempt computes the same operation id:

- Calls made inside an activity run under the call scope
  ``(temporal:<namespace>:<workflow id>, <activity id>)`` (:func:`activity_scope`),
  so ``operation_id=call_scoped(prefix)`` gives every attempt of one activity
  the same id. The workflow's *run id* is left out on purpose: it changes when
  the workflow is retried, reset or continued as new, while the workflow id
  and the activity id (the sequence number of the workflow's activity
  commands, unless the workflow sets one) are the identities Temporal keeps for "this step of
  this workflow". A new run of the workflow that schedules the same activity
  id replays the first run's outcome; a business key in the template
  (``"invoice:{invoice_id}:capture"``) is the way to say otherwise.
- Register :class:`EffectInterceptor` on the worker
  (``Worker(..., interceptors=[EffectInterceptor()])``) to scope every
  activity, or decorate one activity with :func:`effect_activity`. Either way
  the scope is set inside the activity function itself, in the thread (or
  coroutine) that runs it, not around it: Temporal runs a synchronous activity
  on its executor, so a scope set in the interceptor's coroutine would reach
  a thread pool only by the SDK's copy of the context, and a process pool
  never.
- What an ``@effect`` call came to becomes what Temporal understands
  (:func:`application_error`): a confirmed call, fresh or replayed, returns
  its output; an operation that is QUARANTINED, AWAITING_APPROVAL or
  REJECTED, a request conflicting with the one recorded, a pruned operation
  and an output that could not be stored are non-retryable
  ``ApplicationError`` s whose message names the operation and the
  ``agent-effect-ops`` command, with the pending payload
  (:class:`~effectguard.adapters.PendingEffect`), or for a refusal the
  operation id, as their details; an
  outcome that is still unknown, another worker holding the operation's lease
  (an earlier attempt still running) and a request that provably never left
  are retryable ``ApplicationError`` s with a ``next_retry_delay`` that grows
  with the attempt. Any other error (the ledger could not be reached…) is
  raised unchanged, and the retry policy decides.
- ``heartbeat=`` (off by default) heartbeats while the activity function
  runs, so a provider call longer than the ``heartbeat_timeout`` is not
  timed out while its worker is alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import logging
import random
import shlex
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar, overload

from effectguard._scope import call_scope
from effectguard.adapters._common import PendingEffect
from effectguard.errors import (
    ConfigurationError,
    EffectAwaitingApproval,
    EffectNotConfirmed,
    EffectPruned,
    EffectQuarantined,
    EffectRejected,
    OperationConflictError,
    OutputNotStored,
)

try:
    import temporalio.activity
    import temporalio.worker
    from temporalio.exceptions import ApplicationError
except ModuleNotFoundError as exc:
    msg = (
        f"effectguard.adapters.temporal needs the 'temporal' extra ({exc.name} is not "
        "installed): pip install 'effectguard[temporal]'"
    )
    raise ImportError(msg, name=exc.name) from exc

__all__ = [
    "NON_RETRYABLE_TYPES",
    "RETRYABLE_TYPES",
    "EffectInterceptor",
    "activity_scope",
    "application_error",
    "effect_activity",
]

_log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

#: The ``ApplicationError.type`` of an outcome no retry can change: a person or the workflow acts.
NON_RETRYABLE_TYPES = (
    "EffectQuarantined",
    "EffectAwaitingApproval",
    "EffectRejected",
    "OperationConflictError",
    "EffectPruned",
    "OutputNotStored",
)
#: The ``ApplicationError.type`` of an outcome a later attempt settles without sending blindly.
RETRYABLE_TYPES = ("EffectOutcomeUnknown", "EffectInProgress", "EffectNotSent")

#: The first retry delay asked for, and the most any is: the delay doubles with each attempt.
DEFAULT_RETRY_INITIAL = timedelta(seconds=1)
DEFAULT_RETRY_MAX = timedelta(minutes=5)

#: Set on a function :func:`effect_activity` made, so the interceptor does not wrap it twice.
_SCOPED_MARK = "_effectguard_activity_scoped"


def activity_scope(info: temporalio.activity.Info) -> tuple[str, str]:
    """Return the call scope ``(run_id, call_id)`` of every attempt of one activity.

    ``("temporal:<namespace>:<workflow id>", "<activity id>")``; an activity
    started on its own, by a client rather than a workflow, has no workflow
    id and is ``("temporal:<namespace>:activity", "<activity id>")``. Neither
    the attempt nor the workflow's run id is part of it.
    """
    # ``namespace`` is the activity's own (temporalio 1.2x added it, with standalone
    # activities); older releases have only the workflow's, which is the same namespace.
    namespace = getattr(info, "namespace", None) or info.workflow_namespace
    owner = info.workflow_id or "activity"
    return f"temporal:{namespace}:{owner}", info.activity_id


@dataclasses.dataclass(frozen=True, slots=True)
class _Retry:
    """The bounds of the ``next_retry_delay`` an unsettled outcome asks Temporal for.

    ``heartbeat``, when set, is how often the activity heartbeats while its function runs.
    """

    initial: timedelta = DEFAULT_RETRY_INITIAL
    maximum: timedelta = DEFAULT_RETRY_MAX
    heartbeat: timedelta | None = None

    def __post_init__(self) -> None:
        if self.initial <= timedelta(0) or self.maximum < self.initial:
            msg = (
                f"retry_initial ({self.initial}) must be positive and at most "
                f"retry_max ({self.maximum})"
            )
            raise ConfigurationError(msg)
        if self.heartbeat is not None and self.heartbeat <= timedelta(0):
            msg = f"heartbeat ({self.heartbeat}) must be a positive interval, or None"
            raise ConfigurationError(msg)

    def delay(self, attempt: int) -> timedelta:
        """Between half and all of ``initial * 2**(attempt-1)``, capped at ``maximum``."""
        ceiling = min(
            self.maximum.total_seconds(),
            self.initial.total_seconds() * 2 ** min(max(attempt, 1) - 1, 32),
        )
        # Jittered, so the attempts of many activities waiting on one provider spread out.
        return timedelta(seconds=random.uniform(ceiling / 2, ceiling))


def _operation_of(error: BaseException) -> str | None:
    if isinstance(error, (OperationConflictError, EffectPruned)):
        return error.operation_id
    result = getattr(error, "result", None)
    return None if result is None else str(result.operation_id)


def _pending(error: EffectNotConfirmed, info: temporalio.activity.Info) -> dict[str, Any]:
    run_id, call_id = activity_scope(info)
    result = error.result
    return PendingEffect(
        tool=info.activity_type,
        tool_call_id=call_id,
        operation_id=result.operation_id,
        status=result.status,
        reason=result.reason,
        attempts=result.attempts,
        # The error's message names the ledger and the command its status calls for.
        operator_command=str(error),
        run_id=run_id,
    ).to_json()


def _refusal(error: BaseException, info: temporalio.activity.Info) -> ApplicationError | None:
    """The non-retryable error for an outcome a retry cannot change; None for any other."""
    operation = _operation_of(error)
    where = f"activity {info.activity_type} ({info.activity_id}, attempt {info.attempt})"
    show = (
        "the activity raised it outside an @effect tool, so nothing is recorded"
        if operation is None
        else f"`agent-effect-ops --db LEDGER show {shlex.quote(operation)}` shows what is recorded"
    )
    details: dict[str, Any] = {"operation_id": operation, "error": type(error).__name__}
    if isinstance(error, (EffectQuarantined, EffectAwaitingApproval)):
        message = f"{where}: {error}. Retrying the activity changes nothing until then"
        return ApplicationError(
            message, _pending(error, info), type=type(error).__name__, non_retryable=True
        )
    if isinstance(error, EffectRejected):
        reason = error.reason
        message = (
            f"{where}: operation {operation!r} was rejected ({reason}); it is never sent "
            f"again and every retry gets the same answer. {show}"
        )
    elif isinstance(error, OperationConflictError):
        message = (
            f"{where}: {error}; nothing was sent. This activity id already ran another "
            f"request (the workflow's code or arguments changed between runs). {show}"
        )
    elif isinstance(error, EffectPruned):
        message = f"{where}: {error}"
    elif isinstance(error, OutputNotStored):
        message = f"{where}: {error}. {show}"
    else:
        return None
    return ApplicationError(message, details, type=type(error).__name__, non_retryable=True)


def application_error(
    error: BaseException,
    info: temporalio.activity.Info,
    *,
    retry_initial: timedelta = DEFAULT_RETRY_INITIAL,
    retry_max: timedelta = DEFAULT_RETRY_MAX,
) -> ApplicationError | None:
    """Return the ``ApplicationError`` that tells Temporal what ``error`` means, or None.

    ``info`` is the activity attempt's (``temporalio.activity.info()``). An
    outcome no retry can change (QUARANTINED, AWAITING_APPROVAL, REJECTED, a
    conflicting request, a pruned operation, an output that was not stored)
    is non-retryable, typed with the effectguard error's class name
    (:data:`NON_RETRYABLE_TYPES`). Any other unconfirmed outcome (unknown,
    in another worker's hands, provably not sent) is retryable with a
    ``next_retry_delay`` between ``retry_initial`` and ``retry_max`` that
    doubles with ``info.attempt`` (:data:`RETRYABLE_TYPES`). None for every
    other error: the caller raises it unchanged.
    """
    refusal = _refusal(error, info)
    if refusal is not None or not isinstance(error, EffectNotConfirmed):
        return refusal
    delay = _Retry(retry_initial, retry_max).delay(info.attempt)
    message = (
        f"activity {info.activity_type} ({info.activity_id}, attempt {info.attempt}): {error}. "
        f"Retry in {delay.total_seconds():.1f} s: the next attempt reconciles the same "
        "operation, never sends it blindly"
    )
    # A handler's own EffectNotSent carries no result until the decorator has settled it.
    details = _pending(error, info) if error.result is not None else {}
    return ApplicationError(message, details, type=type(error).__name__, next_retry_delay=delay)


def _info(fn: Callable[..., Any]) -> temporalio.activity.Info:
    try:
        return temporalio.activity.info()
    except RuntimeError as exc:
        name = getattr(fn, "__qualname__", repr(fn))
        msg = (
            f"{name} takes its effectguard call scope from the Temporal activity it runs in, "
            "and it was called outside one; nothing was recorded or sent. Run it as an "
            "activity (or under temporalio.testing.ActivityEnvironment)"
        )
        raise ConfigurationError(msg) from exc


def _translate(error: Exception, info: temporalio.activity.Info, retry: _Retry) -> None:
    """Raise the ``ApplicationError`` ``error`` means; return when it should surface unchanged."""
    mapped = application_error(error, info, retry_initial=retry.initial, retry_max=retry.maximum)
    if mapped is None:
        return
    level = logging.INFO if not mapped.non_retryable else logging.WARNING
    _log.log(level, "temporal activity %s[%s]: %s", info.activity_type, info.activity_id, mapped)
    raise mapped from error


def _beat(info: temporalio.activity.Info) -> None:
    try:
        temporalio.activity.heartbeat()
    except Exception:  # noqa: BLE001 - a heartbeat that fails must not fail the effect; it is logged
        # The server then times the attempt out and retries it: the lease keeps that safe.
        _log.warning("heartbeat of activity %s[%s] failed", info.activity_type, info.activity_id)


@contextlib.contextmanager
def _beating_in_thread(every: timedelta | None, info: temporalio.activity.Info) -> Iterator[None]:
    """Heartbeat every ``every`` from a thread of its own until the block exits."""
    if every is None:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every.total_seconds()):
            _beat(info)

    # A copy of this context, so the thread finds the activity's (temporalio.activity.heartbeat
    # looks it up); the SDK makes a sync activity's heartbeat safe to call from any thread.
    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(beat,), name="effectguard-heartbeat")
    thread.daemon = True
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _call_sync(fn: Callable[..., Any], retry: _Retry, /, *args: Any, **kwargs: Any) -> Any:
    """Run a synchronous activity function under its call scope, in the thread that runs it."""
    info = _info(fn)
    run_id, call_id = activity_scope(info)
    with call_scope(run_id=run_id, call_id=call_id), _beating_in_thread(retry.heartbeat, info):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            _translate(exc, info, retry)
            raise


async def _beating_in_task(every: timedelta, info: temporalio.activity.Info) -> None:
    while True:
        await asyncio.sleep(every.total_seconds())
        _beat(info)


async def _call_async(fn: Callable[..., Any], retry: _Retry, /, *args: Any, **kwargs: Any) -> Any:
    """Run an ``async def`` activity function under its call scope."""
    info = _info(fn)
    run_id, call_id = activity_scope(info)
    with call_scope(run_id=run_id, call_id=call_id):
        beats = (
            None
            if retry.heartbeat is None
            else asyncio.create_task(_beating_in_task(retry.heartbeat, info))
        )
        try:
            return await fn(*args, **kwargs)
        except Exception as exc:
            _translate(exc, info, retry)
            raise
        finally:
            if beats is not None:
                beats.cancel()
                # Waited for, not awaited: its CancelledError is not this activity's.
                await asyncio.wait([beats])


def _is_async(fn: Callable[..., Any]) -> bool:
    # As Temporal decides it: an ``async def`` function, or an object with an async __call__.
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - the callable's own __call__, as the SDK checks it
    )


@overload
def effect_activity(fn: F, /) -> F: ...


@overload
def effect_activity(
    *,
    retry_initial: timedelta = ...,
    retry_max: timedelta = ...,
    heartbeat: timedelta | None = ...,
) -> Callable[[F], F]: ...


def effect_activity(
    fn: F | None = None,
    /,
    *,
    retry_initial: timedelta = DEFAULT_RETRY_INITIAL,
    retry_max: timedelta = DEFAULT_RETRY_MAX,
    heartbeat: timedelta | None = None,
) -> F | Callable[[F], F]:
    """Scope one activity function's ``@effect`` calls by its activity; map their outcomes.

    Put it under ``@activity.defn``: the function keeps its name, signature
    and type hints, and a synchronous one stays synchronous. Each call reads
    ``temporalio.activity.info()``, runs the body under :func:`activity_scope`
    and raises what :func:`application_error` makes of an effectguard error.
    Called outside an activity it raises :class:`ConfigurationError` before
    anything is recorded. ``retry_initial`` and ``retry_max`` bound the
    ``next_retry_delay`` of a retryable outcome.

    ``heartbeat`` (off by default) makes the activity heartbeat, without
    details, every that long while the function runs, so a provider call
    longer than the activity's ``heartbeat_timeout`` is not timed out while
    its worker is alive, and a dead worker still stops heartbeating. Leave it
    off for an activity that heartbeats itself: a heartbeat without details
    replaces the details it recorded.
    """
    retry = _Retry(retry_initial, retry_max, heartbeat)

    def decorate(inner: F) -> F:
        if _is_async(inner):

            @functools.wraps(inner)
            async def scoped_async(*args: Any, **kwargs: Any) -> Any:
                return await _call_async(inner, retry, *args, **kwargs)

            wrapper: Callable[..., Any] = scoped_async
        else:

            @functools.wraps(inner)
            def scoped(*args: Any, **kwargs: Any) -> Any:
                return _call_sync(inner, retry, *args, **kwargs)

            wrapper = scoped
        setattr(wrapper, _SCOPED_MARK, True)
        return wrapper  # type: ignore[return-value] # functools.wraps keeps the signature F describes

    return decorate if fn is None else decorate(fn)


class EffectInterceptor(temporalio.worker.Interceptor):
    """A worker interceptor that runs every activity as :func:`effect_activity` would.

    ``Worker(client, task_queue=..., activities=[...], interceptors=[EffectInterceptor()])``.
    The interceptor hands the next one in the chain the activity function
    wrapped (a ``functools.partial`` of a module-level function, so a process
    pool can still pickle it), so the scope is set where the function runs.
    Activities decorated with :func:`effect_activity` are left as they are.
    The options are :func:`effect_activity`'s, for every activity of the worker.
    """

    def __init__(
        self,
        *,
        retry_initial: timedelta = DEFAULT_RETRY_INITIAL,
        retry_max: timedelta = DEFAULT_RETRY_MAX,
        heartbeat: timedelta | None = None,
    ) -> None:
        self._retry = _Retry(retry_initial, retry_max, heartbeat)

    def intercept_activity(
        self,
        next: temporalio.worker.ActivityInboundInterceptor,  # noqa: A002 - the SDK's parameter name
    ) -> temporalio.worker.ActivityInboundInterceptor:
        """Wrap ``next``: see the class docstring."""
        return _ScopedActivityInbound(next, self._retry)


class _ScopedActivityInbound(temporalio.worker.ActivityInboundInterceptor):
    def __init__(
        self,
        next: temporalio.worker.ActivityInboundInterceptor,  # noqa: A002 - the SDK's parameter name
        retry: _Retry,
    ) -> None:
        super().__init__(next)
        self._retry = retry

    async def execute_activity(self, input: temporalio.worker.ExecuteActivityInput) -> Any:  # noqa: A002 - the SDK's parameter name
        fn = input.fn
        if not getattr(fn, _SCOPED_MARK, False):
            call = _call_async if _is_async(fn) else _call_sync
            input = dataclasses.replace(input, fn=functools.partial(call, fn, self._retry))  # noqa: A001 - ditto
        return await self.next.execute_activity(input)
