"""recipes/checked_tools.py under agent-effect check: the recipes' tools hold, the broken one fails.

Each check is a real process, as CI runs it: the payment recipe over HTTP against
the testkit's payment server, the email recipe over SMTP against its SMTP server,
then the contract broken on purpose. Effects are counted at the servers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS = "recipes.checked_tools"


def check(tmp_path: Path, tool: str, counter: str, *same: str) -> tuple[int, dict]:
    output = tmp_path / f"{tool.replace(':', '-')}.json"
    arguments = [f"{TOOLS}:{tool}", "--counter", f"{TOOLS}:{counter}", "--json", str(output)]
    for name in same:
        arguments += ["--same-request", name]
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            "from effectguard.cli.main import main; main()",
            "check",
            *arguments,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert output.exists(), completed.stdout + completed.stderr
    return completed.returncode, json.loads(output.read_text(encoding="utf-8"))


def test_the_payment_recipe_holds_over_http(tmp_path):
    """Every episode, SIGKILLs and the race included, leaves one capture on the server."""
    code, data = check(tmp_path, "PAYMENTS.capture", "count_captures", "amount_cents", "currency")
    assert code == 0, data["summary"]
    assert all(e["judged"] and e["effects"] == 1 for e in data["episodes"]), data["episodes"]
    assert {c["claim"]: c["held"] for c in data["claims"]}["idempotency_guaranteed"] is True


def test_the_email_recipe_holds_over_smtp_and_its_broken_twin_is_caught(tmp_path):
    """No receipt sent twice; the same send behind a lying probe is named, exit 1."""
    code, data = check(tmp_path, "MAILER.send_receipt", "count_messages", "to", "text")
    assert code == 0, data["summary"]
    assert all(e["effects"] <= 1 for e in data["episodes"]), data["episodes"]
    code, data = check(tmp_path, "send_receipt_lying_probe", "count_messages", "to", "text")
    assert code == 1, data["summary"]
    probe = next(c for c in data["claims"] if c["claim"] == "probe")
    assert probe["held"] is False
    duplicated = {e["fault"] for e in data["episodes"] if e["duplicate"]}
    assert {"lost-ack", "kill-after-send"} <= duplicated
