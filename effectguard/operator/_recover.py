"""Re-probing an operation nobody is working on, and sweeping every uncertain one.

A re-probe asks the provider's outcome probe and writes what its answer
proves through the reconcile table, as one fenced write; it never dispatches.
:func:`recover` sweeps a ledger once, :class:`Recoverer` keeps sweeping with a
backoff per operation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from effectguard._decorator import TOOLS_VARIABLE, ToolIndex, known_tools, load_tools
from effectguard._executor import _calls as _handler
from effectguard._executor._leases import abandoned, live_overlap
from effectguard._executor._machine import Ruling, Verdict, decide
from effectguard._executor._outputs import Stored, jsonable, store
from effectguard._fingerprint import request_fingerprint
from effectguard._model import (
    EffectStatus,
    EventType,
    OperationRecord,
    OutcomeProbeResult,
    OverlapHolder,
    ProbeStatus,
)
from effectguard.errors import ConfigurationError, FencedWriteError, IllegalTransitionError
from effectguard.ledger import EffectLedger, open_ledger
from effectguard.ledger._protocol import UNSET, Changes, EventDraft, Expect, Seen, to_confirmed
from effectguard.ledger._resolution import os_user

if TYPE_CHECKING:
    from effectguard._contract import EffectContract

__all__ = [
    "REPROBED_STATUSES",
    "ProbedOutput",
    "Recoverer",
    "RecoveryReport",
    "ReprobeAction",
    "ReprobeOutcome",
    "Skipped",
    "output_from_probe",
    "recover",
    "reprobe",
    "reprobe_problem",
    "start_recovery",
]


# ---- Re-probing an operation nobody is working on ----

#: The statuses a re-probe may look at; DISPATCHED and RECONCILING only when nobody holds them.
REPROBED_STATUSES = frozenset(
    {
        EffectStatus.OUTCOME_UNKNOWN,
        EffectStatus.RECONCILING,
        EffectStatus.QUARANTINED,
        EffectStatus.DISPATCHED,
    }
)


_HELD = frozenset({EffectStatus.DISPATCHED, EffectStatus.RECONCILING})


class ReprobeAction(enum.StrEnum):
    """What a re-probe did (or, in a dry run, would do) to an operation."""

    CONFIRMED = "confirmed"
    RETRY_READY = "retry_ready"
    MARKED_UNKNOWN = "marked_unknown"
    UNCHANGED = "unchanged"
    RACED = "raced"


@dataclass(frozen=True, slots=True)
class ReprobeOutcome:
    """One re-probed operation: its status before and after, the probe's answer and why.

    ``written`` is False in a dry run, and when another writer changed the
    operation between the read and the write (``action`` is then RACED).
    """

    operation_id: str
    contract: str
    before: EffectStatus
    after: EffectStatus
    probe: ProbeStatus
    action: ReprobeAction
    reason: str
    written: bool
    evidence: Mapping[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """Whether the status changes (or, in a dry run, would change)."""
        return self.before is not self.after

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict of this outcome."""
        return {
            "operation_id": self.operation_id,
            "contract": self.contract,
            "before": self.before.value,
            "after": self.after.value,
            "probe": self.probe.value,
            "action": self.action.value,
            "reason": self.reason,
            "written": self.written,
            "evidence": dict(self.evidence),
        }


