"""Every exception effectguard raises, under one root.

::

    EffectGuardError
    ├── InternalError                            an invariant of effectguard broke: a bug in it
    ├── ConfigurationError (ValueError)          a contract, template or setting is invalid
    ├── InvalidRequestError (ValueError)         a request is malformed (missing audit field…)
    ├── OperationConflictError                   same operation id, different request
    ├── EffectPruned                             settled, then pruned down to a tombstone
    ├── EffectRejected                           reliable evidence that the effect did not happen
    ├── OutputNotStored                          the effect happened; its output could not be stored
    ├── EffectNotConfirmed                       the effect is not confirmed; carries .result
    │   ├── EffectOutcomeUnknown                 it may or may not have happened
    │   ├── EffectQuarantined                    an operator must resolve it
    │   ├── EffectInProgress                     another worker holds it right now
    │   └── EffectNotSent                        provably never sent; calling again sends it
    └── LedgerError                              the ledger refused or failed
        ├── LedgerUnavailableError               the store could not be read or written
        │   └── LedgerLockedError                another writer held the lock past the busy timeout
        ├── LedgerNotFoundError                  a read named a ledger that does not exist
        ├── LedgerSchemaError                    not a ledger, or a ledger of a newer schema
        ├── LedgerIntegrityError                 a stored record was edited behind the ledger
        ├── FencedWriteError                     the writer's lease token is no longer current
        ├── OperationNotFoundError (LookupError) no operation with that id
        └── IllegalTransitionError               an operator action that makes no sense now
            └── OperationChangedError            it changed since the operator looked: reload
    └── RuntimeStateError                        an agent run cannot do what was asked
        ├── RunNotFoundError (LookupError)       no checkpoint for that run id
        ├── RunExistsError                       start() named a run that already exists
        ├── ApprovalNotPendingError              no call of that id awaits a decision
        ├── ScriptExhaustedError (LookupError)   a ScriptedModel has no turn left
        └── CheckpointError                      the checkpoint store refused or failed
            └── CheckpointConflictError          another process saved the run first

Handlers raise :class:`EffectRejected` themselves to report a definite "no effect"
(a declined card, a refused recipient), and :class:`EffectNotSent` to report that
this attempt's request never left (the connection was refused): the executor
retries it later with the same operation id. Any other exception from a handler
is an unknown outcome, never permission to retry.

A checkpoint failure, like a ledger failure, leaves an agent run resumable: it
is raised to the caller, and the last checkpoint that was saved still says which
call to re-issue. The runtime's exceptions are exported from
:mod:`effectguard.runtime` too.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from effectguard._model import EffectResult

__all__ = [
    "ApprovalNotPendingError",
    "CheckpointConflictError",
    "CheckpointError",
    "ConfigurationError",
    "EffectAwaitingApproval",
    "EffectGuardError",
    "EffectInProgress",
    "EffectNotConfirmed",
    "EffectNotSent",
    "EffectOutcomeUnknown",
    "EffectPruned",
    "EffectQuarantined",
    "EffectRejected",
    "FencedWriteError",
    "IllegalTransitionError",
    "InternalError",
    "InvalidRequestError",
    "LedgerError",
    "LedgerIntegrityError",
    "LedgerLockedError",
    "LedgerNotFoundError",
    "LedgerSchemaError",
    "LedgerUnavailableError",
    "OperationChangedError",
    "OperationConflictError",
    "OperationNotFoundError",
    "OutputNotStored",
    "RunExistsError",
    "RunNotFoundError",
    "RuntimeStateError",
    "ScriptExhaustedError",
]


class EffectGuardError(Exception):
    """Root of every exception effectguard raises.

    Every one survives ``pickle`` with its message and attributes (``.result``,
    ``.operation_id``…), though many take other arguments than the message:
    engines that store a failed step's exception by pickling it (DBOS) rebuild
    the same exception when they replay the step.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception's own __reduce__ calls cls(*self.args) on load, which fails for every
        # subclass whose __init__ takes something other than the message.
        return _rebuild, (type(self), self.args, self.__dict__)


