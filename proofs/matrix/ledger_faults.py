"""The ledger's own faults in a matrix episode, each with the outcome it must have.

Played by the matrix's process on the handle a fault can break
(:meth:`~proofs.matrix.site.Site.open_faulty`), before the
episode's ordinary call rounds:

- ``ledger-unavailable-at-claim``: the ledger cannot be written when the call
  claims (SQLite: another connection holds the exclusive lock; PostgreSQL:
  the proxy refuses connections). Expected: the call fails with
  :class:`~effectguard.errors.LedgerUnavailableError` and the provider
  receives nothing.
- ``ledger-unavailable-at-outcome``: the request is sent, then the ledger
  cannot be written. Expected: the call fails with a ledger error and the
  row stays DISPATCHED; later (time moves past the lease) a call reconciles
  it instead of dispatching on the strength of a missing record.
- ``lost-claim-ack`` / ``lost-outcome-ack`` (PostgreSQL): the write commits
  but the proxy drops the connection before its answer. Expected: the
  write is recognised as done: the call is not refused.
- ``clock-jump`` is played by :mod:`~proofs.matrix.stall`.

Whatever happens, the matrix's invariants are judged by the provider's count.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from effectguard import EffectStatus, LedgerUnavailableError
from effectguard.errors import InternalError
from effectguard.testkit._crash.kinds import Setup
from effectguard.testkit.faults import LedgerFault
from proofs.matrix.context import EpisodeContext
from proofs.matrix.site import CLAIM_MARKER, OUTCOME_MARKER

__all__ = ["EXPECTED", "LedgerFaultOutcome", "play"]

#: How long the faulty handle may take to answer again before a fault is played on it.
_READY_SECONDS = 30.0
#: An operation id no episode uses: reading it checks the handle, and changes nothing.
_WARM_UP = "effectguard-matrix:ready"

#: The outcome each ledger fault must have; an episode that misses it fails the report.
EXPECTED = {
    LedgerFault.UNAVAILABLE_AT_CLAIM: "refused with a ledger error; nothing sent",
    LedgerFault.UNAVAILABLE_AT_OUTCOME: "ledger error; row stays DISPATCHED; reconciled later",
    LedgerFault.LOST_CLAIM_ACK: "the committed claim is recognised; the call goes on",
    LedgerFault.LOST_OUTCOME_ACK: "the committed outcome is recognised; the call goes on",
    LedgerFault.CLOCK_JUMP: "the jumped caller takes over; the owner's late write is fenced",
}


@dataclass(frozen=True, slots=True)
class LedgerFaultOutcome:
    """What the faulted call did."""

    calls: int
    refused: int
    as_expected: bool
    """Whether the fault had the outcome :data:`EXPECTED` states (a clock jump's: judged later)."""


def play(fault: LedgerFault, setup: Setup, context: EpisodeContext) -> LedgerFaultOutcome:
    """Make one call that ``fault`` breaks; return what it did."""
    if fault in (LedgerFault.UNAVAILABLE_AT_CLAIM, LedgerFault.UNAVAILABLE_AT_OUTCOME):
        return _unavailable(fault, setup, context)
    if fault in (LedgerFault.LOST_CLAIM_ACK, LedgerFault.LOST_OUTCOME_ACK):
        return _lost_ack(fault, setup, context)
    msg = f"ledger fault {fault!r} is not played here"
    raise InternalError(msg)


def _ready(context: EpisodeContext) -> None:
    """Wait until the faulty handle answers again (its pool reconnects after the last outage).

    A refusal before the fault is switched on would be the harness's own
    slowness under load, not the fault's outcome.
    """
    deadline = time.monotonic() + _READY_SECONDS
    while True:
        try:
            context.faulty.get(_WARM_UP)
        except LedgerUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        else:
            return


def _unavailable(fault: LedgerFault, setup: Setup, context: EpisodeContext) -> LedgerFaultOutcome:
    site = context.site
    _ready(context)
    before = setup.provider.attempts()
    handler = setup.handler
    if fault is LedgerFault.UNAVAILABLE_AT_CLAIM:
        site.make_unavailable()
    else:
        handler = _then(setup.handler, site.make_unavailable)
    refused = False
    try:
        context.faulty_executor.execute(setup.contract, setup.arguments, handler)
    except LedgerUnavailableError:
        refused = True
    finally:
        site.make_available()
    record = context.ledger.get(setup.operation_id)
    if fault is LedgerFault.UNAVAILABLE_AT_CLAIM:
        expected = refused and setup.provider.attempts() == before
    else:
        expected = refused and record is not None and record.status is EffectStatus.DISPATCHED
        # Later: the held lease has expired by the time anyone calls again.
        context.clock.advance(setup.lease_seconds + 1)
    return LedgerFaultOutcome(calls=1, refused=int(refused), as_expected=expected)


def _lost_ack(fault: LedgerFault, setup: Setup, context: EpisodeContext) -> LedgerFaultOutcome:
    site = context.site
    handler = setup.handler
    if fault is LedgerFault.LOST_CLAIM_ACK:
        armed = site.lose_ack(CLAIM_MARKER)
    else:
        armed = True
        handler = _then(setup.handler, lambda: site.lose_ack(OUTCOME_MARKER))
    if not armed:
        msg = f"the {site.backend} site cannot lose a commit's acknowledgement"
        raise InternalError(msg)
    lost_before = site.replies_lost()
    refused = False
    try:
        context.patient_executor.execute(setup.contract, setup.arguments, handler)
    except LedgerUnavailableError:
        refused = True
    finally:
        site.keep_replies()
    lost = site.replies_lost() - lost_before
    return LedgerFaultOutcome(calls=1, refused=int(refused), as_expected=not refused and lost == 1)


def _then(handler: Callable[..., Any], action: Callable[[], object]) -> Callable[..., Any]:
    """``handler``, with ``action`` run after its first request, whatever that request did."""
    done = False

    def wrapped(arguments: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
        nonlocal done
        first, done = not done, True
        try:
            return handler(arguments, idempotency_key=idempotency_key)
        finally:
            if first:
                action()

    return wrapped
