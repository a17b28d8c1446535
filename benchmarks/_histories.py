"""The operations of a large bench ledger, exactly as the executor writes them.

Each distinct history is produced once by the real state machine: an
:class:`~effectguard.executor.EffectExecutor` calls a testkit fake payment
provider under a :class:`~effectguard.testkit.ManualClock`, on a scratch
ledger of the backend being measured. Most operations were confirmed at once;
every hundredth met a provider timeout, had no probe, and was quarantined.
The large ledger is those histories replicated under new operation ids (the
invoice id changes everywhere it appears, the fingerprint is recomputed, the
chain is hashed afresh, times move on) and written by the ledger's own
``bulk_load``, which checks every chain: nothing here decides what a row or
an event looks like.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from effectguard import EffectContract, EffectExecutor, EffectLedger, EffectStatus
from effectguard._fingerprint import canonical_json, request_fingerprint
from effectguard._model import EffectEvent, OperationRecord
from effectguard.ledger import _chain as chain
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup, ManualClock

__all__ = [
    "CONTRACT",
    "QUARANTINE_EVERY",
    "Shapes",
    "histories",
    "operation_id",
    "record_shapes",
]

#: The contract name bench operations are recorded under.
CONTRACT = "bench.capture"
#: One operation in this many was quarantined; the rest were confirmed.
QUARANTINE_EVERY = 100
#: Microseconds between the starts of consecutive operations.
_SPACING_US = 1000
#: How long the provider takes to answer, by the shapes' clock.
_CONFIRM_SECONDS = 0.0008
_TIMEOUT_SECONDS = 0.0005
_AMOUNT_CENTS = 1999

History = tuple[OperationRecord, list[EffectEvent]]


def _invoice(index: int) -> str:
    return f"INV-{index:08d}"


def operation_id(index: int) -> str:
    """The id of bench operation ``index``."""
    return f"invoice:{_invoice(index)}:capture"


@dataclass(frozen=True, slots=True)
class Shapes:
    """One operation of each history, as the executor wrote it, and the index it stands for."""

    confirmed: History
    quarantined: History
    confirmed_index: int
    quarantined_index: int


def _capture(ledger: EffectLedger, clock: ManualClock, index: int, *, times_out: bool) -> History:
    """Run one capture through the executor; return its record and events as stored."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=not times_out,
        lookup=Lookup.NONE if times_out else Lookup.STRONG,
        faults=FaultPlan({1: Fault.LOSE_ACK}) if times_out else FaultPlan(),
    )
    try:

        def handler(arguments: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
            clock.advance(_TIMEOUT_SECONDS if times_out else _CONFIRM_SECONDS)
            return provider.handler(arguments, idempotency_key=idempotency_key)

        contract = EffectContract(
            name=CONTRACT,
            operation_id=lambda arguments: f"invoice:{arguments['invoice_id']}:capture",
            provider_idempotency_key=lambda arguments: f"capture:{arguments['invoice_id']}",
            provider_idempotency_guaranteed=not times_out,
            outcome_probe=None if times_out else provider.probe,
            provider_operation_id=lambda output: output["id"],
        )
        arguments = {"amount_cents": _AMOUNT_CENTS, "invoice_id": _invoice(index)}
        result = EffectExecutor(ledger, clock=clock).execute(contract, arguments, handler)
        wanted = EffectStatus.QUARANTINED if times_out else EffectStatus.CONFIRMED
        # The provider's own count, not the executor's report, says the capture happened once.
        if result.status is not wanted or provider.committed() != 1:
            msg = f"the bench's {wanted.value} history came out {result.status.value}"
            raise RuntimeError(msg)
    finally:
        provider.close()
    record = ledger.get(operation_id(index), now=clock())
    if record is None:
        msg = f"the executor left no record of {operation_id(index)!r}"
        raise RuntimeError(msg)
    return record, ledger.events(operation_id(index))


def record_shapes(ledger: EffectLedger, start: float) -> Shapes:
    """Write one operation of each history into the empty ``ledger``, starting at ``start``."""
    clock = ManualClock(start)
    confirmed = _capture(ledger, clock, 0, times_out=False)
    clock.advance(_SPACING_US / 1_000_000)
    last = QUARANTINE_EVERY - 1
    quarantined = _capture(ledger, clock, last, times_out=True)
    return Shapes(confirmed, quarantined, 0, last)


def _retargeted(value: Mapping[str, Any], old: str, new: str) -> Mapping[str, Any]:
    """``value`` with ``old`` replaced by ``new`` in every string (most have none: kept as is)."""
    if not value:
        return value
    text = canonical_json(dict(value))
    return json.loads(text.replace(old, new)) if old in text else value


def _recommitted(
    commits: Mapping[str, Any], swaps: Mapping[str | None, str | None], old: str, new: str
) -> Mapping[str, Any]:
    """``commits`` with the template's digests swapped for the replica's, ids retargeted."""
    if not commits:
        return commits
    return {
        name: swaps.get(value, value)
        if name in {"fingerprint", "arguments", "output"}
        else value.replace(old, new)
        if isinstance(value, str) and name != "lease"
        else value
        for name, value in commits.items()
    }


def _replica(shape: History, shape_index: int, index: int, shift: timedelta) -> History:
    """``shape`` as operation ``index``: its invoice id swapped in, ``shift`` later, rehashed."""
    record, events = shape
    old, new = _invoice(shape_index), _invoice(index)
    arguments = _retargeted(record.arguments, old, new)
    evidence = [_retargeted(event.evidence, old, new) for event in events]
    new_id = operation_id(index)
    key = None if record.provider_key is None else record.provider_key.replace(old, new)
    fingerprint = request_fingerprint(record.contract, record.contract_version, arguments, key)
    output_json = None if record.output_json is None else record.output_json.replace(old, new)
    # The events commit to the row (chain.commits_of): to the replica's, not the template's.
    # The fingerprint commits by its first 16 hex digits and covers the arguments itself.
    swaps = {
        record.fingerprint[:16]: fingerprint[:16],
        chain.digest(canonical_json(dict(record.arguments))): chain.digest(
            canonical_json(dict(arguments))
        ),
        chain.digest(record.output_json): chain.digest(output_json),
    }
    linked = chain.relink(
        new_id,
        [
            dataclasses.replace(
                event, evidence=moved, commits=_recommitted(event.commits, swaps, old, new)
            )
            for event, moved in zip(events, evidence, strict=True)
        ],
        shift=shift,
    )
    replica = dataclasses.replace(
        record,
        operation_id=new_id,
        fingerprint=fingerprint,
        provider_key=key,
        arguments=arguments,
        output_json=output_json,
        reason=None if record.reason is None else record.reason.replace(old, new),
        evidence=_retargeted(record.evidence, old, new),
        lease_expires_at=(
            None if record.lease_expires_at is None else record.lease_expires_at + shift
        ),
        created_at=record.created_at + shift,
        updated_at=record.updated_at + shift,
        first_dispatched_at=record.first_dispatched_at + shift,
        event_head=linked[-1].hash,
    )
    return replica, linked


def histories(shapes: Shapes, count: int, end_us: int) -> Iterator[History]:
    """Yield ``count`` operations, the last of them starting shortly before ``end_us``."""
    start_us = end_us - (count + 1) * _SPACING_US
    for index in range(count):
        quarantined = index % QUARANTINE_EVERY == QUARANTINE_EVERY - 1
        shape = shapes.quarantined if quarantined else shapes.confirmed
        shape_index = shapes.quarantined_index if quarantined else shapes.confirmed_index
        at_us = start_us + index * _SPACING_US
        shift = chain.from_micros(at_us) - shape[0].created_at
        yield _replica(shape, shape_index, index, shift)
