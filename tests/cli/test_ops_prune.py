"""``agent-effect-ops prune`` and ``verify --archive`` through the installed console script.

On every backend: exit codes, one-line errors, the ledger unchanged on bad input,
and the fake provider's commits counted after a pruned id is called again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from effectguard import EffectExecutor, EffectLedger, EffectPruned, EffectStatus, use_executor

DAY = 86_400.0
OLD = time.time() - 40 * DAY
OP = "invoice:INV-1:capture"

_TOOLS = """
from effectguard import effect
from effectguard.testkit import FakePaymentProvider

provider = FakePaymentProvider()


@effect(
    name="payments.capture",
    operation_id="invoice:{invoice_id}:capture",
    idempotency_key="capture:{invoice_id}",
    idempotency_guaranteed=True,
    provider_key_retention=90 * 86400,
)
def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> dict:
    return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A tools module (a capture whose provider remembers keys 90 days) in its own directory."""
    (tmp_path / "prune_tools.py").write_text(textwrap.dedent(_TOOLS), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("prune_tools", None)
    import prune_tools  # noqa: PLC0415 - written by this fixture

    return prune_tools


def _ops(target: str, cwd: Path, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    script = shutil.which("agent-effect-ops", path=str(Path(sys.executable).parent))
    assert script is not None, "agent-effect-ops is not installed in this environment"
    env = {k: v for k, v in os.environ.items() if k != "EFFECTGUARD_TOOLS"}
    done = subprocess.run(
        [script, "--db", target, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    if code:
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("Error: "), done.stderr
    return done


def _capture_old(ledger: EffectLedger, tools: Any, invoice: str = "INV-1") -> str:
    with use_executor(EffectExecutor(ledger, clock=lambda: OLD)):
        result = tools.capture.execute(invoice, 1250)
    assert result.status is EffectStatus.CONFIRMED
    return str(result.operation_id)


def _state(ledger: EffectLedger) -> Any:
    records = ledger.list_operations(limit=100)
    return (
        sorted((r.operation_id, r.status, r.event_head) for r in records),
        sorted(ledger.tombstones()),  # type: ignore[attr-defined]
    )


def test_prune_archive_and_verify_through_the_console_script(
    ledger: EffectLedger, ledger_target: str, site: Any, tmp_path: Path
) -> None:
    """Prune with --archive, then verify --archive; the pruned id then raises and sends nothing."""
    operation_id = _capture_old(ledger, site)
    archive = tmp_path / "pruned.jsonl"

    done = _ops(ledger_target, tmp_path, "prune", "--older-than", "30d", "--archive", str(archive))

    assert done.stdout == f"pruned 1 operations (archived to {archive})\n"
    assert done.stderr == "warning: without --tools the providers' key retention is not checked\n"
    assert ledger.get(operation_id) is None
    shown = _ops(ledger_target, tmp_path, "show", operation_id, code=1)
    assert "was CONFIRMED and pruned at" in shown.stderr
    checked = _ops(ledger_target, tmp_path, "verify", "--archive", str(archive))
    assert "checked 1 archived operations against their tombstones" in checked.stdout
    with pytest.raises(EffectPruned), use_executor(EffectExecutor(ledger)):
        site.capture("INV-1", 1250)
    assert (site.provider.requests, site.provider.committed()) == (1, 1)


def test_tools_keep_what_the_provider_still_remembers_unless_forced(
    ledger: EffectLedger, ledger_target: str, site: Any, tmp_path: Path
) -> None:
    """--tools reads provider_key_retention_seconds: 40 days < 90 keeps it; --force prunes."""
    operation_id = _capture_old(ledger, site)

    kept = _ops(ledger_target, tmp_path, "prune", "--older-than", "30d", "--tools", "prune_tools")
    assert kept.stdout.startswith("pruned 0 operations\nkept 1 whose provider may still remember")
    assert ledger.get(operation_id) is not None

    forced = _ops(
        ledger_target,
        tmp_path,
        "prune",
        "--older-than",
        "30d",
        "--tools",
        "prune_tools",
        "--force",
        "--json",
    )
    assert json.loads(forced.stdout)["pruned"] == [operation_id]


def test_dry_run_prints_what_it_would_prune_and_writes_nothing(
    ledger: EffectLedger, ledger_target: str, site: Any, tmp_path: Path
) -> None:
    """--dry-run: the would-be list, the ledger as it was."""
    _capture_old(ledger, site)
    before = _state(ledger)

    done = _ops(ledger_target, tmp_path, "prune", "--older-than", "30d", "--dry-run", "--json")

    assert json.loads(done.stdout) == {
        "pruned": [OP],
        "kept": [],
        "dry_run": True,
        "archive": None,
    }
    assert _state(ledger) == before


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--older-than", "30x"), "is not a duration"),
        (("--older-than", "30d", "--status", "QUARANTINED"), "cannot prune QUARANTINED"),
        (("--older-than", "30d", "--status", "BOGUS"), "--status"),
        (("--status", "CONFIRMED"), "--older-than"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_the_ledger_unchanged(
    ledger: EffectLedger,
    ledger_target: str,
    site: Any,
    tmp_path: Path,
    args: tuple[str, ...],
    says: str,
) -> None:
    """A bad duration, a non-terminal or unknown status, no cut-off: exit 2, nothing pruned."""
    _capture_old(ledger, site)
    before = _state(ledger)

    done = _ops(ledger_target, tmp_path, "prune", *args, code=2)

    assert says in done.stderr
    assert _state(ledger) == before


def test_an_existing_archive_is_refused_and_kept(
    ledger: EffectLedger, ledger_target: str, site: Any, tmp_path: Path
) -> None:
    """--archive naming an existing file: exit 2, the file and the ledger untouched."""
    _capture_old(ledger, site)
    archive = tmp_path / "pruned.jsonl"
    archive.write_text("earlier\n")
    before = _state(ledger)

    done = _ops(
        ledger_target, tmp_path, "prune", "--older-than", "30d", "--archive", str(archive), code=2
    )

    assert "already exists" in done.stderr
    assert archive.read_text() == "earlier\n"
    assert _state(ledger) == before


def test_verify_fails_on_a_tombstone_edited_by_hand(
    ledger: EffectLedger, ledger_target: str, ledger_sql: Any, site: Any, tmp_path: Path
) -> None:
    """An edited tombstone: verify exits 1 naming it in one line."""
    operation_id = _capture_old(ledger, site)
    _ops(ledger_target, tmp_path, "prune", "--older-than", "30d", "--force")
    _ops(ledger_target, tmp_path, "verify")

    ledger_sql("UPDATE tombstones SET status = 'REJECTED' WHERE operation_id = ?", operation_id)

    done = _ops(ledger_target, tmp_path, "verify", code=1)
    assert "the tombstone was edited" in done.stderr
    assert operation_id in done.stderr


def test_verify_archive_refuses_a_malformed_file_and_fails_an_edited_one(
    ledger: EffectLedger, ledger_target: str, site: Any, tmp_path: Path
) -> None:
    """Not an archive: exit 2 in one line. An archived event edited: exit 1 naming the id."""
    operation_id = _capture_old(ledger, site)
    archive = tmp_path / "pruned.jsonl"
    _ops(ledger_target, tmp_path, "prune", "--older-than", "30d", "--archive", str(archive))
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n")

    refused = _ops(ledger_target, tmp_path, "verify", "--archive", str(junk), code=2)
    assert "archive line 1" in refused.stderr

    lines = [json.loads(line) for line in archive.read_text().splitlines()]
    lines[2]["document"] = lines[2]["document"].replace("DISPATCHED", "REJECTED")
    archive.write_text("".join(json.dumps(line) + "\n" for line in lines))
    failed = _ops(ledger_target, tmp_path, "verify", "--archive", str(archive), code=1)
    assert operation_id in failed.stderr
    assert "archived event does not hash to its chain" in failed.stderr
