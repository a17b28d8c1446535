"""PostgreSQL's cost in round trips and row locks: counted through a local proxy, never timed.

A fresh guarded call takes two round trips (the claim, which reads only when
the operation exists, and the outcome); concurrent claims do not queue on one
anchor row; a claim dated from an estimate of the server's clock is refused
by the server when that estimate is off. The provider's committed count is
the ground truth throughout.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from postgres_support import import_psycopg, with_schema

from effectguard import EffectExecutor, EffectStatus, open_ledger
from effectguard.testkit import FakePaymentProvider
from effectguard.testkit.tcp_proxy import TcpProxy

psycopg = import_psycopg()

from _postgres_worker import capture_contract  # noqa: E402 - needs psycopg

from effectguard.ledger.postgres import PostgresEffectLedger  # noqa: E402 - needs psycopg

pytestmark = [pytest.mark.postgres]


def arguments(number: int) -> dict[str, object]:
    """The capture of invoice INV-``number``."""
    return {"invoice_id": f"INV-{number}", "amount_cents": 100 + number}


def test_a_fresh_call_takes_two_round_trips_and_a_replay_one(
    postgres_url, postgres_schemas, tmp_path
):
    """A new call takes two round trips (claim, outcome); a first replay elsewhere, row + events."""
    proxy, proxied = TcpProxy.to(postgres_url)
    provider = FakePaymentProvider(idempotency_guaranteed=True, path=tmp_path / "provider.db")
    contract = capture_contract(provider, guaranteed=True)
    target = with_schema(proxied, postgres_schemas())
    try:
        # One connection each: a pool that grew in the background would add its own
        # connection's set-up to the count.
        with open_ledger(target, pool_size=1) as ledger:
            executor = EffectExecutor(ledger)
            # The first call opens the pool and learns the server's clock; psycopg prepares
            # each statement on the server at its 5th run (one more round trip, once).
            for number in range(100, 107):
                executor.execute(contract, arguments(number), provider.handler)
            costs, outputs = [], {}
            for number in range(1, 6):
                before = proxy.round_trips
                result = executor.execute(contract, arguments(number), provider.handler)
                assert result.status is EffectStatus.CONFIRMED
                costs.append(proxy.round_trips - before)
                outputs[number] = result.output
            assert costs == [2] * 5
            assert len(provider.effects()) == 12
            # Another process: nothing cached, nothing seen.
            with open_ledger(target, pool_size=1) as other:
                replaying = EffectExecutor(other)
                for number in range(100, 107):  # warm, as above
                    replaying.execute(contract, arguments(number), provider.handler)
                before = proxy.round_trips
                replayed = replaying.execute(contract, arguments(3), provider.handler)
                assert replayed.replayed
                assert replayed.output == outputs[3]
                # The claim finds the row; the first replay here checks its output's events.
                assert proxy.round_trips - before == 2
            assert len(provider.effects()) == 12
            assert ledger.verify().ok
    finally:
        proxy.close()


def test_a_claim_takes_a_free_anchor_shard_while_another_claim_holds_one(
    postgres_url, postgres_schemas, tmp_path
):
    """With every anchor head but one locked by an open transaction, a claim still commits."""
    provider = FakePaymentProvider(idempotency_guaranteed=True, path=tmp_path / "provider.db")
    contract = capture_contract(provider, guaranteed=True)
    schema = postgres_schemas()
    with PostgresEffectLedger(postgres_url, schema=schema) as ledger:
        executor = EffectExecutor(ledger)
        executor.execute(contract, arguments(0), provider.handler)
        finished = threading.Event()
        results = []

        def call() -> None:
            results.append(executor.execute(contract, arguments(1), provider.handler))
            finished.set()

        with psycopg.connect(postgres_url) as holder:
            # As 15 claims in flight would: each holds its head row until it commits.
            holder.execute(f'SELECT 1 FROM "{schema}".claims_head WHERE shard <> 7 FOR UPDATE')  # noqa: S608 - the test's own schema name
            worker = threading.Thread(target=call, daemon=True)
            worker.start()
            # A liveness bound only (a single anchor row would block here until rollback).
            assert finished.wait(60), "the claim waited for another claim's row lock"
            holder.rollback()
        worker.join()
        assert results[0].status is EffectStatus.CONFIRMED
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            shards = conn.execute(
                f'SELECT shard FROM "{schema}".claims WHERE operation_id = %s',  # noqa: S608 - the test's own schema name
                (results[0].operation_id,),
            ).fetchall()
        assert shards == [(7,)]
        assert len(provider.effects()) == 2
        assert ledger.verify().ok


def test_many_threads_claim_across_shards_and_verify(postgres_url, postgres_schemas, tmp_path):
    """8 threads claiming at once: every claim anchored once, every chain intact, no duplicate."""
    provider = FakePaymentProvider(idempotency_guaranteed=True, path=tmp_path / "provider.db")
    contract = capture_contract(provider, guaranteed=True)
    with PostgresEffectLedger(postgres_url, schema=postgres_schemas(), pool_size=8) as ledger:
        executor = EffectExecutor(ledger)
        barrier = threading.Barrier(8)
        failures: list[BaseException] = []

        def worker(first: int) -> None:
            barrier.wait()
            try:
                for number in range(first, first + 10):
                    # Each operation twice: the second call is a replay, never a second effect.
                    executor.execute(contract, arguments(number), provider.handler)
                    executor.execute(contract, arguments(number), provider.handler)
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=worker, args=(n * 10,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert len(provider.effects()) == 80
        report = ledger.verify()
        assert report.ok, report.problems
        assert report.anchored == 80
        exported = ledger.anchor_head()
        assert exported.count == 80
        assert ledger.verify(anchor=exported).ok


def test_a_claim_dated_by_a_wrong_clock_estimate_is_refused_and_redated(
    postgres_url, postgres_schemas, tmp_path
):
    """An estimate of the server's clock an hour off never dates a claim: the server's time does."""
    provider = FakePaymentProvider(idempotency_guaranteed=True, path=tmp_path / "provider.db")
    contract = capture_contract(provider, guaranteed=True)
    with PostgresEffectLedger(postgres_url, schema=postgres_schemas()) as ledger:
        executor = EffectExecutor(ledger)
        executor.execute(contract, arguments(0), provider.handler)
        # As if the server's clock had been stepped an hour since this process last read it.
        ledger._recent.clock(datetime.now(UTC) - timedelta(hours=1))
        result = executor.execute(contract, arguments(1), provider.handler)
        assert result.status is EffectStatus.CONFIRMED
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            (server_now,) = conn.execute("SELECT statement_timestamp()").fetchone()
        record = ledger.get(result.operation_id)
        assert record is not None
        assert abs(server_now - record.created_at) < timedelta(minutes=5)
        assert all(
            abs(server_now - event.at) < timedelta(minutes=5)
            for event in ledger.events(result.operation_id)
        )
        assert len(provider.effects()) == 2
        assert ledger.verify().ok
