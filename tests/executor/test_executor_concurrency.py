"""Many callers of one operation at the same moment: exactly one dispatch."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support import ARGS, capture_contract

from effectguard import EffectExecutor, EffectStatus, SQLiteEffectLedger
from effectguard.testkit import FakePaymentProvider

CHILD = Path(__file__).parents[1] / "child_worker.py"


def test_eight_threads_racing_on_one_operation_dispatch_it_once(ledger):
    """8 threads call at once: one dispatch, and each caller sees CONFIRMED or DISPATCHED."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    contract = capture_contract(provider)
    barrier = threading.Barrier(8)
    others_answered = threading.Semaphore(0)
    results = []

    def slow(arguments, *, idempotency_key):
        for _ in range(7):  # hold the operation until the other seven have their answer
            others_answered.acquire(timeout=10)
        return provider.handler(arguments, idempotency_key=idempotency_key)

    def call():
        executor = EffectExecutor(ledger)
        barrier.wait()
        result = executor.execute(contract, ARGS, slow)
        results.append(result)
        if result.status is not EffectStatus.CONFIRMED:
            others_answered.release()

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    statuses = sorted(result.status for result in results)
    assert len(results) == 8
    assert statuses.count(EffectStatus.CONFIRMED) == 1
    assert statuses.count(EffectStatus.DISPATCHED) == 7
    assert provider.requests == 1
    assert provider.committed() == 1


@pytest.mark.slow
def test_four_processes_racing_on_one_operation_dispatch_it_once(tmp_path: Path):
    """4 processes call at once: one dispatch on the shared provider, each sees a sane status."""
    ledger_path, provider_path = tmp_path / "ledger.db", tmp_path / "provider.db"
    start = tmp_path / "start"
    # No deduplication at the provider: every dispatch that reaches it commits, so it shows.
    provider = FakePaymentProvider(path=provider_path, idempotency_guaranteed=False)
    children = [
        subprocess.Popen(
            [
                sys.executable,
                str(CHILD),
                "contend",
                str(ledger_path),
                str(provider_path),
                "--start",
                str(start),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for child in children:
        assert child.stdout.readline().strip() == "ready"
    start.touch()
    outputs = [child.communicate(timeout=60)[0] for child in children]

    statuses = sorted(json.loads(out)["status"] for out in outputs)
    assert all(child.returncode == 0 for child in children)
    assert set(statuses) <= {"CONFIRMED", "DISPATCHED"}
    assert statuses.count("CONFIRMED") >= 1
    assert provider.committed() == 1
    with SQLiteEffectLedger(ledger_path) as ledger:
        assert ledger.list_operations()[0].attempts == 1
