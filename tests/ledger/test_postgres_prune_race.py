"""PostgreSQL: a claim that waits on the very row a prune is deleting is still refused.

The claim's ``INSERT … ON CONFLICT`` blocks on the row the prune's transaction
deletes; when that transaction commits, nothing conflicts any more and the row
is inserted, from a snapshot older than the tombstone. Migration 5's trigger
reads the tombstones on a fresh snapshot after the insert, so the claim fails
and nothing is dispatched.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from postgres_support import import_psycopg, with_schema
from support import ARGS, capture_contract

from effectguard import EffectExecutor, EffectPruned, EffectStatus
from effectguard.ledger.postgres import split_target
from effectguard.testkit import FakePaymentProvider

psycopg = import_psycopg()

from effectguard.ledger.postgres import PostgresEffectLedger  # noqa: E402 - needs psycopg

pytestmark = pytest.mark.postgres

_PRUNE_BY_HAND = """
INSERT INTO tombstones (operation_id, contract, contract_version, fingerprint, status,
    provider_operation_id, event_count, event_head, first_hash, pruned_at, digest)
SELECT operation_id, contract, contract_version, fingerprint, status, provider_operation_id,
    event_count, event_head, '\\x'::bytea, now(), '\\x'::bytea FROM operations
WHERE operation_id = %(id)s;
DELETE FROM events WHERE operation_id = %(id)s;
DELETE FROM operations WHERE operation_id = %(id)s;
"""


def test_a_claim_blocked_on_the_row_being_pruned_is_refused(
    postgres_url: str, postgres_schemas: Any
) -> None:
    """The repeat call waits for the prune, then raises EffectPruned; 1 commit in all."""
    target = with_schema(postgres_url, postgres_schemas())
    provider = FakePaymentProvider()
    contract = capture_contract(provider)
    with PostgresEffectLedger(target) as ledger:
        first = EffectExecutor(ledger, replay_cache=0).execute(contract, ARGS, provider.handler)
        assert first.status is EffectStatus.CONFIRMED
        conninfo, schema = split_target(target, None)
        with psycopg.connect(conninfo) as pruner:
            pruner.execute(f'SET search_path TO "{schema}"')
            # The prune's transaction: tombstone written, rows deleted, not yet committed.
            for statement in _PRUNE_BY_HAND.strip().split(";\n"):
                pruner.execute(statement, {"id": first.operation_id})
            outcome: list[BaseException | object] = []

            def call_again() -> None:
                try:
                    outcome.append(
                        EffectExecutor(ledger, replay_cache=0).execute(
                            contract, ARGS, provider.handler
                        )
                    )
                except BaseException as exc:
                    outcome.append(exc)

            caller = threading.Thread(target=call_again)
            caller.start()
            _wait_until_blocked(conninfo, pruner)
            pruner.commit()
            caller.join(timeout=60)
        assert len(outcome) == 1
        assert isinstance(outcome[0], EffectPruned), outcome
        assert ledger.get(first.operation_id) is None
    assert (provider.requests, provider.committed()) == (1, 1)


def _wait_until_blocked(conninfo: str, holder: Any) -> None:
    """Return once some session waits on a lock ``holder``'s transaction holds."""
    holder_pid = holder.info.backend_pid
    with psycopg.connect(conninfo, autocommit=True) as watcher:
        for _ in range(10_000):
            waiting = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (holder_pid,),
            ).fetchone()
            if waiting is not None and waiting[0]:
                return
            watcher.execute("SELECT pg_sleep(0.01)")
    pytest.fail("the repeat call never waited on the prune's transaction")
