"""recipes/approval_refund.py: the refund over the limit waits, an operator approves, one send."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "recipes" / "approval_refund.py"


def test_the_approval_recipe_sends_the_big_refund_once_after_the_approval() -> None:
    """The recipe's own checks pass (exit 0), and its story says what happened in order."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120, check=False
    )

    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "run: WAITING on refund:ORD-7" in out
    assert "AWAITING_APPROVAL" in out
    assert "approved 'refund:ORD-7': AWAITING_APPROVAL -> PREPARED" in out
    assert "approving sends nothing" in out
    assert "approval_requested -> operator_approved -> dispatched -> confirmed" in out
    assert "The provider holds 2 refund(s)." in out
    assert out.index("WAITING") < out.index("approved") < out.index("COMPLETED")
