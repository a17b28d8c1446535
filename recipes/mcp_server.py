# Recipe: an MCP server whose payment tool never charges twice, whatever the client retries.
#
# MCP clients (and the models behind them) retry a tool call that failed, and every retry is
# a new request with a new id. This recipe serves an @effect tool with
# effectguard.adapters.mcp.register: the operation id is a business key over the arguments
# ("invoice:{invoice_id}:capture"), so every retry is the same operation. When the provider's
# acknowledgement is lost, the call returns isError with the pending payload (structured
# content, and _meta["io.effectguard/effect"]) and tells the client to retry later; a retry
# before an operator resolves it sends nothing; after `agent-effect-ops confirm` the retry
# returns the confirmed capture.
#
# To use it with your provider, change:
#   - capture_payment's body: your payment API's capture call, forwarding idempotency_key;
#   - find_capture (optional): a lookup of the capture by that key, so most lost
#     acknowledgements settle themselves without an operator;
#   - the ledger: effectguard.configure(ledger=...) with a SQLite path, or a postgresql:// URL
#     when several server processes share it;
#   - idempotency_guaranteed=True only if your provider documents key deduplication.
#
# Run it as a stdio server for your MCP client:  python recipes/mcp_server.py --ledger PATH
# Or see the whole story offline, driven by the SDK's in-process client:
#                                                python recipes/mcp_server.py --demo
"""An MCP server with an effect-guarded payment tool (``--demo`` runs it end to end, offline)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.server.mcpserver import MCPServer

import effectguard
from effectguard import INJECTED, EffectLedger, OperationConflictError, effect
from effectguard.adapters.mcp import PENDING_META_KEY, register
from effectguard.testkit import FakePaymentProvider, Fault, Lookup

#: A stand-in for your payment API: it commits every request it receives (no key
#: deduplication) and has no lookup, the hardest case.
provider = FakePaymentProvider(idempotency_guaranteed=False, lookup=Lookup.NONE)


@effect(operation_id="invoice:{invoice_id}:capture")
def capture_payment(
    invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
) -> dict[str, Any]:
    """Capture the payment of an invoice.

    Args:
        invoice_id: The invoice to capture, e.g. INV-1042.
        amount_cents: The amount to capture, in cents.
        idempotency_key: Supplied by effectguard; never offered to the client.
    """
    return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


def build_server() -> MCPServer:
    """The MCP server offering ``capture_payment``."""
    server = MCPServer("payments")
    register(server, capture_payment)
    return server


async def demo(ledger: EffectLedger) -> int:
    """Lose the first acknowledgement, retry, resolve as an operator, retry: one capture."""
    provider.faults.set(1, Fault.LOSE_ACK)
    arguments = {"invoice_id": "INV-1042", "amount_cents": 1999}
    async with Client(build_server()) as client:
        paused = await client.call_tool("capture_payment", arguments)
        payload = (paused.meta or {})[PENDING_META_KEY]
        print(f"1. isError={paused.is_error}: {payload['operation_id']} is {payload['status']}")
        again = await client.call_tool("capture_payment", arguments)
        sent = provider.attempts()
        print(f"2. retried before the operator acted: isError={again.is_error}, requests: {sent}")
        found = provider.find_capture(payload["operation_id"])
        if found is None:
            print("the provider shows no capture: authorize a retry instead", file=sys.stderr)
            return 1
        ledger.confirm(
            payload["operation_id"],
            output=found,
            provider_operation_id=found["id"],
            actor="oncall@example.com",
            reason="the capture is in the provider's dashboard",
            evidence_reference="dashboard:" + found["id"],
        )
        print(f"3. operator: {payload['operator_command'].split(' --output-json')[0]} ...")
        done = await client.call_tool("capture_payment", arguments)
        print(f"4. retried: isError={done.is_error}, {done.structured_content}")
    committed, requests = provider.committed(), provider.attempts()
    print(f"the provider received {requests} request(s) and holds {committed} capture(s)")
    return 0 if committed == requests == 1 and not done.is_error else 1


def main() -> int:
    """Serve over stdio, or run ``--demo`` against a throwaway ledger."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ledger", help="the effect ledger (a SQLite path or postgresql:// URL)")
    parser.add_argument("--demo", action="store_true", help="run the offline demo and exit")
    options = parser.parse_args()
    if options.demo:
        with tempfile.TemporaryDirectory() as directory:
            configured = effectguard.configure(ledger=str(Path(directory) / "ledger.db"))
            return asyncio.run(demo(configured.executor.ledger))
    if not options.ledger:
        parser.error("--ledger is required to serve (or pass --demo)")
    effectguard.configure(ledger=options.ledger)
    build_server().run("stdio")
    return 0


if __name__ == "__main__":
    # effectguard installs no log handler; this one prints each event it logs as one short line.
    logging.basicConfig(level=logging.WARNING, format="  log: %(levelname)s %(message).100s")
    logging.getLogger("effectguard").setLevel(logging.INFO)
    try:
        sys.exit(main())
    except OperationConflictError as conflict:  # --ledger holds an earlier, other request
        print(f"error: {conflict}", file=sys.stderr)
        sys.exit(1)