def reprobe_problem(record: OperationRecord, contract: EffectContract | None) -> str | None:  # noqa: PLR0911 - one return per reason
    """Return why ``record`` cannot be re-probed with ``contract`` now (None when it can)."""
    op = record.operation_id
    if record.status not in REPROBED_STATUSES:
        return f"operation {op!r} is {record.status.value}: only uncertain operations are probed"
    held = record.status in _HELD and record.lease_live
    if held and not abandoned(record.lease_token, record.lease_owner):
        return f"operation {op!r} is held by a live worker; it reconciles it itself"
    if contract is None:
        return (
            f"no tool of contract {record.contract!r} was given (--tools MODULE): "
            "its probe lives in your code"
        )
    if contract.outcome_probe is None:
        return (
            f"contract {contract.name!r} has no outcome probe: check the provider by hand, "
            "then confirm, reject or authorize-retry"
        )
    redacted = sorted(set(contract.redact) & set(record.arguments))
    if redacted:
        return (
            f"operation {op!r} has redacted arguments ({', '.join(redacted)}), which the "
            "ledger never stored: its probe cannot be called; call the tool again instead"
        )
    fingerprint = request_fingerprint(
        contract.name, contract.version, record.arguments, record.provider_key
    )
    if fingerprint != record.fingerprint:
        return (
            f"operation {op!r} was recorded by contract {record.contract!r} version "
            f"{record.contract_version}, not the tool given (version {contract.version}): "
            "load the tool that recorded it"
        )
    return None


def reprobe(
    ledger: EffectLedger,
    record: OperationRecord,
    contract: EffectContract,
    *,
    actor: str,
    dry_run: bool = False,
    wall: float | None = None,
) -> ReprobeOutcome:
    """Probe ``record``'s outcome now and write what the evidence allows (see the module).

    Raises :class:`~effectguard.errors.IllegalTransitionError` when the
    operation cannot be probed (:func:`reprobe_problem` says why); nothing is
    written then. ``wall`` is the time (epoch seconds) that decides whether
    the provider still remembers the key; the system clock by default.
    """
    problem = reprobe_problem(record, contract)
    if problem is not None:
        raise IllegalTransitionError(problem)
    answer = _ask(contract, record)
    ruling, stored, overlap = _judge(contract, record, answer, wall)
    evidence: dict[str, Any] = {
        "probe": answer.status.value,
        "probe_evidence": jsonable(answer.evidence),
        "overlap_risk": bool(overlap),
        "reprobed_by": actor,
        "os_user": os_user(),
        "host": socket.gethostname(),
    }
    if isinstance(stored, str):
        evidence["unconfirmable"] = stored
    changes, event, action = _plan(record, answer, stored, ruling.verdict, evidence, overlap)
    reason = _kept(record, ruling.reason) if action is ReprobeAction.UNCHANGED else ruling.reason
    outcome = ReprobeOutcome(
        record.operation_id,
        record.contract,
        record.status,
        changes.status,
        answer.status,
        action,
        reason,
        written=False,
        evidence=evidence,
    )
    if dry_run:
        return outcome
    return _write(ledger, record, changes, event, outcome)


def _write(
    ledger: EffectLedger,
    record: OperationRecord,
    changes: Changes,
    event: EventDraft,
    outcome: ReprobeOutcome,
) -> ReprobeOutcome:
    """Write the re-probe's change, fenced on the record as read; RACED if it changed since."""
    expect = Expect(
        statuses=frozenset({record.status}),
        lease_token=record.lease_token if record.lease_live else UNSET,
        lease_expired=not record.lease_live,
        event_count=record.event_count,
    )
    try:
        ledger.transition(record.operation_id, expect, changes, [event])
    except FencedWriteError:
        return dataclasses.replace(
            outcome,
            after=record.status,
            action=ReprobeAction.RACED,
            reason="another writer changed the operation first; nothing written",
        )
    return dataclasses.replace(outcome, written=True)


