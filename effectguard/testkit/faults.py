"""Fault plans: which failure a fake provider injects into which attempt."""

from __future__ import annotations

import enum
import random
from collections.abc import Mapping, Sequence

__all__ = ["Fault", "FaultPlan", "LedgerFault"]


class Fault(enum.StrEnum):
    """A failure at the provider boundary, as a client would experience it."""

    NONE = "none"
    """The request commits and is acknowledged."""

    FAIL_BEFORE_COMMIT = "fail_before_commit"
    """The request fails before the provider commits anything (the client sees an error)."""

    UNREACHABLE = "unreachable"
    """The destination refuses the connection: nothing is sent (``ConnectionRefusedError``).

    The attempt counts in the plan's numbering, but no request reaches the provider.
    """

    LOSE_ACK = "lose_ack"
    """The provider commits, then the acknowledgement is lost (the client sees a timeout)."""

    LATE_COMMIT = "late_commit"
    """The request is held until released (or ``late_commit_after`` passes), then commits."""

    PENDING = "pending"
    """The provider accepts the request but lookups report it pending for a while."""

    CRASH_BEFORE_COMMIT = "crash_before_commit"
    """The calling process is killed with SIGKILL before the provider commits."""

    CRASH_AFTER_COMMIT = "crash_after_commit"
    """The provider commits, then the calling process is killed with SIGKILL."""


class LedgerFault(enum.StrEnum):
    """A failure of the ledger, of the network to it, or of the caller's clock.

    Where :class:`Fault` breaks the provider, these break the caller's own
    record: the fault matrix plays each and states the outcome it expects.
    """

    NONE = "none"
    """The ledger answers every call."""

    UNAVAILABLE_AT_CLAIM = "ledger-unavailable-at-claim"
    """The ledger cannot be written when the operation is claimed: nothing may be dispatched."""

    UNAVAILABLE_AT_OUTCOME = "ledger-unavailable-at-outcome"
    """The ledger cannot be written once the request was sent: the row stays DISPATCHED."""

    LOST_CLAIM_ACK = "lost-claim-ack"
    """The ledger commits the claim but its acknowledgement is lost (PostgreSQL, over TCP)."""

    LOST_OUTCOME_ACK = "lost-outcome-ack"
    """The ledger commits the outcome but its acknowledgement is lost (PostgreSQL, over TCP)."""

    CLOCK_JUMP = "clock-jump"
    """A caller's clock jumps past a live lease while its owner is still sending."""


class FaultPlan:
    """The fault each attempt of a request meets, by attempt number (1-based).

    Attempts are counted per request identity at the provider (its idempotency
    key, or its natural id when it has none). Unplanned attempts meet
    :attr:`Fault.NONE`. ``pending_probes`` is how many lookups report a
    PENDING request as pending before it commits.
    """

    def __init__(
        self,
        faults: Mapping[int, Fault] | Sequence[Fault] = (),
        *,
        pending_probes: int = 2,
    ) -> None:
        if isinstance(faults, Mapping):
            planned = {int(attempt): Fault(fault) for attempt, fault in faults.items()}
        else:
            planned = {index: Fault(fault) for index, fault in enumerate(faults, start=1)}
        if any(attempt < 1 for attempt in planned):
            msg = "fault plan attempts are numbered from 1"
            raise ValueError(msg)
        if pending_probes < 0:
            msg = "pending_probes must be >= 0"
            raise ValueError(msg)
        self._faults = planned
        self.pending_probes = pending_probes

    def fault_for(self, attempt: int) -> Fault:
        """Return the fault planned for ``attempt``."""
        return self._faults.get(attempt, Fault.NONE)

    @property
    def faults(self) -> dict[int, Fault]:
        """A copy of the planned faults by attempt number (unplanned attempts meet NONE)."""
        return dict(sorted(self._faults.items()))

    def set(self, attempt: int, fault: Fault) -> FaultPlan:
        """Plan ``fault`` for ``attempt`` (replacing what was planned); returns the plan.

        A plan may be changed while providers use it: the next request reads it.
        """
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
            msg = f"fault plan attempts are numbered from 1, not {attempt!r}"
            raise ValueError(msg)
        self._faults[attempt] = Fault(fault)
        return self

    def update(self, faults: Mapping[int, Fault] | Sequence[Fault]) -> FaultPlan:
        """Plan several faults at once, by attempt or in order from attempt 1; returns the plan."""
        planned = FaultPlan(faults)._faults  # noqa: SLF001 - validated by the constructor
        self._faults.update(planned)
        return self

    def clear(self) -> FaultPlan:
        """Forget every planned fault, so every attempt meets NONE; returns the plan."""
        self._faults.clear()
        return self

    @classmethod
    def random(
        cls,
        rng: random.Random,
        *,
        faults: Sequence[Fault] = tuple(Fault),
        attempts: int = 3,
        pending_probes: int = 2,
    ) -> FaultPlan:
        """Return a plan drawing each attempt's fault from ``faults`` with ``rng``."""
        return cls(
            {attempt: rng.choice(list(faults)) for attempt in range(1, attempts + 1)},
            pending_probes=pending_probes,
        )

    def __repr__(self) -> str:
        planned = ", ".join(
            f"{attempt}: {fault.value}" for attempt, fault in sorted(self._faults.items())
        )
        return f"FaultPlan({{{planned}}}, pending_probes={self.pending_probes})"
