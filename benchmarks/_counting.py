"""A ledger that counts the executor's reads and writes, to say how many commits a call takes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from effectguard import EffectLedger
from effectguard._model import OperationRecord
from effectguard.ledger._protocol import Changes, EventDraft, Expect, NewOperation
from effectguard.testkit._ledgers import DelegatingLedger

__all__ = ["CountingLedger"]

#: The primitives that write; each is one commit (EffectLedger's contract). A claim
#: that found its operation already there is counted as ``claim_found``, a read.
WRITES = ("claim", "transition", "renew")


class CountingLedger(DelegatingLedger):
    """Delegates to ``ledger`` and counts each primitive called, in ``calls``.

    Like every :class:`DelegatingLedger` it shows the ledger's ``claims_first``,
    so a measured call takes the path it takes without the counting.
    """

    def __init__(self, ledger: EffectLedger) -> None:
        super().__init__(ledger)
        self.calls: Counter[str] = Counter()

    @property
    def writes(self) -> int:
        """Commits so far: every claim, transition and renewal."""
        return sum(self.calls[name] for name in WRITES)

    @property
    def reads(self) -> int:
        """Plain reads of one operation so far, counting claims that found it instead."""
        return self.calls["get"] + self.calls["claim_found"]

    def claim(
        self, operation: NewOperation, *, now: float | None = None
    ) -> tuple[OperationRecord, bool]:
        """See :meth:`EffectLedger.claim`."""
        claimed = super().claim(operation, now=now)
        # A claim that found the operation committed nothing: it was a read.
        self.calls["claim" if claimed[1] else "claim_found"] += 1
        return claimed

    def transition(
        self,
        operation_id: str,
        expect: Expect,
        changes: Changes,
        events: Sequence[EventDraft],
        *,
        now: float | None = None,
        known: OperationRecord | None = None,
    ) -> OperationRecord:
        """See :meth:`EffectLedger.transition`."""
        self.calls["transition"] += 1
        return super().transition(operation_id, expect, changes, events, now=now, known=known)

    def renew(
        self, operation_id: str, lease_token: str, seconds: float, *, now: float | None = None
    ) -> None:
        """See :meth:`EffectLedger.renew`."""
        self.calls["renew"] += 1
        super().renew(operation_id, lease_token, seconds, now=now)

    def get(self, operation_id: str, *, now: float | None = None) -> OperationRecord | None:
        """See :meth:`EffectLedger.get`."""
        self.calls["get"] += 1
        return super().get(operation_id, now=now)
