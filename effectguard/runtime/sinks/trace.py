"""Trace sinks: the telemetry of a run, every step of it, for finding where it went wrong.

The final answer alone cannot tell where a run failed; the trace can. The
runtime records each run start and resume, model turn, tool call, argument
check, permission decision, dispatch, tool result, effect status and run
outcome as a :class:`TraceEvent`. A sink that raises is logged and ignored:
telemetry never stops a run (the audit sink, which is about accountability, does).
"""

from __future__ import annotations

import enum
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from effectguard.runtime.sinks.jsonl import JsonLinesFile

__all__ = ["InMemoryTraceSink", "JsonLinesTraceSink", "TraceEvent", "TraceKind", "TraceSink"]


class TraceKind(enum.StrEnum):
    """What a trace event records."""

    RUN_STARTED = "run_started"
    RUN_RESUMED = "run_resumed"
    MODEL_TURN = "model_turn"
    TOOL_CALL = "tool_call"
    TOOL_UNKNOWN = "tool_unknown"
    ARGUMENTS_INVALID = "arguments_invalid"
    PERMISSION = "permission"
    APPROVAL = "approval"
    DISPATCH = "dispatch"
    TOOL_RESULT = "tool_result"
    EFFECT = "effect"
    RUN_WAITING = "run_waiting"
    RUN_COMPLETED = "run_completed"
    RUN_FAILED = "run_failed"


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One step of a run. ``step`` is the number of model turns taken so far."""

    run_id: str
    kind: TraceKind
    step: int
    at: datetime
    call_id: str | None = None
    tool: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the JSON form a file sink writes."""
        return {
            "run_id": self.run_id,
            "kind": self.kind.value,
            "step": self.step,
            "at": self.at.isoformat(),
            "call_id": self.call_id,
            "tool": self.tool,
            "data": self.data,
        }


@runtime_checkable
class TraceSink(Protocol):
    """Receives every :class:`TraceEvent` of the runs of a runtime."""

    def record(self, event: TraceEvent) -> None:
        """Take one event."""
        ...


class InMemoryTraceSink:
    """Keeps events in a list, for tests and for looking at a run in a REPL."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[TraceEvent] = []

    def record(self, event: TraceEvent) -> None:
        """Take one event."""
        with self._lock:
            self._events.append(event)

    @property
    def events(self) -> list[TraceEvent]:
        """Every event so far, in order."""
        with self._lock:
            return list(self._events)

    def of(self, run_id: str, kind: TraceKind | None = None) -> list[TraceEvent]:
        """Return the events of one run (of one kind), in order."""
        return [e for e in self.events if e.run_id == run_id and kind in (None, e.kind)]


class JsonLinesTraceSink:
    """Appends each event as one JSON line to a file created 0600.

    Not fsynced by default (telemetry, not a record of truth); pass ``fsync=True`` to change that.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self._file = JsonLinesFile(path, fsync=fsync)
        self.path = self._file.path

    def record(self, event: TraceEvent) -> None:
        """Take one event."""
        self._file.append(event.to_json())

    def close(self) -> None:
        """Close the file."""
        self._file.close()
