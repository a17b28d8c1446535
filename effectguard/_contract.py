"""What a side effect promises: its identity, its provider's guarantees, its probe."""

from __future__ import annotations

import enum
import threading
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from effectguard._fingerprint import check_operation_id
from effectguard._model import OutcomeProbeResult
from effectguard.errors import ConfigurationError, EffectGuardError

__all__ = [
    "DURATION_FIELDS",
    "MAX_LEASE_SECONDS",
    "MAX_SECONDS",
    "WAIT_FIELDS",
    "Arguments",
    "EffectContract",
    "OutputCodec",
    "ProbeFunction",
    "UnknownOutcomePolicy",
    "redacted_names",
    "seconds_problem",
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


#: The fields that are durations in seconds; all but ``lease_seconds`` may be None.
DURATION_FIELDS = ("handler_timeout", "lease_seconds", "provider_key_retention_seconds")

#: The fields that are waits in seconds, where 0 means "do not wait" (None: the executor's).
WAIT_FIELDS = ("wait_for_peer", "retry_wait_initial", "retry_wait_max", "deadline")


#: The longest timeout or wait, in seconds: ``threading.TIMEOUT_MAX`` (about 292 years
#: on 64-bit Linux), the longest a thread can wait; a longer one (or ``inf``) would pass
#: here and overflow only at the first call, after the handler was already dispatched.
MAX_SECONDS: float = threading.TIMEOUT_MAX

#: The longest lease, in seconds (365 days): a lease is renewed while its handler runs,
#: so a longer one only delays recovery after a crash, and lease expiry times must
#: stay representable in the ledger.
MAX_LEASE_SECONDS = 365 * 24 * 3600.0


def seconds_problem(
    name: str,
    value: object,
    *,
    zero_ok: bool,
    optional: bool = False,
    maximum: float = MAX_SECONDS,
) -> str | None:
    """Why ``value`` is not a valid ``name`` in seconds, or None when it is.

    Valid: an int or float (never a bool, a string or NaN) greater than 0
    (``zero_ok``: at least 0) and at most ``maximum``; or None when ``optional``.
    """
    if value is None and optional:
        return None
    # NaN fails every comparison, so it is refused too; a bool is not a number of seconds.
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and (value >= 0 if zero_ok else value > 0) and value <= maximum:  # type: ignore[operator]
        return None
    least = ">= 0" if zero_ok else "> 0"
    also = " or None" if optional else ""
    return f"{name} must be {least} seconds and at most {maximum:g}{also}, not {value!r}"


def _whole(value: object, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _nonnegative(value: object) -> bool:
    # "not >= 0" also refuses NaN; a bool is not a number of seconds.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def _exception_types(value: object) -> tuple[Any, ...]:
    """``not_sent_on`` as a tuple: one type may be given alone."""
    if isinstance(value, Iterable) and not isinstance(value, type):
        return tuple(value)
    return (value,)


def _policy(value: object) -> UnknownOutcomePolicy | None:
    """Return the policy ``value`` names (any case, ``-`` for ``_``), or None."""
    if isinstance(value, UnknownOutcomePolicy):
        return value
    if not isinstance(value, str):
        return None
    try:
        return UnknownOutcomePolicy(value.upper().replace("-", "_"))
    except ValueError:
        return None


def redacted_names(value: object) -> frozenset[str] | None:
    """Return the names ``redact`` gives (a bare str is one name); None when it is invalid."""
    if isinstance(value, str):
        return frozenset([value])
    if not isinstance(value, Collection) or not all(isinstance(name, str) for name in value):
        return None
    return frozenset(value)


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
    ``wait_for_peer`` is how long a call that finds another worker dispatching
    the same operation waits for its outcome and replays it; None leaves it to
    the call and the executor (see :meth:`EffectExecutor.execute`).

    ``not_sent_on`` names exception types that prove the request never left
    (raised before any byte of it can reach the destination, like
    ``ConnectionRefusedError``): an attempt ending in one is treated like
    :class:`~effectguard.errors.EffectNotSent`. Broad or ambiguous types
    (``OSError``, ``ConnectionError``, ``TimeoutError``...) are refused.

    ``retry_wait_initial`` and ``retry_wait_max`` (seconds) shape the waits
    between automatic attempts and re-probes (exponential backoff, full jitter);
    ``deadline`` (seconds) bounds how long one call keeps waiting. None takes the
    executor's default (see :func:`effectguard.configure`).

    ``requires_approval`` (True, or a predicate on the arguments) makes a new
    request wait, recorded and unsent, for a person's approval of exactly that
    request (AWAITING_APPROVAL); the approval is used by the next call, once.
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
    wait_for_peer: float | None = None
    not_sent_on: tuple[type[Exception], ...] = ()
    retry_wait_initial: float | None = None
    retry_wait_max: float | None = None
    deadline: float | None = None
    requires_approval: bool | Callable[[Arguments], bool] = False

    def __post_init__(self) -> None:
        # The one place a contract's settings are checked: @effect passes its options here.
        problems = [*self._identity_problems(), *self._behaviour_problems()]
        policy = _policy(self.unknown_outcome)
        if policy is None:
            choices = ", ".join(choice.value for choice in UnknownOutcomePolicy)
            problems.append(
                f"unknown_outcome={self.unknown_outcome!r} is not a policy; "
                f"expected one of {choices}"
            )
        approval = self.requires_approval
        if not isinstance(approval, bool) and not callable(approval):
            problems.append(
                "requires_approval must be True, False or a predicate on the arguments, "
                f"not {approval!r}"
            )
        redact = redacted_names(self.redact)
        if redact is None:
            problems.append(f"redact must be a collection of argument names, not {self.redact!r}")
        if problems:
            msg = f"invalid contract {self.name!r}: " + "; ".join(problems)
            raise ConfigurationError(msg)
        object.__setattr__(self, "unknown_outcome", policy)
        object.__setattr__(self, "redact", redact)
        object.__setattr__(self, "not_sent_on", _exception_types(self.not_sent_on))

    def _identity_problems(self) -> list[str]:
        problems = []
        if not isinstance(self.name, str) or not self.name.strip():
            problems.append("name must be a non-empty string")
        if not _whole(self.version, 1):
            problems.append(f"version must be an int >= 1, not {self.version!r}")
        if not callable(self.operation_id):
            problems.append("operation_id must be a callable taking the arguments mapping")
        if self.provider_idempotency_key is not None and not callable(
            self.provider_idempotency_key
        ):
            problems.append("provider_idempotency_key must be a callable or None")
        if not isinstance(self.provider_idempotency_guaranteed, bool):
            problems.append(
                "provider_idempotency_guaranteed must be True or False, "
                f"not {self.provider_idempotency_guaranteed!r}"
            )
        elif self.provider_idempotency_guaranteed and self.provider_idempotency_key is None:
            problems.append(
                "provider_idempotency_guaranteed=True needs a provider_idempotency_key: "
                "a provider can only deduplicate a key it is sent"
            )
        return problems

    def _behaviour_problems(self) -> list[str]:
        problems = [
            f"{name} must be a callable or None"
            for name in ("outcome_probe", "postcondition", "provider_operation_id")
            if getattr(self, name) is not None and not callable(getattr(self, name))
        ]
        for name in DURATION_FIELDS:
            lease = name == "lease_seconds"
            problem = seconds_problem(
                name,
                getattr(self, name),
                zero_ok=False,
                optional=not lease,
                maximum=MAX_LEASE_SECONDS if lease else MAX_SECONDS,
            )
            if problem is not None:
                problems.append(problem)
        if not _whole(self.max_attempts, 1):
            problems.append(f"max_attempts must be an int >= 1, not {self.max_attempts!r}")
        if not _whole(self.max_output_bytes, 1):
            problems.append(f"max_output_bytes must be > 0, not {self.max_output_bytes!r}")
        codec = self.codec
        if codec is not None and not (
            callable(getattr(codec, "encode", None)) and callable(getattr(codec, "decode", None))
        ):
            problems.append(f"codec must be an OutputCodec (encode and decode), not {codec!r}")
        problems.extend(self._pacing_problems())
        problems.extend(_not_sent_problems(_exception_types(self.not_sent_on)))
        return problems

    def _pacing_problems(self) -> list[str]:
        problems = [
            problem
            for name in WAIT_FIELDS
            if (problem := seconds_problem(name, getattr(self, name), zero_ok=True, optional=True))
            is not None
        ]
        initial, maximum = self.retry_wait_initial, self.retry_wait_max
        if (
            initial is not None
            and maximum is not None
            and _nonnegative(initial)
            and _nonnegative(maximum)
            and initial > maximum
        ):
            problems.append(
                f"retry_wait_initial ({initial!r}) must not exceed retry_wait_max ({maximum!r})"
            )
        return problems

    def needs_approval(self, arguments: Arguments) -> bool:
        """Whether a new request with ``arguments`` must wait for a person's approval.

        Raises :class:`~effectguard.errors.ConfigurationError` naming the
        contract when its predicate raises or answers something other than a bool.
        """
        approval = self.requires_approval
        if approval is False or approval is True:
            return approval
        try:
            answer = approval(dict(arguments))
        except Exception as exc:
            msg = (
                f"contract {self.name!r}: requires_approval raised {type(exc).__name__}: {exc}; "
                "nothing was recorded or sent"
            )
            raise ConfigurationError(msg) from exc
        if not isinstance(answer, bool):
            msg = (
                f"contract {self.name!r}: requires_approval returned {answer!r}, not True or "
                "False; nothing was recorded or sent"
            )
            raise ConfigurationError(msg)
        return answer

    def identity(self, arguments: Arguments) -> tuple[str, str | None]:
        """Return ``(operation_id, provider_key)`` for ``arguments``.

        Raises ``ConfigurationError`` when either is not a non-empty string, and
        :class:`InvalidRequestError` when either is only whitespace or holds a NUL
        character or a lone surrogate, which no ledger can store alike (see
        :func:`~effectguard.fingerprint.operation_id_problem`).
        """
        operation_id = self.operation_id(arguments)
        if not isinstance(operation_id, str) or not operation_id:
            msg = (
                f"contract {self.name!r}: operation_id must be a non-empty str, "
                f"got {operation_id!r}"
            )
            raise ConfigurationError(msg)
        check_operation_id(operation_id, f"contract {self.name!r}: operation_id")
        key = None
        if self.provider_idempotency_key is not None:
            key = self.provider_idempotency_key(arguments)
            if not isinstance(key, str) or not key:
                msg = (
                    f"contract {self.name!r}: provider idempotency key must be a non-empty "
                    f"str, got {key!r}"
                )
                raise ConfigurationError(msg)
            check_operation_id(key, f"contract {self.name!r}: provider idempotency key")
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
