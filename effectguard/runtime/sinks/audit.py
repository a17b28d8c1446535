"""Audit sinks: who decided what about each tool call, and what became of each effect.

The audit trail is for accountability: every argument rejection, permission
decision (and the policy that made it), approval or refusal (and the person),
dispatch, effect status and run outcome is an :class:`AuditRecord`. It is
written before the runtime acts on the decision it records, and a sink that
raises stops the run there: nothing is dispatched that could not be audited
(the run stays resumable).
"""

from __future__ import annotations

import enum
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from effectguard.runtime.sinks.jsonl import JsonLinesFile

__all__ = ["AuditAction", "AuditRecord", "AuditSink", "InMemoryAuditSink", "JsonLinesAuditSink"]


class AuditAction(enum.StrEnum):
    """What an audit record attests."""

    TOOL_UNKNOWN = "tool_unknown"
    ARGUMENTS_INVALID = "arguments_invalid"
    PERMISSION_ALLOWED = "permission_allowed"
    PERMISSION_DENIED = "permission_denied"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVED = "approved"
    REFUSED = "refused"
    DISPATCHED = "dispatched"
    EFFECT_STATUS = "effect_status"
    RUN_WAITING = "run_waiting"
    RUN_COMPLETED = "run_completed"
    RUN_FAILED = "run_failed"


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One accountable fact about a run.

    ``actor`` is who decided: ``policy:<name>`` for a permission policy, the
    person's name for an approval, ``runtime`` for what the runtime observed.
    """

    run_id: str
    action: AuditAction
    actor: str
    at: datetime
    call_id: str | None = None
    tool: str | None = None
    operation_id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form a file sink writes."""
        return {
            "run_id": self.run_id,
            "action": self.action.value,
            "actor": self.actor,
            "at": self.at.isoformat(),
            "call_id": self.call_id,
            "tool": self.tool,
            "operation_id": self.operation_id,
            "details": self.details,
        }


@runtime_checkable
class AuditSink(Protocol):
    """Receives every :class:`AuditRecord` of the runs of a runtime."""

    def record(self, entry: AuditRecord) -> None:
        """Take one record; raising stops the run before it acts on it."""
        ...


class InMemoryAuditSink:
    """Keeps records in a list, for tests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[AuditRecord] = []

    def record(self, entry: AuditRecord) -> None:
        """Take one record."""
        with self._lock:
            self._records.append(entry)

    @property
    def records(self) -> list[AuditRecord]:
        """Every record so far, in order."""
        with self._lock:
            return list(self._records)

    def of(self, run_id: str, action: AuditAction | None = None) -> list[AuditRecord]:
        """Return the records of one run (of one action), in order."""
        return [r for r in self.records if r.run_id == run_id and action in (None, r.action)]


class JsonLinesAuditSink:
    """Appends each record as one JSON line to a file created 0600, fsynced by default."""

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self._file = JsonLinesFile(path, fsync=fsync)
        self.path = self._file.path

    def record(self, entry: AuditRecord) -> None:
        """Take one record."""
        self._file.append(entry.to_json())

    def close(self) -> None:
        """Close the file."""
        self._file.close()
