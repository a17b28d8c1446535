"""A SQLite ledger file deleted or replaced while a process has it open: never a duplicate.

A process that keeps writing into a file no path names any more records
operations no other process will ever see, so another process on the
recreated path dispatches them again. Every test counts the effects a fake
provider, shared by all processes through its own file, really committed.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support import capture_contract

from effectguard import EffectExecutor, EffectStatus, LedgerUnavailableError, SQLiteEffectLedger
from effectguard.testkit import FakePaymentProvider

TESTS = Path(__file__).parents[1]
FIRST = {"invoice_id": "INV-1", "amount_cents": 100}
SECOND = {"invoice_id": "INV-2", "amount_cents": 200}

# Another process: executes SECOND on the ledger at argv[1], counting at the provider in argv[2].
OTHER_PROCESS = """
import sys
sys.path.insert(0, sys.argv[3])
from support import capture_contract
from effectguard import EffectExecutor, SQLiteEffectLedger
from effectguard.testkit import FakePaymentProvider
provider = FakePaymentProvider(path=sys.argv[2], idempotency_guaranteed=False)
with SQLiteEffectLedger(sys.argv[1]) as ledger:
    result = EffectExecutor(ledger).execute(
        capture_contract(provider), {"invoice_id": "INV-2", "amount_cents": 200}, provider.handler
    )
print(result.status.value)
"""


def _files(path: Path) -> list[Path]:
    return [Path(f"{path}{suffix}") for suffix in ("", "-wal", "-shm")]


def _digest(path: Path) -> dict[str, str]:
    """The bytes of the database and its WAL (the -shm is a shared index every reader touches)."""
    return {
        file.name: hashlib.sha256(file.read_bytes()).hexdigest()
        for file in _files(path)[:2]
        if file.exists()
    }


def _other_process(path: Path, provider: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", OTHER_PROCESS, str(path), str(provider), str(TESTS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def provider_path(tmp_path: Path) -> Path:
    """The fake provider's own file, which every process counts effects in."""
    return tmp_path / "provider.db"


@pytest.fixture
def provider(provider_path: Path) -> FakePaymentProvider:
    """A provider without idempotency: a second dispatch of one operation is a second effect."""
    return FakePaymentProvider(path=provider_path, idempotency_guaranteed=False)


def test_deleting_every_file_refuses_this_process_and_leaves_one_effect_each(
    tmp_path: Path, provider: FakePaymentProvider, provider_path: Path
) -> None:
    """With effects.db* deleted this process dispatches nothing; the recreated ledger is new."""
    path = tmp_path / "effects.db"
    ledger = SQLiteEffectLedger(path)
    executor = EffectExecutor(ledger)
    contract = capture_contract(provider)
    assert executor.execute(contract, FIRST, provider.handler).status is EffectStatus.CONFIRMED
    for file in _files(path):
        file.unlink()

    with pytest.raises(LedgerUnavailableError, match="removed or replaced") as refused:
        executor.execute(contract, SECOND, provider.handler)
    assert "invoice:INV-2:capture" in str(refused.value)
    assert provider.committed() == 1
    assert not path.exists()  # refused before creating a new ledger in the old one's place

    # Another process on the path creates a new, separate ledger and dispatches SECOND once.
    other = _other_process(path, provider_path)
    assert other.returncode == 0, other.stderr
    assert other.stdout.strip() == "CONFIRMED"
    assert provider.committed() == 2
    recreated = _digest(path)

    # This process still refuses: the path names a file it never opened.
    with pytest.raises(LedgerUnavailableError, match="removed or replaced"):
        executor.execute(contract, SECOND, provider.handler)
    # A new thread, so a new connection, is refused too.
    failures: list[BaseException] = []

    def in_thread() -> None:
        try:
            executor.execute(contract, SECOND, provider.handler)
        except LedgerUnavailableError as exc:
            failures.append(exc)

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(30)
    assert len(failures) == 1
    assert provider.committed() == 2
    assert _digest(path) == recreated
    ledger.close()


def test_deleting_only_the_database_file_refuses_every_process(
    tmp_path: Path, provider: FakePaymentProvider, provider_path: Path
) -> None:
    """With only effects.db gone, this process refuses; none builds a ledger beside its WAL."""
    path = tmp_path / "effects.db"
    ledger = SQLiteEffectLedger(path)
    executor = EffectExecutor(ledger)
    contract = capture_contract(provider)
    assert executor.execute(contract, FIRST, provider.handler).confirmed
    path.unlink()
    journal = _digest(path)

    with pytest.raises(LedgerUnavailableError, match="removed or replaced"):
        executor.execute(contract, SECOND, provider.handler)
    other = _other_process(path, provider_path)
    assert other.returncode != 0
    assert "-wal exists without it" in other.stderr
    assert provider.committed() == 1
    assert not path.exists()
    assert _digest(path) == journal
    ledger.close()


def test_a_file_replaced_by_another_ledger_is_not_written(
    tmp_path: Path, provider: FakePaymentProvider
) -> None:
    """A path renamed onto another ledger's file: refused before dispatch, that ledger unchanged."""
    path = tmp_path / "effects.db"
    elsewhere = tmp_path / "elsewhere.db"
    with SQLiteEffectLedger(elsewhere) as other:
        assert (
            EffectExecutor(other)
            .execute(capture_contract(provider), FIRST, provider.handler)
            .confirmed
        )
    ledger = SQLiteEffectLedger(path)
    executor = EffectExecutor(ledger)
    contract = capture_contract(provider)
    assert executor.execute(contract, SECOND, provider.handler).confirmed
    elsewhere.replace(path)
    replaced = _digest(path)

    with pytest.raises(LedgerUnavailableError, match="now names another file"):
        executor.execute(contract, {"invoice_id": "INV-3", "amount_cents": 300}, provider.handler)
    assert provider.committed() == 2
    assert _digest(path) == replaced
    ledger.close()


def test_reopening_the_path_accepts_the_new_file(tmp_path: Path) -> None:
    """Refusal is per handle: closing and opening the path again uses the file it now names."""
    path = tmp_path / "effects.db"
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    with SQLiteEffectLedger(path) as ledger:
        assert (
            EffectExecutor(ledger)
            .execute(capture_contract(provider), FIRST, provider.handler)
            .confirmed
        )
    for file in _files(path):
        file.unlink(missing_ok=True)
    with SQLiteEffectLedger(path) as ledger:
        executor = EffectExecutor(ledger)
        result = executor.execute(capture_contract(provider), SECOND, provider.handler)
        assert result.confirmed
        assert [record.operation_id for record in ledger.list_operations()] == [
            "invoice:INV-2:capture"
        ]
    assert provider.committed() == 2
