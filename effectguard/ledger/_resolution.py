"""Audited operator resolutions (confirm, reject, authorize-retry), written once.

They are built over the ledger primitives.

Each resolution is one fenced transition that records who decided, from which
OS user and host, and why; redacted argument values stay masked in whatever
text the operator sees.
"""

from __future__ import annotations

import dataclasses
import getpass
import itertools
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from effectguard._fingerprint import REDACTED, canonical_json, check_json_value, request_fingerprint
from effectguard._model import EffectStatus, EventType, OperationRecord
from effectguard._process import process_gone
from effectguard.errors import (
    FencedWriteError,
    IllegalTransitionError,
    InvalidRequestError,
    OperationChangedError,
    OperationNotFoundError,
)
from effectguard.ledger._protocol import (
    MIN_HEAD_PREFIX,
    UNSET,
    Changes,
    EventDraft,
    Expect,
    Seen,
    to_confirmed,
)

__all__ = [
    "MAX_APPROVAL_SECONDS",
    "MAX_ASSIGNMENTS",
    "OperatorResolution",
    "approval_expiry",
    "approve",
    "authorize_retry",
    "changed",
    "confirm",
    "deny",
    "described",
    "hide_redacted",
    "os_user",
    "previewed",
    "reject",
]


# ---- Redacted values masked in operator text ----

#: Fingerprints tried at most per resolution (about a tenth of a second of hashing).
MAX_ASSIGNMENTS = 20_000


#: As :data:`effectguard.executor.redaction.MIN_SUBSTRING`.
_MIN_SUBSTRING = 6


_TOKENS = (
    re.compile(r"[^\s\"'`,;:!?()\[\]{}<>]+"),  # a word, punctuation around it removed
    re.compile(r"[^\W_]+"),  # a run of letters and digits
    re.compile(r"\d(?:[ -]?\d)+"),  # digits, maybe grouped by spaces or dashes
)


def hide_redacted(
    record: OperationRecord, audit: Mapping[str, Any], output: Any = None
) -> tuple[dict[str, Any], Any]:
    """``audit`` and ``output`` with every token that is a redacted value of ``record`` masked.

    See the module's docstring for what can be recognised.
    """
    names = sorted(name for name, value in record.arguments.items() if value == REDACTED)
    if not names:
        return dict(audit), output
    # Every text together first (the values may be spread over several); when that is too
    # many to try, each text on its own, so that one long text cannot switch masking off.
    found = _found(record, names, [*audit.values(), output])
    if found is None:
        found = set()
        for text in [*audit.values(), output]:
            found |= _found(record, names, [text]) or set()
    if not found:
        return dict(audit), output
    ordered = sorted(found, key=len, reverse=True)
    return {key: _mask(value, ordered) for key, value in audit.items()}, _mask(output, ordered)


def _found(record: OperationRecord, names: list[str], texts: list[Any]) -> set[str] | None:
    """The spellings of the redacted values found among ``texts``; None if too many to try."""
    spellings: dict[Any, set[str]] = {}
    for text in _strings(*texts):
        _candidates(text, spellings)
    for text in texts:
        for number in _integers(text):
            spellings.setdefault(number, set()).add(str(number))
    values = list(spellings)
    if not values:
        return set()
    if len(values) ** len(names) > MAX_ASSIGNMENTS:
        return None
    for assignment in itertools.product(values, repeat=len(names)):
        arguments = {**record.arguments, **dict(zip(names, assignment, strict=True))}
        fingerprint = request_fingerprint(
            record.contract, record.contract_version, arguments, record.provider_key, names
        )
        if fingerprint == record.fingerprint:
            found: set[str] = set()
            for value in assignment:
                found |= spellings[value]
            return found
    return set()


def _candidates(text: str, spellings: dict[Any, set[str]]) -> None:
    for pattern in _TOKENS:
        for match in pattern.finditer(text):
            spelled = match.group().rstrip(".")
            value = re.sub(r"[ -]", "", spelled) if pattern is _TOKENS[2] else spelled
            if not value:
                continue
            spellings.setdefault(value, set()).add(spelled)
            if value.isdigit() and (value == "0" or not value.startswith("0")):
                spellings.setdefault(int(value), set()).add(spelled)


def _strings(*values: Any) -> Iterable[str]:
    for value in values:
        if isinstance(value, str):
            yield value
        elif isinstance(value, Mapping):
            yield from _strings(*value.keys(), *value.values())
        elif isinstance(value, (list, tuple)):
            yield from _strings(*value)


