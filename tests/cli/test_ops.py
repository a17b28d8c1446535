"""agent-effect-ops: every command, for people and for machines."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from ops_helpers import ARGS, AUDIT, CONTRACT, KEY, OP, Run, parsed, quarantined_file, succeed

import effectguard
from effectguard import EffectContract, EffectExecutor, EffectLedger, EffectStatus, EventType
from effectguard._fingerprint import REDACTED
from effectguard.cli.ops import main
from effectguard.testkit import FakePaymentProvider

# -- reading ---------------------------------------------------------------------------


def test_list_is_an_aligned_table(
    run: Run, make_ledger: Callable[..., EffectLedger], quarantined: FakePaymentProvider
) -> None:
    """List shows id, contract, status, attempts, age and overlap risk in aligned columns."""
    ledger = make_ledger()
    EffectExecutor(ledger).execute(CONTRACT, {**ARGS, "invoice_id": "INV-7"}, succeed)
    lines = run("list").stdout.splitlines()
    assert lines[0].split() == ["OPERATION", "CONTRACT", "STATUS", "ATTEMPTS", "AGE", "OVERLAP"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows[OP][1:4] == ["capture", "QUARANTINED", "1/3"]
    assert rows[OP][5] == "no"
    assert rows["invoice:INV-7:capture"][2] == "CONFIRMED"
    columns = [lines[0].index(header) for header in lines[0].split()]
    for line in lines[1:]:
        assert all(line[at - 2 : at] == "  " and line[at] != " " for at in columns[1:]), line


@pytest.mark.parametrize("spelling", ["quarantined", "QUARANTINED", "Quarantined"])
def test_list_filters_by_status_in_any_case(
    run: Run,
    make_ledger: Callable[..., EffectLedger],
    quarantined: FakePaymentProvider,
    spelling: str,
) -> None:
    """--status takes a status name in any case and lists only operations in it."""
    ledger = make_ledger()
    EffectExecutor(ledger).execute(CONTRACT, {**ARGS, "invoice_id": "INV-7"}, succeed)
    records = parsed(run("list", "--status", spelling, "--json"))
    assert [record["operation_id"] for record in records] == [OP]
    assert records[0]["status"] == "QUARANTINED"


def test_list_filters_by_contract_and_limit(
    run: Run, make_ledger: Callable[..., EffectLedger]
) -> None:
    """--contract keeps one contract's operations; --limit caps how many, newest first."""
    ledger = make_ledger()
    executor = EffectExecutor(ledger)
    for number in range(3):
        executor.execute(CONTRACT, {**ARGS, "invoice_id": f"INV-{number}"}, succeed)
    refund = EffectContract(name="refund", operation_id=lambda a: f"refund:{a['invoice_id']}")
    executor.execute(refund, {"invoice_id": "INV-0"}, succeed)
    captures = parsed(run("list", "--contract", "capture", "--json"))
    assert sorted(record["operation_id"] for record in captures) == [
        f"invoice:INV-{number}:capture" for number in range(3)
    ]
    newest = parsed(run("list", "--limit", "2", "--json"))
    assert len(newest) == 2
    assert newest[0]["operation_id"] == "refund:INV-0"
    assert run("list", "--contract", "nothing").stdout == "no operations match\n"


def test_show_has_what_on_call_needs(run: Run, quarantined: FakePaymentProvider) -> None:
    """Show gives status, reason, attempts, keys, redacted arguments, lease, overlap, evidence."""
    text = run("show", OP).stdout
    fields = {line[:14].strip(): line[16:] for line in text.splitlines()}
    assert fields["status"] == "QUARANTINED"
    assert "does not guarantee idempotency" in fields["reason"]
    assert fields["attempts"] == "1 of 3"
    assert fields["provider key"] == KEY
    assert fields["provider op id"] == "-"
    assert '"card_token":"[redacted]"' in fields["arguments"]
    assert "tok_secret" not in text
    assert fields["lease"] == "none"
    assert fields["overlap risk"] == "none"
    assert '"probe":null' in fields["evidence"]
    assert fields["events"] == "4"


