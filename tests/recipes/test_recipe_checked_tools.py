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


def check(tmp_path: Path, tool: str, counter: str, *options: str) -> tuple[int, dict]:
    """Run the check in a process of its own; plain words in ``options`` are --same-request."""
    output = tmp_path / f"{tool.replace(':', '-')}.json"
    arguments = [f"{TOOLS}:{tool}", "--counter", f"{TOOLS}:{counter}", "--json", str(output)]
    words = list(options)
    while words:
        word = words.pop(0)
        arguments += [word, words.pop(0)] if word.startswith("--") else ["--same-request", word]
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


def test_the_payment_recipe_holds_over_http_with_its_answer_dropped_on_the_wire(tmp_path):
    """Every episode, SIGKILLs and the race included, leaves one capture on the server.

    The lost acknowledgement is the proxy's: the capture reached the server and its
    answer was dropped (a request that missed the proxy would leave a note).
    """
    code, data = check(
        tmp_path,
        "PAYMENTS.capture",
        "count_captures",
        "amount_cents",
        "currency",
        "--sandbox-url-env",
        "EFFECTGUARD_CHECKED_PAYMENTS_URL",
    )
    assert code == 0, data["summary"]
    assert "TCP proxy" in data["lost_ack_by"]
    lost_ack = data["episodes"][0]
    assert lost_ack["fault"] == "lost-ack"
    assert lost_ack["note"] == ""
    assert lost_ack["attempts"] == 1  # confirmed through the probe, never resent
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