def _judge(
    contract: EffectContract,
    record: OperationRecord,
    answer: OutcomeProbeResult,
    wall: float | None,
) -> tuple[Ruling, Stored | str | None, list[OverlapHolder]]:
    """The reconcile table's ruling on ``answer``, the output's stored form, and the overlap."""
    gone = abandoned(record.lease_token, record.lease_owner)
    overlap = list(live_overlap(record))
    # As when the executor takes a row over: only a DISPATCHED holder may still be sending.
    holder_may_send = (
        record.status is EffectStatus.DISPATCHED and record.lease_owner is not None and not gone
    )
    if holder_may_send and record.lease_token is not None and record.lease_owner is not None:
        overlap.append(OverlapHolder(record.lease_token, record.attempts, record.lease_owner))
    stored = store(contract, answer.output) if answer.status is ProbeStatus.COMMITTED else None
    ruling = decide(
        answer,
        confirmable=isinstance(stored, Stored),
        guaranteed=_guaranteed(contract, record, wall),
        overlap_risk=bool(overlap),
        attempts_left=record.attempts < record.attempt_budget,
        policy=contract.unknown_outcome,
    )
    return ruling, stored, overlap


def _kept(record: OperationRecord, ruling: str) -> str:
    if record.status is EffectStatus.QUARANTINED:
        return f"{ruling}; a quarantined operation is closed automatically only when committed"
    return f"{ruling}; left for the next call or an operator"


def _plan(
    record: OperationRecord,
    answer: OutcomeProbeResult,
    stored: Stored | str | None,
    verdict: Verdict,
    evidence: dict[str, Any],
    overlap: list[OverlapHolder],
) -> tuple[Changes, EventDraft, ReprobeAction]:
    """The change a re-probe writes: confirmed, ready to retry, marked unknown, or unchanged."""
    status, attempt = record.status, record.attempts
    if verdict is Verdict.CONFIRM and isinstance(stored, Stored):
        changes, event = to_confirmed(
            status,
            attempt,
            output_json=stored.json,
            provider_operation_id=answer.provider_operation_id or stored.provider_operation_id,
            reason=stored.note or "confirmed by a re-probe: the provider holds the effect",
            evidence=stored.evidence(evidence),
        )
        return changes, event, ReprobeAction.CONFIRMED
    clear = answer.status is ProbeStatus.NOT_COMMITTED and not overlap
    if verdict is Verdict.RETRY and clear and status is not EffectStatus.QUARANTINED:
        reason = "a re-probe found no effect (authoritative): the next call sends it again"
        changes = Changes(
            EffectStatus.PREPARED, lease=None, reason=reason, evidence=evidence, overlap=()
        )
        event = EventDraft(EventType.RETRY, status, EffectStatus.PREPARED, attempt, evidence)
        return changes, event, ReprobeAction.RETRY_READY
    if status in _HELD:
        # Nobody holds it: what the executor would write on taking it over, with the answer.
        reason = "outcome unknown: the previous holder's lease ended; re-probed"
        changes = Changes(
            EffectStatus.OUTCOME_UNKNOWN,
            lease=None,
            reason=reason,
            evidence=evidence,
            overlap=tuple(overlap),
        )
        gone = abandoned(record.lease_token, record.lease_owner)
        evidence["owner_gone"] = gone
        kind = EventType.OWNER_GONE if gone else EventType.LEASE_EXPIRED
        event = EventDraft(kind, status, EffectStatus.OUTCOME_UNKNOWN, attempt, evidence)
        return changes, event, ReprobeAction.MARKED_UNKNOWN
    changes = Changes(status)
    event = EventDraft(EventType.REPROBED, status, status, attempt, evidence)
    return changes, event, ReprobeAction.UNCHANGED


def _guaranteed(contract: EffectContract, record: OperationRecord, wall: float | None) -> bool:
    if not contract.provider_idempotency_guaranteed:
        return False
    retention = contract.provider_key_retention_seconds
    if retention is None:
        return True
    now = time.time() if wall is None else wall
    return now - record.first_dispatched_at.timestamp() < retention


# ---- The output a probe found, offered to an operator's confirmation ----


