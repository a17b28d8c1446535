"""``@effect`` tools on an MCP server (``mcp`` 2.x ``MCPServer``), with pauses the host can see.

::

    from mcp.server.mcpserver import MCPServer
    from effectguard.adapters.mcp import register

    server = MCPServer("payments")
    register(server, capture_payment)          # destructive by default

The tool's input schema comes from the public signature (never
``idempotency_key``), each parameter described by the docstring's ``Args:``;
its annotations say ``idempotentHint=True`` (a repeated call with the same
arguments adds nothing: it replays) and ``destructiveHint`` as given.

An effect whose outcome is not confirmed comes back as a ``CallToolResult``
with ``isError=True``, the pending payload as structured content and in
``_meta`` under ``io.effectguard/effect``, and text telling the host to retry
the same arguments later. A retry before the operator acts dispatches
nothing (the ledger holds the operation); after ``agent-effect-ops confirm``
it returns the confirmed output. A rejected operation is a tool error that
says it is final.

MCP request ids change on every retry, so they cannot identify an operation:
a tool served over MCP needs a business-key operation id (a template over its
arguments). :func:`register` refuses one that reads the call scope
(``call_scoped`` or a ``{run_id}``/``{call_id}`` template).
"""

from __future__ import annotations

import inspect
import logging
import types
from collections.abc import Iterable, Mapping
from typing import Any

from effectguard.adapters._effect_tools import (
    PENDING_KEY,
    EffectTool,
    as_text,
    pending_payload,
    rejection_message,
)
from effectguard.decorator import is_effect
from effectguard.decorator.templates import IdentityTemplate
from effectguard.errors import ConfigurationError, OperationConflictError
from effectguard.model import EffectStatus
from effectguard.scope import call_scoped

try:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import CallToolResult, TextContent, ToolAnnotations
    from pydantic import Field
except ModuleNotFoundError as exc:  # pragma: no cover - exercised without the extra
    msg = (
        "effectguard.adapters.mcp needs the 'mcp' extra "
        f"({exc.name} is not installed): pip install 'effectguard[mcp]'"
    )
    raise ImportError(msg, name=exc.name) from exc

__all__ = ["PENDING_KEY", "register", "register_all"]

logger = logging.getLogger("effectguard.adapters.mcp")

_SCOPED_TYPE = type(call_scoped("x"))


def _refuse_scoped(tool: EffectTool) -> None:
    """Refuse an operation id drawn from the call scope: MCP has no stable call id."""
    op = tool.contract.operation_id
    scoped = isinstance(op, _SCOPED_TYPE) or (isinstance(op, IdentityTemplate) and op.scoped)
    if scoped:
        msg = (
            f"{tool.name}: its operation id ({op!r}) comes from the call scope, and MCP has "
            "no call id that survives a retry (each request gets a new id), so every retry "
            "would be a new operation and a second dispatch. Give it a business-key "
            'operation id over its arguments, e.g. operation_id="invoice:{invoice_id}:capture"'
        )
        raise ConfigurationError(msg)


def _pending_result(tool: EffectTool, payload: dict[str, Any]) -> CallToolResult:
    text = (
        f"{payload['message']} Retry this call later with the same arguments: a retry "
        "dispatches nothing until the operator has acted, then returns the confirmed output."
    )
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=payload,
        is_error=True,
        _meta={PENDING_KEY: payload},
    )


async def _call(tool: EffectTool, arguments: dict[str, Any]) -> Any:
    """Run one call of ``tool``; return its output, or a result the host can act on."""
    try:
        result = await tool.execute(arguments, run_id=None, call_id=None)
    except OperationConflictError as exc:
        raise ToolError(f"{exc}; nothing was sent. Do not retry with these arguments.") from exc
    if result.status is EffectStatus.CONFIRMED:
        output = result.output
        if isinstance(output, Mapping):
            # Structured whatever the annotation says (a bare ``dict`` gets no output schema).
            text = [TextContent(type="text", text=as_text(output))]
            return CallToolResult(content=text, structured_content=dict(output))
        return output
    if result.status is EffectStatus.REJECTED:
        raise ToolError(rejection_message(tool.name, result))
    payload = pending_payload(tool.name, result, call_id=None, run_id=None)
    logger.warning(
        "MCP tool %s: operation %s is %s; the client was told to retry later",
        tool.name,
        result.operation_id,
        result.status.value,
    )
    return _pending_result(tool, payload)


def _server_function(tool: EffectTool) -> Any:
    """A keyword-only ``async def`` with the tool's described parameters, for MCPServer to read."""

    async def call(**arguments: Any) -> Any:
        return await _call(tool, arguments)

    parameters = tool.described_parameters(Field)
    returns = inspect.signature(inspect.unwrap(tool.fn), eval_str=True).return_annotation
    call.__signature__ = inspect.Signature(parameters, return_annotation=returns)  # type: ignore[attr-defined]
    call.__annotations__ = {p.name: p.annotation for p in parameters}
    if returns is not inspect.Signature.empty:
        call.__annotations__["return"] = returns
    call.__name__ = call.__qualname__ = tool.name
    call.__doc__ = tool.description
    return call


def register(
    server: MCPServer,
    fn: Any,
    *,
    name: str | None = None,
    destructive: bool = True,
    pause: str = "error",
) -> None:
    """Register the ``@effect`` function ``fn`` as a tool of ``server``.

    The tool's schema holds exactly ``fn``'s business parameters with their
    docstring descriptions; its annotations declare it idempotent (a repeat
    replays) and ``destructive`` as given. ``pause="error"`` is the only
    pause: an unconfirmed effect is an ``isError`` result carrying the pending
    payload (the SDK's input-required flow does not survive a server restart,
    so it cannot carry an operator's resolution). Raises
    :class:`ConfigurationError` for a function that is not an ``@effect``
    function or whose operation id needs a call scope.
    """
    if pause != "error":
        msg = (
            f"register(pause={pause!r}): only pause='error' is supported; an input_required "
            "pause would not survive a server restart, and the operator resolves in the ledger"
        )
        raise ConfigurationError(msg)
    tool = EffectTool.read(fn, name=name)
    _refuse_scoped(tool)
    server.add_tool(
        _server_function(tool),
        name=tool.name,
        description=tool.description,
        annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=destructive),
    )


def register_all(
    server: MCPServer, module_or_tools: types.ModuleType | object | Iterable[Any]
) -> list[str]:
    """Register every ``@effect`` function of a module or object, or each of an iterable.

    Returns the names registered, in order. A module or object without any
    ``@effect`` function is a :class:`ConfigurationError`: registering
    nothing is never what was meant.
    """
    if isinstance(module_or_tools, Iterable) and not isinstance(module_or_tools, (str, bytes)):
        found = list(module_or_tools)
    else:
        found = [
            value
            for value in (
                getattr(module_or_tools, attribute)
                for attribute in sorted(dir(module_or_tools))
                if not attribute.startswith("_")
            )
            if is_effect(value)
        ]
    if not found:
        msg = f"register_all: {module_or_tools!r} holds no @effect function; nothing registered"
        raise ConfigurationError(msg)
    names = []
    for fn in found:
        register(server, fn)
        names.append(EffectTool.read(fn).name)
    return names
