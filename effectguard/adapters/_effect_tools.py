"""A decorated tool as the OpenAI Agents SDK and MCP adapters see it, and what its results say.

Both frameworks build a tool's schema from a Python signature and hand the
model the tool's text. :class:`EffectTool` reads an ``@effect`` function once:
its business parameters (never ``idempotency_key``), each with the
description its docstring's ``Args:`` section gives, and a keyword-only
signature a framework can introspect. :func:`pending_payload` is what an
unconfirmed effect looks like to a host; the messages here never invite the
model to call the same operation again.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from effectguard.config import resolve_executor
from effectguard.contract import EffectContract
from effectguard.decorator import get_contract
from effectguard.decorator.binding import visible_signature
from effectguard.errors import ConfigurationError
from effectguard.executor import EffectExecutor
from effectguard.model import EffectResult, EffectStatus
from effectguard.scope import call_scope

__all__ = [
    "PENDING_KEY",
    "UNSETTLED",
    "EffectTool",
    "as_text",
    "parse_pending",
    "pending_payload",
    "rejection_message",
]

#: The key under which a host finds an unconfirmed effect's payload (JSON, ``_meta``).
PENDING_KEY = "io.effectguard/effect"

#: Statuses of an operation that was (or may have been) sent and is not settled yet.
UNSETTLED = frozenset(
    {
        EffectStatus.DISPATCHED,
        EffectStatus.OUTCOME_UNKNOWN,
        EffectStatus.RECONCILING,
        EffectStatus.QUARANTINED,
    }
)

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns?|Raises|Yields?|Examples?|Notes?):\s*$")
_ARG = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Return a Google-style docstring's text before its sections, and its ``Args:`` by name."""
    lines = inspect.cleandoc(doc or "").splitlines()
    text: list[str] = []
    described: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        header = _SECTION.match(line)
        if header and not line.startswith(" "):
            section, current = header.group(1), None
            continue
        if section is None:
            text.append(line)
        elif section in ("Args", "Arguments", "Parameters") and line.strip():
            entry = _ARG.match(line.strip())
            indent = len(line) - len(line.lstrip())
            if entry and (current is None or indent <= _indent_of(lines, current)):
                current = entry.group(1).lstrip("*")
                described[current] = entry.group(2).strip()
            elif current is not None:
                described[current] = f"{described[current]} {line.strip()}".strip()
    return "\n".join(text).strip(), described


def _indent_of(lines: list[str], name: str) -> int:
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith(f"{name}:") or stripped.startswith(f"{name} ("):
            return len(line) - len(stripped)
    return 0


