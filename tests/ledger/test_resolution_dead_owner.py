"""Operator resolution of an operation whose lease owner is provably gone, on every backend.

The executor takes over a live lease whose owner process on this host has
exited; an operator must not have to wait for that lease to expire either.
The owner here is a real process, alive and then killed.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from support import capture_contract, foreign_owner

from effectguard import EffectExecutor, EffectLedger
from effectguard._fingerprint import request_fingerprint
from effectguard._model import LeaseOwner
from effectguard._process import _start_time, current_owner
from effectguard.errors import IllegalTransitionError
from effectguard.ledger import Lease, NewOperation
from effectguard.testkit import FakePaymentProvider

ARGS = {"invoice_id": "INV-7", "amount_cents": 700}
OP = "invoice:INV-7:capture"
KEY = "capture:INV-7"
AUDIT = {"actor": "alice", "reason": "worker host rebooted", "evidence_reference": "T-9"}


@pytest.fixture
def worker() -> Iterator[subprocess.Popen[bytes]]:
    """A real process that stands for the worker holding the lease; killed by the test."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield process
    process.kill()
    process.wait()


def _claim(ledger: EffectLedger, owner: LeaseOwner) -> None:
    """Record OP as DISPATCHED under ``owner``'s lease, live for an hour."""
    operation = NewOperation(
        operation_id=OP,
        contract="payments.capture",
        contract_version=1,
        fingerprint=request_fingerprint("payments.capture", 1, ARGS, KEY),
        provider_key=KEY,
        arguments=ARGS,
        attempt_budget=3,
        lease=Lease(secrets.token_hex(16), owner, 3600.0),
    )
    _, created = ledger.claim(operation)
    assert created


def _resolve(ledger: EffectLedger, action: str) -> Any:
    if action == "confirm":
        return ledger.confirm(OP, output={"id": "cap_7"}, provider_operation_id="cap_7", **AUDIT)
    return getattr(ledger, action)(OP, **AUDIT)


def _owner_of(process: subprocess.Popen[bytes]) -> LeaseOwner:
    me = current_owner()
    start = _start_time(process.pid)
    assert start
    return LeaseOwner(me.host, me.boot_id, me.pid_namespace, process.pid, start)


@pytest.mark.parametrize("action", ["confirm", "reject", "authorize_retry"])
def test_a_dead_owners_live_lease_does_not_block_resolution(
    ledger: EffectLedger, worker: subprocess.Popen[bytes], action: str
) -> None:
    """Refused while the owner runs; allowed at once after it is killed, with the owner recorded."""
    owner = _owner_of(worker)
    _claim(ledger, owner)
    with pytest.raises(IllegalTransitionError, match="live lease"):
        _resolve(ledger, action)
    worker.kill()
    worker.wait()
    assert ledger.get(OP).lease_live  # type: ignore[union-attr]
    record = _resolve(ledger, action)
    assert record.lease_token is None
    event = ledger.events(OP)[-1]
    assert event.evidence["previous_lease_owner"] == owner.to_json()
    assert event.evidence["previous_lease_owner_gone"] is True
    assert ledger.verify().ok


def test_a_retry_authorized_after_the_owner_died_sends_once(
    ledger: EffectLedger, worker: subprocess.Popen[bytes]
) -> None:
    """The authorized retry dispatches exactly once, with the stored provider key."""
    _claim(ledger, _owner_of(worker))
    worker.kill()
    worker.wait()
    ledger.authorize_retry(OP, **AUDIT)
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    keys: list[str | None] = []

    def handler(arguments: Any, *, idempotency_key: str | None) -> Any:
        keys.append(idempotency_key)
        return provider.handler(arguments, idempotency_key=idempotency_key)

    result = EffectExecutor(ledger).execute(capture_contract(provider), ARGS, handler)
    assert result.confirmed
    assert provider.committed() == 1
    assert keys == [KEY]


def test_a_live_lease_on_another_host_still_blocks_resolution(ledger: EffectLedger) -> None:
    """An owner this host cannot see is never presumed gone: its live lease still refuses."""
    _claim(ledger, foreign_owner())
    before = (ledger.get(OP), ledger.events(OP))
    with pytest.raises(IllegalTransitionError, match="live lease"):
        _resolve(ledger, "reject")
    assert (ledger.get(OP), ledger.events(OP)) == before
