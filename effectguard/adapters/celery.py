"""``@effect`` tools in Celery tasks (``celery`` 5.3+): a redelivered task never sends twice.

A Celery worker that dies mid-task (``acks_late=True``) leaves its message
unacknowledged, and the broker hands it to another worker, which runs the
task body again. That re-run is the duplicate effectguard stops, provided the
second run computes the same operation id as the first:

- :class:`EffectTask`, as a task's ``base=``, runs the body under the call
  scope ``(celery:<task name>, <task id>)``. The task id is the one identity
  Celery keeps across a redelivery and across ``self.retry()``, so
  ``operation_id=call_scoped(prefix)`` gives the same id to every run of one
  task message (and a different one to a second message with the same
  arguments; a business key in the template, such as
  ``"invoice:{invoice_id}:capture"``, deduplicates those as well).
- An :class:`~effectguard.errors.EffectInProgress` (another worker holds the
  operation's lease, typically the worker a message was taken from) becomes
  ``self.retry()`` with an exponential, jittered countdown: the lease owner's
  outcome is replayed by a later run, nothing is sent meanwhile.
- Any other :class:`~effectguard.errors.EffectNotConfirmed` (outcome unknown,
  quarantined, awaiting approval) is neither a success nor a retry: the task
  ends in the custom state :data:`EFFECT_UNCONFIRMED` (stored when the app
  has a result backend), whose ``info`` is the
  :class:`~effectguard.adapters.PendingEffect` payload with the operation id
  and the ``agent-effect-ops`` command that resolves it; the message is
  acknowledged and never redelivered. Without a result backend the message
  is rejected without requeue instead (``Reject(requeue=False)``:
  dead-lettered on RabbitMQ when the queue has a dead-letter exchange), and
  the payload is in the worker's warning log. Run the task again once an
  operator has acted: the ledger replays or sends.
- An effectguard error that ends the task and that a result backend cannot
  rebuild (an ``EffectInProgress`` past ``max_retries``, an
  ``OperationConflictError``: a backend rebuilds an exception as
  ``cls(*args)``, and these take a result or several fields) is raised as
  :class:`EffectTaskError`, chained from it, so the caller's
  ``AsyncResult.get()`` raises an error naming the operation, the original
  class and the next step rather than a bare ``Exception``. One it can rebuild
  (``EffectRejected``, ``LedgerUnavailableError``) is raised as it is.
- :func:`recover_on_worker_ready` runs a sweep (:func:`effectguard.recover`)
  when a worker starts, so operations a dead worker left uncertain are re-probed
  before it takes work.

The class sets ``acks_late = True`` and ``reject_on_worker_lost = True``: a
message is acknowledged only after its task returned, and a child process
killed mid-task puts its message back. With the Redis broker, a message whose
worker died returns only after ``broker_transport_options["visibility_timeout"]``
(one hour by default); docs/engines.md says which settings a deployment needs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NoReturn

from effectguard._scope import call_scope
from effectguard.adapters._common import PendingEffect
from effectguard.errors import EffectGuardError, EffectInProgress, EffectNotConfirmed, EffectNotSent

try:
    from celery import Celery, Task, signals
    from celery.backends.base import DisabledBackend
    from celery.exceptions import Ignore, Reject, Retry
    from celery.utils.time import get_exponential_backoff_interval
except ModuleNotFoundError as exc:
    msg = (
        f"effectguard.adapters.celery needs the 'celery' extra ({exc.name} is not "
        "installed): pip install 'effectguard[celery]'"
    )
    raise ImportError(msg, name=exc.name) from exc

__all__ = [
    "EFFECT_UNCONFIRMED",
    "EffectTask",
    "EffectTaskError",
    "recover_on_worker_ready",
    "task_scope",
]

_log = logging.getLogger(__name__)

#: The task state of a task whose effect is not confirmed: an operator must look, not a retry.
EFFECT_UNCONFIRMED = "EFFECT_UNCONFIRMED"


class EffectTaskError(EffectGuardError):
    """An effectguard error that ended a Celery task, in a shape a result backend carries intact.

    A result backend stores an exception as its class, module and ``args`` and
    the caller's ``AsyncResult.get()`` rebuilds it as ``cls(*args)``. The errors
    of :mod:`effectguard.errors` take a result or several fields, not their
    message, so they come back as a bare ``Exception``. :class:`EffectTask`
    raises this instead, chained from the original (whose traceback the backend
    also stores), so the caller gets an :class:`~effectguard.errors.EffectGuardError`
    with the message (which names the operation and what to do next),
    ``operation_id`` (None when the error has none), ``error`` (the original
    class's name, such as ``"EffectInProgress"``) and ``status`` (the operation's,
    when known). A caller that has not imported this module gets Celery's
    stand-in class of the same name, with the same ``args``.
    """

    def __init__(
        self,
        message: str,
        operation_id: str | None = None,
        error: str = "EffectGuardError",
        status: str | None = None,
    ) -> None:
        super().__init__(message, operation_id, error, status)
        self.message = message
        self.operation_id = operation_id
        self.error = error
        self.status = status

    def __str__(self) -> str:
        """The original error's message."""
        return self.message

    @classmethod
    def from_error(cls, error: EffectGuardError) -> EffectTaskError:
        """Carry ``error``'s message, operation id, class name and status."""
        result = getattr(error, "result", None)
        operation_id = getattr(error, "operation_id", None)
        status = getattr(error, "status", None)
        if result is not None:
            operation_id, status = result.operation_id, result.status
        return cls(
            str(error),
            operation_id=None if operation_id is None else str(operation_id),
            error=type(error).__name__,
            status=None if status is None else str(getattr(status, "value", status)),
        )


