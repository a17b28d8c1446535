"""What the agent-effect-ops tests share: a checked runner, a quarantined capture, snapshots."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from effectguard import EffectContract, EffectExecutor, EffectLedger, EffectStatus, open_ledger
from effectguard.cli.ops import main
from effectguard.operator import UNCHECKED_OUTPUT
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup

ARGS = {"invoice_id": "INV-1042", "amount_cents": 1250, "card_token": "tok_secret"}
OP = "invoice:INV-1042:capture"
KEY = "capture:INV-1042"
AUDIT = ("--actor", "alice", "--reason", "provider has no capture", "--evidence-reference", "T-7")

CONTRACT = EffectContract(
    name="capture",
    operation_id=lambda a: f"invoice:{a['invoice_id']}:capture",
    provider_idempotency_key=lambda a: f"capture:{a['invoice_id']}",
    redact=frozenset({"card_token"}),
)


def succeed(arguments: Mapping[str, Any], *, idempotency_key: str | None) -> dict[str, Any]:
    """A handler whose effect always happens and is acknowledged."""
    return {"invoice_id": arguments.get("invoice_id"), "key": idempotency_key}


@dataclass
class Run:
    """Runs agent-effect-ops in this process against one ledger."""

    target: str

    def __call__(self, *args: str, code: int = 0, db: str | None = None) -> Result:
        """Run with ``--db``; assert the exit code, and exactly one ``Error:`` line on failure."""
        result = CliRunner().invoke(main, ["--db", db or self.target, *args])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
        if code:
            lines = result.stderr.splitlines()
            assert len(lines) == 1, result.stderr
            assert lines[0].startswith("Error: "), result.stderr
        elif args[0] == "confirm" and "--tools" not in args:
            # Without the tools the output cannot be checked, and the operator is told so.
            assert result.stderr == f"warning: {UNCHECKED_OUTPUT}\n", result.stderr
        else:
            assert result.stderr == ""
        return result


def quarantine(ledger: EffectLedger) -> FakePaymentProvider:
    """Capture ARGS with a lost acknowledgement, no probe, no guarantee: OP is QUARANTINED."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, lookup=Lookup.NONE, faults=FaultPlan([Fault.LOSE_ACK])
    )
    result = EffectExecutor(ledger).execute(CONTRACT, ARGS, provider.handler)
    assert result.status is EffectStatus.QUARANTINED
    return provider


def quarantined_file(directory: Path) -> Path:
    """Create ``directory/ledger.db`` holding OP QUARANTINED, closed, and return its path."""
    path = directory / "ledger.db"
    ledger = open_ledger(path)
    try:
        quarantine(ledger)
    finally:
        ledger.close()
    return path


def protocol_snapshot(ledger: EffectLedger) -> list[Any]:
    """Every operation and event, read through the ledger protocol."""
    return [
        (record, ledger.events(record.operation_id))
        for record in ledger.list_operations(limit=10_000)
    ]


def file_state(path: Path) -> tuple[str | None, list[Any]]:
    """The sha256 of a SQLite file's bytes and every row of every table; (None, []) if absent."""
    if not path.exists():
        return None, []
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    rows: list[Any] = []
    try:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            for (table,) in sorted(tables.fetchall()):
                rows.append((table, conn.execute(f'SELECT * FROM "{table}"').fetchall()))  # noqa: S608 - schema and table names are the test's own, never input
    except sqlite3.DatabaseError as exc:
        rows = [str(exc)]
    return digest, rows


def parsed(result: Result) -> Any:
    """The JSON a ``--json`` command printed."""
    return json.loads(result.stdout)
