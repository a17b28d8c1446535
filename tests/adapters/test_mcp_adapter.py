"""The MCP adapter, through the SDK's in-process client, counted at the fake providers."""

from __future__ import annotations

import asyncio
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from effect_shop import Shop, confirm_with_cli, confirm_with_ledger, open_shop
from extras_support import import_extra

from effectguard import ConfigurationError, EffectRejected, call_scoped, effect
from effectguard._decorator import executor_of
from effectguard.testkit import Fault

mcp = import_extra("mcp", "mcp")

from mcp import Client, StdioServerParameters  # noqa: E402 - after the extra's check
from mcp.server.mcpserver import MCPServer  # noqa: E402 - after the extra's check

from effectguard.adapters.mcp import (  # noqa: E402 - imports mcp, after the extra's check
    PENDING_META_KEY,
    register,
    register_all,
)

I1 = {"invoice_id": "INV-1", "amount_cents": 1999}
RECEIPT = {"to": "ada@example.com", "invoice_id": "INV-1"}
CAPTURED = {"id": "cap_000001", "status": "succeeded", "invoice_id": "INV-1", "amount_cents": 1999}
SERVER = Path(__file__).with_name("mcp_shop_server.py")


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def shop_server(shop: Shop) -> MCPServer:
    server = MCPServer("shop")
    register_all(server, [shop.capture, shop.send_receipt])
    return server


async def call(server: Any, name: str, arguments: dict[str, Any]) -> Any:
    async with Client(server) as client:
        return await client.call_tool(name, arguments)


def test_schema_is_the_business_parameters_with_descriptions(tmp_path):
    """The input schema is exactly the business parameters, described; the tool is idempotent."""
    shop = open_shop(tmp_path)

    async def listed() -> Any:
        async with Client(shop_server(shop)) as client:
            return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in asyncio.run(listed())}
    capture = tools["capture"]
    properties = capture.input_schema["properties"]
    assert sorted(properties) == ["amount_cents", "invoice_id"]
    assert properties["invoice_id"]["description"] == "The invoice to capture, e.g. INV-1042."
    assert properties["amount_cents"]["description"] == "The amount to capture, in cents."
    assert capture.description == "Capture the payment of an invoice."
    assert capture.annotations.idempotent_hint is True
    assert capture.annotations.destructive_hint is True
    assert sorted(tools["send_receipt"].input_schema["properties"]) == ["invoice_id", "to"]
    shop.close()


def test_two_identical_calls_at_once_commit_once(tmp_path, kind):
    """Two identical calls in flight together share one dispatch: one payment at the provider."""
    shop = open_shop(tmp_path, kind=kind)
    server = shop_server(shop)

    async def both() -> list[Any]:
        async with Client(server) as client:
            return list(
                await asyncio.gather(
                    client.call_tool("capture", I1), client.call_tool("capture", I1)
                )
            )

    first, second = asyncio.run(both())
    assert not first.is_error
    assert not second.is_error
    assert first.structured_content["id"] == "cap_000001"
    assert first.structured_content == second.structured_content
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    shop.close()


def test_lost_acknowledgement_returns_the_pending_payload(tmp_path, kind):
    """A lost acknowledgement is an isError result with the payload, never a bare error."""
    shop = open_shop(tmp_path, kind=kind, payment_faults=[Fault.LOSE_ACK])
    result = asyncio.run(call(shop_server(shop), "capture", I1))
    assert result.is_error
    payload = result.structured_content
    assert payload["operation_id"] == "invoice:INV-1:capture"
    assert payload["status"] == "QUARANTINED"
    assert payload["tool"] == "capture"
    assert payload["kind"] == "effectguard.pending_effect"
    assert "confirm invoice:INV-1:capture" in payload["operator_command"]
    assert result.meta[PENDING_META_KEY] == payload
    assert "retry this call later with the same arguments" in result.content[0].text
    assert "Error executing tool" not in result.content[0].text
    assert shop.payments.committed() == 1
    shop.close()


def test_retry_before_the_operator_acts_sends_nothing(tmp_path, kind):
    """Retrying before the operator resolves it returns the payload again and dispatches nothing."""
    shop = open_shop(tmp_path, kind=kind, payment_faults=[Fault.LOSE_ACK])
    server = shop_server(shop)
    asyncio.run(call(server, "capture", I1))
    again = asyncio.run(call(server, "capture", I1))
    assert again.is_error
    assert again.structured_content["status"] == "QUARANTINED"
    assert shop.payments.attempts() == 1
    assert shop.payments.committed() == 1
    shop.close()


def test_after_confirm_the_retry_returns_the_confirmed_output(tmp_path, kind):
    """Once an operator confirms, the retry returns the confirmed output; one payment in all."""
    shop = open_shop(tmp_path, kind=kind, payment_faults=[Fault.LOSE_ACK])
    server = shop_server(shop)
    asyncio.run(call(server, "capture", I1))
    confirm_with_cli(shop.ledger_path, "invoice:INV-1:capture", CAPTURED)
    result = asyncio.run(call(server, "capture", I1))
    assert not result.is_error
    assert result.structured_content == CAPTURED
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    shop.close()


