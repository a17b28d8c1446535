"""PostgreSQL across processes and failures: contention, takeover, migration, lost connections."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres_support import import_psycopg, with_schema

from effectguard import EffectExecutor, EffectStatus, EventType, LedgerUnavailableError, open_ledger
from effectguard._fingerprint import request_fingerprint
from effectguard._model import LeaseOwner, OverlapHolder
from effectguard._process import current_owner
from effectguard.ledger import Changes, EventDraft, Expect, Lease, NewOperation
from effectguard.testkit import FakePaymentProvider
from effectguard.testkit.tcp_proxy import TcpProxy

psycopg = import_psycopg()

from _postgres_worker import capture_contract  # noqa: E402 - needs psycopg

from effectguard.ledger.postgres import (  # noqa: E402 - needs psycopg, imported just above
    SCHEMA_VERSION,
    PostgresEffectLedger,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WORKER = Path(__file__).parents[1] / "_postgres_worker.py"


class Workers:
    """Worker processes started together and released at the same moment."""

    def __init__(self, *commands: list[str]) -> None:
        self.processes = [
            subprocess.Popen(
                [sys.executable, str(WORKER), *command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for command in commands
        ]
        for process in self.processes:
            assert self.read(process) == "ready"

    @staticmethod
    def read(process: subprocess.Popen[str]) -> str:
        """Return the worker's next line; its exit is a test failure."""
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, f"worker exited with {process.wait()}"
        return line.strip()

    @staticmethod
    def send(process: subprocess.Popen[str], line: str) -> None:
        """Give one worker its next cue."""
        assert process.stdin is not None
        process.stdin.write(line + "\n")
        process.stdin.flush()

    def everyone(self, line: str) -> list[str]:
        """Cue every worker at once; return each one's answer."""
        for process in self.processes:
            self.send(process, line)
        return [self.read(process) for process in self.processes]

    def stop(self) -> None:
        """Let the workers finish; kill any that will not."""
        for process in self.processes:
            if process.stdin is not None:
                process.stdin.close()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def workers() -> Iterator[list[Workers]]:
    """Workers started by the test, always stopped afterwards."""
    started: list[Workers] = []
    yield started
    for group in started:
        group.stop()


@pytest.fixture
def ledger(postgres_target: str) -> Iterator[PostgresEffectLedger]:
    """This test's PostgreSQL ledger."""
    with PostgresEffectLedger(postgres_target) as opened:
        yield opened


def test_four_processes_contesting_200_operations_dispatch_each_once(
    ledger, postgres_target, tmp_path, workers
):
    """Four processes with their own pools run the same 200 captures: each is dispatched once."""
    provider_path = tmp_path / "provider.db"
    provider = FakePaymentProvider(idempotency_guaranteed=False, path=provider_path)
    group = Workers(*[["contest", postgres_target, str(provider_path), "200"]] * 4)
    workers.append(group)
    tallies = [json.loads(line) for line in group.everyone("go")]
    assert sum(tally["dispatched"] for tally in tallies) == 200
    assert provider.committed() == 200
    assert provider.duplicates() == 0
    records = ledger.list_operations(limit=1000)
    assert len(records) == 200
    assert {record.status for record in records} == {EffectStatus.CONFIRMED}
    assert all(record.attempts == 1 and record.output_json for record in records)
    assert ledger.verify().ok


def test_a_lease_taken_over_by_another_process_fences_the_stale_holder(
    ledger, postgres_target, tmp_path, workers
):
    """After expiry another process takes the lease; the first one's late writes are refused."""
    provider_path = tmp_path / "provider.db"
    provider = FakePaymentProvider(idempotency_guaranteed=True, path=provider_path)
    group = Workers(["hold", postgres_target, str(provider_path), "INV-7"])
    workers.append(group)
    holder = group.processes[0]
    assert Workers.read(holder) == "dispatched"
    # This process judges the holder's 30 s lease from an hour later: it has expired.
    later = EffectExecutor(ledger, clock=lambda: time.time() + 3600)
    contract = capture_contract(provider, guaranteed=True)
    arguments = {"invoice_id": "INV-7", "amount_cents": 4200}
    result = later.execute(contract, arguments, provider.handler)
    assert result.status is EffectStatus.CONFIRMED
    assert not result.replayed
    Workers.send(holder, "go")
    stale = json.loads(Workers.read(holder))
    assert stale["stale"] == ["renew refused", "transition refused"]
    assert (stale["status"], stale["output"]) == ("CONFIRMED", result.output)
    assert provider.committed() == 1
    events = ledger.events("invoice:INV-7:capture")
    types = [event.type for event in events]
    assert types.count(EventType.CONFIRMED) == 1
    assert types.count(EventType.REJECTED) == 0
    expired = next(event for event in events if event.type is EventType.LEASE_EXPIRED)
    assert expired.evidence["owner_gone"] is False
    assert expired.evidence["overlap_risk"] is True
    late = next(event for event in events if event.type is EventType.LATE_RESULT)
    assert (late.attempt, late.evidence["matches_confirmed_output"]) == (1, True)
    assert ledger.verify().ok


