"""Every exception effectguard raises, under one root.

::

    EffectGuardError
    ├── ConfigurationError (ValueError)          a contract, template or setting is invalid
    ├── InvalidRequestError (ValueError)         a request is malformed (missing audit field…)
    ├── OperationConflictError                   same operation id, different request
    ├── EffectRejected                           reliable evidence that the effect did not happen
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
        ├── FencedWriteError                     the writer's lease token is no longer current
        ├── OperationNotFoundError (LookupError) no operation with that id
        └── IllegalTransitionError               an operator action that makes no sense now
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

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from effectguard.model import EffectResult

__all__ = [
    "ApprovalNotPendingError",
    "CheckpointConflictError",
    "CheckpointError",
    "ConfigurationError",
    "EffectGuardError",
    "EffectInProgress",
    "EffectNotConfirmed",
    "EffectNotSent",
    "EffectOutcomeUnknown",
    "EffectQuarantined",
    "EffectRejected",
    "FencedWriteError",
    "IllegalTransitionError",
    "InvalidRequestError",
    "LedgerError",
    "LedgerLockedError",
    "LedgerNotFoundError",
    "LedgerSchemaError",
    "LedgerUnavailableError",
    "OperationConflictError",
    "OperationNotFoundError",
    "RunExistsError",
    "RunNotFoundError",
    "RuntimeStateError",
    "ScriptExhaustedError",
]


class EffectGuardError(Exception):
    """Root of every exception effectguard raises."""


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

    def __init__(self, operation_id: str, stored: str, requested: str) -> None:
        self.operation_id = operation_id
        self.stored_fingerprint = stored
        self.requested_fingerprint = requested
        super().__init__(
            f"operation {operation_id!r} is already recorded with a different request "
            f"(stored fingerprint {stored[:12]}…, this call {requested[:12]}…); "
            "use a new operation id for a different request"
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


class EffectNotConfirmed(EffectGuardError):
    """The effect is not confirmed; ``result`` says what is known.

    Never treat this as "did not happen": the subclass says whether the outcome
    is unknown, quarantined for an operator, or still in another worker's hands.
    """

    def __init__(self, result: EffectResult[Any]) -> None:
        self.result = result
        reason = f": {result.reason}" if result.reason else ""
        super().__init__(f"operation {result.operation_id!r} is {result.status.value}{reason}")


class EffectOutcomeUnknown(EffectNotConfirmed):
    """The effect may or may not have happened; a later call reconciles it."""


class EffectQuarantined(EffectNotConfirmed):
    """The outcome cannot be settled automatically; an operator must resolve it."""


class EffectInProgress(EffectNotConfirmed):
    """Another worker holds a live lease on the operation and may be dispatching it."""


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
