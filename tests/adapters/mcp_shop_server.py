"""The shop's tools on an MCP server over stdio: ``python mcp_shop_server.py DIR [lose-ack]``.

A test starts it as a subprocess, twice, to restart the server between a
pause and its retry; the ledger and the providers live in DIR.
"""

from __future__ import annotations

import sys
from pathlib import Path

from effect_shop import open_shop
from mcp.server.mcpserver import MCPServer

from effectguard.adapters.mcp import register_all
from effectguard.testkit import Fault


def main() -> None:
    directory = Path(sys.argv[1])
    faults = [Fault.LOSE_ACK] if sys.argv[2:] == ["lose-ack"] else []
    shop = open_shop(directory, payment_faults=faults)
    server = MCPServer("shop")
    register_all(server, [shop.capture, shop.send_receipt])
    try:
        server.run("stdio")
    finally:
        shop.close()


if __name__ == "__main__":
    main()
