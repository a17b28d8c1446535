"""The reconcile table: what an uncertain outcome becomes, given the evidence.

A pure function of the probe's answer and the contract's guarantees, so the
table can be read, and tested, in one place.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from effectguard.contract import UnknownOutcomePolicy
from effectguard.model import OutcomeProbeResult, ProbeStatus

__all__ = ["Ruling", "Verdict", "decide"]


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