@dataclass(frozen=True, slots=True)
class ProbedOutput:
    """What a probe answering COMMITTED says the effect returned, ready to confirm.

    ``output`` is in the form the contract stores (its codec's JSON), as
    ``confirm`` takes it; ``seen`` is the state of the operation the probe was
    asked about, which the confirmation must still find; ``evidence`` is what
    the probe said, recorded with the confirmation.
    """

    operation_id: str
    output: Any
    provider_operation_id: str | None
    seen: Seen
    evidence: dict[str, Any]


def output_from_probe(record: OperationRecord, contract: EffectContract | None) -> ProbedOutput:
    """Ask ``record``'s probe now and return the output it holds; never writes, never dispatches.

    Raises :class:`~effectguard.errors.IllegalTransitionError` with one line
    saying what to do instead when the operation cannot be probed (as
    :func:`reprobe_problem`), when the probe does not answer COMMITTED, or when
    its output fails the contract's postcondition or cannot be stored.
    """
    problem = reprobe_problem(record, contract)
    if problem is not None or contract is None:  # reprobe_problem names a missing contract
        raise IllegalTransitionError(problem or "no tool was given: its probe lives in your code")
    op = record.operation_id
    answer = _ask(contract, record)
    if answer.status is not ProbeStatus.COMMITTED:
        msg = (
            f"the probe of {op!r} answers {answer.status.value}, not committed: it holds no "
            "output to confirm; check the provider, then confirm with the output typed, "
            "reject or authorize a retry"
        )
        raise IllegalTransitionError(msg)
    stored = store(contract, answer.output)
    if isinstance(stored, str) or stored.json is None:
        why = stored if isinstance(stored, str) else stored.note
        msg = (
            f"the probe of {op!r} answers committed, but its output cannot be confirmed as it "
            f"is ({why}): type the output to confirm yourself"
        )
        raise IllegalTransitionError(msg)
    return ProbedOutput(
        op,
        json.loads(stored.json),
        answer.provider_operation_id or stored.provider_operation_id,
        Seen.of(record),
        {"probe": answer.status.value, "probe_evidence": jsonable(answer.evidence)},
    )


def _ask(contract: EffectContract, record: OperationRecord) -> OutcomeProbeResult:
    """Run the probe under the contract's handler timeout; a failure is an UNKNOWN answer."""
    probe = contract.outcome_probe
    arguments = dict(record.arguments)

    def invoke() -> Any:
        if probe is None:  # pragma: no cover - reprobe_problem refuses a contract without one
            return OutcomeProbeResult.unknown({"probe_error": "no probe"})
        value = probe(arguments, idempotency_key=record.provider_key)
        if inspect.isawaitable(value):
            return asyncio.run(_await(value))
        return value

    timeout = contract.handler_timeout
    if timeout is None:
        outcome = _handler.classify(invoke)
    else:
        outcome = _handler.call_in_thread(
            invoke, timeout, lambda _: None, name=f"effectguard-reprobe-{record.operation_id}"
        )
    if outcome.kind is _handler.Outcome.RETURNED:
        return _handler.probe_result(outcome.value)
    if outcome.kind is _handler.Outcome.INTERRUPTED and outcome.error is not None:
        raise outcome.error
    return OutcomeProbeResult.unknown({"probe_error": outcome.describe()})


async def _await(value: Any) -> Any:
    return await value


# ---- Recovery sweeps: recover(), the Recoverer and its backoff ----

logger = logging.getLogger("effectguard.recovery")


_DEFAULT_BATCH = 100


@dataclass(frozen=True, slots=True)
class Skipped:
    """An uncertain operation a sweep could not probe, and why (no tool, no probe…)."""

    operation_id: str
    contract: str
    status: EffectStatus
    reason: str

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "operation_id": self.operation_id,
            "contract": self.contract,
            "status": self.status.value,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What one sweep probed, what it changed (or would, in a dry run) and what it left.

    ``deferred`` counts operations not probed this time because their backoff
    has not run out.
    """

    probed: tuple[ReprobeOutcome, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    deferred: int = 0
    dry_run: bool = False
    errors: tuple[str, ...] = field(default=())

    @property
    def changed(self) -> tuple[ReprobeOutcome, ...]:
        """The probed operations whose status changed (or would change)."""
        return tuple(outcome for outcome in self.probed if outcome.changed)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict of the whole report."""
        return {
            "dry_run": self.dry_run,
            "probed": [outcome.to_json() for outcome in self.probed],
            "changed": len(self.changed),
            "skipped": [item.to_json() for item in self.skipped],
            "deferred": self.deferred,
            "errors": list(self.errors),
        }


