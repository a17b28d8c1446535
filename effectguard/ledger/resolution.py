"""Audited operator resolution, written once over the ledger primitives.

Every backend's ``confirm``, ``reject`` and ``authorize_retry`` delegate here,
so the rules of which resolution makes sense from which state live in one place.

Each write needs an actor, a reason and an evidence reference (non-empty), and
records the OS account (by uid) and host that made it beside the claimed actor,
in one hash-chained event committed with the change. Refused with
:class:`~effectguard.errors.IllegalTransitionError`, writing nothing: any
resolution of a CONFIRMED or REJECTED operation, a second retry authorization
of a PREPARED one, and anything while a worker holds a live lease on it. A
live lease whose owner process on this host is provably gone (the check the
executor makes, :func:`effectguard.process.process_gone`) does not hold.

With ``dry_run=True`` each function checks the same rules and returns the
record as the resolution would leave it, writing nothing.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import socket
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from effectguard.errors import (
    FencedWriteError,
    IllegalTransitionError,
    InvalidRequestError,
    OperationNotFoundError,
)
from effectguard.fingerprint import canonical_json, check_json_value
from effectguard.ledger.operator_text import hide_redacted
from effectguard.ledger.protocol import UNSET, Changes, EventDraft, Expect
from effectguard.ledger.transitions import to_confirmed
from effectguard.model import EffectStatus, EventType, OperationRecord
from effectguard.process import process_gone

__all__ = ["OperatorResolution", "authorize_retry", "confirm", "os_user", "previewed", "reject"]

_RESOLVABLE = frozenset(
    {
        EffectStatus.PREPARED,
        EffectStatus.DISPATCHED,
        EffectStatus.OUTCOME_UNKNOWN,
        EffectStatus.RECONCILING,
        EffectStatus.QUARANTINED,
    }
)
_RETRYABLE = _RESOLVABLE - {EffectStatus.PREPARED}
_ATTEMPTS = 5


class _Primitives(Protocol):
    def get(self, operation_id: str, *, now: float | None = None) -> OperationRecord | None: ...

    def transition(
        self,
        operation_id: str,
        expect: Expect,
        changes: Changes,
        events: Sequence[EventDraft],
        *,
        now: float | None = None,
    ) -> OperationRecord: ...


def os_user() -> str:
    """Return the account this process runs as, by its uid, never by what the environment says.

    ``getpass.getuser()`` trusts ``$USER`` and ``$LOGNAME`` first, which would make
    the recorded OS user as claimable as the actor it is meant to stand beside.
    """
    getuid = getattr(os, "getuid", None)
    if getuid is None:  # pragma: no cover - no uids on this platform (Windows)
        return getpass.getuser()
    uid = getuid()
    try:
        import pwd  # noqa: PLC0415 - POSIX only

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        # No passwd entry (common in containers): the numeric uid still identifies the account.
        return f"uid {uid}"


def _audit(actor: str, reason: str, evidence_reference: str) -> dict[str, Any]:
    missing = [
        name
        for name, value in (
            ("actor", actor),
            ("reason", reason),
            ("evidence reference", evidence_reference),
        )
        if not isinstance(value, str) or not value.strip()
    ]
    if missing:
        msg = "operator resolution needs " + ", ".join(missing) + " (non-empty)"
        raise InvalidRequestError(msg)
    return {
        "actor": actor.strip(),
        "reason": reason.strip(),
        "evidence_reference": evidence_reference.strip(),
        "os_user": os_user(),
        "host": socket.gethostname(),
    }


def _overridden(record: OperationRecord) -> dict[str, Any]:
    """What the resolution sets aside, for the audit trail: overlap holders and an expired lease."""
    found: dict[str, Any] = {"cleared_overlap": len(record.overlap)}
    if record.lease_owner is not None:
        found["previous_lease_owner"] = record.lease_owner.to_json()
        if record.lease_live:
            found["previous_lease_owner_gone"] = True
    return found


def previewed(record: OperationRecord, changes: Changes) -> OperationRecord:
    """Return ``record`` as it would read after ``changes`` and one more event (nothing written)."""
    updates: dict[str, Any] = {"status": changes.status, "event_count": record.event_count + 1}
    for name in ("attempts", "attempt_budget", "output_json", "provider_operation_id", "reason"):
        value = getattr(changes, name)
        if value is not UNSET:
            updates[name] = value
    if changes.evidence is not UNSET:
        updates["evidence"] = dict(changes.evidence)
    if changes.overlap is not UNSET:
        updates["overlap"] = changes.overlap
    if changes.lease is None:
        updates.update(lease_token=None, lease_owner=None, lease_expires_at=None, lease_live=False)
    return dataclasses.replace(record, **updates)


_Build = Callable[[OperationRecord], tuple[Changes, EventDraft]]


def _check(
    record: OperationRecord | None,
    operation_id: str,
    action: str,
    allowed: frozenset[EffectStatus],
) -> OperationRecord:
    """Return ``record`` if ``action`` makes sense on it now, else raise saying why not."""
    if record is None:
        raise OperationNotFoundError(operation_id)
    if record.status not in allowed:
        msg = f"cannot {action} operation {operation_id!r}: it is {record.status.value}"
        raise IllegalTransitionError(msg)
    # A dead owner's lease is as good as expired: the executor would take it over at once.
    owner_gone = record.lease_owner is not None and process_gone(record.lease_owner)
    if record.lease_live and not owner_gone:
        msg = (
            f"cannot {action} operation {operation_id!r}: a worker holds a live lease on it "
            f"until {record.lease_expires_at:%Y-%m-%d %H:%M:%S} UTC; "
            "wait for it to finish or expire"
        )
        raise IllegalTransitionError(msg)
    return record


def _resolve(
    ledger: _Primitives,
    operation_id: str,
    *,
    action: str,
    allowed: frozenset[EffectStatus],
    build: _Build,
    dry_run: bool = False,
) -> OperationRecord:
    for _ in range(_ATTEMPTS):
        record = _check(ledger.get(operation_id), operation_id, action, allowed)
        changes, event = build(record)
        if dry_run:
            return previewed(record, changes)
        expect = Expect(
            statuses=frozenset({record.status}),
            # The dead owner's token pins the row instead: nobody else took its lease meanwhile.
            lease_token=record.lease_token if record.lease_live else UNSET,
            lease_expired=not record.lease_live,
            event_count=record.event_count,
        )
        try:
            return ledger.transition(operation_id, expect, changes, [event])
        except FencedWriteError:
            continue  # changed under us: read again and re-check the rules
    msg = f"cannot {action} operation {operation_id!r}: it keeps changing; try again"
    raise IllegalTransitionError(msg)


def confirm(
    ledger: _Primitives,
    operation_id: str,
    *,
    output: Any,
    provider_operation_id: str | None,
    actor: str,
    reason: str,
    evidence_reference: str,
    dry_run: bool = False,
) -> OperationRecord:
    """Mark the operation CONFIRMED with ``output``, which every later call replays.

    ``output`` is stored as the contract stores a handler's output (its codec's
    JSON form, if it has a codec). ``provider_operation_id`` is a non-empty
    string, or None when the provider has no id for the effect.
    """
    audit = _audit(actor, reason, evidence_reference)
    if provider_operation_id is not None and (
        not isinstance(provider_operation_id, str) or not provider_operation_id.strip()
    ):
        msg = (
            "the provider operation id must be a non-empty string or None, "
            f"not {provider_operation_id!r}"
        )
        raise InvalidRequestError(msg)
    try:
        check_json_value(output)  # an operator's value: the tighter nesting limit
        canonical_json(output)
    except TypeError as exc:
        msg = f"operator output is not JSON-encodable: {exc}"
        raise InvalidRequestError(msg) from exc

    def build(record: OperationRecord) -> tuple[Changes, EventDraft]:
        said, shown = hide_redacted(record, audit, output)
        evidence = {
            **said,
            **_overridden(record),
            "output": shown,
            "provider_operation_id": provider_operation_id,
        }
        return to_confirmed(
            record.status,
            record.attempts,
            output_json=canonical_json(shown),
            provider_operation_id=provider_operation_id,
            reason=f"confirmed by operator {said['actor']}: {said['reason']}",
            evidence=evidence,
            event=EventType.OPERATOR_CONFIRMED,
        )

    return _resolve(
        ledger,
        operation_id,
        action="confirm",
        allowed=_RESOLVABLE,
        build=build,
        dry_run=dry_run,
    )


def reject(
    ledger: _Primitives,
    operation_id: str,
    *,
    actor: str,
    reason: str,
    evidence_reference: str,
    dry_run: bool = False,
) -> OperationRecord:
    """Mark the operation REJECTED: the effect did not happen and will not be attempted again."""
    audit = _audit(actor, reason, evidence_reference)

    def build(record: OperationRecord) -> tuple[Changes, EventDraft]:
        said, _ = hide_redacted(record, audit)
        evidence = {**said, **_overridden(record)}
        changes = Changes(
            status=EffectStatus.REJECTED,
            lease=None,
            output_json=None,
            reason=f"rejected by operator {said['actor']}: {said['reason']}",
            evidence=evidence,
            overlap=(),
        )
        event = EventDraft(
            EventType.OPERATOR_REJECTED,
            record.status,
            EffectStatus.REJECTED,
            record.attempts,
            evidence,
        )
        return changes, event

    return _resolve(
        ledger, operation_id, action="reject", allowed=_RESOLVABLE, build=build, dry_run=dry_run
    )


def authorize_retry(
    ledger: _Primitives,
    operation_id: str,
    *,
    actor: str,
    reason: str,
    evidence_reference: str,
    dry_run: bool = False,
) -> OperationRecord:
    """Move the operation to PREPARED with a budget of exactly one more attempt.

    The operator's authorization also clears any overlap risk: the operator
    vouches that no earlier handler can still commit.
    """
    audit = _audit(actor, reason, evidence_reference)

    def build(record: OperationRecord) -> tuple[Changes, EventDraft]:
        said, _ = hide_redacted(record, audit)
        evidence = {**said, **_overridden(record)}
        changes = Changes(
            status=EffectStatus.PREPARED,
            lease=None,
            attempt_budget=record.attempts + 1,
            reason=f"retry authorized by operator {said['actor']}: {said['reason']}",
            evidence=evidence,
            overlap=(),
        )
        event = EventDraft(
            EventType.OPERATOR_RETRY_AUTHORIZED,
            record.status,
            EffectStatus.PREPARED,
            record.attempts,
            evidence,
        )
        return changes, event

    return _resolve(
        ledger,
        operation_id,
        action="authorize a retry of",
        allowed=_RETRYABLE,
        build=build,
        dry_run=dry_run,
    )


class OperatorResolution:
    """Gives a ledger backend the audited operator writes, over its own ``get`` and ``transition``.

    Backends inherit it, so the rules above are written once for every backend.
    """

    def confirm(
        self: _Primitives,
        operation_id: str,
        *,
        output: Any,
        provider_operation_id: str | None,
        actor: str,
        reason: str,
        evidence_reference: str,
    ) -> OperationRecord:
        """See :func:`effectguard.ledger.resolution.confirm`."""
        return confirm(
            self,
            operation_id,
            output=output,
            provider_operation_id=provider_operation_id,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
        )

    def reject(
        self: _Primitives, operation_id: str, *, actor: str, reason: str, evidence_reference: str
    ) -> OperationRecord:
        """See :func:`effectguard.ledger.resolution.reject`."""
        return reject(
            self, operation_id, actor=actor, reason=reason, evidence_reference=evidence_reference
        )

    def authorize_retry(
        self: _Primitives, operation_id: str, *, actor: str, reason: str, evidence_reference: str
    ) -> OperationRecord:
        """See :func:`effectguard.ledger.resolution.authorize_retry`."""
        return authorize_retry(
            self, operation_id, actor=actor, reason=reason, evidence_reference=evidence_reference
        )
