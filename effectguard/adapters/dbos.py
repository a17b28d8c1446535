"""``@effect`` tools in DBOS steps (``dbos`` 2.20+): a recovered workflow never sends twice.

DBOS checkpoints a step's outcome after the step returns. A process that dies
inside a step, after the provider committed and before that checkpoint was
written, leaves the workflow PENDING; the next launch of the application
(same executor id, same application version) recovers it and runs the step
again from its start. That re-run is the duplicate effectguard stops, provided
the second run computes the same operation id as the first:

- :func:`effect_step` makes a function a DBOS step (it takes
  :meth:`DBOS.step`'s own options) whose body runs under the call scope
  ``(dbos:<workflow id>, <step id>)``. The step id is the function id DBOS
  gives each step, in call order, within its workflow: a recovered workflow
  replays its recorded steps and reaches the interrupted one under the same
  id, and DBOS's own step retries (``retries_allowed``) re-enter the body
  under the same id too. So ``operation_id=call_scoped(prefix)`` gives every
  run of one step of one workflow the same operation id, and another workflow
  (or another step) a different one; a business key in the template, such as
  ``"invoice:{invoice_id}:capture"``, deduplicates across workflows as well.
- An unconfirmed effect (outcome unknown, quarantined, in progress elsewhere,
  awaiting approval, provably not sent) is neither a step failure nor a blind
  retry. The step records the :class:`~effectguard.adapters.PendingEffect`
  payload as its output, and the workflow waits with :meth:`DBOS.recv` on
  :data:`RESOLVED_TOPIC`, a durable wait that survives a restart, then runs the
  body again *under the first run's scope*, so the ledger replays a confirmed
  operation, re-probes an uncertain one, sends an authorized or unsent one once,
  and never dispatches a quarantined one. The wait doubles from
  ``wait_initial`` to ``wait_max`` seconds; :func:`wake` (a message on that
  topic) ends it at once, for instance right after an operator's
  ``agent-effect-ops confirm``. While it waits, the workflow's event
  :data:`PENDING_EVENT` holds the payload (``DBOS.get_event``), and the
  warning log names the operation and the command that resolves it.

An ``async def`` step is awaited from an async workflow and waits with
``DBOS.recv_async``; a synchronous one called from an async workflow is
refused before anything is sent, since DBOS's synchronous wait cannot run
there. docs/engines.md says which DBOS settings a deployment needs.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, Unpack, cast

from effectguard._scope import call_scope
from effectguard.adapters._common import PendingEffect, is_pending_payload
from effectguard.errors import (
    ConfigurationError,
    EffectNotConfirmed,
    EffectRejected,
    InvalidRequestError,
    OperationConflictError,
    OutputNotStored,
)

try:
    from dbos import DBOS, StepOptions
except ModuleNotFoundError as exc:
    msg = (
        f"effectguard.adapters.dbos needs the 'dbos' extra ({exc.name} is not "
        "installed): pip install 'effectguard[dbos]'"
    )
    raise ImportError(msg, name=exc.name) from exc

__all__ = [
    "PENDING_EVENT",
    "RESOLVED_TOPIC",
    "effect_step",
    "pending_effect",
    "retry_is_useful",
    "step_scope",
    "wake",
]

_log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

#: The :meth:`DBOS.recv` topic a workflow waiting on an unconfirmed effect listens on.
RESOLVED_TOPIC = "effectguard.resolved"
#: The workflow event holding the pending payload while the workflow waits (None once settled).
PENDING_EVENT = "effectguard.pending_effect"

# The recorded output of one run of the step: ("done", output, step) or ("pending", payload, step).
_DONE = "done"
_PENDING = "pending"


def step_scope(workflow_id: str, step_id: int) -> tuple[str, str]:
    """Return the call scope ``(run_id, call_id)`` of one step of one DBOS workflow."""
    return f"dbos:{workflow_id}", str(step_id)


def retry_is_useful(error: BaseException) -> bool:
    """DBOS's ``should_retry`` for an effect step: False when a retry can only get the same answer.

    A rejected operation, a conflicting request, an output that could not be
    stored and an invalid configuration or request never change by running
    again. Anything else (a ledger that could not be reached, an error of the
    step's own code) may: a retry re-enters the body under the same scope, and
    the ledger reconciles rather than resends.
    """
    return not isinstance(
        error,
        EffectRejected
        | OperationConflictError
        | OutputNotStored
        | ConfigurationError
        | InvalidRequestError,
    )


def wake(workflow_id: str, operation_id: str) -> None:
    """End the wait of ``workflow_id`` on an unconfirmed effect now, so it re-reads the ledger.

    Call it (in a process where DBOS is launched) once an operator has acted;
    from elsewhere, ``DBOSClient(...).send(workflow_id, operation_id,
    RESOLVED_TOPIC)`` does the same. Without it the workflow notices at its
    next poll. A wake while nothing waits is harmless: it only makes a later
    wait re-check once early.
    """
    DBOS.send(workflow_id, operation_id, topic=RESOLVED_TOPIC)


def effect_step(
    *,
    wait_initial: float = 1.0,
    wait_max: float = 60.0,
    **options: Unpack[StepOptions],
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Make a function a DBOS step whose ``@effect`` calls are scoped by workflow and step id.

    ``options`` are :meth:`DBOS.step`'s (``name``, ``retries_allowed``,
    ``max_attempts``, ``interval_seconds``, ``backoff_rate``, ``should_retry``);
    with ``retries_allowed`` and no ``should_retry``, :func:`retry_is_useful`
    decides. Called from a workflow function, the decorated function returns
    the body's output once every effect in it is confirmed, waiting durably
    (see the module docstring) while one is not; it raises what the body
    raises otherwise (``EffectRejected`` among them), recorded by DBOS as the
    step's error. A body that calls several effects runs again whole after a
    wait: the confirmed ones replay, the pending one is re-checked. Called
    outside any workflow it is the plain function, with no call scope. Called
    from inside another step it raises :class:`ConfigurationError`: that
    step's checkpoint, not this one's, is what a recovery replays. An
    ``async def`` function gives an async step, awaited from an async workflow.
    """
    if not wait_initial > 0 or not wait_max >= wait_initial:
        msg = (
            f"effect_step(wait_initial={wait_initial!r}, wait_max={wait_max!r}): "
            "both must be positive, wait_max at least wait_initial"
        )
        raise ConfigurationError(msg)

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        if inspect.iscoroutinefunction(fn):
            async_step = _AsyncEffectStep(fn, options, wait_initial, wait_max)

            @functools.wraps(fn)
            async def run_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                return await async_step.run(args, kwargs)

            return cast("Callable[P, R]", run_async)
        step = _EffectStep(fn, options, wait_initial, wait_max)

        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            return cast("R", step.run(args, kwargs))

        return run

    return decorate


_Recorded = tuple[str, Any, int]


class _Base:
    """What the sync and the async effect step share: the options, the scope, the outcome."""

    def __init__(
        self, fn: Callable[..., Any], options: StepOptions, wait_initial: float, wait_max: float
    ) -> None:
        self.fn = fn
        self.name = options.get("name") or fn.__qualname__
        self.wait_initial = wait_initial
        self.wait_max = wait_max
        self.options: StepOptions = {**options, "name": self.name}
        if self.options.get("retries_allowed") and self.options.get("should_retry") is None:
            self.options["should_retry"] = retry_is_useful

    def from_workflow(self) -> bool:
        """True when called from a workflow function; False outside any workflow."""
        if DBOS.workflow_id is None:
            return False
        if DBOS.step_id is not None:
            msg = (
                f"{self.name} is an effect step called from inside another step "
                f"(workflow {DBOS.workflow_id}, step {DBOS.step_id}); call it from the "
                "workflow function itself. Nothing was sent"
            )
            raise ConfigurationError(msg)
        return True

    def scope(self, scope_step: int | None) -> tuple[str, int, str, str]:
        """Return ``(workflow id, scoping step id, run_id, call_id)`` inside the DBOS step."""
        workflow_id, step_id = DBOS.workflow_id, DBOS.step_id
        if workflow_id is None or step_id is None:
            msg = f"{self.name}: the step body ran outside a DBOS step; nothing was sent"
            raise ConfigurationError(msg)
        # The first run is scoped by its own step id; a re-check after a wait is another step
        # of the workflow, but must be the same operation, so it keeps the first run's id.
        scoped = step_id if scope_step is None else scope_step
        run_id, call_id = step_scope(workflow_id, scoped)
        return workflow_id, scoped, run_id, call_id

    def pending(
        self, error: EffectNotConfirmed, workflow_id: str, scoped: int, run_id: str, call_id: str
    ) -> _Recorded:
        """The step's recorded output for an effect that is not confirmed."""
        pending = _pending(error, self.name, run_id, call_id)
        _log.warning("dbos workflow %s step %s: %s", workflow_id, scoped, pending.message())
        return _PENDING, pending.to_json(), scoped


class _EffectStep(_Base):
    """A synchronous effect step: the DBOS step that runs the body, and the wait around it."""

    def __init__(
        self, fn: Callable[..., Any], options: StepOptions, wait_initial: float, wait_max: float
    ) -> None:
        super().__init__(fn, options, wait_initial, wait_max)

        def body(scope_step: int | None, /, *args: Any, **kwargs: Any) -> _Recorded:
            return self.body(scope_step, args, kwargs)

        # A function of its own, not the bound method: DBOS keeps its registration on it.
        self.step = DBOS.step(**self.options)(body)

    def run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run the step from the workflow; wait durably while its effect is not confirmed."""
        if not self.from_workflow():
            return self.fn(*args, **kwargs)
        if _loop_running():
            msg = (
                f"{self.name} is a synchronous effect step called from an async workflow, "
                "where DBOS's synchronous wait cannot run; make the step's function async. "
                "Nothing was sent"
            )
            raise ConfigurationError(msg)
        kind, value, scoped = self.step(None, *args, **kwargs)
        if kind == _DONE:
            return value
        wait = self.wait_initial
        try:
            while kind == _PENDING:
                DBOS.set_event(PENDING_EVENT, value)
                # Durable: the wait's deadline is recorded, so a restarted process waits out
                # only what is left of it, and a wait that already ended is not waited again.
                DBOS.recv(RESOLVED_TOPIC, timeout_seconds=wait)
                wait = min(wait * 2, self.wait_max)
                kind, value, scoped = self.step(scoped, *args, **kwargs)
        finally:
            # Settled, or failed for good (an operator rejected it): nothing waits any more.
            DBOS.set_event(PENDING_EVENT, None)
        return value

    def body(
        self, scope_step: int | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _Recorded:
        """The DBOS step: the function under the scope of the step that first ran it."""
        workflow_id, scoped, run_id, call_id = self.scope(scope_step)
        with call_scope(run_id=run_id, call_id=call_id):
            try:
                return _DONE, self.fn(*args, **kwargs), scoped
            except EffectNotConfirmed as exc:
                return self.pending(exc, workflow_id, scoped, run_id, call_id)


class _AsyncEffectStep(_Base):
    """The same for an ``async def`` step, awaited in an async workflow."""

    def __init__(
        self, fn: Callable[..., Any], options: StepOptions, wait_initial: float, wait_max: float
    ) -> None:
        super().__init__(fn, options, wait_initial, wait_max)

        async def body(scope_step: int | None, /, *args: Any, **kwargs: Any) -> _Recorded:
            return await self.body(scope_step, args, kwargs)

        self.step = DBOS.step(**self.options)(body)

    async def run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Like :meth:`_EffectStep.run`, with DBOS's async event and receive."""
        if not self.from_workflow():
            return await self.fn(*args, **kwargs)
        kind, value, scoped = await self.step(None, *args, **kwargs)
        if kind == _DONE:
            return value
        wait = self.wait_initial
        try:
            while kind == _PENDING:
                await DBOS.set_event_async(PENDING_EVENT, value)
                await DBOS.recv_async(RESOLVED_TOPIC, timeout_seconds=wait)
                wait = min(wait * 2, self.wait_max)
                kind, value, scoped = await self.step(scoped, *args, **kwargs)
        finally:
            await DBOS.set_event_async(PENDING_EVENT, None)
        return value

    async def body(
        self, scope_step: int | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _Recorded:
        """The async DBOS step; the scope, a context variable, follows the coroutine."""
        workflow_id, scoped, run_id, call_id = self.scope(scope_step)
        with call_scope(run_id=run_id, call_id=call_id):
            try:
                return _DONE, await self.fn(*args, **kwargs), scoped
            except EffectNotConfirmed as exc:
                return self.pending(exc, workflow_id, scoped, run_id, call_id)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _pending(error: EffectNotConfirmed, step_name: str, run_id: str, call_id: str) -> PendingEffect:
    result = error.result
    return PendingEffect(
        tool=step_name,
        tool_call_id=call_id,
        operation_id=result.operation_id,
        status=result.status,
        reason=result.reason,
        attempts=result.attempts,
        # The error's own message names the ledger and the command its status calls for.
        operator_command=str(error),
        run_id=run_id,
    )


def pending_effect(value: object) -> PendingEffect | None:
    """Return the payload held by the workflow event :data:`PENDING_EVENT`; None if none waits."""
    return PendingEffect.from_json(value) if is_pending_payload(value) else None