def test_processes_migrating_an_empty_database_at_once_all_succeed(
    postgres_url, postgres_schemas, workers
):
    """Several processes opening one empty schema at the same moment all succeed, migrated once."""
    group = Workers(*[["migrate"]] * 3)
    workers.append(group)
    for _ in range(4):
        schema = postgres_schemas()
        assert group.everyone(with_schema(postgres_url, schema)) == ["ok"] * 3
        with psycopg.connect(postgres_url) as conn:
            versions = conn.execute(
                f'SELECT version FROM "{schema}".effectguard_migrations ORDER BY version'  # noqa: S608 - schema and table names are the test's own, never input
            ).fetchall()
        assert versions == [(number,) for number in range(1, SCHEMA_VERSION + 1)]


def test_a_terminated_connection_mid_operation_costs_no_duplicate_and_no_lost_result(
    postgres_url, postgres_schemas, tmp_path
):
    """pg_terminate_backend on the ledger's connections while the handler runs loses nothing."""
    application = f"eg_kill_{uuid.uuid4().hex[:12]}"
    separator = "&" if "?" in postgres_url else "?"
    target = with_schema(
        f"{postgres_url}{separator}application_name={application}", postgres_schemas()
    )
    provider = FakePaymentProvider(idempotency_guaranteed=False, path=tmp_path / "provider.db")
    contract = capture_contract(provider, guaranteed=False)
    terminated = []

    def handler(arguments, *, idempotency_key):
        output = provider.handler(arguments, idempotency_key=idempotency_key)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            rows = admin.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (application,),
            ).fetchall()
        terminated.extend(rows)
        return output

    with PostgresEffectLedger(target) as ledger:
        result = EffectExecutor(ledger).execute(
            contract, {"invoice_id": "INV-1", "amount_cents": 100}, handler
        )
        assert terminated
        assert all(ok for (ok,) in terminated)
        assert result.status is EffectStatus.CONFIRMED
        assert result.output["invoice_id"] == "INV-1"
        record = ledger.get("invoice:INV-1:capture")
        assert record.status is EffectStatus.CONFIRMED
        assert record.output == result.output
        assert ledger.verify().ok
    assert provider.committed() == 1


def test_a_server_outage_mid_operation_leaves_it_for_reconciliation(
    postgres_url, postgres_schemas, tmp_path
):
    """An outage while recording an outcome surfaces; a later call confirms it from the probe."""
    proxy, proxied = TcpProxy.to(postgres_url)
    target = with_schema(proxied, postgres_schemas())
    provider = FakePaymentProvider(idempotency_guaranteed=False, path=tmp_path / "provider.db")
    contract = capture_contract(provider, guaranteed=False)
    arguments = {"invoice_id": "INV-2", "amount_cents": 250}

    def handler(arguments, *, idempotency_key):
        output = provider.handler(arguments, idempotency_key=idempotency_key)
        proxy.cut()
        return output

    try:
        with open_ledger(target, timeout=1.0) as ledger, pytest.raises(LedgerUnavailableError):
            EffectExecutor(ledger).execute(contract, arguments, handler)
        proxy.restore()
        with open_ledger(target) as ledger:
            record = ledger.get("invoice:INV-2:capture")
            assert record.status is EffectStatus.DISPATCHED
            assert record.output_json is None
            result = EffectExecutor(ledger).execute(contract, arguments, provider.handler)
            assert result.status is EffectStatus.CONFIRMED
            assert result.output["invoice_id"] == "INV-2"
            assert ledger.get("invoice:INV-2:capture").output == result.output
            assert ledger.verify().ok
    finally:
        proxy.close()
    assert provider.committed() == 1
    assert provider.requests == 1