def _rebuild(
    cls: type[EffectGuardError], args: tuple[Any, ...], state: dict[str, Any]
) -> EffectGuardError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class InternalError(EffectGuardError):
    """An invariant of effectguard itself does not hold: a bug in effectguard, not in your code.

    Raised where an ``assert`` would otherwise guard the invariant, since asserts
    vanish under ``python -O``. ``what`` says which invariant broke.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(
            f"{what}: this is a bug in effectguard, please report it with this message "
            "and the traceback"
        )


class ConfigurationError(EffectGuardError, ValueError):
    """A contract, template or setting is invalid; raised before anything is recorded."""


class InvalidRequestError(EffectGuardError, ValueError):
    """A request is malformed (a missing audit field, an output that is not JSON).

    Nothing was written.
    """


class OperationConflictError(EffectGuardError):
    """The operation id is already recorded with a different request fingerprint.

    Raised before any dispatch: reusing a business operation id for a different
    request is a programming error, never a reason to send again.
    """

    def __init__(
        self, operation_id: str, stored: str, requested: str, differences: Sequence[str] = ()
    ) -> None:
        self.operation_id = operation_id
        self.stored_fingerprint = stored
        self.requested_fingerprint = requested
        #: One line per difference found (``"amount_cents: stored 1000, this call 2500"``).
        self.differences = tuple(differences)
        what = (
            "; ".join(self.differences)
            if self.differences
            else f"stored fingerprint {stored[:12]}…, this call {requested[:12]}…"
        )
        super().__init__(
            f"operation {operation_id!r} is already recorded with a different request "
            f"({what}); use a new operation id for a different request"
        )


class EffectPruned(EffectGuardError):
    """The operation was settled and later pruned: only its tombstone is left.

    Raised, before any dispatch, for a call with a pruned operation id and the
    same request: the effect was already CONFIRMED or REJECTED, but its output
    is no longer stored, so it cannot be replayed. A different request under
    that id is an :class:`OperationConflictError`, as before the prune.
    """

    def __init__(self, operation_id: str, status: str, pruned_at: str) -> None:
        self.operation_id = operation_id
        #: The status the operation had when it was pruned (CONFIRMED or REJECTED).
        self.status = status
        #: When it was pruned (ISO 8601, UTC).
        self.pruned_at = pruned_at
        super().__init__(
            f"operation {operation_id!r} was {status} and pruned at {pruned_at}: its output is "
            "no longer stored, so it is neither replayed nor sent again; read its archive "
            "(prune --archive) for the outcome, or use a new operation id for a new effect"
        )


class EffectRejected(EffectGuardError):
    """Reliable evidence that the effect did not happen and will not happen.

    A handler raises it when the provider definitively refused the request (a
    declined card, a rejected recipient). The operation becomes REJECTED, a
    terminal state that is replayed to every later caller. When the decorator
    raises it for a REJECTED operation, ``result`` holds the :class:`EffectResult`.
    """

    def __init__(
        self,
        reason: str,
        *,
        evidence: Mapping[str, Any] | None = None,
        result: EffectResult[Any] | None = None,
    ) -> None:
        self.reason = reason
        self.evidence: dict[str, Any] = dict(evidence or {})
        self.result = result
        super().__init__(reason)


class OutputNotStored(EffectGuardError):
    """The effect happened (the operation is CONFIRMED), but its output could not be stored.

    The codec could not encode it, or it was over ``max_output_bytes``. It is
    never sent again. ``output`` is the handler's (or the probe's) live output
    on the call that produced it, and None on every replay, which has nothing
    to return; ``has_output`` tells the two apart. ``path`` and ``type_name``
    name the part that failed (``$.when``, ``datetime``); ``result`` is the
    CONFIRMED :class:`EffectResult`.
    """

    def __init__(
        self,
        result: EffectResult[Any],
        *,
        reason: str,
        path: str,
        type_name: str,
        output: Any = None,
        has_output: bool = False,
        hint: str = "return JSON-encodable values or annotate the return type",
    ) -> None:
        self.result = result
        self.operation_id = result.operation_id
        self.reason = reason
        self.path = path
        self.type_name = type_name
        self.output = output
        self.has_output = has_output
        then = (
            "this error's .output holds it now, and a replay will not return it"
            if has_output
            else "a replay cannot return it; the effect will not be sent again"
        )
        super().__init__(
            f"operation {result.operation_id!r} is CONFIRMED (the effect happened), but its "
            f"output was not stored: {reason}; {then}. To store such outputs, {hint}"
        )


class EffectNotConfirmed(EffectGuardError):
    """The effect is not confirmed; ``result`` says what is known.

    Never treat this as "did not happen": the subclass says whether the outcome
    is unknown, quarantined for an operator, or still in another worker's hands.
    """

    def __init__(self, result: EffectResult[Any], *, ledger: str = "LEDGER") -> None:
        """``ledger`` is what ``agent-effect-ops --db`` takes to open the operation's ledger.

        The decorator names a SQLite ledger by its absolute path and any other
        by ``LEDGER_URL`` (a connection string can hold a password).
        """
        self.result = result
        reason = f": {result.reason}" if result.reason else ""
        message = f"operation {result.operation_id!r} is {result.status.value}{reason}"
        step = self.next_step(shlex.quote(result.operation_id), ledger)
        super().__init__(f"{message}. {step}")

    @staticmethod
    def next_step(operation: str, ledger: str = "LEDGER") -> str:
        """What to do about ``operation`` (shell-quoted) in the ledger ``--db ledger`` opens."""
        return (
            f"Call again later to reconcile it; `agent-effect-ops --db {ledger} show {operation}` "
            "shows what is known"
        )


class EffectOutcomeUnknown(EffectNotConfirmed):
    """The effect may or may not have happened; a later call reconciles it."""

    @staticmethod
    def next_step(operation: str, ledger: str = "LEDGER") -> str:
        """See :meth:`EffectNotConfirmed.next_step`."""
        return (
            "Nothing is resent blindly: call again later and it is reconciled with the "
            f"provider's evidence; `agent-effect-ops --db {ledger} show {operation}` shows "
            "what is known"
        )


class EffectQuarantined(EffectNotConfirmed):
    """The outcome cannot be settled automatically; an operator must resolve it."""

    @staticmethod
    def next_step(operation: str, ledger: str = "LEDGER") -> str:
        """See :meth:`EffectNotConfirmed.next_step`."""
        return (
            f"An operator must resolve it: `agent-effect-ops --db {ledger} show "
            f"{operation}` shows the evidence; check the provider's records, then run "
            f"`agent-effect-ops --db {ledger} confirm {operation} ...` if it took effect "
            f"or `agent-effect-ops --db {ledger} authorize-retry {operation} ...` if it did not"
        )


class EffectAwaitingApproval(EffectNotConfirmed):
    """The request needs a person's approval and has none yet: it is recorded, nothing was sent.

    The approval is of exactly this request (its fingerprint): once given,
    the next call with the same request sends it once; a denial makes it
    REJECTED for good. Asking again changes nothing.
    """

    @staticmethod
    def next_step(operation: str, ledger: str = "LEDGER") -> str:
        """See :meth:`EffectNotConfirmed.next_step`."""
        return (
            f"A person must approve it: `agent-effect-ops --db {ledger} show {operation}` "
            f"shows the request; `agent-effect-ops --db {ledger} approve {operation} "
            "--actor WHO --reason WHY --evidence-reference REF` approves it (or `deny` refuses "
            "it), then call again to send it"
        )


class EffectInProgress(EffectNotConfirmed):
    """Another worker holds a live lease on the operation and may be dispatching it."""

    @staticmethod
    def next_step(operation: str, ledger: str = "LEDGER") -> str:  # noqa: ARG004 - same signature as the others
        """See :meth:`EffectNotConfirmed.next_step`."""
        return "Another worker is handling it: call again later to receive its outcome"


class EffectNotSent(EffectNotConfirmed):
    """The request provably never left, so the effect did not happen; calling again sends it.

    A handler raises it (or an exception its contract names in ``not_sent_on``)
    when the request cannot have reached the destination: the connection was
    refused, the host name did not resolve. Unlike :class:`EffectRejected` it
    burns nothing: the executor retries the attempt with a backoff and, when
    the attempts or the call's deadline run out, leaves the operation PREPARED
    for the next call with the same id. The decorator raises it for a PREPARED
    result, with ``result`` set; ``retryable`` is always True.
    """

    retryable = True

    def __init__(
        self,
        reason: str,
        *,
        evidence: Mapping[str, Any] | None = None,
        result: EffectResult[Any] | None = None,
    ) -> None:
        self.reason = reason
        self.evidence: dict[str, Any] = dict(evidence or {})
        self.result = result  # type: ignore[assignment]  # None while a handler raises it
        EffectGuardError.__init__(self, reason)


class LedgerError(EffectGuardError):
    """The ledger refused a request or could not serve it."""


class LedgerUnavailableError(LedgerError):
    """The ledger could not be read or written; nothing was dispatched on its account."""


class LedgerLockedError(LedgerUnavailableError):
    """Another writer held the ledger's write lock for longer than the busy timeout."""


