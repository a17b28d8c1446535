"""Where a run reports itself: the trace (every step) and the audit trail (every decision)."""

from effectguard.runtime.sinks.audit import (
    AuditAction,
    AuditRecord,
    AuditSink,
    InMemoryAuditSink,
    JsonLinesAuditSink,
)
from effectguard.runtime.sinks.trace import (
    InMemoryTraceSink,
    JsonLinesTraceSink,
    TraceEvent,
    TraceKind,
    TraceSink,
)

__all__ = [
    "AuditAction",
    "AuditRecord",
    "AuditSink",
    "InMemoryAuditSink",
    "InMemoryTraceSink",
    "JsonLinesAuditSink",
    "JsonLinesTraceSink",
    "TraceEvent",
    "TraceKind",
    "TraceSink",
]
