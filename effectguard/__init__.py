"""effectguard: make the side effects of AI-agent tools safe to execute, recover and test.

Every call of a guarded side effect is recorded durably before dispatch under a
stable business operation id; an uncertain outcome is reconciled with the
provider's probe and retried only when the provider's contract makes a resend
safe, otherwise it is quarantined for an operator.
"""

from typing import TYPE_CHECKING, Any

from effectguard.codec import DataclassCodec, PydanticCodec
from effectguard.config import Configuration, configure, observe_effects
from effectguard.contract import EffectContract, OutputCodec, UnknownOutcomePolicy
from effectguard.decorator import (
    INJECTED,
    AsyncEffectFunction,
    EffectDecorator,
    EffectFunction,
    effect,
    get_contract,
    is_effect,
    use_executor,
)
from effectguard.errors import (
    ConfigurationError,
    EffectGuardError,
    EffectInProgress,
    EffectNotConfirmed,
    EffectNotSent,
    EffectOutcomeUnknown,
    EffectQuarantined,
    EffectRejected,
    FencedWriteError,
    IllegalTransitionError,
    InvalidRequestError,
    LedgerError,
    LedgerLockedError,
    LedgerNotFoundError,
    LedgerSchemaError,
    LedgerUnavailableError,
    OperationConflictError,
    OperationNotFoundError,
)
from effectguard.executor import EffectExecutor
from effectguard.ledger.protocol import EffectLedger
from effectguard.ledger.sqlite import SQLiteEffectLedger
from effectguard.model import (
    EffectEvent,
    EffectResult,
    EffectStatus,
    EventType,
    OperationRecord,
    OutcomeProbeResult,
    ProbeStatus,
    VerifyProblem,
    VerifyReport,
)

__all__ = [
    "INJECTED",
    "AsyncEffectFunction",
    "Configuration",
    "ConfigurationError",
    "DataclassCodec",
    "EffectContract",
    "EffectDecorator",
    "EffectEvent",
    "EffectExecutor",
    "EffectFunction",
    "EffectGuardError",
    "EffectInProgress",
    "EffectLedger",
    "EffectNotConfirmed",
    "EffectNotSent",
    "EffectOutcomeUnknown",
    "EffectQuarantined",
    "EffectRejected",
    "EffectResult",
    "EffectStatus",
    "EventType",
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
    "OperationRecord",
    "OutcomeProbeResult",
    "OutputCodec",
    "ProbeStatus",
    "PydanticCodec",
    "SQLiteEffectLedger",
    "UnknownOutcomePolicy",
    "VerifyProblem",
    "VerifyReport",
    "configure",
    "effect",
    "get_contract",
    "is_effect",
    "observe_effects",
    "use_executor",
]

__version__ = "0.1.0"

if TYPE_CHECKING:
    from effectguard.ledger.postgres import PostgresEffectLedger as PostgresEffectLedger


def __getattr__(name: str) -> Any:
    # PostgresEffectLedger is public but imported on first use, and left out of
    # __all__, so that SQLite users never need psycopg: not even for
    # ``import effectguard`` or ``from effectguard import *``.
    if name == "PostgresEffectLedger":
        try:
            from effectguard.ledger.postgres import PostgresEffectLedger  # noqa: PLC0415
        except ModuleNotFoundError as exc:
            msg = f"PostgresEffectLedger needs psycopg: pip install 'effectguard[postgres]' ({exc})"
            raise ImportError(msg, name=name) from exc
        return PostgresEffectLedger
    msg = f"module 'effectguard' has no attribute {name!r}"
    raise AttributeError(msg)
