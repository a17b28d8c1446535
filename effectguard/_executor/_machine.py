"""The executor: an operation recorded before dispatch, its outcome settled, in one place.

Read top to bottom:

1. the waits between attempts (:class:`Pacing`, :class:`Pace`) and for a peer
   (:class:`PeerWait`);
2. the reconcile table (:func:`decide`), a pure function of the evidence;
3. the state machine (:class:`StateMachine`): the rules of DESIGN.md's
   executor, written once as a generator that yields the I/O it needs (a
   ledger call, the handler, the probe, a pause) and is sent its result;
4. performing those steps, sync or async (:class:`StepPerformer`);
5. :class:`EffectExecutor`, whose two drivers run the machine. The common
   call, a new operation claimed, dispatched and confirmed, and the replay of
   a settled one, run straight through without the generator: the same rules,
   the same writes, one ledger call each. Anything else (a peer's lease, an
   outcome in doubt, a retry) continues in the machine from where it stands.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import hashlib
import inspect
import logging
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import FunctionType
from typing import Any

from effectguard import _process
from effectguard._contract import EffectContract, UnknownOutcomePolicy, seconds_problem
from effectguard._executor import _calls
from effectguard._executor._calls import HandlerOutcome, Outcome
from effectguard._executor._leases import KEEPER, TOKENS, abandoned, live_overlap
from effectguard._executor._observe import SOURCES as OBSERVER_SOURCES
from effectguard._executor._observe import (
    Observer,
    Transition,
    listening,
    log_transition,
    notify,
    report_pause,
    watched,
)
from effectguard._executor._outputs import (
    DEFAULT_REPLAY_CACHE,
    ReplayCache,
    Stored,
    check_replayable,
    check_stored_output,
    decode,
    decode_text,
    jsonable,
    not_stored,
    store,
)
from effectguard._executor._redaction import scrub, scrub_write, secrets_of
from effectguard._fingerprint import (
    REDACTED,
    arguments_json,
    canonical_json,
    check_json_value,
    redact_arguments,
    request_fingerprint,
    request_text,
)
from effectguard._model import (
    EffectResult,
    EffectStatus,
    EventType,
    LeaseOwner,
    OperationRecord,
    OutcomeProbeResult,
    OverlapHolder,
    ProbeStatus,
    frozen_builder,
)
from effectguard.errors import (
    ConfigurationError,
    EffectNotSent,
    EffectRejected,
    FencedWriteError,
    InternalError,
    InvalidRequestError,
    OperationConflictError,
    OutputNotStored,
)
from effectguard.ledger._protocol import (
    UNSET,
    AsyncLedger,
    Changes,
    EffectLedger,
    EventDraft,
    Expect,
    Lease,
    NewOperation,
    ReplayView,
    async_ledger,
    claims_first,
    to_confirmed,
)
from effectguard.ledger._resolution import approval_expiry
from effectguard.ledger._rows import AWAITING

__all__ = [
    "DEFAULT_DEADLINE",
    "DEFAULT_RETRY_WAIT_INITIAL",
    "DEFAULT_RETRY_WAIT_MAX",
    "EffectExecutor",
    "Handler",
    "Jitter",
    "Ruling",
    "StateMachine",
    "Verdict",
    "decide",
    "differences",
    "full_jitter",
    "record_late",
    "seeded_jitter",
]

#: ``handler(arguments, *, idempotency_key=...)``; the executor calls it at most once per attempt.
Handler = Callable[..., Any]

# Built without their frozen __init__ (see frozen_builder): every call makes these.
_new_result = frozen_builder(EffectResult)
_new_operation = frozen_builder(NewOperation)
_new_lease = frozen_builder(Lease)
_new_expect = frozen_builder(Expect)
_new_event = frozen_builder(EventDraft)
_new_changes = frozen_builder(Changes)

_DISPATCHED = EffectStatus.DISPATCHED
_CONFIRMED = EffectStatus.CONFIRMED
_RECONCILING = EffectStatus.RECONCILING
_PREPARED = EffectStatus.PREPARED
_AWAITING_APPROVAL = EffectStatus.AWAITING_APPROVAL
_UNKNOWN = EffectStatus.OUTCOME_UNKNOWN
#: The event a claim appends (the ledger writes it; observers hear of it).
_CLAIMED = EventDraft(EventType.CLAIMED, None, _DISPATCHED, 1)
#: Statuses whose lease holder may have left an attempt in flight.
_HELD = frozenset({_DISPATCHED, _RECONCILING})
#: ``live=`` default of :meth:`StateMachine.result`: no output was produced by this call.
_NO_OUTPUT: Any = object()
#: The evidence of a handler that returned.
_RETURNED = "returned"


# -- waiting between attempts: exponential backoff with full jitter ----------------------

#: Seconds before the first automatic retry or re-probe, at most (full jitter).
DEFAULT_RETRY_WAIT_INITIAL = 0.1
#: The longest single wait, in seconds.
DEFAULT_RETRY_WAIT_MAX = 5.0
#: How long one call keeps waiting for a retry or a re-probe, in seconds: an agent's
#: tool call stays bounded even when a provider answers "still processing" forever.
DEFAULT_DEADLINE = 5.0

#: ``jitter(ceiling)`` returns the wait, in ``[0, ceiling]``.
Jitter = Callable[[float], float]

_random = random.Random()  # spreading retries needs no cryptographic randomness


def full_jitter(ceiling: float) -> float:
    """A uniformly random wait in ``[0, ceiling]`` (AWS's "full jitter")."""
    return _random.uniform(0.0, ceiling)


def seeded_jitter(seed: int | str) -> Jitter:
    """Full jitter drawn from its own generator seeded with ``seed``: the same waits every run."""
    rng = random.Random(seed)

    def jitter(ceiling: float) -> float:
        return rng.uniform(0.0, ceiling)

    return jitter


@dataclass(frozen=True, slots=True)
class Pacing:
    """The executor's defaults for the contracts that leave a value unset."""

    retry_wait_initial: float = DEFAULT_RETRY_WAIT_INITIAL
    retry_wait_max: float = DEFAULT_RETRY_WAIT_MAX
    deadline: float = DEFAULT_DEADLINE
    jitter: Jitter = full_jitter

    def start(
        self,
        contract: EffectContract,
        clock: Callable[[], float] | None,
        started: float,
        clock_started: float | None,
    ) -> Pace:
        """The waits of one call under ``contract`` that began at ``started`` (monotonic)."""
        initial = _pick(contract.retry_wait_initial, self.retry_wait_initial)
        return Pace(
            initial=initial,
            maximum=max(initial, _pick(contract.retry_wait_max, self.retry_wait_max)),
            deadline=_pick(contract.deadline, self.deadline),
            jitter=self.jitter,
            clock=clock,
            started=started,
            clock_started=clock_started,
        )


def _pick(value: float | None, default: float) -> float:
    return default if value is None else value


class Pace:
    """The waits of one call: how long the next one is, and whether it fits the deadline.

    Elapsed time is the larger of the injected clock's progress (which a
    :class:`~effectguard.testkit.ManualClock` makes when the executor advances
    it instead of sleeping) and real time, so a clock that never moves cannot
    keep a call waiting past its deadline.
    """

    def __init__(
        self,
        *,
        initial: float,
        maximum: float,
        deadline: float,
        jitter: Jitter,
        clock: Callable[[], float] | None,
        started: float | None = None,
        clock_started: float | None = None,
    ) -> None:
        self.initial, self.maximum, self.deadline = initial, maximum, deadline
        self._jitter = jitter
        self._clock = clock
        self._started = time.monotonic() if started is None else started
        self._clock_started = clock_started
        if clock is not None and clock_started is None:
            self._clock_started = clock()
        self.waits = 0

    def elapsed(self) -> float:
        """Seconds since the call began."""
        real = time.monotonic() - self._started
        if self._clock is None or self._clock_started is None:
            return real
        return max(real, self._clock() - self._clock_started)

    def next_wait(self) -> float | None:
        """The next wait in seconds, or None when it would end past the deadline.

        A wait that fits counts as taken: the following one is twice as long, at most.
        """
        ceiling = min(self.maximum, self.initial * 2.0 ** min(self.waits, 64))
        wait = min(max(self._jitter(ceiling), 0.0), ceiling)
        if self.elapsed() + wait > self.deadline:
            return None
        self.waits += 1
        return wait


#: Longest pause between two reads while waiting for a peer: the backoff stops growing here.
_MAX_PEER_POLL = 0.5


class PeerWait:
    """The pauses of one call waiting for a peer: doubling from ``first``, within ``seconds``.

    The wait ends when ``seconds`` have passed on the monotonic clock, or on the
    injected clock when there is one: a test moves its clock instead of sleeping,
    and a clock that never moves still cannot make a call wait forever.
    """

    def __init__(self, seconds: float, clock: Callable[[], float] | None, first: float) -> None:
        self.seconds = seconds
        self._clock = clock
        self._started = None if clock is None else clock()
        self._deadline = time.monotonic() + seconds
        self._pause = max(first, 0.001)

    def next_pause(self) -> float | None:
        """The next pause, or None when the wait is over."""
        remaining = self._deadline - time.monotonic()
        if self._clock is not None and self._started is not None:
            remaining = min(remaining, self.seconds - (self._clock() - self._started))
        if remaining <= 0:
            return None
        pause = min(self._pause, remaining)
        self._pause = min(self._pause * 2, max(_MAX_PEER_POLL, self._pause))
        return pause


# -- the reconcile table -------------------------------------------------------------


class Verdict(enum.Enum):
    """The four ways out of RECONCILING."""

    CONFIRM = "confirm"
    RETRY = "retry"
    KEEP_UNKNOWN = "keep_unknown"
    QUARANTINE = "quarantine"


@dataclass(frozen=True, slots=True)
class Ruling:
    """A verdict and the reason a person reads in the ledger.

    ``nothing_committed`` is True when the evidence proves the operation holds
    no effect (an authoritative NOT_COMMITTED with no overlap risk): only then
    does a later attempt that is not sent prove the operation was never sent.
    """

    verdict: Verdict
    reason: str
    nothing_committed: bool = False


def _policy(policy: UnknownOutcomePolicy, reason: str) -> Ruling:
    if policy is UnknownOutcomePolicy.KEEP_UNKNOWN:
        return Ruling(Verdict.KEEP_UNKNOWN, reason)
    return Ruling(Verdict.QUARANTINE, reason)


def decide(
    probe: OutcomeProbeResult | None,
    *,
    confirmable: bool,
    guaranteed: bool,
    overlap_risk: bool,
    attempts_left: bool,
    policy: UnknownOutcomePolicy,
) -> Ruling:
    """Return what to do with an operation whose outcome is uncertain.

    ``probe`` is None when the contract has no probe. ``confirmable`` says a
    COMMITTED probe's output is storable and passes the postcondition.
    ``guaranteed`` says a resend with the same key is covered by the provider's
    idempotency right now (declared, and within the key's retention).
    ``overlap_risk`` says an earlier handler may still be sending.
    """
    if probe is not None and probe.status is ProbeStatus.COMMITTED:
        if confirmable:
            return Ruling(Verdict.CONFIRM, "the probe found the effect committed")
        return _policy(
            policy,
            "the probe reports the effect committed, but its output fails the postcondition "
            "or cannot be stored",
        )
    if probe is not None and probe.status is ProbeStatus.PENDING:
        return Ruling(Verdict.KEEP_UNKNOWN, "the provider reports the request still pending")
    if probe is not None and probe.status is ProbeStatus.NOT_COMMITTED:
        if overlap_risk and not guaranteed:
            return Ruling(
                Verdict.KEEP_UNKNOWN,
                "the probe found no effect, but an earlier handler may still be sending "
                "(overlap risk) and the provider does not guarantee idempotency",
            )
        basis = "the probe found no effect (authoritative)"
        if not attempts_left:
            return Ruling(Verdict.QUARANTINE, f"{basis}, but no attempts are left")
        return Ruling(Verdict.RETRY, basis, nothing_committed=not overlap_risk)
    if guaranteed:
        basis = "the outcome is unknown; the provider's idempotency guarantee covers a resend"
    else:
        evidence = "no probe" if probe is None else "the probe could not tell"
        return _policy(
            policy,
            f"the outcome is unknown ({evidence}) and the provider does not guarantee "
            "idempotency, so a resend could duplicate the effect",
        )
    if not attempts_left:
        return Ruling(Verdict.QUARANTINE, f"{basis}, but no attempts are left")
    return Ruling(Verdict.RETRY, basis)


# -- a conflicting request: what differs, never a redacted value -----------------------

#: Longest rendering of one value in a conflict message; longer ones are cut.
_SHOWN = 60


def _show(value: Any) -> str:
    try:
        text = canonical_json(value)
    except TypeError:
        text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def differences(
    record: OperationRecord,
    *,
    contract: str,
    version: int,
    arguments: Mapping[str, Any],
    provider_key: str | None,
    redact: frozenset[str],
) -> list[str]:
    """Return one line per difference between ``record``'s request and this call's.

    Values are shown only for arguments that are stored unredacted. A redacted
    argument is said to differ only when the fingerprints prove it: the stored
    fingerprint is recomputed from the stored visible values and this call's
    redacted ones, and it no longer matches. Nothing of a redacted value is shown.
    """
    lines: list[str] = []
    if record.contract != contract:
        lines.append(f"contract: stored {record.contract!r}, this call {contract!r}")
    if record.contract_version != version:
        lines.append(f"contract version: stored {record.contract_version}, this call {version}")
    if record.provider_key != provider_key:
        lines.append(f"provider key: stored {record.provider_key!r}, this call {provider_key!r}")
    stored = record.arguments
    for name in sorted(set(stored) | set(arguments)):
        if name in redact or stored.get(name) == REDACTED:
            continue
        if name not in stored:
            lines.append(f"{name}: not stored, this call {_show(arguments[name])}")
        elif name not in arguments:
            lines.append(f"{name}: stored {_show(stored[name])}, not in this call")
        elif canonical_json(stored[name]) != canonical_json(arguments[name]):
            shown = f"stored {_show(stored[name])}, this call {_show(arguments[name])}"
            lines.append(f"{name}: {shown}")
    hidden = sorted(name for name in arguments if name in redact)
    if hidden and set(stored) == set(arguments):
        # The stored visible values plus this call's secrets: if that is not the stored
        # fingerprint, a secret must differ (the visible parts are the stored ones).
        mixed = {name: (arguments[name] if name in redact else stored[name]) for name in arguments}
        again = request_fingerprint(
            record.contract, record.contract_version, mixed, record.provider_key, redact
        )
        if again != record.fingerprint:
            lines.append(f"redacted {', '.join(hidden)}: differs (values not shown)")
    return lines


# -- what the machine asks its drivers to do, and the call it works on -------------------


class Call:
    """One call of an effect: its contract, arguments, handler and identity.

    ``secrets`` are the redacted argument values, masked in any text user code
    produced before it is stored or observed; ``observers`` hear of every
    transition and of the result. ``stored`` are the arguments as the ledger
    keeps them (redacted values replaced) and ``stored_json`` their canonical
    JSON; ``fingerprinted`` says that text is what the fingerprint hashed.
    """

    __slots__ = (
        "_approval",
        "_pace",
        "_pacing",
        "arguments",
        "clock",
        "clock_started",
        "contract",
        "fingerprint",
        "fingerprinted",
        "handler",
        "observers",
        "on_loop",
        "operation_id",
        "provider_key",
        "secrets",
        "started",
        "stored",
        "stored_json",
        "wait_seconds",
    )

    def __init__(
        self,
        contract: EffectContract,
        arguments: dict[str, Any],
        handler: Callable[..., Any],
        operation_id: str,
        provider_key: str | None,
        fingerprint: str,
        wait_seconds: float,
        pacing: Pacing,
        clock: Callable[[], float] | None,
        secrets: tuple[str, ...],
        observers: tuple[Observer, ...],
        stored: Mapping[str, Any],
        stored_json: str,
        *,
        fingerprinted: bool,
        on_loop: bool,
    ) -> None:
        self.contract = contract
        self.arguments = arguments
        self.handler = handler
        self.operation_id = operation_id
        self.provider_key = provider_key
        self.fingerprint = fingerprint
        #: How long to wait for a peer holding a live lease (``wait_for_peer``), in seconds.
        self.wait_seconds = wait_seconds
        self._pacing = pacing
        self._pace: Pace | None = None
        self._approval: bool | None = None
        self.clock = clock
        self.started = time.monotonic()
        self.clock_started = None if clock is None else clock()
        self.secrets = secrets
        self.observers = observers
        self.stored = stored
        self.stored_json = stored_json
        self.fingerprinted = fingerprinted
        #: Driven from an event loop (``execute_async``): its steps may be awaited there.
        self.on_loop = on_loop

    def needs_approval(self) -> bool:
        """Whether this new request must wait for a person's approval, asked of the contract once.

        A predicate answers once per call, so one that is slow or not pure
        cannot route a call one way and decide it another.
        """
        if self._approval is None:
            contract = self.contract
            self._approval = contract.requires_approval is not False and contract.needs_approval(
                self.arguments
            )
        return self._approval

    @property
    def pace(self) -> Pace:
        """The call's waits between attempts and re-probes, timed from the call's start."""
        if self._pace is None:
            self._pace = self._pacing.start(
                self.contract, self.clock, self.started, self.clock_started
            )
        return self._pace


@dataclass(frozen=True, slots=True)
class LedgerStep:
    """Run ``run`` (a ledger call) and send back its result.

    ``run_async``, when set, is the same call for a driver on an event loop:
    awaited there instead of running ``run`` in a worker thread.
    """

    run: Callable[[], Any]
    run_async: Callable[[], Awaitable[Any]] | None = None


@dataclass(frozen=True, slots=True)
class HandlerStep:
    """Call the handler for ``attempt`` under lease ``token``; send back a HandlerOutcome."""

    token: str
    attempt: int


@dataclass(frozen=True, slots=True)
class ProbeStep:
    """Call the contract's probe; send back an OutcomeProbeResult."""


@dataclass(frozen=True, slots=True)
class PauseStep:
    """Wait ``seconds`` before the next step.

    A ``backoff`` wait (between attempts or probes) advances an injected
    manual clock instead of sleeping; a poll for another worker always sleeps,
    since that worker needs real time to progress.
    """

    seconds: float
    backoff: bool = False


#: One piece of I/O the machine needs performed.
Step = LedgerStep | HandlerStep | ProbeStep | PauseStep
#: A run of the machine: yields steps, returns the result its caller receives.
Machine = Generator[Step, Any, EffectResult[Any]]


# -- the state machine ------------------------------------------------------------------


#: This process's lease owner by pid, so a claim finds it without a call out of this module.
_OWNERS: dict[int, LeaseOwner] = {}


def _token() -> str:
    """A new lease token: random, and unique among the leases of every process."""
    # secrets.token_hex(8), which is os.urandom(8).hex() three calls down.
    return os.urandom(8).hex()


class StateMachine:
    """The rules of DESIGN.md's executor, over one ledger and one clock."""

    def __init__(
        self,
        ledger: EffectLedger,
        clock: Callable[[], float] | None,
        poll_interval: float,
        replays: ReplayCache | None = None,
    ) -> None:
        self.ledger = ledger
        #: The async forms of the read, claim and transition, when the ledger has its own.
        self.async_ledger: AsyncLedger | None = async_ledger(ledger)
        self._clock = clock
        self.poll_interval = poll_interval
        self.replays = ReplayCache(0) if replays is None else replays
        self.claims_first = claims_first(ledger)
        checked = getattr(ledger, "get_checked", None)
        #: The ledger's read of a row with its last event's commitments, when it has one.
        self.get_checked: Callable[..., tuple[OperationRecord | None, str | None]] | None = (
            checked if callable(checked) and type(ledger).get is _own_get(ledger) else None
        )
        view = getattr(ledger, "replay_view", None)
        #: The ledger's read of what a replay returns, when it has one (and its own get).
        self.replay_view: Callable[[str], ReplayView | None] | None = (
            view
            if self.get_checked is not None
            and callable(view)
            and _definer(ledger, "replay_view") is _definer(ledger, "get_checked")
            else None
        )
        view_async = getattr(ledger, "replay_view_async", None)
        #: Its form for an event loop, defined beside it.
        self.replay_view_async: Callable[[str], Awaitable[ReplayView | None]] | None = (
            view_async
            if self.replay_view is not None
            and callable(view_async)
            and _definer(ledger, "replay_view_async") is _definer(ledger, "replay_view")
            else None
        )

    def now(self) -> float | None:
        """The injected clock's time, or None for the ledger's own clock."""
        return None if self._clock is None else self._clock()

    def wall(self) -> float:
        """The injected clock's time, or the system's."""
        return time.time() if self._clock is None else self._clock()

    # -- what every write and result is built of ---------------------------------------

    def new_operation(self, call: Call, token: str) -> NewOperation:
        """The operation a claim inserts, under a lease of ``token``."""
        contract = call.contract
        return _new_operation(
            call.operation_id,
            contract.name,
            contract.version,
            call.fingerprint,
            call.provider_key,
            call.stored,
            contract.max_attempts,
            self.lease(call, token),
            call.stored_json,
            call.fingerprinted,
            False,  # noqa: FBT003 - NewOperation's positional fields, in order
        )

    def lease(self, call: Call, token: str) -> Lease:
        """A lease for ``token``, owned by this process, for the contract's lease length."""
        pid = os.getpid()
        owner = _OWNERS.get(pid)
        if owner is None:  # this process's first lease (a child after fork(): its own)
            owner = _OWNERS[pid] = _process.current_owner()
        return _new_lease(token, owner, call.contract.lease_seconds)

    def notify(self, call: Call, events: Sequence[EventDraft], record: OperationRecord) -> None:
        """Tell the call's observers of ``events``, which ``record`` now holds durably."""
        contract = call.contract
        for event in events:
            observers = listening(call.observers, event.from_status, event.to_status)
            if not observers:
                continue
            transition = Transition(
                operation_id=call.operation_id,
                contract=contract.name,
                contract_version=contract.version,
                from_status=event.from_status,
                to_status=event.to_status,
                event=event.type,
                attempt=event.attempt,
                evidence=event.evidence,
                reason=record.reason,
            )
            notify(observers, transition)

    def guaranteed(self, contract: EffectContract, record: OperationRecord) -> bool:
        """Whether a resend is covered by the provider's key: declared, and within its retention."""
        if not contract.provider_idempotency_guaranteed:
            return False
        retention = contract.provider_key_retention_seconds
        if retention is None:
            return True
        return self.wall() - record.first_dispatched_at.timestamp() < retention

    def result(
        self,
        call: Call,
        record: OperationRecord,
        *,
        replayed: bool,
        reason: str | None = None,
        live: Any = _NO_OUTPUT,
        commits: str | None = None,
    ) -> EffectResult[Any]:
        """The caller's view of ``record``; the output is decoded only when it is CONFIRMED.

        A replayed output is first checked against its confirmation's
        commitment (``commits``: the last event's, when the read brought
        them). A CONFIRMED operation whose output was not stored raises
        :class:`OutputNotStored` instead, with ``live`` (the output just
        produced) when there is one.
        """
        output = None
        if record.status is _CONFIRMED:
            mark = not_stored(record)
            if mark is not None:
                _raise_not_stored(record, mark, replayed=replayed, reason=reason, live=live)
            if replayed:
                check_replayable(self.ledger, record, commits)
            output = decode(call.contract, record)
        return _new_result(
            record.status,
            record.operation_id,
            output,
            record.provider_operation_id,
            record.attempts,
            replayed,
            record.evidence,
            reason or record.reason,
            None,
        )

    def write(
        self,
        call: Call,
        expect: Expect,
        changes: Changes,
        *events: EventDraft,
        known: OperationRecord | None = None,
    ) -> LedgerStep:
        """A step that applies ``changes`` and ``events`` only if ``expect`` still holds.

        The call's observers hear of the events once they are durable.
        """
        changes, events = scrub_write(call.secrets, changes, events)

        def run() -> OperationRecord:
            record = self.ledger.transition(
                call.operation_id, expect, changes, events, now=self.now(), known=known
            )
            self.notify(call, events, record)
            return record

        writes = self.async_ledger if call.on_loop else None
        if writes is None:
            return LedgerStep(run)

        async def run_async() -> OperationRecord:
            record = await writes.transition_async(
                call.operation_id, expect, changes, events, now=self.now(), known=known
            )
            self.notify(call, events, record)
            return record

        return LedgerStep(run, run_async)

    def read(self, call: Call) -> LedgerStep:
        """A step that reads the operation's record (None when there is none)."""
        ledger, forms = self.ledger, self.async_ledger if call.on_loop else None
        return LedgerStep(
            lambda: ledger.get(call.operation_id, now=self.now()),
            None if forms is None else lambda: forms.get_async(call.operation_id, now=self.now()),
        )

    def backoff(self, seconds: float) -> PauseStep:
        """A wait between attempts or probes (see :class:`PauseStep`)."""
        return PauseStep(seconds, backoff=True)

    def claimed(self, call: Call, token: str, record: OperationRecord, created: bool) -> None:
        """After a claim: tell the observers of a new one, or give the unused token back."""
        if created:
            self.notify(call, (_CLAIMED,), record)
        else:
            TOKENS.release(token)

    # -- the machine ---------------------------------------------------------------------

    def run(self, call: Call) -> Machine:
        """Drive ``call`` from its first read to the result its caller receives.

        The call's observers hear of that result, fresh or replayed, also when
        it reaches the caller as :class:`OutputNotStored` (the effect happened);
        their call watchers watch it from before the first read to after the result.
        """
        contract = call.contract
        with watched(call.observers, contract, call.operation_id, call.arguments):
            return (yield from self.reported(call, self.drive(call, None, first=True)))

    def reported(self, call: Call, machine: Machine) -> Machine:
        """``machine``, its result (or :class:`OutputNotStored`) told to the call's observers."""
        try:
            result = yield from machine
        except OutputNotStored as exc:
            report(call, exc.result)
            raise
        report(call, result)
        return result

    def drive(self, call: Call, record: OperationRecord | None, *, first: bool = False) -> Machine:
        """The rules from a read that found ``record`` (``first``: read it now)."""
        waiting = PeerWait(call.wait_seconds, self._clock, self.poll_interval)
        # Replaying a terminal operation is a plain read: no write lock is taken. A ledger
        # that claims first reads by claiming; its claim writes nothing when the row exists.
        if first and not self.claims_first:
            record = yield self.read(call)
        while True:
            if record is None:
                claimed = yield from self._claim_and_work(call)
                if isinstance(claimed, EffectResult):
                    return claimed
                record = claimed
                continue
            if record.fingerprint != call.fingerprint:
                raise conflict(call, record)
            if record.status is _AWAITING_APPROVAL:
                return self.result(call, record, replayed=True)
            if record.status is _PREPARED and record.attempts == 0:
                expired = yield from self._approval_expired(call, record)
                if expired is not None:
                    return expired
            if record.status.terminal or record.status is EffectStatus.QUARANTINED:
                replayed = self.result(call, record, replayed=True)
                # Only once its output has passed the check; a QUARANTINED one is not kept.
                self.replays.remember(record)
                return replayed
            if record.lease_live and not abandoned(record.lease_token, record.lease_owner):
                pause = waiting.next_pause()
                if pause is not None:
                    yield PauseStep(pause)
                    record = yield self.read(call)
                    continue
                expires = record.lease_expires_at
                waited = f"; waited {call.wait_seconds:g}s for it" if call.wait_seconds else ""
                return self.result(
                    call,
                    record,
                    replayed=True,
                    reason=f"another worker holds it (lease until {expires:%H:%M:%S} UTC){waited}",
                )
            result = yield from self._take_over_and_work(call, record)
            if result is not None:
                return result
            record = yield self.read(call)

    def _claim_and_work(
        self, call: Call
    ) -> Generator[Step, Any, EffectResult[Any] | OperationRecord]:
        """Claim an operation no record was found for and work it; the record found if one won."""
        if call.contract.requires_approval is not False and call.needs_approval():
            return (yield from self._request_approval(call))
        token = _token()
        TOKENS.hold(token)
        record: OperationRecord
        created: bool
        try:
            record, created = yield self.claim_step(call, token)
        except BaseException:
            TOKENS.release(token)
            raise
        self.claimed(call, token, record, created)
        if created:
            result: EffectResult[Any] = yield from self.work(call, record, token, dispatch=True)
            return result
        return record

    def _request_approval(
        self, call: Call
    ) -> Generator[Step, Any, EffectResult[Any] | OperationRecord]:
        """Record a request that needs a person's approval, unsent; the record found if one won."""
        operation = dataclasses.replace(self.new_operation(call, _token()), awaiting_approval=True)
        ledger, writes = self.ledger, self.async_ledger if call.on_loop else None
        record: OperationRecord
        created: bool
        record, created = yield LedgerStep(
            lambda: ledger.claim(operation, now=self.now()),
            None if writes is None else lambda: writes.claim_async(operation, now=self.now()),
        )
        if not created:
            return record
        self.notify(call, (AWAITING,), record)
        return self.result(call, record, replayed=False)

    def _approval_expired(
        self, call: Call, record: OperationRecord
    ) -> Generator[Step, Any, EffectResult[Any] | None]:
        """Void an approved request's approval that ran out before any call sent it.

        None when the approval still holds (or another writer moved the row:
        the caller's loop reads it again); else the request waits for a new
        approval, AWAITING_APPROVAL, and nothing is sent.
        """
        expires = approval_expiry(record)
        if expires is None or self.wall() < expires.timestamp():
            return None
        evidence = {"expired_at": expires.isoformat(), "approved_by": record.evidence.get("actor")}
        expect = Expect(
            statuses=frozenset({_PREPARED}), lease_expired=True, event_count=record.event_count
        )
        changes = Changes(
            _AWAITING_APPROVAL,
            lease=None,
            reason=f"the approval ran out at {expires:%Y-%m-%d %H:%M:%S} UTC before any call "
            "sent the request; it waits for a new approval and nothing was sent",
            evidence=evidence,
        )
        event = EventDraft(
            EventType.APPROVAL_EXPIRED, _PREPARED, _AWAITING_APPROVAL, record.attempts, evidence
        )
        try:
            voided: OperationRecord = yield self.write(call, expect, changes, event)
        except FencedWriteError:
            return None
        return self.result(call, voided, replayed=True)

    def claim_step(self, call: Call, token: str) -> LedgerStep:
        """The step that claims the operation under ``token``: ``(record, created)`` back."""
        operation = self.new_operation(call, token)
        ledger, writes = self.ledger, self.async_ledger if call.on_loop else None
        return LedgerStep(
            lambda: ledger.claim(operation, now=self.now()),
            None if writes is None else lambda: writes.claim_async(operation, now=self.now()),
        )

    def _take_over_and_work(
        self, call: Call, record: OperationRecord
    ) -> Generator[Step, Any, EffectResult[Any] | None]:
        """Take over a record nobody is working on and work it; None if another writer won."""
        token = _token()
        TOKENS.hold(token)
        try:
            taken = yield from self.take_over(call, record, token)
        except BaseException:
            TOKENS.release(token)
            raise
        if taken is None:
            TOKENS.release(token)
            return None
        dispatch = taken.status is _DISPATCHED
        return (yield from self.work(call, taken, token, dispatch=dispatch))

    def take_over(
        self, call: Call, record: OperationRecord, token: str
    ) -> Generator[Step, Any, OperationRecord | None]:
        """Take the lease of a record nobody is working on; None if another writer won."""
        status = record.status
        if status is _PREPARED:
            step = self._from_prepared(call, record, token)
        elif status in _HELD:
            step = self._from_held(call, record, token)
        else:
            expect = Expect(
                statuses=frozenset({status}), lease_expired=True, event_count=record.event_count
            )
            changes = Changes(_RECONCILING, lease=self.lease(call, token))
            event = EventDraft(EventType.RECONCILING, status, _RECONCILING, record.attempts)
            step = self.write(call, expect, changes, event)
        try:
            taken: OperationRecord = yield step
        except FencedWriteError:
            return None
        return taken

    def _from_prepared(self, call: Call, record: OperationRecord, token: str) -> LedgerStep:
        """Dispatch a PREPARED row again: it provably sent nothing, so nothing needs reconciling."""
        status = record.status
        # A PREPARED row keeps its lease while its holder waits to retry; if that
        # holder is provably gone, its token fences the takeover instead of expiry.
        gone = record.lease_live and abandoned(record.lease_token, record.lease_owner)
        expect = Expect(
            statuses=frozenset({status}),
            lease_token=record.lease_token if gone else UNSET,
            lease_expired=not gone,
            event_count=record.event_count,
        )
        attempt = record.attempts + 1
        changes = Changes(_DISPATCHED, lease=self.lease(call, token), attempts=attempt)
        event = EventDraft(EventType.DISPATCHED, status, _DISPATCHED, attempt)
        return self.write(call, expect, changes, event)

    def _from_held(self, call: Call, record: OperationRecord, token: str) -> LedgerStep:
        """Reconcile a DISPATCHED or RECONCILING row whose holder is gone or whose lease expired."""
        status = record.status
        gone = abandoned(record.lease_token, record.lease_owner)
        overlap = list(live_overlap(record))
        if status is _DISPATCHED and not gone and record.lease_owner:
            if record.lease_token is None:
                msg = f"{call.operation_id!r} has a lease owner but no lease token"
                raise InternalError(msg)
            overlap.append(OverlapHolder(record.lease_token, record.attempts, record.lease_owner))
        reason = "the previous holder is gone" if gone else "the previous holder's lease expired"
        evidence = {
            "previous_owner": record.lease_owner.to_json() if record.lease_owner else None,
            "owner_gone": gone,
            "overlap_risk": bool(overlap),
            "reason": reason,
        }
        expect = Expect(
            statuses=frozenset({status}),
            lease_token=record.lease_token,
            lease_expired=not gone,
            event_count=record.event_count,
        )
        changes = Changes(
            _RECONCILING,
            lease=self.lease(call, token),
            overlap=tuple(overlap),
            reason=f"outcome unknown: {reason}",
            evidence=evidence,
        )
        # The event names what was proven: the holder's process is gone, or only its lease ran out.
        kind = EventType.OWNER_GONE if gone else EventType.LEASE_EXPIRED
        return self.write(
            call,
            expect,
            changes,
            EventDraft(kind, status, _UNKNOWN, record.attempts, evidence),
            EventDraft(EventType.RECONCILING, _UNKNOWN, _RECONCILING, record.attempts),
        )

    def work(self, call: Call, record: OperationRecord, token: str, *, dispatch: bool) -> Machine:
        """Work the operation while holding its lease: dispatch, settle, reconcile, retry."""
        renewal = KEEPER.start(
            self.ledger, call.operation_id, token, call.contract.lease_seconds, self.now
        )
        try:
            return (yield from self.working(call, record, token, dispatch=dispatch))
        finally:
            KEEPER.stop(renewal)
            TOKENS.release(token)

    def working(
        self,
        call: Call,
        record: OperationRecord,
        token: str,
        *,
        dispatch: bool,
        outcome: HandlerOutcome | None = None,
    ) -> Machine:
        """:meth:`work` without the lease's keeping: its caller keeps it and gives it back.

        ``outcome`` is the first attempt's, when its handler already ran. The
        result carries the exception the last handler call raised, if it
        raised, so that the caller's error can chain it. ``unsent`` tracks
        whether the operation provably holds no effect before the next
        dispatch: true for a fresh claim or a PREPARED row, and after an
        authoritative NOT_COMMITTED with no overlap risk. Only then does an
        attempt that was not sent prove the operation was never sent.
        """
        raised: BaseException | None = None
        unsent = True
        while True:
            if dispatch:
                if outcome is None:
                    outcome = yield HandlerStep(token, record.attempts)
                raised = outcome.error if outcome.kind is Outcome.RAISED else None
                settled = yield from self.settle(call, record, token, outcome, unsent=unsent)
                outcome = None
                if isinstance(settled, EffectResult):
                    return _carrying(settled, raised)
                record = settled
                if record.status is _DISPATCHED:
                    continue  # not sent, and sent again after a wait
            reconciled = yield from self.reconcile(call, record, token)
            if isinstance(reconciled, EffectResult):
                return _carrying(reconciled, raised)
            (record, unsent), dispatch = reconciled, True

    # -- settling a handler's outcome ----------------------------------------------------

    def settle(
        self,
        call: Call,
        record: OperationRecord,
        token: str,
        outcome: HandlerOutcome,
        *,
        unsent: bool,
    ) -> Generator[Step, Any, OperationRecord | EffectResult[Any]]:
        """Record a handler's outcome; a record back means reconcile it (RECONCILING, our lease).

        A DISPATCHED record back means the attempt was not sent and is to be
        sent again now. Every write is fenced by the lease token: a worker that
        lost the lease records its outcome as evidence only.
        """
        attempt = record.attempts
        try:
            if outcome.kind is Outcome.RETURNED:
                stored = store(call.contract, outcome.value)
                if isinstance(stored, Stored):
                    expect, changes, event = confirmation(attempt, token, outcome, stored)
                    confirmed = yield self.write(call, expect, changes, event, known=record)
                    return self.result(call, confirmed, replayed=False, live=outcome.value)
                reason = scrub(stored, call.secrets)
            elif outcome.kind is Outcome.REJECTED:
                return (yield from self._reject(call, record, token, outcome))
            elif outcome.kind is Outcome.NOT_SENT:
                return (yield from self.not_sent(call, record, token, outcome, unsent=unsent))
            elif outcome.kind is Outcome.TIMED_OUT:
                reason = f"the handler passed its {call.contract.handler_timeout:g}s deadline"
                if outcome.still_running:
                    reason += " and may still be sending"
            else:
                reason = scrub(_unknown_because(outcome), call.secrets)
            return (yield from self._unknown(call, record, token, outcome, reason))
        except FencedWriteError:
            return (yield from self.settle_fenced(call, record, token, outcome))

    def settle_fenced(
        self, call: Call, record: OperationRecord, token: str, outcome: HandlerOutcome
    ) -> Machine:
        """Another worker took the operation over: what this handler did is evidence only.

        A handler still running records its outcome itself when it ends;
        recording "timed out" now would clear the overlap risk it still carries.
        """
        attempt = record.attempts
        if not outcome.still_running:
            yield LedgerStep(lambda: self.record_late(call, token, attempt, outcome))
        if outcome.kind is Outcome.INTERRUPTED and outcome.error is not None:
            raise outcome.error from None
        current = yield LedgerStep(lambda: self.ledger.get(call.operation_id, now=self.now()))
        return self.result(call, current, replayed=False)

    def _reject(
        self, call: Call, record: OperationRecord, token: str, outcome: HandlerOutcome
    ) -> Generator[Step, Any, EffectResult[Any]]:
        """The handler raised :class:`EffectRejected`: REJECTED, with the provider's evidence."""
        error = outcome.error
        if not isinstance(error, EffectRejected):
            msg = f"a rejection of {call.operation_id!r} without its EffectRejected"
            raise InternalError(msg)
        rejection = scrub(jsonable(error.evidence), call.secrets)
        changes = Changes(
            EffectStatus.REJECTED,
            lease=None,
            reason=scrub(str(error.reason), call.secrets),
            evidence=rejection,
        )
        event = EventDraft(
            EventType.REJECTED, _DISPATCHED, EffectStatus.REJECTED, record.attempts, rejection
        )
        rejected = yield self.write(call, Expect(lease_token=token), changes, event, known=record)
        return self.result(call, rejected, replayed=False)

    def _unknown(
        self,
        call: Call,
        record: OperationRecord,
        token: str,
        outcome: HandlerOutcome,
        reason: str,
    ) -> Generator[Step, Any, OperationRecord]:
        """The outcome is unknown: RECONCILING under our lease, OUTCOME_UNKNOWN if interrupted."""
        attempt = record.attempts
        fence = Expect(lease_token=token)
        overlap = list(live_overlap(record))
        if outcome.still_running:
            overlap.append(OverlapHolder(token, attempt, _process.current_owner()))
        evidence: dict[str, Any] = {
            "handler": scrub(outcome.describe(), call.secrets),
            "reason": reason,
            "overlap_risk": bool(overlap),
        }
        if outcome.kind is Outcome.RAISED and outcome.error is not None:
            evidence["error"] = _error_evidence(outcome.error, call.secrets)
        if outcome.kind is Outcome.INTERRUPTED:
            changes = Changes(
                _UNKNOWN, lease=None, overlap=tuple(overlap), reason=reason, evidence=evidence
            )
            event = EventDraft(EventType.OUTCOME_UNKNOWN, _DISPATCHED, _UNKNOWN, attempt, evidence)
            yield self.write(call, fence, changes, event, known=record)
            if outcome.error is None:
                msg = f"an interruption of {call.operation_id!r} without its exception"
                raise InternalError(msg)
            raise outcome.error
        changes = Changes(
            _RECONCILING,
            lease=self.lease(call, token),
            overlap=tuple(overlap),
            reason=f"outcome unknown: {reason}",
            evidence=evidence,
        )
        # Unknown and reconciling share one commit; the probe runs under the same lease.
        reconciling: OperationRecord = yield self.write(
            call,
            fence,
            changes,
            EventDraft(EventType.OUTCOME_UNKNOWN, _DISPATCHED, _UNKNOWN, attempt, evidence),
            EventDraft(EventType.RECONCILING, _UNKNOWN, _RECONCILING, attempt),
            known=record,
        )
        return reconciling

    # -- attempts that were never sent ---------------------------------------------------
    # A handler that raises EffectNotSent (or an exception its contract names in
    # not_sent_on) proves that *this* attempt's request never left. With nothing committed
    # before (a fresh claim, a PREPARED row, an authoritative NOT_COMMITTED with no overlap
    # risk) the operation goes back to PREPARED and is sent again after a backoff while the
    # call has attempts and time left, else it stays PREPARED for the next call (with a
    # fresh attempt budget once this one is spent). When an earlier attempt's outcome is
    # still unknown, this attempt proves nothing about that one: the operation returns to
    # reconciling it. It is never quarantined on account of an attempt that sent nothing.

    def not_sent(
        self,
        call: Call,
        record: OperationRecord,
        token: str,
        outcome: HandlerOutcome,
        *,
        unsent: bool,
    ) -> Generator[Step, Any, OperationRecord | EffectResult[Any]]:
        """Record an attempt that was not sent; a record back is DISPATCHED or RECONCILING.

        DISPATCHED means send now.

        ``unsent`` says the operation provably held no effect before this attempt.
        """
        attempt = record.attempts
        error = outcome.error
        detail = error.reason if isinstance(error, EffectNotSent) else outcome.describe()
        evidence: dict[str, Any] = {"handler": outcome.describe(), "not_sent": True}
        if isinstance(error, EffectNotSent) and error.evidence:
            evidence["evidence"] = jsonable(error.evidence)
        fence = Expect(lease_token=token)
        attempts_left = attempt < record.attempt_budget
        if not unsent:
            return (yield from self._earlier_unknown(call, record, token, detail, evidence))
        wait = call.pace.next_wait() if attempts_left else None
        if wait is None:
            budget = record.attempt_budget
            if attempts_left:
                why = (
                    f"the next attempt would start past the call's {call.pace.deadline:g}s deadline"
                )
            else:
                budget = attempt + call.contract.max_attempts
                evidence["attempt_budget"] = budget
                why = f"no attempts were left in this call; the next call has {budget - attempt}"
            changes = Changes(
                _PREPARED,
                lease=None,
                attempt_budget=budget,
                reason=f"not sent: {detail}; {why}. Call again with the same id to send it",
                evidence=evidence,
            )
            event = EventDraft(EventType.NOT_SENT, _DISPATCHED, _PREPARED, attempt, evidence)
            prepared: OperationRecord = yield self.write(call, fence, changes, event, known=record)
            return self.result(call, prepared, replayed=False)
        # PREPARED while waiting, under our lease: if this process dies now, the next
        # call finds a row that provably sent nothing and sends it, without reconciling.
        changes = Changes(
            _PREPARED,
            lease=self.lease(call, token),
            reason=f"not sent: {detail}; sending again after {wait:.3f}s",
            evidence=evidence,
        )
        event = EventDraft(EventType.NOT_SENT, _DISPATCHED, _PREPARED, attempt, evidence)
        waiting: OperationRecord = yield self.write(call, fence, changes, event, known=record)
        yield self.backoff(wait)
        changes = Changes(
            _DISPATCHED, lease=self.lease(call, token), attempts=attempt + 1, reason=None
        )
        event = EventDraft(EventType.DISPATCHED, _PREPARED, _DISPATCHED, attempt + 1)
        dispatched: OperationRecord = yield self.write(call, fence, changes, event, known=waiting)
        return dispatched

    def _earlier_unknown(
        self,
        call: Call,
        record: OperationRecord,
        token: str,
        detail: str,
        evidence: dict[str, Any],
    ) -> Generator[Step, Any, OperationRecord | EffectResult[Any]]:
        """This attempt sent nothing, but an earlier one may have: back to that uncertainty."""
        attempt = record.attempts
        fence = Expect(lease_token=token)
        reason = (
            f"outcome unknown: attempt {attempt} was not sent ({detail}), "
            "but an earlier attempt's outcome is still unknown"
        )
        if attempt < record.attempt_budget:
            changes = Changes(
                _RECONCILING, lease=self.lease(call, token), reason=reason, evidence=evidence
            )
            reconciling: OperationRecord = yield self.write(
                call,
                fence,
                changes,
                EventDraft(EventType.NOT_SENT, _DISPATCHED, _UNKNOWN, attempt, evidence),
                EventDraft(EventType.RECONCILING, _UNKNOWN, _RECONCILING, attempt),
                known=record,
            )
            return reconciling
        budget = attempt + call.contract.max_attempts
        evidence["attempt_budget"] = budget
        changes = Changes(
            _UNKNOWN,
            lease=None,
            attempt_budget=budget,
            reason=f"{reason}; the next call reconciles it, with {budget - attempt} more attempts",
            evidence=evidence,
        )
        event = EventDraft(EventType.NOT_SENT, _DISPATCHED, _UNKNOWN, attempt, evidence)
        unknown: OperationRecord = yield self.write(call, fence, changes, event, known=record)
        return self.result(call, unknown, replayed=False)

    # -- reconciling an uncertain outcome ------------------------------------------------

    def probe(self, call: Call) -> Generator[Step, Any, tuple[OutcomeProbeResult | None, int]]:
        """Probe; while the provider answers PENDING, probe again after a backoff.

        Returns the last answer (None without a probe) and how many probes ran.
        Re-probing uses no attempt and sends nothing; it stops at the call's deadline.
        """
        if call.contract.outcome_probe is None:
            return None, 0
        probes = 0
        while True:
            answer: OutcomeProbeResult = yield ProbeStep()
            probes += 1
            if answer.status is not ProbeStatus.PENDING:
                return answer, probes
            wait = call.pace.next_wait()
            if wait is None:
                return answer, probes
            yield self.backoff(wait)

    def reconcile(
        self, call: Call, record: OperationRecord, token: str
    ) -> Generator[Step, Any, tuple[OperationRecord, bool] | EffectResult[Any]]:
        """Apply the reconcile table; a record back means dispatch again (DISPATCHED, our lease).

        With it comes whether the operation provably holds no effect (see :meth:`working`).
        """
        contract = call.contract
        answer, probes = yield from self.probe(call)
        stored: Stored | str | None = None
        if answer is not None and answer.status is ProbeStatus.COMMITTED:
            stored = store(contract, answer.output)
        overlap = live_overlap(record)
        ruling = decide(
            answer,
            confirmable=isinstance(stored, Stored),
            guaranteed=self.guaranteed(contract, record),
            overlap_risk=bool(overlap),
            attempts_left=record.attempts < record.attempt_budget,
            policy=contract.unknown_outcome,
        )
        # Why the outcome was uncertain in the first place stays on the record.
        cause = record.evidence.get("cause") or record.evidence.get("reason")
        evidence = _evidence(call, record, answer, probes, stored, overlap, cause)
        attempt = record.attempts
        fence = Expect(lease_token=token)
        if ruling.verdict is Verdict.CONFIRM:
            if not isinstance(stored, Stored) or answer is None:
                msg = f"a CONFIRM ruling on {call.operation_id!r} without a storable probe output"
                raise InternalError(msg)
            changes, event = to_confirmed(
                _RECONCILING,
                attempt,
                output_json=stored.json,
                provider_operation_id=answer.provider_operation_id or stored.provider_operation_id,
                reason=stored.note or ruling.reason,
                evidence=evidence,
            )
            step = self.write(call, fence, changes, event, known=record)
        elif ruling.verdict is Verdict.RETRY:
            wait = call.pace.next_wait()
            if wait is None:
                return (
                    yield from self.give_up_waiting(call, record, token, ruling, evidence, overlap)
                )
            yield self.backoff(wait)
            step = self._retry(call, record, token, ruling, evidence, overlap)
        else:
            step = self._stop(call, record, token, ruling, evidence, overlap, cause)
        try:
            written: OperationRecord = yield step
        except FencedWriteError:
            current = yield LedgerStep(lambda: self.ledger.get(call.operation_id, now=self.now()))
            return self.result(call, current, replayed=False)
        if ruling.verdict is Verdict.RETRY:
            return written, ruling.nothing_committed
        live = answer.output if answer is not None and ruling.verdict is Verdict.CONFIRM else None
        return self.result(call, written, replayed=False, live=live)

    def give_up_waiting(
        self,
        call: Call,
        record: OperationRecord,
        token: str,
        ruling: Ruling,
        evidence: dict[str, Any],
        overlap: tuple[OverlapHolder, ...],
    ) -> Generator[Step, Any, EffectResult[Any]]:
        """A retry is allowed but would start past the call's deadline: leave it to the next call.

        Provably unsent, the operation waits PREPARED; otherwise OUTCOME_UNKNOWN,
        so the next call reconciles it again before any resend.
        """
        deadline = f"the next attempt would start past the call's {call.pace.deadline:g}s deadline"
        target, kind = _UNKNOWN, EventType.OUTCOME_UNKNOWN
        if ruling.nothing_committed:
            target, kind = _PREPARED, EventType.RETRY
        reason = f"{ruling.reason}; {deadline}: call again to retry it"
        changes = Changes(target, lease=None, reason=reason, evidence=evidence, overlap=overlap)
        event = EventDraft(kind, _RECONCILING, target, record.attempts, evidence)
        try:
            written: OperationRecord = yield self.write(
                call, Expect(lease_token=token), changes, event, known=record
            )
        except FencedWriteError:
            written = yield LedgerStep(lambda: self.ledger.get(call.operation_id, now=self.now()))
        return self.result(call, written, replayed=False)

    def _retry(
        self,
        call: Call,
        record: OperationRecord,
        token: str,
        ruling: Ruling,
        evidence: dict[str, Any],
        overlap: tuple[OverlapHolder, ...],
    ) -> LedgerStep:
        """Back to DISPATCHED under our lease, for the next attempt with the same key."""
        attempt = record.attempts
        changes = Changes(
            _DISPATCHED,
            lease=self.lease(call, token),
            attempts=attempt + 1,
            reason=f"retrying with the same key: {ruling.reason}",
            evidence=evidence,
            overlap=overlap,
        )
        return self.write(
            call,
            Expect(lease_token=token),
            changes,
            EventDraft(EventType.RETRY, _RECONCILING, _PREPARED, attempt, evidence),
            EventDraft(EventType.DISPATCHED, _PREPARED, _DISPATCHED, attempt + 1),
        )

    def _stop(
        self,
        call: Call,
        record: OperationRecord,
        token: str,
        ruling: Ruling,
        evidence: dict[str, Any],
        overlap: tuple[OverlapHolder, ...],
        cause: Any,
    ) -> LedgerStep:
        """QUARANTINED for an operator, or OUTCOME_UNKNOWN for the next call, the lease released."""
        if ruling.verdict is Verdict.QUARANTINE:
            target, kind = EffectStatus.QUARANTINED, EventType.QUARANTINED
        else:
            target, kind = _UNKNOWN, EventType.OUTCOME_UNKNOWN
        reason = f"{cause}; {ruling.reason}" if cause else ruling.reason
        changes = Changes(target, lease=None, reason=reason, evidence=evidence, overlap=overlap)
        return self.write(
            call,
            Expect(lease_token=token),
            changes,
            EventDraft(kind, _RECONCILING, target, record.attempts, evidence),
            known=record,
        )

    # -- late results --------------------------------------------------------------------

    def record_late(self, call: Call, token: str, attempt: int, outcome: HandlerOutcome) -> None:
        """Record what a handler that lost its deadline or its lease finally did."""
        record_late(
            self.ledger,
            self.now,
            call.contract,
            call.operation_id,
            token,
            attempt,
            outcome,
            secrets=call.secrets,
            written=lambda event, record: self.notify(call, (event,), record),
        )


def _definer(ledger: object, name: str) -> type | None:
    """The class in ``ledger``'s MRO that defines ``name`` (None: none does)."""
    return next((k for k in type(ledger).__mro__ if name in vars(k)), None)


def _own_get(ledger: object) -> Any:
    """The ``get`` the class that defines ``get_checked`` defines (a wrapper may override get)."""
    owner = _definer(ledger, "get_checked")
    return None if owner is None else vars(owner).get("get", getattr(owner, "get", None))


def confirmation(
    attempt: int, token: str, outcome: HandlerOutcome, stored: Stored
) -> tuple[Expect, Changes, EventDraft]:
    """The fenced write that confirms an attempt whose handler returned ``stored``.

    An output that cannot be stored still confirms: the handler returned. The
    change and event are :func:`~effectguard.ledger._protocol.to_confirmed`'s,
    built positionally on every fresh call (a test holds the two equal).
    """
    handler = {"handler": outcome.describe()}
    if stored.not_stored is None:
        evidence, reason = handler, None
    else:
        evidence, reason = stored.evidence(handler), stored.note
    output, provider_id = stored.json, stored.provider_operation_id
    changes = _new_changes(
        _CONFIRMED, None, UNSET, UNSET, output, provider_id, reason, evidence, ()
    )
    event = _new_event(EventType.CONFIRMED, _DISPATCHED, _CONFIRMED, attempt, evidence)
    return _new_expect(None, token, False, None), changes, event  # noqa: FBT003 - positional fields


def report(call: Call, result: EffectResult[Any]) -> None:
    """Tell the call's observers of its ``result``."""
    observers = listening(call.observers, None, result.status, final=True, replayed=result.replayed)
    if observers:
        contract = call.contract
        notify(observers, Transition.of_result(contract.name, contract.version, result))


def _raise_not_stored(
    record: OperationRecord,
    mark: Mapping[str, Any],
    *,
    replayed: bool,
    reason: str | None,
    live: Any,
) -> None:
    """Raise :class:`OutputNotStored` for a CONFIRMED ``record`` whose output is not stored."""
    result = _new_result(
        record.status,
        record.operation_id,
        None,
        record.provider_operation_id,
        record.attempts,
        replayed,
        record.evidence,
        reason or record.reason,
        None,
    )
    raise OutputNotStored(
        result,
        reason=str(mark.get("reason")),
        path=str(mark.get("path", "$")),
        type_name=str(mark.get("type", "?")),
        output=None if live is _NO_OUTPUT else live,
        has_output=live is not _NO_OUTPUT,
        **({"hint": str(mark["hint"])} if "hint" in mark else {}),
    )


def _carrying(result: EffectResult[Any], error: BaseException | None) -> EffectResult[Any]:
    """``result`` carrying the handler's exception of this call (never stored)."""
    return result if error is None else dataclasses.replace(result, handler_error=error)


def conflict(call: Call, record: OperationRecord) -> OperationConflictError:
    """The error for a call whose request differs from the one ``record`` was claimed for."""
    return OperationConflictError(
        call.operation_id,
        record.fingerprint,
        call.fingerprint,
        differences(
            record,
            contract=call.contract.name,
            version=call.contract.version,
            arguments=call.arguments,
            provider_key=call.provider_key,
            redact=call.contract.redact,
        ),
    )


def _unknown_because(outcome: HandlerOutcome) -> str:
    """Why a handler's outcome leaves the effect in doubt, in a sentence an operator reads."""
    error = outcome.error
    if outcome.kind is Outcome.RAISED and error is not None:
        return (
            f"the handler raised {type(error).__name__}: {error} "
            "(a handler that raised may already have sent the request)"
        )
    return f"the handler {outcome.describe()}"


def _error_evidence(error: BaseException, secrets: tuple[str, ...]) -> dict[str, str]:
    """The type and message of a handler's exception, as the ledger keeps them."""
    return {"type": type(error).__name__, "message": scrub(str(error), secrets)}


def _evidence(
    call: Call,
    record: OperationRecord,
    answer: OutcomeProbeResult | None,
    probes: int,
    stored: Stored | str | None,
    overlap: tuple[OverlapHolder, ...],
    cause: Any,
) -> dict[str, Any]:
    """What the ledger keeps of a reconciliation: the probe's answer, the overlap, the cause."""
    secrets = call.secrets
    evidence: dict[str, Any] = {
        "probe": None if answer is None else answer.status.value,
        "probe_evidence": {} if answer is None else scrub(jsonable(answer.evidence), secrets),
        "overlap_risk": bool(overlap),
    }
    if cause:
        evidence["cause"] = cause
    if "error" in record.evidence:
        evidence["error"] = record.evidence["error"]
    if probes > 1:
        evidence["probes"] = probes
    if isinstance(stored, str):
        evidence["unconfirmable"] = scrub(stored, secrets)
    elif stored is not None:
        evidence = stored.evidence(evidence)
    return evidence


# -- late results: what a handler that lost its deadline or its lease finally did ---------

_late_log = logging.getLogger("effectguard.executor")

#: Re-reads after losing a race with another writer; each loss means the row moved on,
#: so a handful suffices unless the operation is extremely busy (then: log and give up).
_LATE_ATTEMPTS = 8


def record_late(
    ledger: EffectLedger,
    now: Callable[[], float | None],
    contract: EffectContract,
    operation_id: str,
    token: str,
    attempt: int,
    outcome: HandlerOutcome,
    *,
    secrets: tuple[str, ...] = (),
    written: Callable[[EventDraft, OperationRecord], None] | None = None,
) -> None:
    """Record what a handler that lost its deadline or its lease finally did.

    A return that passes the postcondition confirms any operation not yet
    terminal, with its output marked not stored if it cannot be stored: it is
    the effect's own acknowledgement. Anything else is evidence only, and
    clears the overlap risk that handler carried; it never changes a
    confirmed output. ``secrets`` are masked in what the
    handler's exception says; ``written`` hears of the event once it is durable.
    """
    stored = store(contract, outcome.value) if outcome.kind is Outcome.RETURNED else None
    status: str | None = None
    for _ in range(_LATE_ATTEMPTS):
        record = ledger.get(operation_id, now=now())
        if record is None:
            return
        status = record.status.value
        changes, event = _late_write(record, stored, token, attempt, outcome, secrets)
        # The output and the not-stored marker are user text too, as is the reason quoting it.
        changes, (event,) = scrub_write(secrets, changes, (event,))
        try:
            after = ledger.transition(
                operation_id,
                Expect(event_count=record.event_count),
                changes,
                [event],
                now=now(),
            )
        except FencedWriteError:
            continue  # the operation moved on while we read it: read again
        if written is not None:
            written(event, after)
        return
    _late_log.warning(
        "could not record the late result of %s (attempt %d): it kept changing; "
        "what that handler did is in this line only: %s",
        operation_id,
        attempt,
        scrub(outcome.describe(), secrets),
        extra={"operation_id": operation_id, "contract": contract.name, "status": status},
    )


def _late_write(
    record: OperationRecord,
    stored: Stored | str | None,
    token: str,
    attempt: int,
    outcome: HandlerOutcome,
    secrets: tuple[str, ...],
) -> tuple[Changes, EventDraft]:
    """The write a late ``outcome`` makes to ``record``: a confirmation, or evidence only.

    Only an output that can be confirmed (``stored``) on an operation not yet
    terminal confirms; otherwise the status stays and this attempt's overlap
    risk is cleared. ``secrets`` are masked in the handler's text and in why an
    output is unconfirmable; the caller masks the rest of the write.
    """
    evidence: dict[str, Any] = {
        "attempt": attempt,
        "handler": scrub(outcome.describe(), secrets),
    }
    if isinstance(stored, Stored) and not record.status.terminal:
        # An output that cannot be stored confirms too: the handler returned.
        evidence = stored.evidence(evidence)
        late = f"the handler of attempt {attempt} returned after its deadline"
        return to_confirmed(
            record.status,
            attempt,
            output_json=stored.json,
            provider_operation_id=stored.provider_operation_id,
            reason=f"{late}; {stored.note}" if stored.note else late,
            evidence=evidence,
            event=EventType.LATE_RESULT,
        )
    if isinstance(stored, str):
        evidence["unconfirmable"] = scrub(stored, secrets)
    if isinstance(stored, Stored) and record.status is EffectStatus.CONFIRMED:
        evidence["matches_confirmed_output"] = stored.json == record.output_json
    # One lease token serves every attempt of a call: only this attempt has ended.
    remaining = tuple(h for h in record.overlap if (h.token, h.attempt) != (token, attempt))
    changes = Changes(record.status, overlap=remaining)
    return changes, EventDraft(
        EventType.LATE_RESULT, record.status, record.status, attempt, evidence
    )


# -- performing the machine's steps -----------------------------------------------------


class StepPerformer:
    """Performs one step of a call and returns what the state machine is sent back.

    The sync and async paths differ only here, in how a step runs (a thread,
    a worker thread, the event loop); what a step's result means stays in the
    state machine. A handler that passes its deadline keeps its lease token
    active until it ends; its late return is recorded through ``states`` and
    only then is the token released. A backoff pause advances ``advance`` (an
    injected manual clock) instead of sleeping when one is given.
    """

    def __init__(self, states: StateMachine, advance: Callable[[float], None] | None) -> None:
        self._states = states
        self._advance = advance

    def perform(self, call: Call, step: Step) -> Any:
        """Perform ``step`` in this thread (a handler with a deadline in a thread of its own)."""
        if type(step) is LedgerStep:
            return step.run()
        if type(step) is HandlerStep:
            return self.call_handler(call, step.token, step.attempt)
        if type(step) is ProbeStep:
            return self._call_probe(call)
        if not self._advanced(step):  # type: ignore[arg-type]  # the last kind of step
            time.sleep(step.seconds)  # type: ignore[union-attr]
        return None

    async def perform_async(self, call: Call, step: Step) -> Any:
        """Perform ``step`` without blocking the event loop: ledger I/O runs in other threads."""
        if isinstance(step, LedgerStep):
            if step.run_async is not None:
                return await step.run_async()
            return await asyncio.to_thread(step.run)
        if isinstance(step, HandlerStep):
            return await self._call_handler_async(call, step)
        if isinstance(step, ProbeStep):
            probe = call.contract.outcome_probe
            if inspect.iscoroutinefunction(probe):
                outcome = await _calls.call_async(
                    lambda: probe(call.arguments, idempotency_key=call.provider_key),
                    call.contract.handler_timeout,
                )
                return _probe_outcome(outcome)
            return await asyncio.to_thread(self._call_probe, call)
        if not self._advanced(step):
            await asyncio.sleep(step.seconds)
        return None

    def _advanced(self, step: PauseStep) -> bool:
        """Advance an injected manual clock by a backoff wait instead of sleeping it."""
        if step.backoff:
            report_pause(step.seconds)  # to the call's watchers (telemetry), if any
        if step.backoff and self._advance is not None:
            self._advance(step.seconds)
            return True
        return False

    def call_handler(self, call: Call, token: str, attempt: int) -> HandlerOutcome:
        """Call the handler for ``attempt`` in this thread, or in one of its own with a deadline."""
        timeout = call.contract.handler_timeout
        if timeout is None:
            return _calls.run_handler(
                call.handler, call.arguments, call.provider_key, call.contract
            )
        TOKENS.hold(token)  # the handler's thread keeps the token active until it ends
        outcome = _calls.call_in_thread(
            functools.partial(_invoke, call),
            timeout,
            functools.partial(self._record_late_and_release, call, token, attempt),
            name=f"effectguard-handler-{call.operation_id}",
        )
        if not outcome.still_running:
            TOKENS.release(token)
        return outcome

    async def _call_handler_async(self, call: Call, step: HandlerStep) -> HandlerOutcome:
        # The token stays active for as long as the handler may run, which can outlast
        # this call (a deadline, a cancelled caller): only then is the lease provably idle.
        TOKENS.hold(step.token)
        late = functools.partial(self._record_late_and_release, call, step.token, step.attempt)
        if inspect.iscoroutinefunction(call.handler):
            outcome = await _calls.call_async(
                lambda: _await_not_sent_on(call),
                call.contract.handler_timeout,
                lambda ended: _in_thread(late, ended),
            )
        else:
            outcome = await _calls.call_thread_async(
                functools.partial(_invoke, call),
                call.contract.handler_timeout,
                late,
                name=f"effectguard-handler-{call.operation_id}",
            )
        if not outcome.still_running:
            TOKENS.release(step.token)
        return outcome

    def _record_late_and_release(
        self, call: Call, token: str, attempt: int, outcome: HandlerOutcome
    ) -> None:
        try:
            self._states.record_late(call, token, attempt, outcome)
        finally:
            TOKENS.release(token)

    def _call_probe(self, call: Call) -> OutcomeProbeResult:
        probe = call.contract.outcome_probe
        if probe is None:
            msg = f"a probe step for {call.operation_id!r}, whose contract has no probe"
            raise InternalError(msg)

        def invoke() -> Any:
            value = probe(call.arguments, idempotency_key=call.provider_key)
            if inspect.isawaitable(value):
                return asyncio.run(_await(value))
            return value

        timeout = call.contract.handler_timeout
        if timeout is None:
            return _probe_outcome(_calls.classify(invoke))
        outcome = _calls.call_in_thread(
            invoke, timeout, lambda _: None, name=f"effectguard-probe-{call.operation_id}"
        )
        return _probe_outcome(outcome)


def _probe_outcome(outcome: HandlerOutcome) -> OutcomeProbeResult:
    if outcome.kind is Outcome.RETURNED:
        return _calls.probe_result(outcome.value)
    if outcome.kind is Outcome.INTERRUPTED and outcome.error is not None:
        raise outcome.error
    return OutcomeProbeResult.unknown({"probe_error": outcome.describe()})


async def _await(value: Any) -> Any:
    return await value


def _invoke(call: Call) -> Any:
    """Call the handler once, an exception of the contract's ``not_sent_on`` as EffectNotSent."""
    try:
        return call.handler(call.arguments, idempotency_key=call.provider_key)
    except call.contract.not_sent_on as exc:
        raise _calls.not_sent(exc) from exc


async def _await_not_sent_on(call: Call) -> Any:
    try:
        return await call.handler(call.arguments, idempotency_key=call.provider_key)
    except call.contract.not_sent_on as exc:
        raise _calls.not_sent(exc) from exc


def _in_thread(work: Callable[[HandlerOutcome], None], outcome: HandlerOutcome) -> None:
    """Run ``work(outcome)`` in a daemon thread: ledger I/O never blocks the event loop."""
    threading.Thread(
        target=work, args=(outcome,), name="effectguard-late-result", daemon=True
    ).start()


# -- the executor -------------------------------------------------------------------------


class EffectExecutor:
    """Runs side effects so that each business operation takes effect at most once.

    Before a handler runs, the operation is claimed in one durable commit. A
    confirmed or rejected operation is replayed, never dispatched again. An
    uncertain outcome is reconciled with the contract's probe and retried only
    when the probe's authoritative NOT_COMMITTED, or the provider's documented
    idempotency, makes a resend safe; otherwise it is quarantined (or kept
    unknown) for later evidence or an operator.

    ``clock`` (epoch seconds) replaces the ledger's clock for leases and the
    executor's for key retention, so tests need not sleep. ``observers`` are
    told of every transition and every result of the calls this executor
    runs (see :func:`effectguard.observing`), after the executor's own log
    lines and before the observers of the call's context. ``wait_for_peer``
    is how long a call waits for another worker dispatching the same
    operation when neither the call nor its contract says (None: not at all
    for :meth:`execute`; decorated tools then use their own default).

    When it has an ``advance(seconds)`` method
    (:class:`~effectguard.testkit.ManualClock`), the waits between attempts
    advance it instead of sleeping. ``retry_wait_initial``, ``retry_wait_max``
    and ``deadline`` (seconds) are the defaults for contracts that leave them
    unset: automatic retries and re-probes wait
    ``jitter(min(retry_wait_max, retry_wait_initial * 2**n))`` before the
    call's n-th wait, and a call stops waiting once the next wait would end
    past its ``deadline``. ``jitter(ceiling)`` returns a wait in
    ``[0, ceiling]``, uniformly random by default; inject it for
    deterministic tests.

    ``replay_cache`` is how many CONFIRMED and REJECTED operations this
    executor keeps in memory to replay without reading the ledger (least
    recently replayed dropped first; 0 disables it). An operation enters it
    on its first replay, once its stored output has passed the integrity
    check; every call still has its request fingerprint checked, and one
    that differs reads the ledger and raises the conflict as always.
    """

    def __init__(
        self,
        ledger: EffectLedger,
        *,
        clock: Callable[[], float] | None = None,
        poll_interval: float = 0.05,
        observers: Iterable[Observer] = (),
        wait_for_peer: float | None = None,
        retry_wait_initial: float = DEFAULT_RETRY_WAIT_INITIAL,
        retry_wait_max: float = DEFAULT_RETRY_WAIT_MAX,
        deadline: float = DEFAULT_DEADLINE,
        jitter: Jitter = full_jitter,
        replay_cache: int = DEFAULT_REPLAY_CACHE,
    ) -> None:
        self.ledger = ledger
        _check_options(
            wait_for_peer=wait_for_peer,
            poll_interval=poll_interval,
            retry_wait_initial=retry_wait_initial,
            retry_wait_max=retry_wait_max,
            deadline=deadline,
        )
        self.wait_for_peer = wait_for_peer
        self.pacing = Pacing(retry_wait_initial, retry_wait_max, deadline, jitter)
        self._check_pacing()
        self._clock = clock
        advance = getattr(clock, "advance", None)
        self._states = StateMachine(ledger, clock, poll_interval, ReplayCache(replay_cache))
        self._performer = StepPerformer(self._states, advance if callable(advance) else None)
        self._observers: tuple[Observer, ...] = ()
        for observer in observers:
            self.add_observer(observer)

    def add_observer(self, observer: Observer) -> None:
        """Tell ``observer`` of every transition and result of the calls that start from now on."""
        if not callable(observer):
            msg = f"an observer must be callable, not {type(observer).__name__}"
            raise TypeError(msg)
        self._observers = (*self._observers, observer)

    def remove_observer(self, observer: Observer) -> None:
        """Stop telling ``observer`` about calls that start from now on (unknown ones: no-op)."""
        self._observers = tuple(known for known in self._observers if known != observer)

    def forget(self, operation_id: str) -> None:
        """Drop ``operation_id`` from the replay cache: its next replay reads the ledger.

        For whatever removes or rewrites a terminal operation (pruning); an
        operation not cached is a no-op.
        """
        self._states.replays.forget(operation_id)

    def _check_pacing(self) -> None:
        pacing = self.pacing
        if not (0 <= pacing.retry_wait_initial <= pacing.retry_wait_max):
            msg = (
                "retry_wait_initial and retry_wait_max must satisfy 0 <= initial <= max, "
                f"not {pacing.retry_wait_initial!r} and {pacing.retry_wait_max!r}"
            )
            raise ConfigurationError(msg)
        if not callable(pacing.jitter):
            msg = f"jitter must be callable, not {type(pacing.jitter).__name__}"
            raise TypeError(msg)

    @property
    def poll_interval(self) -> float:
        """Seconds before the first re-read while waiting for a peer; later waits back off."""
        return self._states.poll_interval

    def __repr__(self) -> str:
        return f"EffectExecutor({self.ledger!r})"

    # -- the drivers -----------------------------------------------------------------------

    def execute(
        self,
        contract: EffectContract,
        arguments: Mapping[str, Any],
        handler: Handler,
        *,
        wait_for_peer: float | None = None,
    ) -> EffectResult[Any]:
        """Run ``handler`` for ``arguments`` under ``contract``, at most once per operation.

        Returns the result, fresh or replayed; it raises only for a conflicting
        request (:class:`OperationConflictError`), arguments that are not JSON
        (``TypeError``), an invalid contract (:class:`ConfigurationError`) or a
        ledger failure (:class:`LedgerUnavailableError`), in which case nothing
        is ever dispatched again on the strength of the missing record.
        A call that finds another worker dispatching the operation (a live
        lease) waits up to ``wait_for_peer`` seconds for its outcome, polling
        with backoff, and replays it; after that it returns the DISPATCHED
        result ("another worker is handling it"). The wait is the first of
        ``wait_for_peer``, the contract's, the executor's that is set, else 0.
        """
        # _coroutine_function(handler), its plain-function case inline.
        if (
            handler.__code__.co_flags & inspect.CO_COROUTINE
            if type(handler) is FunctionType
            else _coroutine_function(handler)
        ):
            msg = "handler is a coroutine function; use execute_async"
            raise TypeError(msg)
        call = self._prepare(contract, arguments, handler, wait_for_peer)
        if type(call) is not Call:
            return call  # type: ignore[return-value]  # the replay cache's result
        if _watching(call.observers):
            return self._drive(call, self._states.run(call))
        return self._straight(call)

    def _straight(self, call: Call) -> EffectResult[Any]:
        """The common call without the generator: a replay, or a claim that is confirmed at once.

        Anything else continues in the machine from the state it reached, so
        the rules stay the machine's.
        """
        states = self._states
        ledger = states.ledger
        replayed, record, commits = self._read_first(call)
        if replayed is not None:
            return replayed
        unheard = _unheard(call.observers)
        if record is not None:
            if record.fingerprint == call.fingerprint and record.status.terminal:
                return self._replayed(call, record, commits, unheard=unheard)
            return self._drive(call, states.reported(call, states.drive(call, record)))
        if call.contract.requires_approval is not False and call.needs_approval():
            return self._drive(call, states.reported(call, states.drive(call, None)))
        token = _token()
        TOKENS.hold(token)
        try:
            record, created = ledger.claim(states.new_operation(call, token), now=states.now())
        except BaseException:
            TOKENS.release(token)
            raise
        if not (created and unheard):
            states.claimed(call, token, record, created)
        if not created:
            return self._drive(call, states.reported(call, states.drive(call, record)))
        renewal = KEEPER.start(
            ledger, call.operation_id, token, call.contract.lease_seconds, states.now
        )
        try:
            outcome = self._performer.call_handler(call, token, 1)
            if outcome.kind is Outcome.RETURNED:
                stored = store(call.contract, outcome.value)
                if isinstance(stored, Stored):
                    return self._confirmed(call, record, token, outcome, stored, unheard=unheard)
            machine = states.working(call, record, token, dispatch=True, outcome=outcome)
            return self._drive(call, states.reported(call, machine))
        finally:
            KEEPER.stop(renewal)
            TOKENS.release(token)

    def _replayed(
        self, call: Call, record: OperationRecord, commits: str | None, *, unheard: bool
    ) -> EffectResult[Any]:
        """The replay of a terminal ``record``, checked against what its confirmation committed."""
        states = self._states
        try:
            result = states.result(call, record, replayed=True, commits=commits)
        except OutputNotStored as exc:
            report(call, exc.result)
            raise
        states.replays.remember(record)
        if not unheard:
            report(call, result)
        return result

    def _read_first(
        self, call: Call
    ) -> tuple[EffectResult[Any] | None, OperationRecord | None, str | None]:
        """The read before a claim: a replay's result, else the record found and its commits.

        A ledger that claims first is not read (the claim reads). A plain
        replay is built from the ledger's :class:`ReplayView` when it offers
        one; anything else is judged from the whole record.
        """
        states = self._states
        if states.claims_first:
            return None, None, None
        if states.replay_view is not None:
            view = states.replay_view(call.operation_id)
            if view is None:
                return None, None, None
            if view.fingerprint == call.fingerprint and view.status.terminal:
                replayed = self._replayed_view(call, view)
                if replayed is not None:
                    return replayed, None, None
        if states.get_checked is not None:
            record, commits = states.get_checked(call.operation_id, now=states.now())
            return None, record, commits
        return None, states.ledger.get(call.operation_id, now=states.now()), None

    def _replayed_view(self, call: Call, view: ReplayView) -> EffectResult[Any] | None:
        """The replay of a terminal operation read as a :class:`ReplayView`: no record built.

        The same result, the same check of the output against its
        confirmation, and the same report as :meth:`_replayed`. None for a
        CONFIRMED operation whose output was not stored, which raises from its
        whole record instead.
        """
        status = view.status
        output = None
        if status is _CONFIRMED:
            if view.output_json is None:
                return None
            operation_id, text = view.operation_id, view.output_json
            check_stored_output(
                self._states.ledger, operation_id, text, view.provider_operation_id, view.commits
            )
            output = decode_text(call.contract, operation_id, text)
        result: EffectResult[Any] = _new_result(
            status,
            view.operation_id,
            output,
            view.provider_operation_id,
            view.attempts,
            True,  # noqa: FBT003 - positional fields
            view.evidence,
            view.reason,
            None,
        )
        self._states.replays.remember(view)
        if not _unheard(call.observers):
            report(call, result)
        return result

    def _confirmed(
        self,
        call: Call,
        record: OperationRecord,
        token: str,
        outcome: HandlerOutcome,
        stored: Stored,
        *,
        unheard: bool,
    ) -> EffectResult[Any]:
        """Write the confirmation of a handler that returned; what a lost fence becomes.

        ``unheard``: nobody hears of it (see :func:`_unheard`), so no notice is built.
        """
        states = self._states
        expect, changes, event = confirmation(1, token, outcome, stored)
        if call.secrets or stored.not_stored is not None:
            changes, (event,) = scrub_write(call.secrets, changes, (event,))
        try:
            confirmed = states.ledger.transition(
                call.operation_id, expect, changes, (event,), now=states.now(), known=record
            )
        except FencedWriteError:
            machine = states.settle_fenced(call, record, token, outcome)
            return self._drive(call, states.reported(call, machine))
        if not unheard:
            states.notify(call, (event,), confirmed)
        try:
            result = states.result(call, confirmed, replayed=False, live=outcome.value)
        except OutputNotStored as exc:
            report(call, exc.result)
            raise
        if not unheard:
            report(call, result)
        return result

    def _drive(self, call: Call, machine: Machine) -> EffectResult[Any]:
        """Run ``machine`` to its result, performing each step in this thread."""
        performer = self._performer
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = machine.throw(error) if error is not None else machine.send(value)
            except StopIteration as stop:
                result: EffectResult[Any] = stop.value
                return result
            error = None
            try:
                value = performer.perform(call, step)
            except BaseException as exc:  # noqa: BLE001 - handed to the machine, which re-raises
                value, error = None, exc

    async def execute_async(
        self,
        contract: EffectContract,
        arguments: Mapping[str, Any],
        handler: Handler,
        *,
        wait_for_peer: float | None = None,
    ) -> EffectResult[Any]:
        """Like :meth:`execute`, for async or sync handlers and probes.

        Ledger I/O never runs on the event loop: a SQLite ledger's first read,
        claim and transitions go to its writer thread (which commits the writes
        with the others queued meanwhile), and every other ledger call runs in
        a worker thread. An async handler that passes its timeout is cancelled
        and awaited until it has stopped, so it leaves no overlap risk; a sync
        one runs in a thread and does.
        """
        call = self._prepare(contract, arguments, handler, wait_for_peer, on_loop=True)
        if type(call) is not Call:
            return call  # type: ignore[return-value]  # the replay cache's result
        states = self._states
        if states.replay_view_async is None or _watching(call.observers):
            machine = states.run(call)
        else:
            # The read before the claim, as _read_first makes it: a plain replay needs no more.
            view = await states.replay_view_async(call.operation_id)
            if view is None:
                machine = states.reported(call, states.drive(call, None))
            else:
                if view.fingerprint == call.fingerprint and view.status.terminal:
                    replayed = self._replayed_view(call, view)
                    if replayed is not None:
                        return replayed
                machine = states.run(call)
        performer = self._performer
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = machine.throw(error) if error is not None else machine.send(value)
            except StopIteration as stop:
                result: EffectResult[Any] = stop.value
                return result
            error = None
            try:
                value = await performer.perform_async(call, step)
            except BaseException as exc:  # noqa: BLE001 - handed to the machine, which re-raises
                value, error = None, exc

    def _prepare(
        self,
        contract: EffectContract,
        arguments: Mapping[str, Any],
        handler: Handler,
        wait_for_peer: float | None,
        *,
        on_loop: bool = False,
    ) -> Call | EffectResult[Any]:
        """The checked call, or its replay when the replay cache holds its terminal result.

        Each value is built once: the arguments' canonical JSON is what the
        fingerprint hashes and, with nothing redacted, what the ledger stores.
        """
        if type(contract) is not EffectContract and not isinstance(contract, EffectContract):
            msg = f"contract must be an EffectContract, not {type(contract).__name__}"
            raise TypeError(msg)
        if not callable(handler):
            msg = f"handler must be callable, not {type(handler).__name__}"
            raise TypeError(msg)
        if type(arguments) is not dict and not isinstance(arguments, Mapping):
            msg = f"arguments must be a mapping of parameter names, not {type(arguments).__name__}"
            raise TypeError(msg)
        if wait_for_peer is None and contract.wait_for_peer is None:  # _peer_wait's last case
            wait = 0.0 if self.wait_for_peer is None else self.wait_for_peer
        else:
            wait = _peer_wait(contract, self.wait_for_peer, wait_for_peer)
        arguments = dict(arguments)
        # Before the contract's callables see them, and before anything is recorded: a
        # lone surrogate or a 100,000-deep value would otherwise fail half-way through.
        check_json_value(arguments)
        operation_id, key = contract.identity(arguments)
        redact = contract.redact
        if redact:
            fingerprint = request_fingerprint(
                contract.name, contract.version, arguments, key, redact, checked=True
            )
            stored: Mapping[str, Any] = redact_arguments(arguments, redact)
            stored_json = canonical_json(stored)
            secrets_found = secrets_of(arguments, redact)
        else:
            stored, stored_json, secrets_found = arguments, arguments_json(arguments), ()
            try:
                text = request_text(contract.name, contract.version, stored_json, key)
                fingerprint = hashlib.sha256(text.encode("utf-8")).hexdigest()
            except (TypeError, ValueError):  # a name or key with no UTF-8 form: say which
                fingerprint = request_fingerprint(contract.name, contract.version, arguments, key)
        # Taken now: a late handler reports, from its own thread, to the observers of its call.
        # What context_observers() gives, read without a call into _observe.
        everywhere, here = OBSERVER_SOURCES.everywhere, OBSERVER_SOURCES.context.get()
        observers = (log_transition, *self._observers, *everywhere, *here)
        replays = self._states.replays
        if replays.size:
            replayed = replays.replay_result(contract, operation_id, fingerprint, observers)
            if replayed is not None:
                return replayed
        return Call(
            contract,
            arguments,
            handler,
            operation_id,
            key,
            fingerprint,
            wait,
            self.pacing,
            self._clock,
            secrets_found,
            observers,
            stored,
            stored_json,
            fingerprinted=not redact,
            on_loop=on_loop,
        )


def _unheard(observers: tuple[Observer, ...]) -> bool:
    """Whether nobody hears what the straight path reports (nothing above INFO).

    The claim is logged at DEBUG, the confirmation at INFO, the result at
    DEBUG fresh and INFO replayed. True when the log is the call's only
    observer and logs nothing at INFO, so no notice need be built: observers
    and logging cost nothing when nobody listens.
    """
    return (
        len(observers) == 1
        and observers[0] is log_transition
        and not _late_log.isEnabledFor(logging.INFO)
    )


def _watching(observers: tuple[Observer, ...]) -> bool:
    """Whether an observer watches calls whole (telemetry): the machine then runs the call."""
    return len(observers) > 1 and any(
        callable(getattr(observer, "watch_call", None)) for observer in observers
    )


def _coroutine_function(handler: object) -> bool:
    """``inspect.iscoroutinefunction(handler)``, read straight off a plain function's code."""
    if type(handler) is FunctionType:
        return bool(handler.__code__.co_flags & inspect.CO_COROUTINE)
    return inspect.iscoroutinefunction(handler)


def _peer_wait(
    contract: EffectContract, executor_wait: float | None, wait_for_peer: float | None
) -> float:
    """Seconds a call waits for a peer's live lease: the call's, the contract's, the executor's, 0.

    Raises :class:`InvalidRequestError` for a value that is not a bounded number of seconds.
    """
    if wait_for_peer is not None:
        problem = seconds_problem("wait_for_peer", wait_for_peer, zero_ok=True, optional=True)
        if problem is not None:
            msg = f"EffectExecutor.execute(): {problem}; nothing was recorded or sent"
            raise InvalidRequestError(msg)
        return wait_for_peer
    if contract.wait_for_peer is not None:
        return contract.wait_for_peer
    return 0.0 if executor_wait is None else executor_wait


def _check_options(**seconds: float | None) -> None:
    """Refuse :class:`EffectExecutor` options that are not a bounded number of seconds.

    Raises :class:`ConfigurationError` naming each one; ``inf`` and ``'1'`` would
    otherwise pass here and fail (``OverflowError``, ``TypeError``) mid-call.
    """
    problems = [
        problem
        for name, value in seconds.items()
        if (
            problem := seconds_problem(
                name, value, zero_ok=name != "poll_interval", optional=name == "wait_for_peer"
            )
        )
        is not None
    ]
    if problems:
        msg = "EffectExecutor(): " + "; ".join(problems)
        raise ConfigurationError(msg)
