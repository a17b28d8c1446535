"""Claiming an operation, or taking over one that nobody is working on.

Functions over the :class:`~effectguard.executor.machine.StateMachine` (as in
:mod:`~effectguard.executor.not_sent`), so its rules stay in one machine
while each concept keeps a module of its own: :func:`claim` is the first
write of a new operation (PREPARED and DISPATCHED in one commit, durable
before the handler runs); :func:`take_over` is the fenced write that moves a
record whose holder is gone or whose lease expired to this call's lease.
"""

from __future__ import annotations

import functools
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from effectguard.errors import FencedWriteError, InternalError
from effectguard.executor.lease import abandoned, live_overlap
from effectguard.executor.steps import LedgerStep
from effectguard.fingerprint import redact_arguments
from effectguard.ledger.protocol import UNSET, Changes, EventDraft, Expect, NewOperation
from effectguard.model import EffectStatus, EventType, OperationRecord, OverlapHolder

if TYPE_CHECKING:
    from effectguard.executor.machine import StateMachine
    from effectguard.executor.steps import Call, Step
    from effectguard.ledger.asyncledger import AsyncLedger

__all__ = ["HELD", "claim", "claim_async", "claim_step", "take_over"]

#: Statuses whose lease holder may have left an attempt in flight.
HELD = frozenset({EffectStatus.DISPATCHED, EffectStatus.RECONCILING})


def claim_step(machine: StateMachine, call: Call, token: str) -> LedgerStep:
    """The step that claims the operation: :func:`claim`, or :func:`claim_async` on a loop."""
    writes = machine.async_ledger if call.on_loop else None
    return LedgerStep(
        functools.partial(machine.claim, call, token),
        None if writes is None else functools.partial(claim_async, machine, call, token, writes),
    )


def claim(machine: StateMachine, call: Call, token: str) -> tuple[OperationRecord, bool]:
    """Insert the operation as DISPATCHED under ``token``, or return the record found."""
    operation, events = _new(machine, call, token)
    record, created = machine.ledger.claim(operation, events, now=machine.now())
    if created:
        machine.notify(call, events, record)
    return record, created


async def claim_async(
    machine: StateMachine, call: Call, token: str, writes: AsyncLedger
) -> tuple[OperationRecord, bool]:
    """:func:`claim` on an event loop, through the ledger's async form of the write."""
    operation, events = _new(machine, call, token)
    record, created = await writes.claim_async(operation, events, now=machine.now())
    if created:
        machine.notify(call, events, record)
    return record, created


def _new(
    machine: StateMachine, call: Call, token: str
) -> tuple[NewOperation, tuple[EventDraft, EventDraft]]:
    operation = NewOperation(
        operation_id=call.operation_id,
        contract=call.contract.name,
        contract_version=call.contract.version,
        fingerprint=call.fingerprint,
        provider_key=call.provider_key,
        arguments=redact_arguments(call.arguments, call.contract.redact),
        attempt_budget=call.contract.max_attempts,
        lease=machine.lease(call, token),
    )
    # PREPARED and DISPATCHED share one commit: it is durable before the handler runs.
    events = (
        EventDraft(EventType.PREPARED, None, EffectStatus.PREPARED, 0),
        EventDraft(EventType.DISPATCHED, EffectStatus.PREPARED, EffectStatus.DISPATCHED, 1),
    )
    return operation, events


def take_over(
    machine: StateMachine, call: Call, record: OperationRecord, token: str
) -> Generator[Step, Any, OperationRecord | None]:
    """Take the lease of a record nobody is working on; None if another writer won."""
    status = record.status
    if status is EffectStatus.PREPARED:
        step = _from_prepared(machine, call, record, token)
    elif status in HELD:
        step = _from_held(machine, call, record, token)
    else:
        expect = Expect(
            statuses=frozenset({status}), lease_expired=True, event_count=record.event_count
        )
        changes = Changes(EffectStatus.RECONCILING, lease=machine.lease(call, token))
        event = EventDraft(EventType.RECONCILING, status, EffectStatus.RECONCILING, record.attempts)
        step = machine.write(call, expect, changes, event)
    try:
        taken: OperationRecord = yield step
    except FencedWriteError:
        return None
    return taken


def _from_prepared(
    machine: StateMachine, call: Call, record: OperationRecord, token: str
) -> LedgerStep:
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
    changes = Changes(EffectStatus.DISPATCHED, lease=machine.lease(call, token), attempts=attempt)
    event = EventDraft(EventType.DISPATCHED, status, EffectStatus.DISPATCHED, attempt)
    return machine.write(call, expect, changes, event)


def _from_held(
    machine: StateMachine, call: Call, record: OperationRecord, token: str
) -> LedgerStep:
    """Reconcile a DISPATCHED or RECONCILING row whose holder is gone or whose lease expired."""
    status = record.status
    gone = abandoned(record.lease_token, record.lease_owner)
    overlap = list(live_overlap(record))
    if status is EffectStatus.DISPATCHED and not gone and record.lease_owner:
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
        EffectStatus.RECONCILING,
        lease=machine.lease(call, token),
        overlap=tuple(overlap),
        reason=f"outcome unknown: {reason}",
        evidence=evidence,
    )
    unknown = EffectStatus.OUTCOME_UNKNOWN
    # The event names what was proven: the holder's process is gone, or only its lease ran out.
    kind = EventType.OWNER_GONE if gone else EventType.LEASE_EXPIRED
    return machine.write(
        call,
        expect,
        changes,
        EventDraft(kind, status, unknown, record.attempts, evidence),
        EventDraft(EventType.RECONCILING, unknown, EffectStatus.RECONCILING, record.attempts),
    )
