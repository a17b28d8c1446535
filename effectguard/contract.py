"""What a side effect promises: its identity, its provider's guarantees, its probe."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from effectguard.errors import ConfigurationError, EffectGuardError
from effectguard.model import OutcomeProbeResult

__all__ = [
    "Arguments",
    "EffectContract",
    "OutputCodec",
    "ProbeFunction",
    "UnknownOutcomePolicy",
]

T = TypeVar("T")

#: The call's arguments by parameter name, as the contract's callables receive them.
Arguments = Mapping[str, Any]

#: ``probe(arguments, *, idempotency_key=...)``, sync or async.
ProbeFunction = Callable[..., "OutcomeProbeResult | Awaitable[OutcomeProbeResult]"]

#: Largest stored output, in bytes of its JSON text, unless a contract says otherwise.
DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024

#: Exception types too broad for ``not_sent_on``: each includes errors raised after
#: some of the request may have reached the destination (a reset, a broken pipe, a
#: read timeout), which are unknown outcomes, never "not sent".
_AMBIGUOUS: tuple[type[BaseException], ...] = (
    BaseException,
    Exception,
    OSError,
    ConnectionError,
    ConnectionResetError,
    ConnectionAbortedError,
    BrokenPipeError,
)


class UnknownOutcomePolicy(enum.StrEnum):
    """What to do when neither a probe nor a provider guarantee can settle an outcome."""

    QUARANTINE = "QUARANTINE"
    """Hold the operation for an operator; nothing is sent again until one resolves it."""

    KEEP_UNKNOWN = "KEEP_UNKNOWN"
    """Leave it OUTCOME_UNKNOWN, so a later call probes again."""


class OutputCodec(Protocol[T]):
    """Turns a handler's output into JSON for the ledger and back, losslessly."""

    def encode(self, output: T) -> Any:
        """Return a JSON-encodable value that :meth:`decode` turns back into ``output``."""
        ...

    def decode(self, data: Any) -> T:
        """Return the output that :meth:`encode` turned into ``data``."""
        ...


