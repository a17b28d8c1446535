"""effectguard: make the side effects of AI-agent tools safe to execute, recover and test.

Every call of a guarded side effect is recorded durably before dispatch under a
stable business operation id; an uncertain outcome is reconciled with the
provider's probe and retried only when the provider's contract makes a resend
safe, otherwise it is quarantined for an operator.

``__all__`` holds what a user of the README needs. Every other name importable
from here lives in a subpackage and is loaded from it on first use (PEP 562),
like the names of ``__all__`` themselves: ``import effectguard`` loads neither
the executor, nor asyncio, nor wrapt, so a command-line tool that only reads a
ledger starts fast. Type checkers see ordinary imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "INJECTED",
    "ConfigurationError",
    "EffectContract",
    "EffectExecutor",
    "EffectGuardError",
    "EffectInProgress",
    "EffectNotConfirmed",
    "EffectNotSent",
    "EffectOutcomeUnknown",
    "EffectPruned",
    "EffectQuarantined",
    "EffectRejected",
    "EffectResult",
    "EffectStatus",
    "LedgerUnavailableError",
    "OperationConflictError",
    "OutcomeProbeResult",
    "OutputNotStored",
    "ProbeStatus",
    "SQLiteEffectLedger",
    "call_scope",
    "call_scoped",
    "configure",
    "effect",
    "open_ledger",
]

#: Every name ``effectguard`` exports, in ``__all__`` or not, and the module that owns it.
_EXPORTS: dict[str, str] = {
    # The decorator.
    "INJECTED": "effectguard.decorator",
    "AsyncEffectFunction": "effectguard.decorator",
    "EffectDecorator": "effectguard.decorator",
    "EffectFunction": "effectguard.decorator",
    "effect": "effectguard.decorator",
    "get_contract": "effectguard.decorator",
    "is_effect": "effectguard.decorator",
    "use_executor": "effectguard.decorator",
    # The executor and its process-wide configuration.
    "EffectExecutor": "effectguard.executor",
    "Observer": "effectguard.executor",
    "Transition": "effectguard.executor",
    "observing": "effectguard.executor",
    "Configuration": "effectguard.config",
    "configure": "effectguard.config",
    "observe_effects": "effectguard.config",
    # Recovery: re-probing what was left uncertain, and finding the tools that can.
    "RecoveryReport": "effectguard.recovery",
    "recover": "effectguard.recovery",
    "ToolIndex": "effectguard.decorator.discovery",
    "load_tools": "effectguard.decorator.discovery",
    # Operation ids from the calling context.
    "CallScope": "effectguard.scope",
    "call_scope": "effectguard.scope",
    "call_scoped": "effectguard.scope",
    # Contracts and output codecs.
    "EffectContract": "effectguard.contract",
    "OutputCodec": "effectguard.contract",
    "UnknownOutcomePolicy": "effectguard.contract",
    "DataclassCodec": "effectguard.codec",
    "PydanticCodec": "effectguard.codec",
    # Ledgers.
    "AnchorHead": "effectguard.ledger",
    "EffectLedger": "effectguard.ledger",
    "open_ledger": "effectguard.ledger",
    "SQLiteEffectLedger": "effectguard.ledger.sqlite",
    "PostgresEffectLedger": "effectguard.ledger.postgres",
    # Records, results and statuses.
    "EffectEvent": "effectguard.model",
    "EffectResult": "effectguard.model",
    "EffectStatus": "effectguard.model",
    "EventType": "effectguard.model",
    "OperationRecord": "effectguard.model",
    "OutcomeProbeResult": "effectguard.model",
    "ProbeStatus": "effectguard.model",
    "VerifyProblem": "effectguard.model",
    "VerifyReport": "effectguard.model",
    # Errors.
    "ConfigurationError": "effectguard.errors",
    "EffectGuardError": "effectguard.errors",
    "EffectInProgress": "effectguard.errors",
    "EffectNotConfirmed": "effectguard.errors",
    "EffectOutcomeUnknown": "effectguard.errors",
    "EffectQuarantined": "effectguard.errors",
    "EffectPruned": "effectguard.errors",
    "EffectRejected": "effectguard.errors",
    "FencedWriteError": "effectguard.errors",
    "IllegalTransitionError": "effectguard.errors",
    "InternalError": "effectguard.errors",
    "InvalidRequestError": "effectguard.errors",
    "LedgerError": "effectguard.errors",
    "LedgerIntegrityError": "effectguard.errors",
    "LedgerLockedError": "effectguard.errors",
    "LedgerNotFoundError": "effectguard.errors",
    "LedgerSchemaError": "effectguard.errors",
    "LedgerUnavailableError": "effectguard.errors",
    "OperationConflictError": "effectguard.errors",
    "OperationNotFoundError": "effectguard.errors",
    "EffectNotSent": "effectguard.errors",
    "OutputNotStored": "effectguard.errors",
}

#: What ``__version__`` is when the package's metadata is missing (run from a bare source tree).
_UNKNOWN_VERSION = "0+unknown"

if TYPE_CHECKING:
    from effectguard.codec import DataclassCodec as DataclassCodec
    from effectguard.codec import PydanticCodec as PydanticCodec
    from effectguard.config import Configuration as Configuration
    from effectguard.config import configure as configure
    from effectguard.config import observe_effects as observe_effects
    from effectguard.contract import EffectContract as EffectContract
    from effectguard.contract import OutputCodec as OutputCodec
    from effectguard.contract import UnknownOutcomePolicy as UnknownOutcomePolicy
    from effectguard.decorator import INJECTED as INJECTED
    from effectguard.decorator import AsyncEffectFunction as AsyncEffectFunction
    from effectguard.decorator import EffectDecorator as EffectDecorator
    from effectguard.decorator import EffectFunction as EffectFunction
    from effectguard.decorator import effect as effect
    from effectguard.decorator import get_contract as get_contract
    from effectguard.decorator import is_effect as is_effect
    from effectguard.decorator import use_executor as use_executor
    from effectguard.decorator.discovery import ToolIndex as ToolIndex
    from effectguard.decorator.discovery import load_tools as load_tools
    from effectguard.errors import ConfigurationError as ConfigurationError
    from effectguard.errors import EffectGuardError as EffectGuardError
    from effectguard.errors import EffectInProgress as EffectInProgress
    from effectguard.errors import EffectNotConfirmed as EffectNotConfirmed
    from effectguard.errors import EffectNotSent as EffectNotSent
    from effectguard.errors import EffectOutcomeUnknown as EffectOutcomeUnknown
    from effectguard.errors import EffectPruned as EffectPruned
    from effectguard.errors import EffectQuarantined as EffectQuarantined
    from effectguard.errors import EffectRejected as EffectRejected
    from effectguard.errors import FencedWriteError as FencedWriteError
    from effectguard.errors import IllegalTransitionError as IllegalTransitionError
    from effectguard.errors import InternalError as InternalError
    from effectguard.errors import InvalidRequestError as InvalidRequestError
    from effectguard.errors import LedgerError as LedgerError
    from effectguard.errors import LedgerIntegrityError as LedgerIntegrityError
    from effectguard.errors import LedgerLockedError as LedgerLockedError
    from effectguard.errors import LedgerNotFoundError as LedgerNotFoundError
    from effectguard.errors import LedgerSchemaError as LedgerSchemaError
    from effectguard.errors import LedgerUnavailableError as LedgerUnavailableError
    from effectguard.errors import OperationConflictError as OperationConflictError
    from effectguard.errors import OperationNotFoundError as OperationNotFoundError
    from effectguard.errors import OutputNotStored as OutputNotStored
    from effectguard.executor import EffectExecutor as EffectExecutor
    from effectguard.executor import Observer as Observer
    from effectguard.executor import Transition as Transition
    from effectguard.executor import observing as observing
    from effectguard.ledger import AnchorHead as AnchorHead
    from effectguard.ledger import EffectLedger as EffectLedger
    from effectguard.ledger import open_ledger as open_ledger
    from effectguard.ledger.postgres import PostgresEffectLedger as PostgresEffectLedger
    from effectguard.ledger.sqlite import SQLiteEffectLedger as SQLiteEffectLedger
    from effectguard.model import EffectEvent as EffectEvent
    from effectguard.model import EffectResult as EffectResult
    from effectguard.model import EffectStatus as EffectStatus
    from effectguard.model import EventType as EventType
    from effectguard.model import OperationRecord as OperationRecord
    from effectguard.model import OutcomeProbeResult as OutcomeProbeResult
    from effectguard.model import ProbeStatus as ProbeStatus
    from effectguard.model import VerifyProblem as VerifyProblem
    from effectguard.model import VerifyReport as VerifyReport
    from effectguard.recovery import RecoveryReport as RecoveryReport
    from effectguard.recovery import recover as recover
    from effectguard.scope import CallScope as CallScope
    from effectguard.scope import call_scope as call_scope
    from effectguard.scope import call_scoped as call_scoped

    __version__: str


def _version() -> str:
    # The version is written once, in pyproject.toml; the installed metadata carries it.
    # importlib.metadata is imported here, not at the top, because it costs more to
    # import than the rest of this module.
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 - see above

    try:
        return version("effectguard")
    except PackageNotFoundError:
        return _UNKNOWN_VERSION


def _load(name: str) -> Any:
    """Return the exported ``name`` from the module that owns it, and keep it here.

    Raises:
        AttributeError: ``name`` is not exported by effectguard.
        ImportError: ``name`` is ``PostgresEffectLedger`` and psycopg is not installed.
    """
    if name == "__version__":
        value: Any = _version()
    else:
        owner = _EXPORTS.get(name)
        if owner is None:
            msg = f"module 'effectguard' has no attribute {name!r}"
            raise AttributeError(msg, name=name)
        try:
            module = importlib.import_module(owner)
        except ModuleNotFoundError as exc:
            if owner != "effectguard.ledger.postgres":
                raise
            # PostgresEffectLedger is left out of __all__ so that SQLite users never need
            # psycopg: not for ``import effectguard``, nor for ``from effectguard import *``.
            msg = f"PostgresEffectLedger needs psycopg: pip install 'effectguard[postgres]' ({exc})"
            raise ImportError(msg, name=name) from exc
        value = getattr(module, name)
    # Later lookups find the name in the module's namespace and skip this function.
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, "__version__"})


if not TYPE_CHECKING:
    # Type checkers see the imports above instead of this hook, so that a misspelt name
    # stays an error for them rather than becoming Any.
    __getattr__ = _load
