"""effectguard: make the side effects of AI-agent tools safe to execute, recover and test.

Every call of a guarded side effect is recorded durably before dispatch under a
stable business operation id; an uncertain outcome is reconciled with the
provider's probe and retried only when the provider's contract makes a resend
safe, otherwise it is quarantined for an operator.

``__all__`` is the whole public API of this module; the documented
subpackages (:mod:`effectguard.ledger` and its backends,
:mod:`effectguard.errors`, :mod:`effectguard.operator`,
:mod:`effectguard.runtime`, :mod:`effectguard.adapters`,
:mod:`effectguard.testkit`, :mod:`effectguard.otel`) hold the rest. Each name
is loaded from its module on first use (PEP 562): ``import effectguard``
loads neither the executor, nor asyncio, nor wrapt, so a command-line tool
that only reads a ledger starts fast. Type checkers see ordinary imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "INJECTED",
    "AsyncEffectFunction",
    "CallScope",
    "Configuration",
    "ConfigurationError",
    "DataclassCodec",
    "EffectAwaitingApproval",
    "EffectContract",
    "EffectExecutor",
    "EffectFunction",
    "EffectGuardError",
    "EffectInProgress",
    "EffectLedger",
    "EffectNotConfirmed",
    "EffectNotSent",
    "EffectOutcomeUnknown",
    "EffectPruned",
    "EffectQuarantined",
    "EffectRejected",
    "EffectResult",
    "EffectStatus",
    "EventType",
    "InvalidRequestError",
    "LedgerError",
    "LedgerIntegrityError",
    "LedgerUnavailableError",
    "Observer",
    "OperationConflictError",
    "OutcomeProbeResult",
    "OutputCodec",
    "OutputNotStored",
    "ProbeStatus",
    "PydanticCodec",
    "RecoveryReport",
    "SQLiteEffectLedger",
    "Transition",
    "UnknownOutcomePolicy",
    "call_scope",
    "call_scoped",
    "configure",
    "effect",
    "get_contract",
    "is_effect",
    "observe_effects",
    "observing",
    "open_ledger",
    "recover",
    "use_executor",
]

#: The module that owns each name of ``__all__``.
_OWNERS: dict[str, str] = {
    "INJECTED": "effectguard._decorator",
    "AsyncEffectFunction": "effectguard._decorator",
    "EffectFunction": "effectguard._decorator",
    "effect": "effectguard._decorator",
    "get_contract": "effectguard._decorator",
    "is_effect": "effectguard._decorator",
    "use_executor": "effectguard._decorator",
    "Configuration": "effectguard._configure",
    "configure": "effectguard._configure",
    "observe_effects": "effectguard._configure",
    "EffectExecutor": "effectguard._executor._machine",
    "Observer": "effectguard._executor._observe",
    "Transition": "effectguard._executor._observe",
    "observing": "effectguard._executor._observe",
    "CallScope": "effectguard._scope",
    "call_scope": "effectguard._scope",
    "call_scoped": "effectguard._scope",
    "EffectContract": "effectguard._contract",
    "OutputCodec": "effectguard._contract",
    "UnknownOutcomePolicy": "effectguard._contract",
    "DataclassCodec": "effectguard._codec",
    "PydanticCodec": "effectguard._codec",
    "EffectLedger": "effectguard.ledger",
    "open_ledger": "effectguard.ledger",
    "SQLiteEffectLedger": "effectguard.ledger.sqlite",
    "RecoveryReport": "effectguard.operator",
    "recover": "effectguard.operator",
    "EffectResult": "effectguard._model",
    "EffectStatus": "effectguard._model",
    "EventType": "effectguard._model",
    "OutcomeProbeResult": "effectguard._model",
    "ProbeStatus": "effectguard._model",
    "ConfigurationError": "effectguard.errors",
    "EffectAwaitingApproval": "effectguard.errors",
    "EffectGuardError": "effectguard.errors",
    "EffectInProgress": "effectguard.errors",
    "EffectNotConfirmed": "effectguard.errors",
    "EffectNotSent": "effectguard.errors",
    "EffectOutcomeUnknown": "effectguard.errors",
    "EffectPruned": "effectguard.errors",
    "EffectQuarantined": "effectguard.errors",
    "EffectRejected": "effectguard.errors",
    "InvalidRequestError": "effectguard.errors",
    "LedgerError": "effectguard.errors",
    "LedgerIntegrityError": "effectguard.errors",
    "LedgerUnavailableError": "effectguard.errors",
    "OperationConflictError": "effectguard.errors",
    "OutputNotStored": "effectguard.errors",
}

#: Names an earlier development version exported from the root, and their public home now.
_MOVED: dict[str, str] = {
    **dict.fromkeys(
        [
            "AnchorHead",
            "EffectEvent",
            "OperationRecord",
            "VerifyProblem",
            "VerifyReport",
        ],
        "effectguard.ledger",
    ),
    "PostgresEffectLedger": "effectguard.ledger.postgres",
    **dict.fromkeys(
        [
            "FencedWriteError",
            "IllegalTransitionError",
            "InternalError",
            "LedgerLockedError",
            "LedgerNotFoundError",
            "LedgerSchemaError",
            "OperationNotFoundError",
        ],
        "effectguard.errors",
    ),
    **dict.fromkeys(["ToolIndex", "load_tools"], "effectguard.operator"),
}

#: What ``__version__`` is when the package's metadata is missing (run from a bare source tree).
_UNKNOWN_VERSION = "0+unknown"

if TYPE_CHECKING:
    from effectguard._codec import DataclassCodec as DataclassCodec
    from effectguard._codec import PydanticCodec as PydanticCodec
    from effectguard._configure import Configuration as Configuration
    from effectguard._configure import configure as configure
    from effectguard._configure import observe_effects as observe_effects
    from effectguard._contract import EffectContract as EffectContract
    from effectguard._contract import OutputCodec as OutputCodec
    from effectguard._contract import UnknownOutcomePolicy as UnknownOutcomePolicy
    from effectguard._decorator import INJECTED as INJECTED
    from effectguard._decorator import AsyncEffectFunction as AsyncEffectFunction
    from effectguard._decorator import EffectFunction as EffectFunction
    from effectguard._decorator import effect as effect
    from effectguard._decorator import get_contract as get_contract
    from effectguard._decorator import is_effect as is_effect
    from effectguard._decorator import use_executor as use_executor
    from effectguard._executor._machine import EffectExecutor as EffectExecutor
    from effectguard._executor._observe import Observer as Observer
    from effectguard._executor._observe import Transition as Transition
    from effectguard._executor._observe import observing as observing
    from effectguard._model import EffectResult as EffectResult
    from effectguard._model import EffectStatus as EffectStatus
    from effectguard._model import EventType as EventType
    from effectguard._model import OutcomeProbeResult as OutcomeProbeResult
    from effectguard._model import ProbeStatus as ProbeStatus
    from effectguard._scope import CallScope as CallScope
    from effectguard._scope import call_scope as call_scope
    from effectguard._scope import call_scoped as call_scoped
    from effectguard.errors import ConfigurationError as ConfigurationError
    from effectguard.errors import EffectAwaitingApproval as EffectAwaitingApproval
    from effectguard.errors import EffectGuardError as EffectGuardError
    from effectguard.errors import EffectInProgress as EffectInProgress
    from effectguard.errors import EffectNotConfirmed as EffectNotConfirmed
    from effectguard.errors import EffectNotSent as EffectNotSent
    from effectguard.errors import EffectOutcomeUnknown as EffectOutcomeUnknown
    from effectguard.errors import EffectPruned as EffectPruned
    from effectguard.errors import EffectQuarantined as EffectQuarantined
    from effectguard.errors import EffectRejected as EffectRejected
    from effectguard.errors import InvalidRequestError as InvalidRequestError
    from effectguard.errors import LedgerError as LedgerError
    from effectguard.errors import LedgerIntegrityError as LedgerIntegrityError
    from effectguard.errors import LedgerUnavailableError as LedgerUnavailableError
    from effectguard.errors import OperationConflictError as OperationConflictError
    from effectguard.errors import OutputNotStored as OutputNotStored
    from effectguard.ledger import EffectLedger as EffectLedger
    from effectguard.ledger import open_ledger as open_ledger
    from effectguard.ledger.sqlite import SQLiteEffectLedger as SQLiteEffectLedger
    from effectguard.operator import RecoveryReport as RecoveryReport
    from effectguard.operator import recover as recover

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
    """Return ``name`` of ``__all__`` from the module that owns it, and keep it here.

    Raises:
        AttributeError: ``name`` is not in ``__all__`` (nor ``__version__``).
    """
    if name == "__version__":
        value: Any = _version()
    else:
        owner = _OWNERS.get(name)
        if owner is None:
            msg = f"module 'effectguard' has no attribute {name!r}"
            home = _MOVED.get(name)
            if home is not None:
                msg += f"; import it from {home} (it left the root in 0.1.0)"
            raise AttributeError(msg, name=name)
        value = getattr(importlib.import_module(owner), name)
    # Later lookups find the name in the module's namespace and skip this function.
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "__version__"})


if not TYPE_CHECKING:
    # Type checkers see the imports above instead of this hook, so that a misspelt name
    # stays an error for them rather than becoming Any.
    __getattr__ = _load
