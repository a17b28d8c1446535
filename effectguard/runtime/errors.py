"""The exceptions of the agent runtime, under effectguard's one root.

::

    EffectGuardError
    └── RuntimeStateError                     a run cannot do what was asked
        ├── RunNotFoundError (LookupError)    no checkpoint for that run id
        ├── RunExistsError                    start() named a run that already exists
        ├── ApprovalNotPendingError           no call of that id awaits a decision
        ├── ScriptExhaustedError (LookupError) a ScriptedModel has no turn left
        └── CheckpointError                   the checkpoint store refused or failed
            └── CheckpointConflictError       another process saved the run first

A checkpoint failure, like a ledger failure, leaves the run resumable: it is
raised to the caller, and the last checkpoint that was saved still says which
call to re-issue.
"""

from __future__ import annotations

from effectguard.errors import EffectGuardError

__all__ = [
    "ApprovalNotPendingError",
    "CheckpointConflictError",
    "CheckpointError",
    "RunExistsError",
    "RunNotFoundError",
    "RuntimeStateError",
    "ScriptExhaustedError",
]


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