@dataclass(frozen=True, slots=True)
class EffectContract:
    """The rules one kind of side effect is executed under.

    ``operation_id`` maps a call's arguments to the stable business identity,
    the same across retries, resumes and processes. ``provider_idempotency_key``
    maps them to the key forwarded to the provider, the same for every attempt.
    ``provider_idempotency_guaranteed`` is a claim grounded in the provider's
    documentation that a resend with that key never creates a second effect
    (within ``provider_key_retention_seconds`` of the first dispatch). Without it,
    an uncertain outcome is retried only on a probe's authoritative NOT_COMMITTED.

    ``not_sent_on`` names exception types that prove the request never left
    (raised before any byte of it can reach the destination, like
    ``ConnectionRefusedError``): an attempt ending in one is treated like
    :class:`~effectguard.errors.EffectNotSent`. Broad or ambiguous types
    (``OSError``, ``ConnectionError``, ``TimeoutError``...) are refused.

    ``retry_wait_initial`` and ``retry_wait_max`` (seconds) shape the waits
    between automatic attempts and re-probes (exponential backoff, full jitter);
    ``deadline`` (seconds) bounds how long one call keeps waiting. None takes the
    executor's default (see :func:`effectguard.configure`).
    """

    name: str
    operation_id: Callable[[Arguments], str]
    version: int = 1
    provider_idempotency_key: Callable[[Arguments], str] | None = None
    provider_idempotency_guaranteed: bool = False
    outcome_probe: ProbeFunction | None = None
    postcondition: Callable[[Any], bool] | None = None
    provider_operation_id: Callable[[Any], str | None] | None = None
    unknown_outcome: UnknownOutcomePolicy = UnknownOutcomePolicy.QUARANTINE
    handler_timeout: float | None = None
    lease_seconds: float = 30.0
    max_attempts: int = 3
    provider_key_retention_seconds: float | None = None
    redact: frozenset[str] = field(default_factory=frozenset)
    codec: OutputCodec[Any] | None = None
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    not_sent_on: tuple[type[Exception], ...] = ()
    retry_wait_initial: float | None = None
    retry_wait_max: float | None = None
    deadline: float | None = None

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.name, str) or not self.name.strip():
            problems.append("name must be a non-empty string")
        if not isinstance(self.version, int) or isinstance(self.version, bool) or self.version < 1:
            problems.append(f"version must be an int >= 1, not {self.version!r}")
        if not callable(self.operation_id):
            problems.append("operation_id must be a callable taking the arguments mapping")
        if self.provider_idempotency_key is not None and not callable(
            self.provider_idempotency_key
        ):
            problems.append("provider_idempotency_key must be a callable or None")
        if self.provider_idempotency_guaranteed and self.provider_idempotency_key is None:
            problems.append(
                "provider_idempotency_guaranteed=True needs a provider_idempotency_key: "
                "a provider can only deduplicate a key it is sent"
            )
        if self.outcome_probe is not None and not callable(self.outcome_probe):
            problems.append("outcome_probe must be a callable or None")
        if self.handler_timeout is not None and not self.handler_timeout > 0:
            problems.append(f"handler_timeout must be > 0 or None, not {self.handler_timeout!r}")
        if not self.lease_seconds > 0:
            problems.append(f"lease_seconds must be > 0, not {self.lease_seconds!r}")
        if (
            not isinstance(self.max_attempts, int)
            or isinstance(self.max_attempts, bool)
            or self.max_attempts < 1
        ):
            problems.append(f"max_attempts must be an int >= 1, not {self.max_attempts!r}")
        retention = self.provider_key_retention_seconds
        if retention is not None and not retention > 0:
            problems.append(
                f"provider_key_retention_seconds must be > 0 or None, not {retention!r}"
            )
        if not isinstance(self.unknown_outcome, UnknownOutcomePolicy):
            problems.append("unknown_outcome must be an UnknownOutcomePolicy")
        if not self.max_output_bytes > 0:
            problems.append(f"max_output_bytes must be > 0, not {self.max_output_bytes!r}")
        problems.extend(self._pacing_problems())
        not_sent_on = self.not_sent_on
        if isinstance(not_sent_on, type):
            not_sent_on = (not_sent_on,)
        not_sent_on = tuple(not_sent_on)
        problems.extend(_not_sent_problems(not_sent_on))
        if problems:
            msg = f"invalid contract {self.name!r}: " + "; ".join(problems)
            raise ConfigurationError(msg)
        object.__setattr__(self, "redact", frozenset(self.redact))
        object.__setattr__(self, "not_sent_on", not_sent_on)

    def _pacing_problems(self) -> list[str]:
        problems = []
        for name in ("retry_wait_initial", "retry_wait_max"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                problems.append(f"{name} must be >= 0 seconds or None, not {value!r}")
        initial, maximum = self.retry_wait_initial, self.retry_wait_max
        if initial is not None and maximum is not None and initial > maximum:
            problems.append(
                f"retry_wait_initial ({initial!r}) must not exceed retry_wait_max ({maximum!r})"
            )
        if self.deadline is not None and not self.deadline >= 0:
            problems.append(f"deadline must be >= 0 seconds or None, not {self.deadline!r}")
        return problems

    def identity(self, arguments: Arguments) -> tuple[str, str | None]:
        """Return ``(operation_id, provider_key)`` for ``arguments``.

        Raises ``ConfigurationError`` when either is not a non-empty string.
        """
        operation_id = self.operation_id(arguments)
        if not isinstance(operation_id, str) or not operation_id:
            msg = (
                f"contract {self.name!r}: operation_id must be a non-empty str, "
                f"got {operation_id!r}"
            )
            raise ConfigurationError(msg)
        key = None
        if self.provider_idempotency_key is not None:
            key = self.provider_idempotency_key(arguments)
            if not isinstance(key, str) or not key:
                msg = (
                    f"contract {self.name!r}: provider idempotency key must be a non-empty "
                    f"str, got {key!r}"
                )
                raise ConfigurationError(msg)
        return operation_id, key


def _not_sent_problems(types: tuple[Any, ...]) -> list[str]:
    """Why ``types`` cannot be a contract's ``not_sent_on``; empty when it can."""
    problems = []
    for kind in types:
        if not isinstance(kind, type) or not issubclass(kind, Exception):
            problems.append(f"not_sent_on must name Exception subclasses, not {kind!r}")
        elif kind in _AMBIGUOUS or issubclass(kind, TimeoutError):
            problems.append(
                f"not_sent_on cannot name {kind.__name__}: it is also raised after the "
                "request may have reached the destination; name the errors raised before "
                "anything is sent, such as ConnectionRefusedError"
            )
        elif issubclass(kind, EffectGuardError):
            problems.append(f"not_sent_on cannot name effectguard's own {kind.__name__}")
    return problems