def test_a_confirmed_sibling_is_not_sent_again(tmp_path):
    """Retrying a batch after the operator acts replays the sibling that had succeeded."""
    shop = open_shop(tmp_path, mail_faults=[Fault.LOSE_ACK])
    server = shop_server(shop)

    async def batch() -> list[Any]:
        async with Client(server) as client:
            return list(
                await asyncio.gather(
                    client.call_tool("capture", I1), client.call_tool("send_receipt", RECEIPT)
                )
            )

    paid, receipt = asyncio.run(batch())
    assert not paid.is_error
    assert receipt.structured_content["status"] == "QUARANTINED"
    sent = shop.mail.effects()[0]["response"]
    confirm_with_ledger(shop.ledger, "receipt:INV-1", sent)
    paid_again, receipt_again = asyncio.run(batch())
    assert paid_again.structured_content == paid.structured_content
    assert receipt_again.structured_content == sent
    assert shop.payments.attempts() == 1
    assert shop.mail.attempts() == 1
    assert shop.payments.committed() == 1
    assert shop.mail.committed() == 1
    shop.close()


@pytest.mark.slow
def test_a_server_restart_between_pause_and_retry_still_commits_once(tmp_path):
    """A new server process (stdio) after the operator confirms returns the output; one payment."""

    def stdio(*extra: str) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable, args=[str(SERVER), str(tmp_path), *extra]
        )

    paused = asyncio.run(call(stdio("lose-ack"), "capture", I1))
    assert paused.is_error
    assert paused.structured_content["status"] == "QUARANTINED"
    retried = asyncio.run(call(stdio("lose-ack"), "capture", I1))
    assert retried.structured_content["status"] == "QUARANTINED"
    confirm_with_cli(str(tmp_path / "ledger.db"), "invoice:INV-1:capture", CAPTURED)
    resumed = asyncio.run(call(stdio("lose-ack"), "capture", I1))
    assert not resumed.is_error
    assert resumed.structured_content == CAPTURED
    shop = open_shop(tmp_path)
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    shop.close()


def test_a_rejected_operation_is_a_final_tool_error(tmp_path):
    """REJECTED is an isError result that says it is final, with no pending payload."""
    shop = open_shop(tmp_path)
    calls = []

    @effect(operation_id="refund:{invoice_id}", executor=executor_of(shop.capture))
    def refund(invoice_id: str) -> dict:
        """Refund an invoice."""
        calls.append(invoice_id)
        reason = "card closed"
        raise EffectRejected(reason)

    server = MCPServer("shop")
    register(server, refund, destructive=False)
    first = asyncio.run(call(server, "refund", {"invoice_id": "INV-9"}))
    second = asyncio.run(call(server, "refund", {"invoice_id": "INV-9"}))
    for result in (first, second):
        assert result.is_error
        assert "card closed" in result.content[0].text
        assert "never sent again" in result.content[0].text
        assert not result.structured_content
    assert calls == ["INV-9"]
    shop.close()


def test_call_scoped_operation_ids_are_refused(tmp_path):
    """An operation id from the call scope is refused at registration: MCP ids change per retry."""
    shop = open_shop(tmp_path)

    @effect(operation_id=call_scoped("charge"), executor=executor_of(shop.capture))
    def charge(customer_id: str) -> dict:
        return {"customer_id": customer_id}

    @effect(operation_id="mail:{run_id}:{call_id}", executor=executor_of(shop.capture))
    def notify(customer_id: str) -> dict:
        return {"customer_id": customer_id}

    server = MCPServer("shop")
    for tool in (charge, notify):
        with pytest.raises(ConfigurationError, match="business-key operation id"):
            register(server, tool)
    shop.close()


def test_register_refuses_what_it_cannot_serve(tmp_path):
    """A plain function, an input_required pause, or a module without effects are clear errors."""
    shop = open_shop(tmp_path)
    server = MCPServer("shop")

    def plain(x: int) -> int:
        return x

    with pytest.raises(ConfigurationError, match="decorated with @effect"):
        register(server, plain)
    with pytest.raises(ConfigurationError, match="only pause='error'"):
        register(server, shop.capture, pause="input_required")
    with pytest.raises(ConfigurationError, match="holds no @effect function"):
        register_all(server, pytest)
    shop.close()


def test_register_all_finds_the_effects_of_an_object(tmp_path):
    """register_all on an object registers its @effect functions and nothing else."""
    shop = open_shop(tmp_path)
    holder = types.SimpleNamespace(capture=shop.capture, helper=len, _hidden=shop.send_receipt)
    server = MCPServer("shop")
    assert register_all(server, holder) == ["capture"]

    async def listed() -> list[str]:
        async with Client(server) as client:
            return [tool.name for tool in (await client.list_tools()).tools]

    assert asyncio.run(listed()) == ["capture"]
    shop.close()
