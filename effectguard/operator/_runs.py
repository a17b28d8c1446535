"""Framework runs in the ledger: operations grouped by the call scope their ids were made from.

The framework adapters run every tool call under a call scope
(:func:`effectguard.call_scope`): LangGraph's thread id, Pydantic AI's
conversation id, the OpenAI Agents SDK's ``run_id=`` (``"openai-agents"``
unless given), each with the tool call's id. The ledger keeps no scope beside
an operation; the scope survives only inside the operation id, when the tool
built its id from it: ``call_scoped(prefix)`` writes ``prefix:<run id>:<call id>``,
and a template naming ``{run_id}`` or ``{call_id}`` puts them where it says.
Given the tools (their identity templates), each operation whose contract
reads the scope is parsed back into its run and tool call, so an operator
sees a framework run's effects together. An operation with a business-key id
(``"invoice:{invoice_id}:capture"``) holds no scope and belongs to no run;
MCP tools never have one.

Parsing is exact for templates whose scope fields are separated by literal
text that the ids themselves do not contain; ``call_scoped`` ids are split at
their last ``:``, so a tool call id must not contain one (no framework's does).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from effectguard._decorator import IdentityTemplate, ToolIndex
from effectguard._model import EffectStatus
from effectguard._scope import call_scoped
from effectguard.errors import RunNotFoundError

if TYPE_CHECKING:
    from effectguard.ledger import EffectLedger

__all__ = ["ScopedOperation", "ScopedRun", "framework_run", "framework_runs", "scope_parser"]

#: Statuses a resume settles without a person (as for the runtime's waiting runs).
_SETTLED_OR_RESUMABLE = frozenset(
    {
        EffectStatus.CONFIRMED,
        EffectStatus.REJECTED,
        EffectStatus.PREPARED,
        EffectStatus.OUTCOME_UNKNOWN,
    }
)

#: How many operations of one contract are read at most (newest first).
DEFAULT_LIMIT = 10_000

_SCOPED_TYPE = type(call_scoped("x"))

#: ``operation id -> (run_id, call_id or None)``, or None when the id holds no scope.
ScopeParser = Callable[[str], "tuple[str, str | None] | None"]


@dataclass(frozen=True, slots=True)
class ScopedOperation:
    """One operation of a framework run: which tool call made it, and where it stands now."""

    operation_id: str
    contract: str
    call_id: str | None
    status: EffectStatus
    attempts: int
    reason: str | None
    updated_at: datetime

    @property
    def blocks(self) -> bool:
        """Whether this operation needs a person (or a worker still holding it) before a resume."""
        return self.status not in _SETTLED_OR_RESUMABLE


@dataclass(frozen=True, slots=True)
class ScopedRun:
    """A framework run as the ledger knows it: its run id and its operations, newest first."""

    run_id: str
    operations: tuple[ScopedOperation, ...]

    @property
    def counts(self) -> dict[str, int]:
        """How many of its operations are in each status, by status name."""
        return dict(sorted(Counter(op.status.value for op in self.operations).items()))

    @property
    def needs_attention(self) -> bool:
        """True when some operation waits for a person (QUARANTINED, or still held)."""
        return any(op.blocks for op in self.operations)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "run_id": self.run_id,
            "counts": self.counts,
            "needs_attention": self.needs_attention,
            "operations": [
                {
                    "operation_id": op.operation_id,
                    "contract": op.contract,
                    "call_id": op.call_id,
                    "status": op.status.value,
                    "attempts": op.attempts,
                    "reason": op.reason,
                    "blocks": op.blocks,
                    "updated_at": op.updated_at.isoformat(),
                }
                for op in self.operations
            ],
        }


def _template_pattern(template: str) -> re.Pattern[str] | None:
    """A regex matching the ids ``template`` makes, capturing ``run_id`` and ``call_id``."""
    parts: list[str] = []
    seen: set[str] = set()
    for literal, field, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if field is None:
            continue
        if field in ("run_id", "call_id"):
            parts.append(f"(?P={field})" if field in seen else f"(?P<{field}>.+?)")
            seen.add(field)
        else:
            parts.append(".+?")
    if "run_id" not in seen:
        return None
    return re.compile("".join(parts), re.DOTALL)


def scope_parser(spec: object) -> ScopeParser | None:
    """How to read the call scope back out of the ids ``spec`` makes; None if they hold none.

    ``spec`` is a contract's ``operation_id``: ``call_scoped(prefix)``, an
    identity template, or a function (which holds no scope we can read).
    """
    if isinstance(spec, _SCOPED_TYPE):
        head = f"{spec.prefix}:"

        def scoped(operation_id: str) -> tuple[str, str | None] | None:
            if not operation_id.startswith(head):
                return None
            run_id, sep, call_id = operation_id[len(head) :].rpartition(":")
            return (run_id, call_id) if sep and run_id and call_id else None

        return scoped
    if isinstance(spec, IdentityTemplate) and "run_id" in spec.scoped:
        pattern = _template_pattern(spec.template)
        if pattern is None:
            return None

        def templated(operation_id: str) -> tuple[str, str | None] | None:
            found = pattern.fullmatch(operation_id)
            if found is None:
                return None
            fields = found.groupdict()
            return fields["run_id"], fields.get("call_id")

        return templated
    return None


def _scoped(ledger: EffectLedger, tools: ToolIndex, limit: int) -> Iterable[tuple[str, Any]]:
    """Each operation of a tool whose id holds its call scope, with its run id and tool call id."""
    for tool in tools:
        parse = scope_parser(tool.contract.operation_id)
        if parse is None:
            continue
        for record in ledger.list_operations(contract=tool.contract.name, limit=limit):
            if record.contract_version != tool.contract.version:
                continue
            scope = parse(record.operation_id)
            if scope is not None:
                yield (
                    scope[0],
                    ScopedOperation(
                        operation_id=record.operation_id,
                        contract=record.contract,
                        call_id=scope[1],
                        status=record.status,
                        attempts=record.attempts,
                        reason=record.reason,
                        updated_at=record.updated_at,
                    ),
                )


def framework_runs(
    ledger: EffectLedger, tools: ToolIndex, *, limit: int = DEFAULT_LIMIT
) -> list[ScopedRun]:
    """The framework runs the ledger holds operations of, most recently active first.

    ``tools`` are the ``@effect`` tools (:func:`effectguard.operator.load_tools`):
    only their identity templates say where an operation id keeps its scope.
    At most ``limit`` operations of each contract are read, newest first.
    """
    grouped: dict[str, list[ScopedOperation]] = {}
    for run_id, operation in _scoped(ledger, tools, limit):
        grouped.setdefault(run_id, []).append(operation)
    runs = [
        ScopedRun(run_id, tuple(sorted(ops, key=lambda op: op.updated_at, reverse=True)))
        for run_id, ops in grouped.items()
    ]
    return sorted(runs, key=lambda run: run.operations[0].updated_at, reverse=True)


def framework_run(
    ledger: EffectLedger, tools: ToolIndex, run_id: str, *, limit: int = DEFAULT_LIMIT
) -> ScopedRun:
    """One framework run's operations; :class:`RunNotFoundError` when the ledger holds none."""
    for run in framework_runs(ledger, tools, limit=limit):
        if run.run_id == run_id:
            return run
    msg = (
        f"no operation in the ledger belongs to run {run_id!r}: check the run id (`runs list` "
        "shows them) and that --tools names the tools whose operation ids hold the call scope"
    )
    raise RunNotFoundError(msg)
