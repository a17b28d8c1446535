"""A payments MCP server nobody guarded: ``python mcp_payments_upstream.py DIR [FLAG...]``.

The upstream the proxy tests put ``agent-effect-mcp-proxy`` in front of. Its
payments are the testkit's :class:`FakePaymentProvider`, kept in
``DIR/payments.db`` so a restarted server (and the test) sees what an earlier
one committed; its counts are what every test asserts on. Flags:

- ``lose-ack``: the first attempt of each payment commits and its answer is lost
  (the tool fails with a timeout); ``hang`` instead never answers it at all;
- ``no-dedupe``: the provider ignores idempotency keys (every request commits);
- ``http=PORT``: serve streamable HTTP on 127.0.0.1:PORT (path ``/mcp``) instead of stdio.

Each start writes ``DIR/upstream.json`` (this pid and its parent's, the proxy's),
so a test can kill the proxy in the middle of a call.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

from effectguard import ProbeStatus
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup, ProviderTimeout

#: How a lookup's outcome reads on the wire, as a real API would spell it.
_LOOKUP_STATUS = {
    ProbeStatus.COMMITTED: "succeeded",
    ProbeStatus.NOT_COMMITTED: "not_found",
    ProbeStatus.PENDING: "processing",
    ProbeStatus.UNKNOWN: "unknown",
}


def main() -> None:
    directory = Path(sys.argv[1])
    flags = set(sys.argv[2:])
    faults = [Fault.LOSE_ACK] if flags & {"lose-ack", "hang"} else []
    payments = FakePaymentProvider(
        idempotency_guaranteed="no-dedupe" not in flags,
        lookup=Lookup.STRONG,
        faults=FaultPlan(faults),
        path=directory / "payments.db",
    )
    (directory / "upstream.json").write_text(
        json.dumps({"pid": os.getpid(), "ppid": os.getppid()}), encoding="utf-8"
    )
    server = MCPServer("payments")

    @server.tool()
    async def create_payment(
        invoice_id: str, amount_cents: int, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Capture a payment for an invoice; a repeated idempotency key returns the first."""
        try:
            return payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)
        except ProviderTimeout:
            if "hang" in flags:
                await anyio.sleep_forever()
            raise

    @server.tool()
    def find_payment(reference: str) -> dict[str, Any]:
        """Look a payment up by its idempotency key (or invoice:<id> when sent without one)."""
        found = payments.probe({}, idempotency_key=reference)
        answer: dict[str, Any] = {"reference": reference, "status": _LOOKUP_STATUS[found.status]}
        if found.status is ProbeStatus.COMMITTED:
            answer["payment"] = found.output
        return answer

    @server.tool()
    def list_payments() -> dict[str, Any]:
        """Every payment committed so far (a read: it changes nothing)."""
        return {"count": payments.committed(), "payments": payments.effects()}

    ports = [flag.removeprefix("http=") for flag in flags if flag.startswith("http=")]
    if ports:
        server.run("streamable-http", port=int(ports[0]))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
