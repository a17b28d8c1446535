# Recipe: put the effect ledger in front of an MCP server you did not write.
#
# The payments server here stands in for one someone else wrote (a vendor's, a colleague's):
# its create_payment tool charges every request it gets, and its answer can be lost. Nothing
# in it changes. agent-effect-mcp-proxy starts it, offers its tools unchanged, and runs
# create_payment through the ledger as the contracts file below says: one operation per
# invoice, the operation id as the provider's idempotency key, and find_payment as the probe
# that settles a lost answer. The client retries as much as it likes: one payment.
#
# To use it with your server, change:
#   - CONTRACTS: one [tools.NAME] table per write tool of your server; the probe only if it
#     has a lookup that is never stale (else leave not_found out);
#   - --upstream: the command your host ran for the server, or its http(s):// URL;
#   - --db: a SQLite path, or a postgresql:// URL shared by every proxy of one ledger;
#   - in your host's MCP configuration, run agent-effect-mcp-proxy where the server ran.
#
# See it offline:   python recipes/mcp_proxy.py --demo
"""A guarding proxy in front of a payments MCP server (``--demo`` runs it end to end, offline)."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from effectguard import ProbeStatus
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup, ProviderTimeout

PROXY = str(Path(sys.executable).with_name("agent-effect-mcp-proxy"))

CONTRACTS = """\
[tools.create_payment]
operation_id = "payment:{invoice_id}"
idempotency_key_argument = "idempotency_key"
timeout = 10

[tools.create_payment.probe]
tool = "find_payment"
arguments = { reference = "{idempotency_key}" }
field = "status"
committed = ["succeeded"]
not_found = ["not_found"]
output = "payment"
"""


def serve_upstream(directory: Path, *, lose_ack: bool) -> None:
    """The server nobody guarded: a payment per request, the first answer lost on request."""
    payments = FakePaymentProvider(
        idempotency_guaranteed=False,  # the hardest case: it never deduplicates a key
        lookup=Lookup.STRONG,
        faults=FaultPlan([Fault.LOSE_ACK] if lose_ack else []),
        path=directory / "payments.db",
    )
    server = MCPServer("payments")

    @server.tool()
    def create_payment(
        invoice_id: str, amount_cents: int, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Charge an invoice."""
        try:
            return payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)
        except ProviderTimeout as exc:  # it may have charged: the processor's answer was lost
            raise ToolError(str(exc)) from exc

    @server.tool()
    def find_payment(reference: str) -> dict[str, Any]:
        """Look a payment up by its idempotency key."""
        found = payments.probe({}, idempotency_key=reference)
        if found.status is ProbeStatus.COMMITTED:
            return {"status": "succeeded", "payment": found.output}
        return {"status": "not_found" if found.status is ProbeStatus.NOT_COMMITTED else "unknown"}

    server.run("stdio")


async def demo(directory: Path) -> int:
    """Lose the first answer; the probe settles it; a retry replays it: one payment."""
    contracts = directory / "contracts.toml"
    contracts.write_text(CONTRACTS, encoding="utf-8")
    upstream = [sys.executable, __file__, "--serve-upstream", str(directory), "--lose-ack"]
    proxy = StdioServerParameters(
        command=PROXY,
        args=[
            *("--contracts", str(contracts), "--upstream", shlex.join(upstream)),
            *("--db", str(directory / "ledger.db")),
        ],
    )
    arguments = {"invoice_id": "INV-1042", "amount_cents": 1999}
    async with Client(proxy) as client:
        tools = [tool.name for tool in (await client.list_tools()).tools]
        print(f"1. the proxy offers the upstream's tools: {', '.join(tools)}")
        first = await client.call_tool("create_payment", arguments)
        print(f"2. the answer was lost, the probe found it: {first.structured_content}")
        again = await client.call_tool("create_payment", arguments)
        same = again.structured_content == first.structured_content
        print(f"3. the client retried and got the same answer: {same}")
    payments = FakePaymentProvider(path=directory / "payments.db")
    committed, requests = payments.committed(), payments.attempts()
    print(f"the upstream received {requests} request(s) and holds {committed} payment(s)")
    ok = committed == requests == 1 and not first.is_error and not again.is_error
    return 0 if ok else 1


def main() -> int:
    """Run ``--demo``, or (as the proxy's upstream) ``--serve-upstream DIR``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--demo", action="store_true", help="run the offline demo and exit")
    parser.add_argument("--serve-upstream", metavar="DIR", help="serve the unguarded server")
    parser.add_argument("--lose-ack", action="store_true", help="lose the first answer")
    options = parser.parse_args()
    if options.serve_upstream:
        serve_upstream(Path(options.serve_upstream), lose_ack=options.lose_ack)
        return 0
    if not options.demo:
        parser.error("pass --demo (or, as the proxy does, --serve-upstream DIR)")
    with tempfile.TemporaryDirectory() as directory:
        return asyncio.run(demo(Path(directory)))


if __name__ == "__main__":
    sys.exit(main())
