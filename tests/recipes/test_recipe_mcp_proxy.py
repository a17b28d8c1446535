"""recipes/mcp_proxy.py runs offline: a lost answer settled by the probe, one payment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from extras_support import import_extra

import_extra("mcp", "mcp")

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "mcp_proxy.py"


def test_the_mcp_proxy_recipe_demo_pays_once():
    """``--demo``: the proxy in front of the server, answer lost, found, replayed; one payment."""
    done = subprocess.run(
        [sys.executable, str(RECIPE), "--demo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "1. the proxy offers the upstream's tools: create_payment, find_payment"
    assert "the probe found it" in lines[1]
    assert lines[2].endswith("the same answer: True")
    assert lines[-1] == "the upstream received 1 request(s) and holds 1 payment(s)"
