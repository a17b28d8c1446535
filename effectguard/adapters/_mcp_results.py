"""What an MCP client sees of an unconfirmed effect: one shape for our server and our proxy.

:mod:`effectguard.adapters.mcp` (tools written here) and
:mod:`effectguard.adapters.mcp_proxy` (tools of a server written elsewhere)
answer a paused call with the same ``isError`` result, so a host that handles
one handles both: the pending payload as structured content and in ``_meta``
under :data:`PENDING_META_KEY`, and text telling the model not to report the
call as done and to retry it later with the same arguments.
"""

from __future__ import annotations

from typing import Any

from effectguard.adapters._approval import ApprovalRequest
from effectguard.adapters._common import Pending, Refused

try:
    from mcp_types import CallToolResult, TextContent
except ModuleNotFoundError as exc:  # pragma: no cover - exercised without the extra
    msg = (
        "effectguard's MCP adapters need the 'mcp' extra "
        f"({exc.name} is not installed): pip install 'effectguard[mcp]'"
    )
    raise ImportError(msg, name=exc.name) from exc

__all__ = ["PENDING_META_KEY", "approval_result", "pending_result", "refused_result"]

#: The ``_meta`` key of a paused call's result: its pending payload, or its approval payload
#: (``kind`` tells them apart) when the request awaits a person's approval.
PENDING_META_KEY = "io.effectguard/effect"


def pending_result(pending: Pending) -> CallToolResult:
    """The ``isError`` result of an unconfirmed effect: its payload, and what to do next."""
    effect = pending.effect
    payload = effect.to_json()
    text = (
        f"The outcome of {effect.tool} is not confirmed: operation {effect.operation_id} is "
        f"{effect.status.value}. Do not report it as done. An operator must resolve it in the "
        "effect ledger; retry this call later with the same arguments: a retry dispatches "
        "nothing until the operator has acted, then returns the confirmed output."
    )
    return _paused(text, payload)


def approval_result(approval: ApprovalRequest) -> CallToolResult:
    """The ``isError`` result of a request awaiting approval: its payload, and what to do next."""
    payload = approval.to_json()
    text = (
        f"{approval.tool} was not sent: operation {approval.operation_id} needs a person's "
        "approval of exactly this request, which is recorded in the effect ledger. Do not "
        "report it as done. Once a person has approved it there, retry this call with the same "
        "arguments: it is sent once. A denied request is never sent."
    )
    return _paused(text, payload)


def _paused(text: str, payload: dict[str, Any]) -> CallToolResult:
    """An ``isError`` result telling the model ``text``, with ``payload`` for the host."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=payload,
        is_error=True,
        _meta={PENDING_META_KEY: payload},
    )


def refused_result(refused: Refused) -> CallToolResult:
    """The ``isError`` result of a refusal: its message alone, with no payload to act on."""
    return CallToolResult(content=[TextContent(type="text", text=refused.message)], is_error=True)
