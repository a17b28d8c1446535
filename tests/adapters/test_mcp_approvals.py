"""Exact-call approvals over MCP: a tool error carrying the approval payload, then one send.

The client is the SDK's own (in process, or a server per call over stdio);
the approval comes from the ledger (``agent-effect-ops approve``, the API),
never from the client. Counted at the fake provider; SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from approval_shop import ARGUMENTS, AUDIT, OPERATION, Refunds, open_refunds
from extras_support import import_extra
from fault_children import ops

from effectguard import EffectStatus, EventType
from effectguard.adapters import ApprovalRequest

mcp = import_extra("mcp", "mcp")

from mcp import Client, StdioServerParameters  # noqa: E402 - after the extra's check
from mcp.server.mcpserver import MCPServer  # noqa: E402 - after the extra's check

from effectguard.adapters.mcp import PENDING_META_KEY, register  # noqa: E402 - imports mcp

CHILD = Path(__file__).with_name("approval_shop.py")
OPS_AUDIT = ("--actor", "bob", "--reason", "checked", "--evidence-reference", "T-35")


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def refunds(tmp_path: Path, ledger_target: str, kind: str) -> Iterator[Refunds]:
    opened = open_refunds(tmp_path, ledger_target, kind=kind)
    yield opened
    opened.close()


def call(server: Any, arguments: dict[str, Any]) -> Any:
    async def once() -> Any:
        async with Client(server) as client:
            return await client.call_tool("refund", arguments)

    return asyncio.run(once())


def served(refunds: Refunds) -> MCPServer:
    server = MCPServer("refunds")
    register(server, refunds.refund)
    return server


def test_a_request_awaiting_approval_is_a_tool_error_with_the_payload(refunds):
    """isError; _meta holds kind, operation, masked arguments, the approve command; nothing sent."""
    server = served(refunds)
    paused = call(server, ARGUMENTS)
    assert paused.is_error
    payload = paused.meta[PENDING_META_KEY]
    assert payload == paused.structured_content
    assert payload["kind"] == "effectguard.approval"
    request = ApprovalRequest.from_json(payload)
    assert request.operation_id == OPERATION
    assert request.arguments == {**ARGUMENTS, "card_token": "[redacted]"}
    assert "tok_SECRET" not in json.dumps(payload)
    assert "tok_SECRET" not in paused.content[0].text
    assert f"approve {OPERATION}" in request.operator_command
    record = refunds.ledger.get(OPERATION)
    assert record.status is EffectStatus.AWAITING_APPROVAL
    assert request.fingerprint == record.fingerprint

    again = call(server, ARGUMENTS)
    assert again.is_error
    assert again.meta[PENDING_META_KEY]["kind"] == "effectguard.approval"
    assert refunds.ledger.get(OPERATION).event_count == record.event_count  # asking wrote nothing
    assert refunds.provider.committed() == 0


def test_after_the_approval_the_clients_call_sends_once_then_replays(refunds):
    """agent-effect-ops approve, then the same call: one refund; later calls replay it."""
    server = served(refunds)
    assert call(server, ARGUMENTS).is_error
    ops(refunds.ledger_target, "approve", OPERATION, *OPS_AUDIT)
    assert refunds.provider.committed() == 0
    done = call(server, ARGUMENTS)
    assert not done.is_error
    assert done.structured_content["amount_cents"] == -25_000
    replays = [call(server, ARGUMENTS) for _ in range(2)]
    assert all(r.structured_content == done.structured_content for r in replays)
    assert refunds.provider.committed() == 1
    kinds = [e.type for e in refunds.ledger.events(OPERATION)]
    assert kinds == [
        EventType.APPROVAL_REQUESTED,
        EventType.OPERATOR_APPROVED,
        EventType.DISPATCHED,
        EventType.CONFIRMED,
    ]


def test_a_denied_request_is_a_final_refusal_and_never_sent(refunds):
    """deny: every later call is a tool error saying it is final; the provider never sees it."""
    server = served(refunds)
    call(server, ARGUMENTS)
    refunds.ledger.deny(OPERATION, **AUDIT)
    for _ in range(2):
        refused = call(server, ARGUMENTS)
        assert refused.is_error
        assert refused.meta is None or PENDING_META_KEY not in refused.meta
        assert "rejected" in refused.content[0].text
        assert "never sent again" in refused.content[0].text
    assert refunds.provider.committed() == 0


def test_other_arguments_under_the_operation_are_a_conflict_and_send_nothing(refunds):
    """A changed amount after the approval is refused; the approved request is still sent once."""
    server = served(refunds)
    call(server, ARGUMENTS)
    refunds.ledger.approve(OPERATION, **AUDIT)
    conflicted = call(server, {**ARGUMENTS, "amount_cents": 90_000})
    assert conflicted.is_error
    assert "already recorded with a different request" in conflicted.content[0].text
    assert refunds.provider.committed() == 0
    assert refunds.ledger.get(OPERATION).status is EffectStatus.PREPARED  # the approval stands
    done = call(server, ARGUMENTS)
    assert done.structured_content["amount_cents"] == -25_000
    assert refunds.provider.committed() == 1


def test_an_approval_that_ran_out_sends_nothing(refunds):
    """An approval with --expires-in: past it, the call sends nothing; the request waits again."""
    server = served(refunds)
    call(server, ARGUMENTS)
    refunds.ledger.approve(OPERATION, **AUDIT, expires_in=0.05)
    time.sleep(0.2)
    paused = call(server, ARGUMENTS)
    assert paused.is_error
    assert paused.meta[PENDING_META_KEY]["kind"] == "effectguard.approval"
    assert refunds.ledger.get(OPERATION).status is EffectStatus.AWAITING_APPROVAL
    assert refunds.provider.committed() == 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sync"])
def test_approved_in_one_process_sent_by_a_server_in_another(tmp_path, ledger_target, kind):
    """Each call is a new stdio server process, the approval the CLI's: one refund in all."""
    stdio = StdioServerParameters(
        command=sys.executable, args=[str(CHILD), "mcp", str(tmp_path), ledger_target]
    )
    refunds = open_refunds(tmp_path, ledger_target)
    assert call(stdio, ARGUMENTS).is_error
    assert call(stdio, ARGUMENTS).is_error
    assert refunds.provider.committed() == 0
    ops(ledger_target, "approve", OPERATION, *OPS_AUDIT)
    done = call(stdio, ARGUMENTS)
    assert not done.is_error
    again = call(stdio, ARGUMENTS)
    assert again.structured_content == done.structured_content
    assert refunds.provider.committed() == 1
    refunds.close()
