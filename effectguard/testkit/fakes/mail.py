"""A fake email API: no idempotency, a sent log searchable by Message-ID."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

from effectguard._model import OutcomeProbeResult
from effectguard.testkit.fakes.base import FakeProvider, Lookup
from effectguard.testkit.faults import FaultPlan

__all__ = ["FakeEmailProvider"]

#: The domain of the Message-IDs :meth:`FakeEmailProvider.message_id_for` makes.
DEFAULT_DOMAIN = "effectguard.invalid"


class FakeEmailProvider(FakeProvider):
    """An email API that delivers every send it accepts: resending sends again.

    It has no idempotency, like SMTP and most mail APIs. What makes an email
    effect recoverable is the Message-ID: a contract that sets a deterministic
    one (:meth:`message_id_for` the operation id, forwarded as the provider key)
    can look the sent log up by it (:meth:`probe`, as strong as ``lookup``).
    A message's reference (what :meth:`committed` and lookups take) is its
    Message-ID.
    """

    def __init__(
        self,
        *,
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

    @staticmethod
    def message_id_for(operation_id: str, *, domain: str = DEFAULT_DOMAIN) -> str:
        """Return the Message-ID for ``operation_id``: the same for every attempt and process."""
        digest = hashlib.sha256(operation_id.encode("utf-8")).hexdigest()[:32]
        return f"<{digest}@{domain}>"

    def send(
        self, to: str, subject: str, body: str, *, message_id: str | None = None
    ) -> dict[str, Any]:
        """Send one message; returns ``{"id", "message_id", "to", "subject", "status"}``.

        Without ``message_id`` the provider assigns one, which the caller learns
        only from the acknowledgement: such a send cannot be looked up after a
        lost acknowledgement.
        """
        request = {"to": to, "subject": subject, "body": body, "message_id": message_id}
        reference = (
            message_id
            or "unidentified:"
            + hashlib.sha256(f"{to}\n{subject}\n{body}".encode()).hexdigest()[:16]
        )

        def response(seq: int) -> dict[str, Any]:
            assigned = message_id or f"<msg-{seq:06d}@{DEFAULT_DOMAIN}>"
            return {
                "id": assigned,
                "message_id": assigned,
                "to": to,
                "subject": subject,
                "status": "sent",
            }

        return self._submit(
            reference, message_id, request, deduplicate=False, make_response=response
        )

    def find_message(self, message_id: str) -> dict[str, Any] | None:
        """Search the sent log for ``message_id``; None when not (yet) visible."""
        found = self._find(message_id)
        return None if found is None or found[0] != "committed" else found[1]

    def probe(
        self, arguments: Mapping[str, Any], *, idempotency_key: str | None
    ) -> OutcomeProbeResult:
        """An outcome probe for a mail contract: the sent log searched by Message-ID.

        The Message-ID is the provider key, else ``arguments["message_id"]``;
        without either the probe can only answer UNKNOWN.
        """
        message_id = idempotency_key or arguments.get("message_id")
        if not message_id:
            return OutcomeProbeResult.unknown({"lookup": "no Message-ID to search the sent log by"})
        return self._probe(str(message_id))

    def handler(
        self, arguments: Mapping[str, Any], *, idempotency_key: str | None
    ) -> dict[str, Any]:
        """An executor handler sending ``to``/``subject``/``body``, with the key as Message-ID."""
        message_id = idempotency_key or arguments.get("message_id")
        return self.send(
            arguments["to"],
            arguments["subject"],
            arguments["body"],
            message_id=None if message_id is None else str(message_id),
        )