def test_show_json_has_every_field_but_the_lease_token(
    run: Run, quarantined: FakePaymentProvider
) -> None:
    """The JSON form of show carries the record's fields for machines, never a lease token."""
    record = parsed(run("show", OP, "--json"))
    assert record["operation_id"] == OP
    assert record["status"] == "QUARANTINED"
    assert (record["attempts"], record["attempt_budget"]) == (1, 3)
    assert record["provider_key"] == KEY
    assert record["arguments"]["card_token"] == REDACTED
    assert record["output"] is None
    assert record["overlap_risk"] is False
    assert record["lease"] is None
    assert record["event_count"] == 4
    assert "token" not in str(record).replace("card_token", "")


def test_show_reports_a_live_lease_holder(
    run: Run, make_ledger: Callable[..., EffectLedger]
) -> None:
    """While a worker holds the operation, show names the holding process and the expiry."""
    ledger = make_ledger()
    release = threading.Event()
    entered = threading.Event()

    def handler(arguments: object, *, idempotency_key: str | None) -> dict[str, str]:
        entered.set()
        release.wait()
        return {"id": "cap_1"}

    worker = threading.Thread(target=EffectExecutor(ledger).execute, args=(CONTRACT, ARGS, handler))
    worker.start()
    try:
        assert entered.wait(10)
        text = run("show", OP).stdout
        record = parsed(run("show", OP, "--json"))
    finally:
        release.set()
        worker.join(10)
    assert f"live: pid {os.getpid()} on {socket.gethostname()}, until " in text
    assert record["lease"]["live"] is True
    assert record["lease"]["owner"]["pid"] == os.getpid()


def test_events_shows_the_history(run: Run, quarantined: FakePaymentProvider) -> None:
    """Events lists the operation's history oldest first, as a table and as JSON."""
    lines = run("events", OP).stdout.splitlines()
    assert lines[0].split() == ["SEQ", "AT", "TYPE", "TRANSITION", "ATTEMPT", "EVIDENCE"]
    assert [line.split()[2] for line in lines[1:]] == [
        "claimed",
        "outcome_unknown",
        "reconciling",
        "quarantined",
    ]
    assert "ProviderTimeout" in lines[2]
    history = parsed(run("events", OP, "--json"))
    assert [event["seq"] for event in history] == [1, 2, 3, 4]
    assert history[-1]["from"] == "RECONCILING"
    assert history[-1]["to"] == "QUARANTINED"
    assert len(history[-1]["hash"]) == 64


def test_text_views_escape_control_characters(
    run: Run, make_ledger: Callable[..., EffectLedger]
) -> None:
    """Ids and arguments from callers cannot send terminal escapes to the operator's screen."""
    ledger = make_ledger()
    EffectExecutor(ledger).execute(CONTRACT, {**ARGS, "invoice_id": "X\x1b[2J\nY"}, succeed)
    for output in (run("list").stdout, run("show", "invoice:X\x1b[2J\nY:capture").stdout):
        assert "\x1b" not in output
        assert "X\\x1b[2J\\nY" in output


def test_verify_passes_an_intact_ledger(
    run: Run, quarantined: FakePaymentProvider, backend: str
) -> None:
    """Verify checks every chain and exits 0 when all are intact."""
    assert run("verify").stdout == "checked 1 operations and 4 events\n"
    report = parsed(run("verify", "--json"))
    anchor = report.pop("anchor")
    assert report == {
        "ok": True,
        "operations_checked": 1,
        "events_checked": 4,
        "problems": [],
        "operations_uncovered": 0,
    }
    assert anchor["count"] == 1
    # PostgreSQL keeps its anchor in 16 shards: each one's count and hash (8 + 32 bytes).
    assert len(bytes.fromhex(anchor["running"])) == (16 * 40 if backend == "postgres" else 32)


