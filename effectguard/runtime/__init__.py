"""The agent runtime: contracted tools, WAITING runs and safe resume.

Import it from here (``from effectguard.runtime import AgentRuntime``); the
top-level ``effectguard`` package does not import it, so a tool that only
uses ``@effect`` never loads the runtime.
"""

from effectguard.errors import (
    ApprovalNotPendingError,
    CheckpointConflictError,
    CheckpointError,
    RunExistsError,
    RunNotFoundError,
    RuntimeStateError,
    ScriptExhaustedError,
)
from effectguard.runtime.checkpoints import CheckpointStore, InMemoryCheckpointStore
from effectguard.runtime.checkpoints.sqlite import SQLiteCheckpointStore
from effectguard.runtime.llm import Message, Model, ModelTurn, ScriptedModel, ToolCall
from effectguard.runtime.permissions import (
    Decision,
    PermissionPolicy,
    ToolRequest,
    allow_all,
    allow_list,
    require_approval,
)
from effectguard.runtime.runtime import AgentRuntime
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
from effectguard.runtime.state import ApprovalRequest, RunResult, RunState
from effectguard.runtime.tools import ToolDefinition
from effectguard.runtime.tools.registry import ToolLike, ToolRegistry
from effectguard.runtime.tools.schema import function_schema, parse_docstring
from effectguard.runtime.waiting import RunView, WaitedOperation, describe_run, list_runs

__all__ = [
    "AgentRuntime",
    "ApprovalNotPendingError",
    "ApprovalRequest",
    "AuditAction",
    "AuditRecord",
    "AuditSink",
    "CheckpointConflictError",
    "CheckpointError",
    "CheckpointStore",
    "Decision",
    "InMemoryAuditSink",
    "InMemoryCheckpointStore",
    "InMemoryTraceSink",
    "JsonLinesAuditSink",
    "JsonLinesTraceSink",
    "Message",
    "Model",
    "ModelTurn",
    "PermissionPolicy",
    "RunExistsError",
    "RunNotFoundError",
    "RunResult",
    "RunState",
    "RunView",
    "RuntimeStateError",
    "SQLiteCheckpointStore",
    "ScriptExhaustedError",
    "ScriptedModel",
    "ToolCall",
    "ToolDefinition",
    "ToolLike",
    "ToolRegistry",
    "ToolRequest",
    "TraceEvent",
    "TraceKind",
    "TraceSink",
    "WaitedOperation",
    "allow_all",
    "allow_list",
    "describe_run",
    "function_schema",
    "list_runs",
    "parse_docstring",
    "require_approval",
]
