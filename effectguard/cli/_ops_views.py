r"""How ``agent-effect-ops`` shows operations, events and chain reports: JSON and text.

JSON views are for machines and carry every field an operator may need, except
lease tokens, which are write capabilities rather than facts. Text views are
for people: aligned columns, UTC times. Both escape every stored character
that is not printable (controls, DEL, C1 such as U+009B, bidi overrides such
as U+202E): text as Python escapes it, JSON as ``\u`` escapes, because arguments
and ids come from agents and callers, and must never be able to drive the
operator's terminal or disguise what it shows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Annotations only, so that `agent-effect-ops --help` does not load the model.
    from effectguard.ledger import EffectEvent, OperationRecord, VerifyReport

__all__ = [
    "event_json",
    "events_table",
    "operation_detail",
    "operations_table",
    "record_json",
    "report_json",
    "resolution_preview",
    "table",
    "to_json",
]


def _escape_unprintable(text: str) -> str:
    r"""Return JSON ``text`` with every non-printable character but its newlines as ``\u`` escapes.

    json.dumps escapes only C0 controls; outside strings it writes nothing but
    spaces and newlines, so every character replaced here is inside a string,
    where a ``\u`` escape (a surrogate pair above U+FFFF) means the same character.
    """
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char.isprintable() or char == "\n":
            out.append(char)
        elif ord(char) > 0xFFFF:  # noqa: PLR2004 - the last code point of the BMP
            out.append(json.dumps(char, ensure_ascii=True)[1:-1])
        else:
            out.append(f"\\u{ord(char):04x}")
    return "".join(out)


def to_json(value: Any) -> str:
    """Return ``value`` as indented, key-sorted JSON text, non-printable characters escaped."""
    return _escape_unprintable(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _clean(text: str) -> str:
    """Return ``text`` with every non-printable character escaped, as Python escapes it."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def _when(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _age(moment: datetime, now: datetime) -> str:
    seconds = max(0, int((now - moment).total_seconds()))
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def record_json(record: OperationRecord) -> dict[str, Any]:
    """Return everything stored about ``record`` as JSON-ready data."""
    lease = None
    if record.lease_owner is not None or record.lease_expires_at is not None:
        lease = {
            "owner": None if record.lease_owner is None else record.lease_owner.to_json(),
            "expires_at": _when(record.lease_expires_at),
            "live": record.lease_live,
        }
    return {
        "operation_id": record.operation_id,
        "contract": record.contract,
        "contract_version": record.contract_version,
        "status": record.status.value,
        "reason": record.reason,
        "attempts": record.attempts,
        "attempt_budget": record.attempt_budget,
        "provider_key": record.provider_key,
        "provider_operation_id": record.provider_operation_id,
        "fingerprint": record.fingerprint,
        "arguments": dict(record.arguments),
        "output": record.output,
        "evidence": dict(record.evidence),
        "lease": lease,
        "overlap_risk": record.overlap_risk,
        "overlap": [
            {"attempt": holder.attempt, "owner": holder.owner.to_json()}
            for holder in record.overlap
        ],
        "created_at": _when(record.created_at),
        "updated_at": _when(record.updated_at),
        "first_dispatched_at": _when(record.first_dispatched_at),
        "event_count": record.event_count,
        "event_head": record.event_head.hex(),
    }


def event_json(event: EffectEvent) -> dict[str, Any]:
    """Return one history entry as JSON-ready data."""
    return {
        "seq": event.seq,
        "type": event.type.value,
        "from": None if event.from_status is None else event.from_status.value,
        "to": event.to_status.value,
        "attempt": event.attempt,
        "at": _when(event.at),
        "evidence": dict(event.evidence),
        "hash": event.hash.hex(),
    }