@dataclass(frozen=True, slots=True)
class EffectTool:
    """An ``@effect`` function read once for a framework adapter.

    ``parameters`` are the business parameters, keyword-only, annotated with
    their resolved types; ``descriptions`` holds what the docstring's ``Args:``
    says of each.
    """

    fn: Any
    name: str
    description: str
    parameters: tuple[inspect.Parameter, ...]
    descriptions: Mapping[str, str]
    contract: EffectContract
    is_async: bool

    @classmethod
    def read(cls, fn: Any, *, name: str | None = None) -> EffectTool:
        """Read ``fn``; raise :class:`ConfigurationError` when it is not an ``@effect`` function."""
        contract = get_contract(fn)
        if contract is None:
            msg = (
                f"{fn!r} is not an @effect function: decorate it with "
                "@effectguard.effect(operation_id=...) before registering it as a tool"
            )
            raise ConfigurationError(msg)
        raw = inspect.unwrap(fn)
        try:
            hints = typing.get_type_hints(raw, include_extras=True)
        except (NameError, TypeError) as exc:
            msg = f"{contract.name}: cannot resolve its type hints for a tool schema: {exc}"
            raise ConfigurationError(msg) from exc
        parameters = []
        for parameter in visible_signature(fn).parameters.values():
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                msg = (
                    f"{contract.name}: *{parameter.name} cannot be offered to a model; "
                    "give the tool named parameters"
                )
                raise ConfigurationError(msg)
            parameters.append(
                parameter.replace(
                    kind=inspect.Parameter.KEYWORD_ONLY,
                    annotation=hints.get(parameter.name, Any),
                )
            )
        description, described = parse_docstring(getattr(raw, "__doc__", None))
        return cls(
            fn=fn,
            name=name or raw.__name__,
            description=description,
            parameters=tuple(parameters),
            descriptions={p.name: described[p.name] for p in parameters if p.name in described},
            contract=contract,
            is_async=inspect.iscoroutinefunction(raw),
        )

    def described_parameters(self, field: Any) -> list[inspect.Parameter]:
        """The parameters, each described one annotated ``Annotated[T, field(description=...)]``."""
        return [
            p.replace(annotation=Annotated[p.annotation, field(description=self.descriptions[p.name])])
            if p.name in self.descriptions
            else p
            for p in self.parameters
        ]

    def executor(self) -> EffectExecutor:
        """The executor this tool's calls run on (given to ``@effect``, lent, or configured)."""
        tool = getattr(self.fn, "_self_tool", None)
        explicit = getattr(tool, "executor", None)
        return resolve_executor(explicit, self.contract.name)

    def bind(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Return ``arguments`` with defaults applied; raise ``TypeError`` as a call would."""
        signature = inspect.Signature(list(self.parameters))
        try:
            bound = signature.bind(**arguments)
        except TypeError as exc:
            raise TypeError(f"{self.name}(): {exc}") from None
        bound.apply_defaults()
        return dict(bound.arguments)

    def operation_id(self, arguments: Mapping[str, Any]) -> str:
        """The operation id a call with ``arguments`` has, under the active call scope."""
        return self.contract.operation_id(self.bind(arguments))

    async def execute(
        self, arguments: Mapping[str, Any], *, run_id: str | None, call_id: str | None
    ) -> EffectResult[Any]:
        """Run the tool for ``arguments`` (under the call scope, when ids are given).

        A sync tool runs in a worker thread, so parallel identical calls can
        wait for each other without blocking the event loop.
        """
        if self.is_async:
            if run_id is None or call_id is None:
                result: EffectResult[Any] = await self.fn.execute(**arguments)
                return result
            with call_scope(run_id=run_id, call_id=call_id):
                result = await self.fn.execute(**arguments)
                return result
        return await asyncio.to_thread(self.execute_sync, arguments, run_id=run_id, call_id=call_id)

    def execute_sync(
        self, arguments: Mapping[str, Any], *, run_id: str | None, call_id: str | None
    ) -> EffectResult[Any]:
        """Run a sync tool for ``arguments`` in this thread (under the call scope, when given)."""
        if self.is_async:
            msg = f"{self.name} is an async tool: use the adapter's async settle function"
            raise TypeError(msg)
        if run_id is None or call_id is None:
            result: EffectResult[Any] = self.fn.execute(**arguments)
            return result
        with call_scope(run_id=run_id, call_id=call_id):
            result = self.fn.execute(**arguments)
            return result


def as_text(output: Any) -> str:
    """A confirmed output as the model reads it: JSON when it is JSON, else ``str()``."""
    if isinstance(output, str):
        return output
    try:
        return json.dumps(output, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(output)


def pending_payload(
    tool: str, result: EffectResult[Any], *, call_id: str | None, run_id: str | None
) -> dict[str, Any]:
    """What a host needs to resolve an unconfirmed effect, as JSON-ready data.

    The tool and its call, the operation id, status, reason and attempts, and
    the operator commands that settle it; ``message`` tells a model not to
    call the tool again for this operation.
    """
    operation = result.operation_id
    status = result.status.value
    if result.status is EffectStatus.PREPARED:
        message = (
            f"{tool} was not sent ({result.reason}). Nothing took effect; the host retries "
            f"operation {operation} later with the same arguments. Do not call {tool} again now."
        )
    else:
        message = (
            f"The outcome of {tool} is not confirmed (operation {operation} is {status}). "
            f"Do not call {tool} again for it and do not report it as done: an operator must "
            "resolve it in the effect ledger, and the host resumes this call afterwards."
        )
    return {
        PENDING_KEY: "unconfirmed",
        "tool": tool,
        "tool_call_id": call_id,
        "run_id": run_id,
        "operation_id": operation,
        "status": status,
        "reason": result.reason,
        "attempts": result.attempts,
        "resolve": (
            f"agent-effect-ops --db LEDGER show {operation}; then "
            f"agent-effect-ops --db LEDGER confirm {operation} --output-json ... if it took "
            f"effect, or agent-effect-ops --db LEDGER authorize-retry {operation} ... if not"
        ),
        "message": message,
    }


def parse_pending(text: object) -> dict[str, Any] | None:
    """Return the pending payload a tool output holds, or None when it holds a settled output."""
    if isinstance(text, Mapping):
        found = dict(text)
    elif isinstance(text, str) and PENDING_KEY in text:
        try:
            found = json.loads(text)
        except ValueError:
            return None
    else:
        return None
    if not isinstance(found, dict) or found.get(PENDING_KEY) != "unconfirmed":
        return None
    return found


def rejection_message(tool: str, result: EffectResult[Any]) -> str:
    """The text a model reads for a REJECTED operation: final, so no retry is invited."""
    reason = result.reason or "the provider refused it"
    return (
        f"{tool} was rejected and nothing took effect: {reason}. Operation "
        f"{result.operation_id} is final; calling {tool} again with the same arguments "
        "returns this same rejection. Tell the user instead."
    )