def _integers(value: Any) -> Iterable[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _integers(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _integers(item)


def _mask(value: Any, found: list[str]) -> Any:
    if isinstance(value, str):
        # A short value (a CVV) is masked as a whole token only, as the executor masks it.
        parts = (
            re.escape(s) if len(s) >= _MIN_SUBSTRING else rf"(?<![^\W_]){re.escape(s)}(?![^\W_])"
            for s in found
        )
        return re.sub("|".join(parts), REDACTED, value)
    if isinstance(value, Mapping):
        return {_mask(key, found): _mask(item, found) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mask(item, found) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and str(value) in found:
        return REDACTED
    return value


# ---- Audited operator resolutions over the primitives ----

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


def changed(operation_id: str, seen: str, now: OperationRecord | None) -> OperationChangedError:
    """The refusal of a decision made on ``seen`` when the operation is now ``now``."""
    if now is None:
        found = "it is no longer in the ledger"
    else:
        found = (
            f"it is now {now.status.value} with {now.event_count} events "
            f"(head {now.event_head.hex()[:MIN_HEAD_PREFIX]})"
        )
    msg = (
        f"operation {operation_id!r} changed since you looked: reload. "
        f"The decision was made on {seen}; {found}. Nothing was written"
    )
    return OperationChangedError(operation_id, msg)


def described(seen: Seen) -> str:
    """``seen`` as a refusal names it: its event count and the start of its head."""
    parts = []
    if seen.event_count is not None:
        parts.append(f"{seen.event_count} events")
    if seen.event_head is not None:
        parts.append(f"head {seen.event_head[:MIN_HEAD_PREFIX]}")
    return " and ".join(parts)


def _resolve(
    ledger: _Primitives,
    operation_id: str,
    *,
    action: str,
    allowed: frozenset[EffectStatus],
    build: _Build,
    dry_run: bool = False,
    expected: Seen | None = None,
) -> OperationRecord:
    """Apply ``build``'s write to the state the operator saw, or refuse it; never to another.

    With ``expected``, the operation must still be that state. Without, the
    state this read finds is the one decided on. Either way the write is
    fenced on that state's event count: a write that loses a race to another
    is refused (:class:`OperationChangedError`), never retried on what the
    other left.
    """
    found = ledger.get(operation_id)
    if expected is not None and found is not None and not expected.matches(found):
        raise changed(operation_id, described(expected), found)
    record = _check(found, operation_id, action, allowed)
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
    except FencedWriteError as exc:
        seen = described(expected or Seen(record.event_count, record.event_head.hex()))
        raise changed(operation_id, seen, ledger.get(operation_id)) from exc


#: Where :func:`confirm` carries the typed provider id through :func:`hide_redacted`.
_PROVIDER_ID = "provider_operation_id"


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
    expected: Seen | None = None,
    output_from: Mapping[str, Any] | None = None,
) -> OperationRecord:
    """Mark the operation CONFIRMED with ``output``, which every later call replays.

    ``output`` is stored as the contract stores a handler's output (its codec's
    JSON form, if it has a codec). ``provider_operation_id`` is a non-empty
    string, or None when the provider has no id for the effect. A redacted
    argument value the operator typed, in the output, the provider id, the
    reason or the evidence reference, is stored masked, as a handler's would be.
    ``output_from`` says where the output came from when the operator did not
    type it (a probe's answer), and is recorded with the confirmation.
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
        # What the operator typed is masked as a handler's answer is: the provider's id too.
        typed = {**audit, _PROVIDER_ID: provider_operation_id or ""}
        said, shown = hide_redacted(record, typed, output)
        provider_id = said.pop(_PROVIDER_ID) or None
        evidence = {
            **said,
            **_overridden(record),
            "output": shown,
            "provider_operation_id": provider_id,
        }
        if output_from is not None:
            evidence["output_from"] = hide_redacted(record, dict(output_from))[0]
        return to_confirmed(
            record.status,
            record.attempts,
            output_json=canonical_json(shown),
            provider_operation_id=provider_id,
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
        expected=expected,
    )


def reject(
    ledger: _Primitives,
    operation_id: str,
    *,
    actor: str,
    reason: str,
    evidence_reference: str,
    dry_run: bool = False,
    expected: Seen | None = None,
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
        ledger,
        operation_id,
        action="reject",
        allowed=_RESOLVABLE,
        build=build,
        dry_run=dry_run,
        expected=expected,
    )


def authorize_retry(
    ledger: _Primitives,
    operation_id: str,
    *,
    actor: str,
    reason: str,
    evidence_reference: str,
    dry_run: bool = False,
    expected: Seen | None = None,
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
        expected=expected,
    )


# ---- Approvals of exact requests ----

_AWAITING = frozenset({EffectStatus.AWAITING_APPROVAL})

#: The longest approval (ten years): longer is a mistake, not a policy.
MAX_APPROVAL_SECONDS = 10 * 365 * 86_400.0


def approval_expiry(record: OperationRecord) -> datetime | None:
    """When the approval that made ``record`` PREPARED runs out; None if it never does.

    Only an approved request not yet sent has one: PREPARED, attempt 0.
    """
    if record.status is not EffectStatus.PREPARED or record.attempts != 0:
        return None
    text = record.evidence.get("expires_at")
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return datetime.fromtimestamp(0, UTC)  # unreadable: treated as run out, never as forever


def approve(
    ledger: _Primitives,
    operation_id: str,
    *,
    actor: str,
    reason: str,
    evidence_reference: str,
    expires_in: float | None = None,
    dry_run: bool = False,
    expected: Seen | None = None,
) -> OperationRecord:
    """Approve exactly the request an AWAITING_APPROVAL operation holds: it becomes PREPARED.

    The next call with the same request sends it, once (racing calls send it
    once between them); a different request under the id stays a conflict.
    ``expires_in`` (seconds) voids the approval if no call has used it by then.
    The event records the audit, the fingerprint approved and the expiry.
    """
    audit = _audit(actor, reason, evidence_reference)
    if expires_in is not None and (
        isinstance(expires_in, bool)
        or not isinstance(expires_in, (int, float))
        or not 0 < expires_in <= MAX_APPROVAL_SECONDS
    ):
        msg = (
            f"expires_in must be a number of seconds above 0 and at most ten years, "
            f"not {expires_in!r}"
        )
        raise InvalidRequestError(msg)
    expires = None if expires_in is None else datetime.now(UTC) + timedelta(seconds=expires_in)

    def build(record: OperationRecord) -> tuple[Changes, EventDraft]:
        said, _ = hide_redacted(record, audit)
        evidence = {
            **said,
            "approved_fingerprint": record.fingerprint,
            "expires_at": None if expires is None else expires.isoformat(),
        }
        until = "" if expires is None else f" (until {expires:%Y-%m-%d %H:%M:%S} UTC)"
        changes = Changes(
            status=EffectStatus.PREPARED,
            lease=None,
            reason=f"approved by {said['actor']}{until}: {said['reason']}; the next call sends it",
            evidence=evidence,
        )
        event = EventDraft(
            EventType.OPERATOR_APPROVED,
            record.status,
            EffectStatus.PREPARED,
            record.attempts,
            evidence,
        )
        return changes, event

    return _resolve(
        ledger,
        operation_id,
        action="approve",
        allowed=_AWAITING,
        build=build,
        dry_run=dry_run,
        expected=expected,
    )


def deny(
    ledger: _Primitives,
    operation_id: str,
    *,
    actor: str,
    reason: str,
    evidence_reference: str,
    dry_run: bool = False,
    expected: Seen | None = None,
) -> OperationRecord:
    """Deny the request an AWAITING_APPROVAL operation holds: REJECTED, never sent."""
    audit = _audit(actor, reason, evidence_reference)

    def build(record: OperationRecord) -> tuple[Changes, EventDraft]:
        said, _ = hide_redacted(record, audit)
        evidence = {**said, "denied_fingerprint": record.fingerprint}
        changes = Changes(
            status=EffectStatus.REJECTED,
            lease=None,
            output_json=None,
            reason=f"denied by {said['actor']}: {said['reason']}; it is never sent",
            evidence=evidence,
        )
        event = EventDraft(
            EventType.OPERATOR_DENIED,
            record.status,
            EffectStatus.REJECTED,
            record.attempts,
            evidence,
        )
        return changes, event

    return _resolve(
        ledger,
        operation_id,
        action="deny",
        allowed=_AWAITING,
        build=build,
        dry_run=dry_run,
        expected=expected,
    )


class OperatorResolution:
    """Gives a ledger backend the audited operator writes, over its own ``get`` and ``transition``.

    Backends inherit it, so the rules above are written once for every backend.
    ``expected`` is the state the decision was made on (:class:`Seen`); a
    resolution whose operation has moved on, or that loses a race to another
    write, is refused with :class:`~effectguard.errors.OperationChangedError`.
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
        expected: Seen | None = None,
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
            expected=expected,
        )

    def reject(
        self: _Primitives,
        operation_id: str,
        *,
        actor: str,
        reason: str,
        evidence_reference: str,
        expected: Seen | None = None,
    ) -> OperationRecord:
        """See :func:`effectguard.ledger.resolution.reject`."""
        return reject(
            self,
            operation_id,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
            expected=expected,
        )

    def approve(
        self: _Primitives,
        operation_id: str,
        *,
        actor: str,
        reason: str,
        evidence_reference: str,
        expires_in: float | None = None,
        expected: Seen | None = None,
    ) -> OperationRecord:
        """See :func:`effectguard.ledger.resolution.approve`."""
        return approve(
            self,
            operation_id,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
            expires_in=expires_in,
            expected=expected,
        )

    def deny(
        self: _Primitives,
        operation_id: str,
        *,
        actor: str,
        reason: str,
        evidence_reference: str,
        expected: Seen | None = None,
    ) -> OperationRecord:
        """See :func:`effectguard.ledger.resolution.deny`."""
        return deny(
            self,
            operation_id,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
            expected=expected,
        )

    def authorize_retry(
        self: _Primitives,
        operation_id: str,
        *,
        actor: str,
        reason: str,
        evidence_reference: str,
        expected: Seen | None = None,
    ) -> OperationRecord:
        """See :func:`effectguard.ledger.resolution.authorize_retry`."""
        return authorize_retry(
            self,
            operation_id,
            actor=actor,
            reason=reason,
            evidence_reference=evidence_reference,
            expected=expected,
        )