def report_json(report: VerifyReport) -> dict[str, Any]:
    """Return a chain check's result as JSON-ready data."""
    return {
        "ok": report.ok,
        "operations_checked": report.operations_checked,
        "events_checked": report.events_checked,
        "problems": [
            {"operation_id": p.operation_id, "seq": p.seq, "problem": p.problem}
            for p in report.problems
        ],
        "operations_uncovered": report.operations_uncovered,
        "anchor": {"count": report.anchored, "running": report.anchor_running.hex()},
    }


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Return ``rows`` under ``headers`` in left-aligned columns; the last one is not padded."""
    cells = [list(headers), *([_clean(cell) for cell in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers) - 1)]
    lines = []
    for row in cells:
        padded = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*padded, row[-1]]).rstrip())
    return "\n".join(lines)


def operations_table(records: Iterable[OperationRecord], now: datetime) -> str:
    """Return one line per operation: id, contract, status, attempts, age, overlap risk."""
    return table(
        ("OPERATION", "CONTRACT", "STATUS", "ATTEMPTS", "AGE", "OVERLAP"),
        (
            (
                record.operation_id,
                record.contract,
                record.status.value,
                f"{record.attempts}/{record.attempt_budget}",
                _age(record.created_at, now),
                "yes" if record.overlap_risk else "no",
            )
            for record in records
        ),
    )


def _lease_line(record: OperationRecord) -> str:
    if record.lease_expires_at is None:
        return "none"
    state = "live" if record.lease_live else "expired"
    holder = "unknown holder"
    if record.lease_owner is not None:
        owner = record.lease_owner
        holder = f"pid {owner.pid} on {owner.host}"
    return f"{state}: {holder}, until {_when(record.lease_expires_at)}"


def _overlap_lines(record: OperationRecord) -> list[str]:
    if not record.overlap:
        return ["none"]
    return [
        f"attempt {holder.attempt}: pid {holder.owner.pid} on {holder.owner.host} may still send"
        for holder in record.overlap
    ]


def operation_detail(record: OperationRecord, now: datetime) -> str:
    """Return what an on-call person needs to judge ``record``, one labelled line per fact."""
    fields: list[tuple[str, str | list[str]]] = [
        ("operation", record.operation_id),
        ("contract", f"{record.contract} (version {record.contract_version})"),
        ("status", record.status.value),
        ("reason", record.reason or "-"),
        ("attempts", f"{record.attempts} of {record.attempt_budget}"),
        ("provider key", record.provider_key or "-"),
        ("provider op id", record.provider_operation_id or "-"),
        ("created", f"{_when(record.created_at)} ({_age(record.created_at, now)} ago)"),
        ("updated", f"{_when(record.updated_at)} ({_age(record.updated_at, now)} ago)"),
        ("lease", _lease_line(record)),
        ("overlap risk", _overlap_lines(record)),
        ("arguments", _compact(dict(record.arguments))),
        ("output", "-" if record.output_json is None else record.output_json),
        ("evidence", _compact(dict(record.evidence)) if record.evidence else "-"),
        ("fingerprint", record.fingerprint),
        ("events", str(record.event_count)),
        ("chain head", record.event_head.hex()),
    ]
    width = max(len(label) for label, _ in fields)
    lines = []
    for label, value in fields:
        values = [value] if isinstance(value, str) else value
        for index, text in enumerate(values):
            lines.append(f"{(label if index == 0 else '').ljust(width)}  {_clean(text)}")
    if not record.status.terminal:
        lines.append(
            f"{'decide on'.ljust(width)}  --expect-events {record.event_count} "
            f"--expect-head {record.event_head.hex()[:16]}  (refused if it changes before then)"
        )
    return "\n".join(lines)


def _transition(event: EffectEvent) -> str:
    start = "-" if event.from_status is None else event.from_status.value
    return f"{start} -> {event.to_status.value}"


def _evidence(evidence: Mapping[str, Any]) -> str:
    return _compact(dict(evidence)) if evidence else ""


def events_table(events: Iterable[EffectEvent], width: int | None = None) -> str:
    """Return one line per event: sequence, time, type, transition, attempt, evidence.

    With ``width``, a line longer than that is cut, ending in an ellipsis.
    """
    text = table(
        ("SEQ", "AT", "TYPE", "TRANSITION", "ATTEMPT", "EVIDENCE"),
        (
            (
                str(event.seq),
                _when(event.at) or "",
                event.type.value,
                _transition(event),
                str(event.attempt),
                _evidence(event.evidence),
            )
            for event in events
        ),
    )
    if width is None:
        return text
    limit = max(width, 20) - 1
    return "\n".join(
        line if len(line) <= limit + 1 else line[:limit] + "\u2026" for line in text.splitlines()
    )


def resolution_preview(
    before: OperationRecord, after: OperationRecord, action: str, now: datetime
) -> str:
    """Return what a dry-run resolution shows: the record before and as it would be after."""
    return "\n".join(
        [
            (
                f"dry run: {action} would move {_clean(before.operation_id)!s} "
                f"from {before.status.value} to {after.status.value}"
            ),
            "--- before",
            operation_detail(before, now),
            "--- after",
            operation_detail(after, now),
            "nothing was written",
        ]
    )