def test_verify_names_the_tampered_operation_and_event(tmp_path: Path) -> None:
    """An edited event makes verify exit 1, naming the operation and the event."""
    path = quarantined_file(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute(
            'UPDATE events SET evidence = \'{"handler":"returned"}\' '
            "WHERE operation_id = ? AND seq = 2",
            (OP,),
        )
    conn.close()
    result = Run(str(path))("verify", code=1)
    assert f"operation {OP!r} event 2: event hash does not match" in result.stdout
    assert f"operation {OP!r} event 2" in result.stderr
    assert "tampered" in result.stderr
    report = parsed(Run(str(path))("verify", "--json", code=1))
    assert report["ok"] is False
    problem = report["problems"][0]
    assert (problem["operation_id"], problem["seq"]) == (OP, 2)


# -- resolving -------------------------------------------------------------------------


def test_confirm_records_the_output_that_execute_replays(
    run: Run, make_ledger: Callable[..., EffectLedger], quarantined: FakePaymentProvider
) -> None:
    """Confirm stores the operator's output; the next execute replays it without dispatch."""
    assert quarantined.committed() == 1
    capture = quarantined.effects()[0]["response"]
    result = run(
        "confirm",
        OP,
        "--output-json",
        json.dumps({"id": capture["id"], "status": "succeeded"}),
        "--provider-operation-id",
        capture["id"],
        *AUDIT,
    )
    assert result.stdout.startswith(f"confirmed {OP!r}: QUARANTINED -> CONFIRMED (event 5")
    assert "actor 'alice'" in result.stdout
    replay = EffectExecutor(make_ledger()).execute(CONTRACT, ARGS, quarantined.handler)
    assert replay.confirmed
    assert replay.replayed
    assert replay.output == {"id": capture["id"], "status": "succeeded"}
    assert replay.provider_operation_id == capture["id"]
    assert quarantined.committed() == 1


def test_a_redacted_value_an_operator_types_is_stored_masked(
    run: Run, make_ledger: Callable[..., EffectLedger], quarantined: FakePaymentProvider
) -> None:
    """The card token typed into confirm's provider id, output and reason is never stored."""
    secret = ARGS["card_token"]
    run(
        "confirm",
        OP,
        "--output-json",
        json.dumps({"id": secret, "note": f"charged {secret} once"}),
        "--provider-operation-id",
        secret,
        "--actor",
        "alice",
        "--reason",
        f"provider shows {secret}",
        "--evidence-reference",
        "T-7",
    )
    shown = run("show", OP, "--json").stdout + run("events", OP, "--json").stdout
    exported = run("export").stdout
    assert secret not in shown + exported
    record = make_ledger().get(OP)
    assert record.provider_operation_id == REDACTED
    assert record.output_json == json.dumps(
        {"id": REDACTED, "note": f"charged {REDACTED} once"}, separators=(",", ":")
    )
    assert quarantined.committed() == 1


def test_reject_is_replayed_and_never_dispatched(
    run: Run, make_ledger: Callable[..., EffectLedger], quarantined: FakePaymentProvider
) -> None:
    """Reject makes the operation REJECTED; execute replays that and sends nothing."""
    result = run("reject", OP, *AUDIT)
    assert result.stdout.startswith(f"rejected {OP!r}: QUARANTINED -> REJECTED (event 5")
    replay = EffectExecutor(make_ledger()).execute(CONTRACT, ARGS, quarantined.handler)
    assert replay.status is EffectStatus.REJECTED
    assert replay.replayed
    assert quarantined.committed() == 1


def test_resolution_events_carry_the_audit(run: Run, quarantined: FakePaymentProvider) -> None:
    """The resolution's event holds actor, reason, evidence reference, OS account and host."""
    run("authorize-retry", OP, *AUDIT)
    event = parsed(run("events", OP, "--json"))[-1]
    assert event["type"] == EventType.OPERATOR_RETRY_AUTHORIZED.value
    evidence = event["evidence"]
    assert (evidence["actor"], evidence["reason"], evidence["evidence_reference"]) == (
        "alice",
        "provider has no capture",
        "T-7",
    )
    assert f"(uid {os.getuid()})" in evidence["os_user"]
    assert evidence["host"] == socket.gethostname()
    assert run("verify").stdout == "checked 1 operations and 5 events\n"


def test_authorize_retry_sends_once_more_with_the_same_key(
    run: Run, make_ledger: Callable[..., EffectLedger]
) -> None:
    """After authorize-retry, execute dispatches exactly once, with the same provider key."""
    ledger = make_ledger()
    keys: list[str | None] = []
    provider = FakePaymentProvider(idempotency_guaranteed=False)

    def handler(arguments: dict[str, object], *, idempotency_key: str | None) -> object:
        keys.append(idempotency_key)
        if len(keys) == 1:
            raise ConnectionResetError("reset before the request was written")
        return provider.handler(arguments, idempotency_key=idempotency_key)

    executor = EffectExecutor(ledger)
    assert executor.execute(CONTRACT, ARGS, handler).status is EffectStatus.QUARANTINED
    result = run("authorize-retry", OP, *AUDIT)
    assert "QUARANTINED -> PREPARED (event 5" in result.stdout
    assert executor.execute(CONTRACT, ARGS, handler).confirmed
    assert executor.execute(CONTRACT, ARGS, handler).replayed
    assert keys == [KEY, KEY]
    assert provider.committed() == 1


# -- help, version and the installed script --------------------------------------------


def test_help_documents_the_exit_codes() -> None:
    """--help lists every command and the meaning of exit codes 0, 1 and 2."""
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for command in ("list", "show", "events", "confirm", "reject", "authorize-retry", "verify"):
        assert f"  {command} " in result.stdout
    assert "0  done" in result.stdout
    assert "1  refused or not found" in result.stdout
    assert "2  usage error" in result.stdout
    assert "Exit codes" in CliRunner().invoke(main, ["confirm", "--help"]).stdout


def test_version_is_the_package_version() -> None:
    """--version prints the installed effectguard version."""
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert effectguard.__version__ in result.stdout


def console_script() -> Path:
    """The agent-effect-ops script installed next to this Python."""
    script = Path(sys.executable).parent / "agent-effect-ops"
    if not script.exists():
        pytest.fail(f"{script} is not installed: pip install -e . in this environment")
    return script


def test_installed_console_script_reads_and_refuses(tmp_path: Path) -> None:
    """The installed agent-effect-ops lists a real ledger, and refuses a missing one in one line."""
    path = quarantined_file(tmp_path)
    script = console_script()
    listed = subprocess.run(
        [script, "--db", path, "list", "--status", "quarantined"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert OP in listed.stdout
    assert "QUARANTINED" in listed.stdout

    missing = tmp_path / "nowhere.db"
    refused = subprocess.run(
        [script, "--db", missing, "show", OP],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr == f"Error: no ledger at {missing} (reads never create one)\n"
    assert not missing.exists()


@pytest.mark.postgres
def test_reading_a_missing_postgres_ledger_creates_no_schema(postgres_url, postgres_schemas):
    """On PostgreSQL too, a read names the missing ledger and leaves no schema behind."""
    import psycopg  # noqa: PLC0415 - only this test needs the driver
    from postgres_support import with_schema  # noqa: PLC0415 - imports psycopg, which is optional

    schema = postgres_schemas()
    result = CliRunner().invoke(main, ["--db", with_schema(postgres_url, schema), "list"])
    assert result.exit_code == 1, result.output
    with psycopg.connect(postgres_url) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)
        ).fetchone()
    assert found == (0,)
