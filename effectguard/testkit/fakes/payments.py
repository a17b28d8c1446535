"""A fake payment API with Stripe-like idempotency keys, or none."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from effectguard._model import OutcomeProbeResult
from effectguard.testkit.fakes.base import FakeProvider, Lookup
from effectguard.testkit.faults import FaultPlan

__all__ = ["FakePaymentProvider"]


class FakePaymentProvider(FakeProvider):
    """A payment API with Stripe-like idempotency keys, or none, and a lookup of chosen strength.

    With ``idempotency_guaranteed=True`` a capture resent with the same key
    returns the first response and commits nothing new; the same key with other
    parameters is refused; the same key while the first is still processing is
    a conflict. Without it, every request that reaches the provider commits.
    A capture's reference (what :meth:`committed` and lookups take) is its
    idempotency key, or ``invoice:<invoice_id>`` when sent without one.
    """

    def __init__(
        self,
        *,
        idempotency_guaranteed: bool = True,
        lookup: Lookup = Lookup.STRONG,
        visible_after_reads: int = 0,
        faults: FaultPlan | None = None,
        path: str | os.PathLike[str] | None = None,
        late_commit_after: float = 5.0,
    ) -> None:
        super().__init__(
            lookup=lookup,
            visible_after_reads=visible_after_reads,
            faults=faults,
            path=path,
            late_commit_after=late_commit_after,
        )
        self.idempotency_guaranteed = idempotency_guaranteed

    def capture(
        self, invoice_id: str, amount_cents: int, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Capture ``amount_cents`` for ``invoice_id``; returns the capture on acknowledgement."""
        reference = idempotency_key or f"invoice:{invoice_id}"
        body = {"invoice_id": invoice_id, "amount_cents": amount_cents}

        def response(seq: int) -> dict[str, Any]:
            return {"id": f"cap_{seq:06d}", "status": "succeeded", **body}

        return self._submit(
            reference,
            idempotency_key,
            body,
            deduplicate=self.idempotency_guaranteed,
            make_response=response,
        )

    def find_capture(self, reference: str) -> dict[str, Any] | None:
        """Look a capture up by idempotency key (or ``invoice:<id>`` without one)."""
        found = self._find(reference)
        return None if found is None or found[0] != "committed" else found[1]

    def probe(
        self, arguments: Mapping[str, Any], *, idempotency_key: str | None
    ) -> OutcomeProbeResult:
        """An outcome probe for a capture contract, as strong as this provider's lookup."""
        return self._probe(idempotency_key or f"invoice:{arguments['invoice_id']}")

    def handler(
        self, arguments: Mapping[str, Any], *, idempotency_key: str | None
    ) -> dict[str, Any]:
        """An executor handler capturing ``amount_cents`` for ``invoice_id`` from ``arguments``."""
        return self.capture(
            arguments["invoice_id"], arguments["amount_cents"], idempotency_key=idempotency_key
        )
