"""agent-effect-ops on bad input: one line naming the problem, a non-zero exit, nothing changed."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from ops_helpers import ARGS, AUDIT, CONTRACT, OP, Run, file_state, quarantined_file, succeed

from effectguard import EffectExecutor, EffectLedger
from effectguard.ledger.sqlite import SCHEMA_VERSION
from effectguard.testkit import FakePaymentProvider

CONFIRM = ("--output-json", '{"id": "cap_1"}', "--provider-operation-id", "cap_1")

#: Every command, with the arguments that would make it succeed on a quarantined OP.
COMMANDS = {
    "list": ("list",),
    "show": ("show", OP),
    "events": ("events", OP),
    "verify": ("verify",),
    "confirm": ("confirm", OP, *CONFIRM, *AUDIT),
    "reject": ("reject", OP, *AUDIT),
    "authorize-retry": ("authorize-retry", OP, *AUDIT),
}
READS = ("list", "show", "events", "verify")
WRITES = ("confirm", "reject", "authorize-retry")


@pytest.fixture
def unchanged(state: Callable[[], Any], quarantined: FakePaymentProvider) -> Callable[[], None]:
    """A quarantined ledger, and a check that it still holds exactly what it held at the start."""
    before = state()

    def check() -> None:
        assert state() == before

    return check


def test_the_unchanged_check_sees_a_write(
    run: Run, state: Callable[[], Any], quarantined: Any
) -> None:
    """The before/after comparison these tests rely on does notice a real resolution."""
    before = state()
    run(*COMMANDS["reject"])
    after = state()
    assert after[0] != before[0]
    if after[1] is not None:
        assert after[1][0] != before[1][0]
        assert after[1][1] != before[1][1]


# -- on the backend under test ---------------------------------------------------------


@pytest.mark.parametrize("spelling", ["bogus", "quarantine", ""])
def test_unknown_status_is_a_usage_error(
    run: Run, unchanged: Callable[[], None], spelling: str
) -> None:
    """An unknown --status names itself and the valid names, exit 2."""
    error = run("list", "--status", spelling, code=2).stderr
    assert f"unknown status {spelling!r}" in error
    assert "quarantined" in error
    unchanged()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{id: 1}", "not valid JSON"),
        ('{"id": "cap_1"', "not valid JSON"),
        ("", "not valid JSON"),
        ("NaN", "NaN is not a JSON number"),
        ('{"amount": Infinity}', "Infinity is not a JSON number"),
    ],
)
def test_malformed_output_json_is_a_usage_error(
    run: Run, unchanged: Callable[[], None], text: str, problem: str
) -> None:
    """A malformed --output-json is refused before the ledger is touched, exit 2."""
    args = ("--output-json", text, "--provider-operation-id", "cap_1", *AUDIT)
    error = run("confirm", OP, *args, code=2).stderr
    assert "--output-json" in error
    assert problem in error
    unchanged()


@pytest.mark.parametrize("command", ["show", "events", *WRITES])
def test_unknown_operation_is_not_found(
    run: Run, unchanged: Callable[[], None], command: str
) -> None:
    """An operation id the ledger does not hold is named in the error, exit 1."""
    args = [arg if arg != OP else "invoice:INV-0000:capture" for arg in COMMANDS[command]]
    error = run(*args, code=1).stderr
    assert "no operation 'invoice:INV-0000:capture'" in error
    unchanged()


@pytest.mark.parametrize("command", WRITES)
@pytest.mark.parametrize("option", ["--actor", "--reason", "--evidence-reference"])
def test_missing_audit_field_is_a_usage_error(
    run: Run, unchanged: Callable[[], None], command: str, option: str
) -> None:
    """Leaving out an audit option names it, exit 2."""
    args = list(COMMANDS[command])
    at = args.index(option)
    del args[at : at + 2]
    error = run(*args, code=2).stderr
    assert f"Missing option {option!r}" in error
    unchanged()


@pytest.mark.parametrize("command", WRITES)
@pytest.mark.parametrize("option", ["--actor", "--reason", "--evidence-reference"])
def test_blank_audit_field_is_a_usage_error(
    run: Run, unchanged: Callable[[], None], command: str, option: str
) -> None:
    """An audit option that is empty or only spaces names itself, exit 2."""
    args = list(COMMANDS[command])
    args[args.index(option) + 1] = "   "
    error = run(*args, code=2).stderr
    assert f"Invalid value for {option!r}: must not be empty" in error
    unchanged()


@pytest.mark.parametrize(
    ("first", "second", "refusal"),
    [
        ("confirm", "confirm", "cannot confirm operation"),
        ("confirm", "reject", "cannot reject operation"),
        ("confirm", "authorize-retry", "cannot authorize a retry of operation"),
        ("reject", "confirm", "cannot confirm operation"),
        ("reject", "authorize-retry", "cannot authorize a retry of operation"),
        ("authorize-retry", "authorize-retry", "cannot authorize a retry of operation"),
    ],
)
def test_illegal_transition_is_refused(
    run: Run,
    state: Callable[[], Any],
    quarantined: FakePaymentProvider,
    first: str,
    second: str,
    refusal: str,
) -> None:
    """A resolution that makes no sense from the current state is refused, exit 1."""
    run(*COMMANDS[first])
    before = state()
    error = run(*COMMANDS[second], code=1).stderr
    assert f"{refusal} {OP!r}: it is" in error
    assert state() == before


@pytest.mark.parametrize("command", WRITES)
def test_live_lease_is_refused(
    run: Run, make_ledger: Callable[..., EffectLedger], command: str
) -> None:
    """While a worker holds the operation, no resolution is accepted, exit 1."""
    entered, release = threading.Event(), threading.Event()

    def handler(arguments: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
        entered.set()
        release.wait()
        return succeed(arguments, idempotency_key=idempotency_key)

    worker = threading.Thread(
        target=EffectExecutor(make_ledger()).execute, args=(CONTRACT, ARGS, handler)
    )
    worker.start()
    try:
        assert entered.wait(10)
        error = run(*COMMANDS[command], code=1).stderr
    finally:
        release.set()
        worker.join(10)
    assert "holds a live lease" in error


# -- SQLite files ----------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_missing_database_is_never_created(tmp_path: Path, command: str) -> None:
    """A ledger path that does not exist is reported, exit 1, and no file appears."""
    path = tmp_path / "ledger.db"
    error = Run(str(path))(*COMMANDS[command], code=1).stderr
    assert error == f"Error: no ledger at {path} (reads never create one)\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"these are not the bytes of a database\n" * 200, "is not a SQLite database"),
        (None, "is a SQLite database but not an effectguard ledger"),
        (b"", "is empty, not a ledger (reads never create one)"),
    ],
    ids=["text", "foreign-sqlite", "empty"],
)
def test_a_file_that_is_not_a_ledger_is_refused(
    tmp_path: Path, command: str, content: bytes | None, problem: str
) -> None:
    """A file that is not a ledger (even an empty one) is named and left as it was, exit 1."""
    path = tmp_path / "other.db"
    if content is None:
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE notes (body TEXT)")
            conn.execute("INSERT INTO notes VALUES ('keep me')")
        conn.close()
    else:
        path.write_bytes(content)
    before = file_state(path)
    error = Run(str(path))(*COMMANDS[command], code=1).stderr
    assert f"{path} {problem}" in error
    assert file_state(path) == before
    assert sorted(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("command", COMMANDS)
def test_newer_schema_is_refused(tmp_path: Path, command: str) -> None:
    """A ledger written by a newer effectguard is refused and left as it was, exit 1."""
    path = quarantined_file(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = file_state(path)
    error = Run(str(path))(*COMMANDS[command], code=1).stderr
    assert f"schema version {SCHEMA_VERSION + 1}, newer than" in error
    assert file_state(path) == before


_HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


@pytest.mark.parametrize("command", WRITES)
def test_locked_database_waits_then_says_so(tmp_path: Path, command: str) -> None:
    """A write blocked by another process's transaction waits --busy-timeout, then exits 1."""
    path = quarantined_file(tmp_path)
    before = file_state(path)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "locked\n"
        run = Run(str(path))
        error = run("--busy-timeout", "0.2", *COMMANDS[command], code=1).stderr
        # Readers are not blocked by a writer in WAL mode: the operator can still look.
        assert OP in run("list").stdout
    finally:
        holder.communicate("\n", timeout=30)
    assert holder.returncode == 0
    assert f"ledger {path} is locked by another writer" in error
    assert "busy timeout of 0.2s" in error
    assert file_state(path) == before
