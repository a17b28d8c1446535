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
it returns the confirmed output. A rejected operation, or a request that
conflicts with the one recorded, is a tool error that says it is final.

A request whose contract requires approval (``@effect(requires_approval=...)``)
is recorded unsent and answered with an ``isError`` result whose ``_meta``
(same key) and structured content hold the approval payload
(:class:`~effectguard.adapters.ApprovalRequest`: ``kind``
``effectguard.approval``, the operation id, the arguments as the ledger
recorded them with redacted values masked, the ``agent-effect-ops approve``
command). The approval comes from the ledger (CLI, console, API), never from
the client: the client's call with the same arguments after it sends the
request once; a denied one is a final refusal.

MCP request ids change on every retry, so they cannot identify an operation:
a tool served over MCP needs a business-key operation id (a template over its
arguments). :func:`register` refuses one that reads the call scope
(``call_scoped`` or a ``{run_id}``/``{call_id}`` template), and a call never
runs under a call scope, so a custom operation id that needs one fails
before anything is sent.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import types
from collections.abc import Iterable, Mapping
from typing import Any

from effectguard._decorator import IdentityTemplate, get_contract, is_effect, request_of
from effectguard._model import EffectResult, EffectStatus
from effectguard._scope import call_scoped
from effectguard.adapters._approval import request_payload
from effectguard.adapters._common import (
    Confirmed,
    Pending,
    PublicSignature,
    Refused,
    _refusal,
    classify,
    public_signature,
)
from effectguard.adapters._effect_tools import as_text, keyword_parameters, stand_in
from effectguard.errors import ConfigurationError, OperationConflictError, OutputNotStored

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import CallToolResult, TextContent, ToolAnnotations
    from pydantic import Field
except ModuleNotFoundError as exc:  # pragma: no cover - exercised without the extra
    msg = (
        "effectguard.adapters.mcp needs the 'mcp' extra "
        f"({exc.name} is not installed): pip install 'effectguard[mcp]'"
    )
    raise ImportError(msg, name=exc.name) from exc

# After the framework's check, so a missing extra is named for this module.
from effectguard.adapters._mcp_results import PENDING_META_KEY, approval_result, pending_result

__all__ = ["PENDING_META_KEY", "register", "register_all"]

logger = logging.getLogger("effectguard.adapters.mcp")

_SCOPED_TYPE = type(call_scoped("x"))


def _refuse_scoped(fn: Any, tool: str) -> None:
    """Refuse an operation id from the call scope: no MCP call id survives a retry."""
    contract = get_contract(fn)
    op = None if contract is None else contract.operation_id
    if isinstance(op, _SCOPED_TYPE) or (isinstance(op, IdentityTemplate) and op.scoped):
        msg = (
            f"{tool}: its operation id ({op!r}) comes from the call scope, and MCP has no "
            "call id that survives a retry (each request gets a new id), so every retry "
            "would be a new operation and a second dispatch. Give it a business-key "
            'operation id over its arguments, e.g. operation_id="invoice:{invoice_id}:capture"'
        )
        raise ConfigurationError(msg)


def _approval_result(
    fn: Any,
    public: PublicSignature,
    arguments: Mapping[str, Any],
    result: EffectResult[Any],
    request: str,
) -> CallToolResult:
    """The tool error of a request awaiting approval: the approval payload, and what to do next."""
    recorded = request_of(fn, **arguments)
    approval = request_payload(
        fn,
        tool=public.name,
        tool_call_id=request,
        operation_id=result.operation_id,
        arguments=recorded.arguments,
        fingerprint=recorded.fingerprint,
        reason=result.reason,
    )
    logger.warning(
        "MCP tool %s: operation %s awaits a person's approval; nothing was sent",
        public.name,
        approval.operation_id,
    )
    return approval_result(approval)


async def _execute(fn: Any, arguments: Mapping[str, Any]) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn.execute(**arguments)
    return await asyncio.to_thread(fn.execute, **arguments)


async def _call(fn: Any, public: PublicSignature, arguments: dict[str, Any], request: str) -> Any:
    """Run one call; return its output, or a result the host can act on."""
    try:
        result = await _execute(fn, arguments)
    except (OperationConflictError, OutputNotStored) as exc:
        outcome: Confirmed | Pending | Refused = _refusal(exc, public.name)
    else:
        if result.status is EffectStatus.AWAITING_APPROVAL:
            return _approval_result(fn, public, arguments, result, request)
        outcome = classify(fn, result, tool=public.name, tool_call_id=request)
    if isinstance(outcome, Refused):
        raise ToolError(outcome.message)
    if isinstance(outcome, Pending):
        logger.warning(
            "MCP tool %s: operation %s is %s; the client was told to retry later",
            public.name,
            outcome.effect.operation_id,
            outcome.effect.status.value,
        )
        return pending_result(outcome)
    output = outcome.output
    if isinstance(output, Mapping):
        # Structured whatever the annotation says (a bare ``dict`` gets no output schema).
        text = TextContent(type="text", text=as_text(output))
        return CallToolResult(content=[text], structured_content=dict(output))
    return output


def _server_function(fn: Any, public: PublicSignature) -> Any:
    async def call(ctx: Context, **arguments: Any) -> Any:
        return await _call(fn, public, arguments, ctx.request_id)

    context = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)
    parameters = [*keyword_parameters(public, Field), context]
    returns = inspect.signature(inspect.unwrap(fn), eval_str=True).return_annotation
    return stand_in(call, public, parameters, returns)


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
    payload (the SDK's input-required flow keeps its state under a
    process-local key, so it would not survive a server restart, and an
    operator resolves in the ledger, not through the client). A request
    awaiting approval is an ``isError`` result carrying the approval payload;
    the same call after the ledger's approval sends it once. Raises
    :class:`ConfigurationError` for a function that is not an ``@effect``
    function or whose operation id needs a call scope.
    """
    if pause != "error":
        msg = (
            f"register(pause={pause!r}): only pause='error' is supported; an input_required "
            "pause would not survive a server restart, and the operator resolves in the ledger"
        )
        raise ConfigurationError(msg)
    public = public_signature(fn, name=name)
    _refuse_scoped(fn, public.name)
    server.add_tool(
        _server_function(fn, public),
        name=public.name,
        description=public.description,
        annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=destructive),
    )


def register_all(
    server: MCPServer, module_or_tools: types.ModuleType | object | Iterable[Any]
) -> list[str]:
    """Register every ``@effect`` function of a module or object, or each one of an iterable.

    Returns the names registered, in order. Finding no ``@effect`` function is
    a :class:`ConfigurationError`: registering nothing is never what was meant.
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
        names.append(public_signature(fn).name)
    return names
