"""PostgreSQL after a lost connection: the real outcome is read back, and the pool stays quiet.

A write whose acknowledgement is lost may well have committed; the caller must
get what the ledger holds, not a connection error, whenever that can be read
back. The provider's committed count is the ground truth throughout.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from postgres_support import import_psycopg, with_schema

from effectguard import EffectExecutor, EffectStatus, EventType, open_ledger
from effectguard.ledger import Changes, EventDraft, Expect
from effectguard.testkit import FakePaymentProvider
from effectguard.testkit.tcp_proxy import TcpProxy

psycopg = import_psycopg()

from _postgres_worker import capture_contract  # noqa: E402 - needs psycopg

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

OUTCOME = b"WITH op AS (UPDATE"
READ = b"statement_timestamp()"
OP = "invoice:INV-5:capture"
ARGS = {"invoice_id": "INV-5", "amount_cents": 500}


def test_a_lost_acknowledgement_is_settled_even_when_reading_back_breaks_twice(
    postgres_url, postgres_schemas, tmp_path
):
    """The confirm's answer and the next two read-backs are lost: the caller gets CONFIRMED."""
    proxy, proxied = TcpProxy.to(postgres_url)
    provider = FakePaymentProvider(idempotency_guaranteed=False, path=tmp_path / "provider.db")
    contract = capture_contract(provider, guaranteed=False)

    def handler(arguments, *, idempotency_key):
        proxy.lose_reply_to(
            OUTCOME, then=lambda: proxy.lose_reply_to(READ, then=lambda: proxy.lose_reply_to(READ))
        )
        return provider.handler(arguments, idempotency_key=idempotency_key)

    try:
        with open_ledger(with_schema(proxied, postgres_schemas()), timeout=5.0) as ledger:
            result = EffectExecutor(ledger).execute(contract, ARGS, handler)
            assert proxy.replies_lost == 3
            assert result.status is EffectStatus.CONFIRMED
            assert not result.replayed
            assert result.output == provider.effects()[0]["response"]
            types = [event.type for event in ledger.events(OP)]
            assert types == [EventType.CLAIMED, EventType.CONFIRMED]
            assert ledger.verify().ok
    finally:
        proxy.close()
    assert provider.committed() == 1


def test_a_lost_write_is_recognised_after_another_writer_appended_to_it(
    postgres_url, postgres_schemas, tmp_path
):
    """A late-result event lands between the lost confirm and its read-back: still CONFIRMED."""
    schema = postgres_schemas()
    proxy, proxied = TcpProxy.to(postgres_url)
    provider = FakePaymentProvider(idempotency_guaranteed=False, path=tmp_path / "provider.db")
    contract = capture_contract(provider, guaranteed=False)
    direct = open_ledger(with_schema(postgres_url, schema))

    def append_late_result():
        record = direct.get(OP)
        assert record.status is EffectStatus.CONFIRMED
        event = EventDraft(
            EventType.LATE_RESULT, EffectStatus.CONFIRMED, EffectStatus.CONFIRMED, 1, {"seen": 1}
        )
        direct.transition(
            OP, Expect(event_count=record.event_count), Changes(EffectStatus.CONFIRMED), [event]
        )

    def handler(arguments, *, idempotency_key):
        proxy.lose_reply_to(OUTCOME, then=append_late_result)
        return provider.handler(arguments, idempotency_key=idempotency_key)

    try:
        with open_ledger(with_schema(proxied, schema), timeout=5.0) as ledger:
            result = EffectExecutor(ledger).execute(contract, ARGS, handler)
            assert proxy.replies_lost == 1
            assert result.status is EffectStatus.CONFIRMED
            assert result.output == provider.effects()[0]["response"]
            types = [event.type for event in ledger.events(OP)]
            assert types[-2:] == [EventType.CONFIRMED, EventType.LATE_RESULT]
            assert ledger.verify().ok
    finally:
        proxy.close()
        direct.close()
    assert provider.committed() == 1


# Opens a pooled ledger, has its backends terminated, uses it again; effectguard's log on stdout.
POOL_CHILD = """
import logging, sys
import psycopg
from effectguard.ledger.postgres import PostgresEffectLedger
admin_url, target, application = sys.argv[1:4]
handler = logging.StreamHandler(sys.stdout)
handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
logging.getLogger("effectguard").addHandler(handler)
logging.getLogger("effectguard").setLevel(logging.INFO)
with PostgresEffectLedger(target, pool_size=2) as ledger:
    assert ledger.get("nothing") is None
    with psycopg.connect(admin_url, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE application_name = %s",
            (application,),
        ).fetchall()
    assert killed and all(ok for (ok,) in killed), killed
    assert ledger.get("nothing") is None
    assert ledger.get("nothing") is None
print("done", flush=True)
"""


def test_the_pool_reports_a_broken_connection_through_effectguards_logger(
    postgres_url, postgres_schemas
):
    """pg_terminate_backend on a pooled connection: nothing raw on stderr, a record in the log."""
    application = f"eg_pool_{uuid.uuid4().hex[:12]}"
    separator = "&" if "?" in postgres_url else "?"
    target = with_schema(
        f"{postgres_url}{separator}application_name={application}", postgres_schemas()
    )
    completed = subprocess.run(
        [sys.executable, "-c", POOL_CHILD, postgres_url, target, application],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip().endswith("done")
    assert completed.stderr == ""
    routed = [
        line
        for line in completed.stdout.splitlines()
        if line.startswith("effectguard.ledger.postgres INFO connection pool: discarding")
    ]
    assert routed, completed.stdout
