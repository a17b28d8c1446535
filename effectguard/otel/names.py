"""The names effectguard's telemetry uses: spans, attributes, events and instruments.

Written once here so the spans, the metrics, the operator's spans and the
docs agree. GenAI attributes are spelled out as strings: the constants for
them in ``opentelemetry-semantic-conventions`` are deprecated, and the extra
does not depend on that package.
"""

from __future__ import annotations

__all__ = [
    "ACTION",
    "ACTOR",
    "ATTEMPT",
    "ATTEMPTS",
    "AWAITING_OPERATOR",
    "CALLS",
    "CALL_DURATION",
    "CONTRACT_NAME",
    "CONTRACT_VERSION",
    "ERROR_TYPE",
    "EVIDENCE_REFERENCE",
    "FROM_STATUS",
    "GEN_AI_OPERATION",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_TOOL_TYPE",
    "IDEMPOTENCY_GUARANTEED",
    "INSTRUMENTATION_NAME",
    "OPERATION_ID",
    "OVERLAP_RISK",
    "PROBE_STATUS",
    "PROVIDER_OPERATION_ID",
    "REASON",
    "REPLAYED",
    "STATUS",
    "TO_STATUS",
    "WAIT_SECONDS",
    "argument_attribute",
]

#: The instrumentation scope of every tracer and meter effectguard asks for.
INSTRUMENTATION_NAME = "effectguard"

# -- GenAI semantic conventions (execute_tool spans) ----------------------------------
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
ERROR_TYPE = "error.type"

# -- an effect span's attributes -----------------------------------------------------
OPERATION_ID = "effectguard.operation.id"
CONTRACT_NAME = "effectguard.contract.name"
CONTRACT_VERSION = "effectguard.contract.version"
STATUS = "effectguard.status"
ATTEMPTS = "effectguard.attempts"
REPLAYED = "effectguard.replayed"
PROVIDER_OPERATION_ID = "effectguard.provider.operation_id"
IDEMPOTENCY_GUARANTEED = "effectguard.idempotency_guaranteed"
OVERLAP_RISK = "effectguard.overlap_risk"
REASON = "effectguard.reason"

# -- span events' attributes ---------------------------------------------------------
ATTEMPT = "effectguard.attempt"
FROM_STATUS = "effectguard.from_status"
TO_STATUS = "effectguard.to_status"
PROBE_STATUS = "effectguard.probe.status"
WAIT_SECONDS = "effectguard.wait.seconds"

# -- an operator's span --------------------------------------------------------------
ACTOR = "effectguard.operator.actor"
ACTION = "effectguard.operator.action"
EVIDENCE_REFERENCE = "effectguard.operator.evidence_reference"

# -- instruments ---------------------------------------------------------------------
CALLS = "effectguard.calls"
CALL_DURATION = "effectguard.call.duration"
AWAITING_OPERATOR = "effectguard.operations.awaiting_operator"


def argument_attribute(name: str) -> str:
    """The attribute of an argument, for contracts whose arguments are recorded."""
    return f"effectguard.argument.{name}"
