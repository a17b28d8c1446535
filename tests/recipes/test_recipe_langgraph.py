"""recipes/langgraph_payments.py runs offline: pause, operator, resume, one payment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from extras_support import import_extra

langgraph = import_extra("langgraph", "langgraph")

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "langgraph_payments.py"


def test_the_langgraph_recipe_pauses_is_confirmed_and_resumes_with_one_payment():
    """It prints the pause, the operator's step and the resume, and exits 0 (one payment)."""
    done = subprocess.run(
        [sys.executable, str(RECIPE)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("paused: capture_payment (tool call call_1) waits on operation")
    assert "QUARANTINED" in lines[0]
    assert "agent-effect-ops --db " in lines[0]
    assert lines[1] == "resumed early: still paused on 1 effect(s)"
    assert lines[2] == "operator: confirmed invoice:INV-1042:capture as cap_000001"
    assert lines[3] == "resumed: 'Invoice INV-1042 is paid.'; payments the provider holds: 1"
