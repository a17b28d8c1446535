"""``agent-effect-ops export``: operations and events as JSON lines, through the console script."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from recovery_support import Site, leave_uncertain, make_site

from effectguard import open_ledger


@pytest.fixture
def site(tmp_path: Path, ledger_target: str) -> Site:
    """Two quarantined captures in this test's ledger."""
    made = make_site(tmp_path, ledger_target)
    ledger = open_ledger(ledger_target)
    try:
        leave_uncertain(made, ledger, invoice="INV-1")
        leave_uncertain(made, ledger, invoice="INV-2")
    finally:
        ledger.close()
    return made


def test_export_writes_each_operation_then_its_events(site: Site) -> None:
    """Every operation is followed by all its events, hashes included; the file is 0600."""
    out = site.directory / "incident.jsonl"

    done = site.ops("export", "--output", str(out))

    assert done.stdout == f"exported 2 operations to {out}\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    operations = [line for line in lines if line["kind"] == "operation"]
    assert sorted(op["operation_id"] for op in operations) == [
        "invoice:INV-1:capture",
        "invoice:INV-2:capture",
    ]
    ledger = open_ledger(site.target)
    try:
        for op in operations:
            events = [
                line
                for line in lines
                if line["kind"] == "event" and line["operation_id"] == op["operation_id"]
            ]
            stored = ledger.events(op["operation_id"])
            assert [e["hash"] for e in events] == [e.hash.hex() for e in stored]
            assert op["event_head"] == stored[-1].hash.hex()
    finally:
        ledger.close()


def test_export_to_stdout_filters_by_status(site: Site) -> None:
    """Without --output it prints the lines; --status narrows them."""
    done = site.ops("export", "--status", "confirmed")
    assert done.stdout == ""
    done = site.ops("export", "--status", "quarantined", "--limit", "1")
    kinds = [json.loads(line)["kind"] for line in done.stdout.splitlines()]
    assert kinds.count("operation") == 1
    assert kinds.count("event") == 4


def test_export_never_overwrites_a_file(site: Site) -> None:
    """An existing --output file is refused in one line, exit 1, and left as it was."""
    out = site.directory / "incident.jsonl"
    out.write_text("keep me\n", encoding="utf-8")

    done = site.ops("export", "--output", str(out), code=1)

    assert "already exists" in done.stderr
    assert out.read_text(encoding="utf-8") == "keep me\n"