def _raise_portable(error: EffectGuardError) -> NoReturn:
    """Raise ``error`` if a result backend rebuilds it as itself, else an EffectTaskError of it.

    A backend rebuilds a stored exception as ``cls(*args)``; this tries the same.
    """
    if not isinstance(error, EffectTaskError):
        try:
            type(error)(*error.args)
        except Exception:  # noqa: BLE001 - any failure to rebuild means the backend's fails too
            raise EffectTaskError.from_error(error) from error
    raise error


def task_scope(task_name: str, task_id: str) -> tuple[str, str]:
    """Return the call scope ``(run_id, call_id)`` of one Celery task message."""
    return f"celery:{task_name}", task_id


class EffectTask(Task):  # type: ignore[misc] # celery ships no type information: Task is Any
    """A Celery task base for bodies that call ``@effect`` tools; see the module docstring.

    ``effect_retry_initial`` and ``effect_retry_max`` (seconds) bound the
    countdown of the retry an :class:`~effectguard.errors.EffectInProgress`
    becomes; ``max_retries`` (Celery's) bounds how many there are.
    """

    abstract = True
    acks_late = True
    reject_on_worker_lost = True
    effect_retry_initial = 1
    effect_retry_max = 60

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the body under the task's call scope and map an unconfirmed effect onto Celery."""
        request = self.request
        if request.called_directly or not request.id:
            # A plain function call (``task(...)``): no message, so no task id to scope by.
            return super().__call__(*args, **kwargs)
        run_id, call_id = task_scope(self.name, request.id)
        with call_scope(run_id=run_id, call_id=call_id):
            try:
                # run(), not Task.__call__: that pushes a fresh, empty request over the one
                # Celery pushed for this message in an eager apply() on Celery 5.3, so the body
                # would see no task id. A worker's stack protection calls run() the same way.
                return self.run(*args, **kwargs)
            except (EffectInProgress, EffectNotSent) as exc:
                # Another worker holds the lease, or the request provably never left: a later
                # run replays the holder's outcome or sends once. Neither is a blind resend.
                countdown = get_exponential_backoff_interval(
                    factor=self.effect_retry_initial,
                    retries=request.retries,
                    maximum=self.effect_retry_max,
                    full_jitter=True,
                )
                try:
                    raise self.retry(exc=exc, countdown=countdown) from exc
                except (Retry, EffectTaskError):
                    # Retry: the retry is sent. EffectTaskError: an eager retry's own failure.
                    raise
                except EffectGuardError as final:
                    # Past max_retries Celery raises the error itself: the task fails with it.
                    _raise_portable(final)
            except EffectNotConfirmed as exc:
                raise self._unconfirmed(exc, run_id, call_id) from exc
            except EffectGuardError as exc:
                _raise_portable(exc)

    def _unconfirmed(self, error: EffectNotConfirmed, run_id: str, call_id: str) -> Ignore | Reject:
        """Return what ends the task, having recorded :data:`EFFECT_UNCONFIRMED` if it can."""
        result = error.result
        pending = PendingEffect(
            tool=self.name,
            tool_call_id=call_id,
            operation_id=result.operation_id,
            status=result.status,
            reason=result.reason,
            attempts=result.attempts,
            # The error's own message names the ledger the tool ran on and the command
            # (confirm / authorize-retry, or approve) its status calls for.
            operator_command=str(error),
            run_id=run_id,
        )
        _log.warning("celery task %s[%s]: %s", self.name, self.request.id, pending.message())
        if isinstance(self.backend, DisabledBackend):
            # No result backend to hold the state: reject the message for good (RabbitMQ
            # dead-letters it when the queue has a dead-letter exchange).
            return Reject(pending.message(), requeue=False)
        self.update_state(state=EFFECT_UNCONFIRMED, meta=pending.to_json())
        # Ignore, not Reject: recent Celery (5.7) records a Reject(requeue=False) as FAILURE over
        # the state just stored, and a failure reads as "did not happen". Both end the message.
        return Ignore()


def recover_on_worker_ready(app: Celery, sweep: Callable[[], object]) -> Callable[..., None]:
    """Call ``sweep`` once when a worker of ``app`` is ready, before it takes work.

    ``sweep`` is the recovery sweep, typically
    ``functools.partial(effectguard.recover, ledger, tools=[...])``: it only
    re-probes, never dispatches. (Adapters sit beside the operator layer and
    do not import it, so the sweep is passed in.) A sweep that raises is
    logged and the worker starts anyway, since every task reconciles its own
    operation when it runs. Returns the connected receiver.
    """

    def on_worker_ready(sender: Any = None, **_: Any) -> None:
        if sender is not None and getattr(sender, "app", app) is not app:
            return
        try:
            report = sweep()
        except Exception:  # noqa: BLE001 - a failed sweep must not stop the worker; it is logged
            _log.exception("effectguard recovery sweep on worker_ready failed")
            return
        _log.info("effectguard recovery sweep on worker_ready: %s", report)

    signals.worker_ready.connect(on_worker_ready, weak=False)
    return on_worker_ready
