"""agent-effect-ops against an attacker's inputs and an operator's limited rights.

Reads work on a ledger the user may only read; stored strings never reach
the terminal raw, in text or in JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from ops_helpers import AUDIT, CONTRACT, succeed

from effectguard import EffectExecutor, SQLiteEffectLedger
from effectguard.cli.ops import main

# Runs agent-effect-ops as another user: imports first (the interpreter may live where that
# user cannot read), then drops to the uid in argv[1] when this process is root.
AS_USER = """
import os, sys
import gettext, json, locale, sqlite3, unicodedata
import effectguard.cli.ops as ops
import effectguard.cli._ops_click, effectguard.cli._ops_views
import effectguard.ledger.sqlite, effectguard._model, effectguard.operator
uid = int(sys.argv[1])
if os.geteuid() == 0 and uid != 0:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
ops.main(sys.argv[2:], prog_name="agent-effect-ops")
"""

HOSTILE = "INV\u009b31m\x7f\u202eX"
HOSTILE_OP = f"invoice:{HOSTILE}:capture"
RAW = ("\u009b", "\x7f", "\u202e")


def _reader_uid() -> int:
    """An unprivileged account to read as (root cannot be denied a write by a mode)."""
    if os.geteuid() != 0:
        return os.geteuid()
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("running as root without a 'nobody' account to drop to")
    raise AssertionError  # pragma: no cover - skip raises


@pytest.fixture
def read_only_ledger() -> Iterator[Path]:
    """A ledger holding one CONFIRMED operation: file 0644, directory 0555, reachable by anyone."""
    directory = Path(tempfile.mkdtemp(prefix="eg-readonly-"))
    directory.chmod(0o755)
    path = directory / "effects.db"
    with SQLiteEffectLedger(path) as ledger:
        assert EffectExecutor(ledger).execute(CONTRACT, {"invoice_id": "INV-9"}, succeed).confirmed
    path.chmod(0o644)
    directory.chmod(0o555)
    try:
        yield path
    finally:
        directory.chmod(0o755)
        for file in directory.iterdir():
            file.unlink()
        directory.rmdir()


def _digests(directory: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in directory.iterdir()}


def _as_reader(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", AS_USER, str(_reader_uid()), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "command",
    [
        ["list"],
        ["list", "--json"],
        ["show", "invoice:INV-9:capture"],
        ["show", "--json", "invoice:INV-9:capture"],
        ["events", "invoice:INV-9:capture"],
        ["verify"],
    ],
    ids=" ".join,
)
def test_reads_work_on_a_ledger_the_user_can_only_read(
    read_only_ledger: Path, command: list[str]
) -> None:
    """A reader without write access lists, shows and verifies, and leaves every byte as it was."""
    before = _digests(read_only_ledger.parent)
    completed = _as_reader("--db", str(read_only_ledger), *command)
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""
    expected = {"verify": "checked 1 operations", "events": "DISPATCHED -> CONFIRMED"}.get(
        command[0], "invoice:INV-9:capture"
    )
    assert expected in completed.stdout
    assert _digests(read_only_ledger.parent) == before


def test_a_write_by_a_reader_is_refused_and_changes_nothing(read_only_ledger: Path) -> None:
    """A resolution by a user who cannot write fails in one line; the files stay as they were."""
    before = _digests(read_only_ledger.parent)
    completed = _as_reader("--db", str(read_only_ledger), "reject", "invoice:INV-9:capture", *AUDIT)
    assert completed.returncode == 1
    assert completed.stderr.startswith("Error: ")
    assert _digests(read_only_ledger.parent) == before


def test_a_read_only_handle_refuses_writes_before_touching_the_file(tmp_path: Path) -> None:
    """SQLiteEffectLedger(read_only=True) reads, and refuses a write naming the operation."""
    path = tmp_path / "effects.db"
    with SQLiteEffectLedger(path) as ledger:
        assert EffectExecutor(ledger).execute(CONTRACT, {"invoice_id": "INV-9"}, succeed).confirmed
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with SQLiteEffectLedger(path, read_only=True) as reader:
        assert reader.get("invoice:INV-9:capture") is not None
        with pytest.raises(Exception, match="opened read-only") as refused:
            EffectExecutor(reader).execute(CONTRACT, {"invoice_id": "INV-10"}, succeed)
        assert "invoice:INV-10:capture" in str(refused.value)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


@pytest.fixture
def hostile(tmp_path: Path) -> str:
    """A ledger whose operation id, arguments and evidence hold C1, DEL and bidi characters."""
    path = tmp_path / "effects.db"
    with SQLiteEffectLedger(path) as ledger:
        result = EffectExecutor(ledger).execute(CONTRACT, {"invoice_id": HOSTILE}, succeed)
        assert result.confirmed
    return str(path)


@pytest.mark.parametrize(
    "command", [["list"], ["show", HOSTILE_OP], ["events", HOSTILE_OP]], ids=lambda c: c[0]
)
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_control_and_bidi_characters_never_reach_the_terminal_raw(
    hostile: str, command: list[str], as_json: bool
) -> None:
    r"""C1 (U+009B), DEL and U+202E are escaped in text and as \u escapes in JSON."""
    flag = ["--json"] if as_json else []
    result = CliRunner().invoke(main, ["--db", hostile, command[0], *flag, *command[1:]])
    assert result.exit_code == 0, result.output
    for char in RAW:
        assert char not in result.stdout
    if as_json and command[0] != "events":
        assert "\\u009b" in result.stdout
        assert "\\u202e" in result.stdout
        assert HOSTILE in json.dumps(json.loads(result.stdout), ensure_ascii=False)


def _fail(arguments: object, *, idempotency_key: str | None) -> object:
    raise TimeoutError


def test_operator_evidence_is_escaped_in_json(tmp_path: Path) -> None:
    """What an operator typed into --reason comes back escaped, and decodes to what was typed."""
    path = str(tmp_path / "effects.db")
    with SQLiteEffectLedger(path) as ledger:
        result = EffectExecutor(ledger).execute(CONTRACT, {"invoice_id": HOSTILE}, _fail)
        assert result.status.value == "QUARANTINED"
    reason = "looks fine\u202e and \u009b[2J\x7f"
    confirmed = CliRunner().invoke(
        main,
        [
            *("--db", path, "confirm", HOSTILE_OP, "--output-json", json.dumps({"note": reason})),
            *("--provider-operation-id", "p1", "--actor", "a", "--reason", reason),
            *("--evidence-reference", "T-1"),
        ],
    )
    assert confirmed.exit_code == 0, confirmed.output
    for command in (["show", "--json", HOSTILE_OP], ["events", "--json", HOSTILE_OP]):
        shown = CliRunner().invoke(main, ["--db", path, *command])
        assert shown.exit_code == 0, shown.output
        for char in RAW:
            assert char not in shown.stdout
        assert reason in json.dumps(json.loads(shown.stdout), ensure_ascii=False)