class LedgerNotFoundError(LedgerError):
    """A read named a ledger that does not exist; reads never create one."""


class LedgerSchemaError(LedgerError):
    """The target is not an effectguard ledger, or its schema is newer than this library."""


class LedgerIntegrityError(LedgerError):
    """A stored record disagrees with what its event chain committed to: it was edited.

    Raised instead of replaying it; ``agent-effect-ops verify`` lists what differs.
    """


class FencedWriteError(LedgerError):
    """The writer's lease token is no longer current, so its write was refused.

    Another worker took the operation over after the lease expired; whatever
    the stale writer observed is evidence, never a second outcome.
    """


class OperationNotFoundError(LedgerError, LookupError):
    """No operation with that id is recorded."""

    def __init__(self, operation_id: str) -> None:
        self.operation_id = operation_id
        super().__init__(f"no operation {operation_id!r} in the ledger")


class IllegalTransitionError(LedgerError):
    """An operator action that makes no sense from the operation's current state."""


class OperationChangedError(IllegalTransitionError):
    """An operator's decision was refused: the operation is no longer the state it was decided on.

    Raised when the event count or chain head the operator saw (``show``
    prints both; the console's forms carry them) is not the operation's now,
    or when another write landed between the resolution's own read and its
    write. Nothing was written: reload the operation, look again, decide again.
    """

    def __init__(self, operation_id: str, message: str) -> None:
        self.operation_id = operation_id
        super().__init__(message)


# -- the agent runtime ---------------------------------------------------------------


class RuntimeStateError(EffectGuardError):
    """A run cannot do what was asked of it."""


class RunNotFoundError(RuntimeStateError, LookupError):
    """No checkpoint exists for the run id."""


class RunExistsError(RuntimeStateError):
    """``start()`` named a run id that is already checkpointed; ``resume()`` it instead."""


class ApprovalNotPendingError(RuntimeStateError):
    """No tool call of that id is waiting for an approval decision in that run."""


class ScriptExhaustedError(RuntimeStateError, LookupError):
    """A :class:`ScriptedModel` was asked for a turn past the end of its script."""


class CheckpointError(RuntimeStateError):
    """The checkpoint store could not be read or written, or is not a checkpoint store."""


class CheckpointConflictError(CheckpointError):
    """The run was saved by someone else since it was loaded: two drivers raced on one run.

    Nothing of this driver's later progress was saved; effects stay safe because
    the ledger, not the checkpoint, decides whether an operation is dispatched.
    """