@pytest.mark.parametrize(
    ("marker", "operation"), [(b"INSERT INTO", "claim"), (b"WITH op AS (UPDATE", "confirm")]
)
def test_a_write_whose_acknowledgement_is_lost_is_recognised_as_done(
    postgres_url, postgres_schemas, tmp_path, marker, operation
):
    """A write that committed but whose answer was lost is recognised, not redone or refused."""
    proxy, proxied = TcpProxy.to(postgres_url)
    provider = FakePaymentProvider(idempotency_guaranteed=False, path=tmp_path / "provider.db")
    contract = capture_contract(provider, guaranteed=False)

    def handler(arguments, *, idempotency_key):
        if operation == "confirm":
            proxy.lose_reply_to(marker)
        return provider.handler(arguments, idempotency_key=idempotency_key)

    try:
        with open_ledger(with_schema(proxied, postgres_schemas())) as ledger:
            if operation == "claim":
                proxy.lose_reply_to(marker)
            result = EffectExecutor(ledger).execute(
                contract, {"invoice_id": "INV-3", "amount_cents": 300}, handler
            )
            assert proxy.replies_lost == 1
            assert result.status is EffectStatus.CONFIRMED
            assert not result.replayed
            types = [event.type for event in ledger.events("invoice:INV-3:capture")]
            assert types == [EventType.CLAIMED, EventType.CONFIRMED]
            assert ledger.verify().ok
    finally:
        proxy.close()
    assert provider.committed() == 1


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.mark.parametrize("host", ["this", "other"])
def test_a_lease_held_on_another_host_is_never_presumed_gone(ledger, clock, tmp_path, host):
    """A dead pid proves its owner gone only on this host; another host's lease waits for expiry."""
    me = current_owner()
    owner = LeaseOwner(
        host=me.host if host == "this" else f"not-{me.host}",
        boot_id=me.boot_id,
        pid_namespace=me.pid_namespace,
        pid=_dead_pid(),
        start_time=me.start_time,
    )
    provider = FakePaymentProvider(idempotency_guaranteed=False, path=tmp_path / "provider.db")
    contract = capture_contract(provider, guaranteed=False)
    arguments = {"invoice_id": "INV-4", "amount_cents": 400}
    key = "capture:INV-4"
    ledger.claim(
        NewOperation(
            operation_id="invoice:INV-4:capture",
            contract="capture",
            contract_version=1,
            fingerprint=request_fingerprint("capture", 1, arguments, key),
            provider_key=key,
            arguments=arguments,
            attempt_budget=3,
            lease=Lease("their-token", owner, 30),
        ),
        now=clock(),
    )
    executor = EffectExecutor(ledger, clock=clock)
    result = executor.execute(contract, arguments, provider.handler)
    if host == "this":
        # The owner provably exited, so its lease is taken over at once, without overlap risk.
        assert result.status is EffectStatus.CONFIRMED
        assert provider.committed() == 1
        return
    assert result.status is EffectStatus.DISPATCHED
    assert provider.requests == 0
    clock.advance(31)
    result = executor.execute(contract, arguments, provider.handler)
    # Expired, but its owner may still be sending: the probe's "not found" cannot clear that.
    assert result.status is EffectStatus.OUTCOME_UNKNOWN
    assert provider.requests == 0
    assert provider.committed() == 0
    record = ledger.get("invoice:INV-4:capture", now=clock())
    assert record.overlap_risk
    assert [holder.owner for holder in record.overlap] == [owner]


def test_postgres_and_sqlite_keep_identical_records(ledger, tmp_path, clock):
    """The same writes at the same instants give equal records, events and chain hashes."""
    sqlite = open_ledger(tmp_path / "ledger.db")
    owner = LeaseOwner("host-a", "boot", "pid:[1]", 7, "9")
    first, second = "t1", "t2"  # lease tokens
    arguments = {"invoice_id": "INV-5", "amount_cents": 500, "memo": "naïve 😀", "f": 0.1}
    try:
        for store in (ledger, sqlite):
            store.claim(
                NewOperation(
                    "op-5", "capture", 2, "f" * 64, "key-5", arguments, 3, Lease(first, owner, 12.5)
                ),
                now=clock() + 0.000001,
            )
            store.transition(
                "op-5",
                Expect(lease_token=first),
                Changes(
                    EffectStatus.RECONCILING,
                    lease=Lease(second, owner, 30),
                    reason="probing",
                    evidence={"handler": "timed out", "big": 1e20},
                    overlap=(OverlapHolder(first, 1, owner),),
                ),
                [
                    EventDraft(
                        EventType.OUTCOME_UNKNOWN,
                        EffectStatus.DISPATCHED,
                        EffectStatus.OUTCOME_UNKNOWN,
                        1,
                        {"handler": "timed out"},
                    )
                ],
                now=clock() + 2.5,
            )
        at = clock() + 10
        assert ledger.get("op-5", now=at) == sqlite.get("op-5", now=at)
        assert ledger.events("op-5") == sqlite.events("op-5")
    finally:
        sqlite.close()


def test_event_text_with_quotes_escapes_and_non_ascii_is_stored_exactly(ledger):
    """Evidence and arguments with quotes, backslashes, braces, NULL and non-ASCII round-trip.

    The events go to the server inside one JSON parameter, their texts as JSON
    strings; their text must come back byte for byte, and the chain over it verify.
    """
    tricky = {
        "note": 'grüße "q" \\ {a,b} NULL',
        "list": [1, None, "x,y"],
        "emoji": "😀",
        "escapes": "nul\x00 tab\t line\u2028 \\u0041",
    }
    owner, token = current_owner(), f"t-{uuid.uuid4().hex}"
    operation = NewOperation(
        "op-ü", "c", 1, "f" * 64, None, {"a": 'x"{}'}, 3, Lease(token, owner, 30.0)
    )
    ledger.claim(operation)
    ledger.transition(
        "op-ü",
        Expect(lease_token=token),
        Changes(EffectStatus.CONFIRMED, lease=None, evidence=tricky, output_json='{"z":"NULL"}'),
        (
            EventDraft(
                EventType.CONFIRMED, EffectStatus.DISPATCHED, EffectStatus.CONFIRMED, 1, tricky
            ),
        ),
    )
    events = ledger.events("op-ü")
    assert [event.evidence for event in events] == [{}, tricky]
    assert [event.from_status for event in events] == [None, EffectStatus.DISPATCHED]
    assert ledger.get("op-ü").arguments == {"a": 'x"{}'}
    assert ledger.verify().problems == ()
