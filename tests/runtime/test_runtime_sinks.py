"""Trace and audit sinks: what they record, their files, and what a failing sink does."""

from __future__ import annotations

import json
import stat

import pytest
from runtime_support import OPERATION, RUN, capture_tool, script

from effectguard.runtime import (
    AgentRuntime,
    AuditAction,
    JsonLinesAuditSink,
    JsonLinesTraceSink,
    RunState,
    TraceKind,
    require_approval,
)
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan


def test_every_step_decision_and_effect_status_is_traced_and_audited(executor, trace, audit):
    """A waiting-then-resumed payment leaves the full story in the trace and the audit trail."""
    provider = FakePaymentProvider(faults=FaultPlan({1: Fault.PENDING}, pending_probes=1))
    runtime = AgentRuntime(
        script(),
        [capture_tool(provider)],
        executor,
        permission_policy=require_approval(),
        trace=trace,
        audit=audit,
    )
    runtime.start(RUN, "pay")
    runtime.approve(RUN, "call-1", actor="alice")
    runtime.resume(RUN)
    assert runtime.resume(RUN).state is RunState.COMPLETED

    assert [event.kind for event in trace.of(RUN)] == [
        TraceKind.RUN_STARTED,
        TraceKind.MODEL_TURN,
        TraceKind.TOOL_CALL,
        TraceKind.PERMISSION,
        TraceKind.RUN_WAITING,
        TraceKind.APPROVAL,
        TraceKind.RUN_RESUMED,
        TraceKind.DISPATCH,
        TraceKind.EFFECT,
        TraceKind.RUN_WAITING,
        TraceKind.RUN_RESUMED,
        TraceKind.DISPATCH,
        TraceKind.EFFECT,
        TraceKind.TOOL_RESULT,
        TraceKind.MODEL_TURN,
        TraceKind.RUN_COMPLETED,
    ]
    assert [(r.action, r.actor) for r in audit.of(RUN)] == [
        (AuditAction.APPROVAL_REQUESTED, "policy:require_approval(effects)"),
        (AuditAction.RUN_WAITING, "runtime"),
        (AuditAction.APPROVED, "alice"),
        (AuditAction.DISPATCHED, "runtime"),
        (AuditAction.EFFECT_STATUS, "runtime"),
        (AuditAction.RUN_WAITING, "runtime"),
        (AuditAction.DISPATCHED, "runtime"),
        (AuditAction.EFFECT_STATUS, "runtime"),
        (AuditAction.RUN_COMPLETED, "runtime"),
    ]
    statuses = [r.details["status"] for r in audit.of(RUN, AuditAction.EFFECT_STATUS)]
    assert statuses == ["OUTCOME_UNKNOWN", "CONFIRMED"]
    assert {r.operation_id for r in audit.of(RUN, AuditAction.EFFECT_STATUS)} == {OPERATION}
    assert [e.step for e in trace.of(RUN, TraceKind.EFFECT)] == [1, 1]


def test_json_lines_sinks_write_one_private_line_per_record(executor, provider, tmp_path):
    """File sinks append one JSON object per line to files only their owner can read."""
    trace = JsonLinesTraceSink(tmp_path / "trace.jsonl")
    audit = JsonLinesAuditSink(tmp_path / "audit.jsonl")
    runtime = AgentRuntime(script(), [capture_tool(provider)], executor, trace=trace, audit=audit)
    runtime.start(RUN, "pay")
    trace.close()
    audit.close()
    for name in ("trace.jsonl", "audit.jsonl"):
        path = tmp_path / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert lines
        assert all(line["run_id"] == RUN for line in lines)
    audit_lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    assert json.loads(audit_lines[-1])["action"] == "run_completed"


def test_a_failing_audit_sink_stops_the_run_before_dispatch(executor, provider):
    """Nothing is sent that could not be audited; the run stays resumable."""

    class Broken:
        def record(self, entry):
            if entry.action is AuditAction.PERMISSION_ALLOWED:
                msg = "audit store down"
                raise OSError(msg)

    runtime = AgentRuntime(script(), [capture_tool(provider)], executor, audit=Broken())
    with pytest.raises(OSError, match="audit store down"):
        runtime.start(RUN, "pay")
    assert provider.requests == 0
    runtime.audit = type("Fine", (), {"record": lambda self, entry: None})()
    assert runtime.resume(RUN).state is RunState.COMPLETED
    assert provider.committed() == 1


def test_a_failing_trace_sink_never_stops_a_run(executor, provider, caplog):
    """Telemetry failures are logged and ignored."""

    class Broken:
        def record(self, event):
            del event
            msg = "collector down"
            raise ConnectionError(msg)

    runtime = AgentRuntime(script(), [capture_tool(provider)], executor, trace=Broken())
    assert runtime.start(RUN, "pay").state is RunState.COMPLETED
    assert "trace sink failed" in caplog.text


def test_redacted_arguments_and_tool_outputs_stay_out_of_the_trace(executor, provider, trace):
    """The trace never holds a value the contract redacts, nor a tool's output."""
    tool = capture_tool(provider, redact=["amount_cents"])
    result = AgentRuntime(script(), [tool], executor, trace=trace).start(RUN, "pay")
    assert result.state is RunState.COMPLETED
    text = repr(trace.of(RUN))
    assert "1999" not in text
    assert "cap_000001" not in text
    [call] = trace.of(RUN, TraceKind.TOOL_CALL)
    assert call.data["arguments"] == {"invoice_id": "INV-1042", "amount_cents": "[redacted]"}
    [output] = trace.of(RUN, TraceKind.TOOL_RESULT)
    assert output.data["size"] > 0
