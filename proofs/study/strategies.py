"""Four ways of calling a tool with a side effect, as honest baselines beside effectguard.

Each strategy makes one logical call (``run``); the study calls it again after
a crash, as a restarted process would. Each gets at most
:data:`ATTEMPTS` requests per call, the same budget as effectguard's
``max_attempts``. None is a straw man: each is what a careful team writes
when it has only that tool.

- **naive retry**: resend on any error, without a stable key.
- **verify then retry**: after an error, read the destination; resend only if
  the read says it is not there (the verification-only strategy). Without a
  lookup it can only resend.
- **provider key only**: forward one stable idempotency key and resend with
  it on any error; no ledger.
- **effectguard**: an :class:`~effectguard.EffectExecutor` with the contract
  the destination honestly supports.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from effectguard import (
    EffectContract,
    EffectExecutor,
    EffectStatus,
    OutcomeProbeResult,
    UnknownOutcomePolicy,
)
from proofs.study.destination import Destination, Lookup

__all__ = ["ATTEMPTS", "Outcome", "Strategy", "Subject", "call", "contract_for"]

#: Requests a strategy may make per call (effectguard's default ``max_attempts``).
ATTEMPTS = 3


class Strategy(enum.StrEnum):
    """The ways of calling a tool the study compares."""

    NAIVE = "naive-retry"
    VERIFY = "verify-then-retry"
    KEY_ONLY = "provider-key-only"
    EFFECTGUARD = "effectguard"


class Outcome(enum.StrEnum):
    """What a call told its caller."""

    DONE = "done"
    """The strategy believes the effect happened."""
    GAVE_UP = "gave-up"
    """The strategy reported a failure: the agent moves on."""
    TICKET = "ticket"
    """The strategy left it for an operator (quarantined, or outcome kept unknown)."""


@dataclass(frozen=True, slots=True)
class Subject:
    """One operation of the study: its id and its stable key."""

    operation_id: str
    key: str


def call(
    strategy: Strategy,
    destination: Destination,
    subject: Subject,
    executor: EffectExecutor | None = None,
) -> Outcome:
    """Make one call with ``strategy``; a ``Crash`` propagates (the process died)."""
    if strategy is Strategy.NAIVE:
        return _resend(destination, None)
    if strategy is Strategy.KEY_ONLY:
        return _resend(destination, subject.key)
    if strategy is Strategy.VERIFY:
        return _verify(destination)
    if executor is None:
        msg = "the effectguard strategy needs an executor"
        raise ValueError(msg)
    return _guarded(destination, subject, executor)


def _resend(destination: Destination, key: str | None) -> Outcome:
    for _ in range(ATTEMPTS):
        try:
            destination.send(key)
        except Exception:  # noqa: BLE001, S112 - this strategy resends on any error, by definition
            continue
        return Outcome.DONE
    return Outcome.GAVE_UP


def _verify(destination: Destination) -> Outcome:
    can_read = destination.lookup is not Lookup.NONE
    if can_read and destination.find() != "missing":
        return Outcome.DONE  # a restarted process checks before it sends
    for _ in range(ATTEMPTS):
        try:
            destination.send(None)
        except Exception:  # noqa: BLE001 - an error sends it to the read
            if can_read and destination.find() != "missing":
                return Outcome.DONE
            continue
        return Outcome.DONE
    return Outcome.GAVE_UP


def contract_for(destination: Destination, name: str) -> EffectContract:
    """The contract a careful team declares for ``destination``: no more than it guarantees."""

    def probe(arguments: object, *, idempotency_key: str | None) -> OutcomeProbeResult:  # noqa: ARG001 - the probe's signature
        seen = destination.find()
        if seen == "found":
            return OutcomeProbeResult.committed({"found": True})
        if seen == "pending":
            return OutcomeProbeResult.pending({"lookup": "pending"})
        if destination.lookup is Lookup.STRONG:
            return OutcomeProbeResult.not_committed({"lookup": "not found (strong read)"})
        return OutcomeProbeResult.unknown({"lookup": "not found (eventual read)"})

    return EffectContract(
        name=name,
        operation_id=lambda arguments: str(arguments["operation_id"]),
        provider_idempotency_key=lambda arguments: str(arguments["key"]),
        provider_idempotency_guaranteed=destination.keyed,
        provider_key_retention_seconds=destination.retention if destination.keyed else None,
        outcome_probe=probe if destination.lookup is not Lookup.NONE else None,
        unknown_outcome=(
            UnknownOutcomePolicy.KEEP_UNKNOWN
            if destination.lookup is Lookup.EVENTUAL
            else UnknownOutcomePolicy.QUARANTINE
        ),
        max_attempts=ATTEMPTS,
        lease_seconds=30.0,
        not_sent_on=(ConnectionRefusedError,),
    )


def _guarded(destination: Destination, subject: Subject, executor: EffectExecutor) -> Outcome:
    contract = contract_for(destination, f"study-{destination.lookup.value}")

    def handler(arguments: object, *, idempotency_key: str | None) -> dict[str, object]:  # noqa: ARG001 - the handler's signature
        return destination.send(idempotency_key)

    arguments = {"operation_id": subject.operation_id, "key": subject.key}
    status = executor.execute(contract, arguments, handler).status
    if status is EffectStatus.CONFIRMED:
        return Outcome.DONE
    if status is EffectStatus.REJECTED:
        return Outcome.GAVE_UP
    return Outcome.TICKET
