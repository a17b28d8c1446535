"""recipes/openai_agents_email.py and recipes/mcp_server.py run offline and commit once."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from extras_support import import_extra

import_extra("agents", "openai-agents")
mcp = import_extra("mcp", "mcp")

from mcp import Client, StdioServerParameters  # noqa: E402 - after the extra's check

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def run_recipe(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *arguments], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_agents_email_recipe_pauses_and_resumes_with_one_email():
    """The recipe prints the pause, the operator step and the resume, and exits 0 (one email)."""
    done = run_recipe(str(RECIPES / "openai_agents_email.py"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("1. Paused: 1 effect(s) await an operator")
    assert "1 waiting, 1 request(s) sent" in lines[1]
    assert lines[-1] == "the provider sent 1 message(s)"


def test_the_mcp_recipe_demo_commits_once():
    """``--demo`` drives the server with the in-process client: paused, retried, confirmed."""
    done = run_recipe(str(RECIPES / "mcp_server.py"), "--demo")
    assert done.returncode == 0, done.stderr
    assert "is QUARANTINED" in done.stdout
    assert done.stdout.splitlines()[-1] == (
        "the provider received 1 request(s) and holds 1 capture(s)"
    )


def test_the_mcp_recipe_serves_over_stdio(tmp_path):
    """Run as a stdio server, it lists the tool without the key and captures a payment."""
    server = StdioServerParameters(
        command=sys.executable,
        args=[str(RECIPES / "mcp_server.py"), "--ledger", str(tmp_path / "ledger.db")],
    )

    async def session():
        async with Client(server) as client:
            tools = (await client.list_tools()).tools
            result = await client.call_tool(
                "capture_payment", {"invoice_id": "INV-5", "amount_cents": 500}
            )
            return tools, result

    tools, result = asyncio.run(session())
    assert [t.name for t in tools] == ["capture_payment"]
    assert sorted(tools[0].input_schema["properties"]) == ["amount_cents", "invoice_id"]
    assert not result.is_error
    assert result.structured_content["invoice_id"] == "INV-5"
    assert result.structured_content["status"] == "succeeded"


def test_the_mcp_recipe_refuses_to_serve_without_a_ledger():
    """Serving without --ledger is a usage error naming the option, exit 2."""
    done = run_recipe(str(RECIPES / "mcp_server.py"))
    assert done.returncode == 2
    assert "--ledger is required" in done.stderr
