"""Asking the provider again about an operation nobody is working on, and writing the answer.

An operator, a recovery sweep or a service starting up calls :func:`reprobe` on
an OUTCOME_UNKNOWN, RECONCILING, QUARANTINED or abandoned DISPATCHED
operation. It runs the contract's probe with the arguments and provider key the
ledger recorded, applies the reconcile table (:func:`effectguard.executor.reconcile.decide`)
as the executor would, and writes what the evidence allows in one fenced write:

- COMMITTED, and the output passes the postcondition and is storable: CONFIRMED;
- an authoritative NOT_COMMITTED with no overlap risk and attempts left:
  PREPARED, so the next call of the tool dispatches it (never a QUARANTINED
  operation: that one waits for a person unless the effect is found committed);
- anything else: the status stays, and the probe's answer is recorded as a
  ``reprobed`` event, so the history shows who asked (the actor given, the OS
  account by uid and the host) and what came back.

Nothing is ever dispatched here. With ``dry_run`` the probe still runs (it
reads, it never sends) but nothing is written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from effectguard.errors import FencedWriteError, IllegalTransitionError
from effectguard.executor import handler as _handler
from effectguard.executor.lease import abandoned, live_overlap
from effectguard.executor.outputs import Stored, jsonable, store
from effectguard.executor.reconcile import Ruling, Verdict, decide
from effectguard.fingerprint import request_fingerprint
from effectguard.ledger.protocol import UNSET, Changes, EventDraft, Expect
from effectguard.ledger.resolution import os_user
from effectguard.ledger.transitions import to_confirmed
from effectguard.model import (
    EffectStatus,
    EventType,
    OperationRecord,
    OutcomeProbeResult,
    OverlapHolder,
    ProbeStatus,
)

if TYPE_CHECKING:
    from effectguard.contract import EffectContract
    from effectguard.ledger.protocol import EffectLedger

__all__ = ["REPROBED_STATUSES", "ReprobeAction", "ReprobeOutcome", "reprobe", "reprobe_problem"]

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