def _candidate(record: OperationRecord) -> bool:
    """Whether nobody works on ``record``: it is uncertain and not held by a live worker."""
    if record.status not in REPROBED_STATUSES:
        return False
    if record.status in _HELD and record.lease_live:
        return abandoned(record.lease_token, record.lease_owner)
    return True


class Recoverer:
    """Sweeps a ledger's uncertain operations, with a backoff per operation across sweeps.

    ``limit`` bounds how many operations one sweep probes; ``batch`` how many
    rows it reads per status. After a probe that leaves an operation as it
    was, that operation is not probed again for ``backoff_initial`` seconds,
    doubling up to ``backoff_max``.
    """

    def __init__(
        self,
        ledger: EffectLedger,
        tools: ToolIndex,
        *,
        statuses: Iterable[EffectStatus] | None = None,
        limit: int = _DEFAULT_BATCH,
        dry_run: bool = False,
        actor: str | None = None,
        backoff_initial: float = 5.0,
        backoff_max: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        chosen = frozenset(REPROBED_STATUSES if statuses is None else statuses)
        wrong = sorted(status.value for status in chosen - REPROBED_STATUSES)
        if wrong:
            msg = (
                f"recovery sweeps only uncertain operations, not {', '.join(wrong)}; "
                f"choose among {', '.join(sorted(s.value for s in REPROBED_STATUSES))}"
            )
            raise ConfigurationError(msg)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            msg = f"limit must be a whole number >= 1, not {limit!r}"
            raise ConfigurationError(msg)
        self.ledger = ledger
        self.tools = tools
        self.statuses = tuple(sorted(chosen, key=lambda status: status.value))
        self.limit = limit
        self.dry_run = dry_run
        self.actor = actor or f"recovery sweep as {os_user()}"
        self._backoff = (backoff_initial, backoff_max)
        self._clock = clock
        self._due: dict[str, tuple[float, float]] = {}
        self.stopped = threading.Event()

    def __repr__(self) -> str:
        return f"Recoverer({self.ledger!r}, statuses={[s.value for s in self.statuses]})"

    def sweep(self) -> RecoveryReport:
        """Probe up to ``limit`` uncertain operations once; see :func:`recover`."""
        probed: list[ReprobeOutcome] = []
        skipped: list[Skipped] = []
        errors: list[str] = []
        deferred = 0
        for record in self._candidates():
            if self.stopped.is_set() or len(probed) + len(skipped) >= self.limit:
                break
            due = self._due.get(record.operation_id)
            if due is not None and due[0] > self._clock():
                deferred += 1
                continue
            found = self.tools.find(record.contract, record.contract_version)
            contract = None if found is None else found.contract
            problem = reprobe_problem(record, contract)
            if problem is not None or contract is None:
                why = problem or "no contract"
                skipped.append(Skipped(record.operation_id, record.contract, record.status, why))
                continue
            try:
                outcome = reprobe(
                    self.ledger, record, contract, actor=self.actor, dry_run=self.dry_run
                )
            except IllegalTransitionError as exc:
                errors.append(f"{record.operation_id!r}: {exc}")
                continue
            probed.append(outcome)
            self._schedule(outcome)
        return RecoveryReport(tuple(probed), tuple(skipped), deferred, self.dry_run, tuple(errors))

    def _candidates(self) -> list[OperationRecord]:
        found: list[OperationRecord] = []
        # Rows still backing off are read too, so they never hide the ones behind them.
        window = self.limit + len(self._due)
        for status in self.statuses:
            records = self.ledger.list_operations(status=status, limit=window)
            found.extend(record for record in records if _candidate(record))
        return found

    def _schedule(self, outcome: ReprobeOutcome) -> None:
        if outcome.changed or self.dry_run:
            self._due.pop(outcome.operation_id, None)
            return
        initial, ceiling = self._backoff
        previous = self._due.get(outcome.operation_id)
        wait = initial if previous is None else min(ceiling, previous[1] * 2)
        self._due[outcome.operation_id] = (self._clock() + wait, wait)


def _tools(tools: ToolIndex | str | Sequence[object] | None) -> ToolIndex:
    if isinstance(tools, ToolIndex):
        return tools
    if tools is None:
        from_env = os.environ.get(TOOLS_VARIABLE)
        return known_tools() if not from_env else known_tools().merged(load_tools(from_env))
    return load_tools(tools)


def recover(
    ledger: EffectLedger | str | os.PathLike[str] | None = None,
    *,
    tools: ToolIndex | str | Sequence[object] | None = None,
    statuses: Iterable[EffectStatus] | None = None,
    limit: int = _DEFAULT_BATCH,
    dry_run: bool = False,
    actor: str | None = None,
) -> RecoveryReport:
    """Re-probe every uncertain operation nobody is working on, once; never dispatch.

    ``ledger`` is a ledger, a path or URL (opened and closed here), or None for
    the executor :func:`effectguard.configure` set. ``tools`` names where the
    probes are: a :class:`~effectguard.operator.ToolIndex`, module
    names (``"billing.tools,mail.tools"``) or tool objects; None means every
    tool decorated in this process (plus the ``EFFECTGUARD_TOOLS`` modules).
    An operation whose tool is not among them is reported as skipped. The
    probe's answer is recorded with ``actor`` (default: the OS account).
    """
    index = _tools(tools)
    owned = False
    if ledger is None:
        from effectguard._decorator import default_executor  # noqa: PLC0415 - config imports this module lazily

        executor = default_executor()
        if executor is None:
            msg = "recover() needs a ledger: pass ledger= or call effectguard.configure() first"
            raise ConfigurationError(msg)
        opened = executor.ledger
    elif isinstance(ledger, EffectLedger):
        opened = ledger
    else:
        opened, owned = open_ledger(ledger, create=False), True
    try:
        recoverer = Recoverer(
            opened, index, statuses=statuses, limit=limit, dry_run=dry_run, actor=actor
        )
        return recoverer.sweep()
    finally:
        if owned:
            opened.close()


def start_recovery(
    ledger: EffectLedger, tools: ToolIndex | str | Sequence[object] | None = None
) -> tuple[threading.Thread, Recoverer]:
    """Run one sweep of ``ledger`` in a daemon thread; it logs what it changed, never raises.

    Returns the thread and its :class:`Recoverer` (set ``stopped`` to end the
    sweep before its next operation).
    """
    recoverer = Recoverer(ledger, ToolIndex(), actor=f"recovery on start as {os_user()}")

    def run() -> None:
        try:
            recoverer.tools = _tools(tools)
            report = recoverer.sweep()
        except Exception:
            logger.exception("recovery sweep on start failed; run `agent-effect-ops reconcile`")
            return
        logger.info(
            "recovery sweep on start: %d probed, %d changed, %d skipped",
            len(report.probed),
            len(report.changed),
            len(report.skipped),
        )
        for outcome in report.changed:
            logger.info(
                "recovered %r: %s -> %s (%s)",
                outcome.operation_id,
                outcome.before.value,
                outcome.after.value,
                outcome.reason,
            )

    thread = threading.Thread(target=run, name="effectguard-recover-on-start", daemon=True)
    thread.start()
    return thread, recoverer
