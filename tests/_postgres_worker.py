"""A worker process for the PostgreSQL tests: its own interpreter, pool and lease owner.

``python _postgres_worker.py COMMAND ARGS…``; it prints ``ready`` once imported
and connected, and takes its cue ("go", or a URL per round) from stdin, so the
test can start several workers at the same moment.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

from effectguard import EffectContract, EffectExecutor, EffectStatus, EventType
from effectguard.errors import FencedWriteError
from effectguard.ledger import Changes, EventDraft, Expect
from effectguard.ledger.postgres import PostgresEffectLedger
from effectguard.testkit import FakePaymentProvider


def capture_contract(provider: FakePaymentProvider, *, guaranteed: bool) -> EffectContract:
    """The invoice-capture contract every worker and the test itself use."""
    return EffectContract(
        name="capture",
        operation_id=lambda a: f"invoice:{a['invoice_id']}:capture",
        provider_idempotency_key=lambda a: f"capture:{a['invoice_id']}",
        provider_idempotency_guaranteed=guaranteed,
        outcome_probe=provider.probe,
    )


def say(message: str) -> None:
    print(message, flush=True)


def contest(url: str, provider_path: str, count: int) -> None:
    """Execute ``count`` captures in the order every worker shares; report what this one did."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, path=provider_path)
    contract = capture_contract(provider, guaranteed=False)
    with PostgresEffectLedger(url, pool_size=2) as ledger:
        executor = EffectExecutor(ledger)
        order = list(range(count))
        random.Random(7).shuffle(order)
        say("ready")
        sys.stdin.readline()
        tally: dict[str, int] = {"dispatched": 0, "replayed": 0, "in_progress": 0}
        for index in order:
            arguments = {"invoice_id": f"INV-{index}", "amount_cents": 100 + index}
            result = executor.execute(contract, arguments, provider.handler)
            if result.status is EffectStatus.DISPATCHED:
                tally["in_progress"] += 1
            elif result.replayed:
                tally["replayed"] += 1
            else:
                assert result.status is EffectStatus.CONFIRMED, result
                tally["dispatched"] += 1
        say(json.dumps(tally))


def migrate() -> None:
    """For each URL read from stdin, open (and so migrate) that ledger; print ok or the error."""
    say("ready")
    for line in sys.stdin:
        try:
            PostgresEffectLedger(line.strip(), pool_size=1).close()
        except Exception as exc:
            say(f"error: {type(exc).__name__}: {exc}")
        else:
            say("ok")


def hold(url: str, provider_path: str, invoice_id: str) -> None:
    """Dispatch one capture whose handler waits for "go" before it reaches the provider.

    Then try to write with the lease token it had, as a stale holder would, and
    report what happened.
    """
    provider = FakePaymentProvider(idempotency_guaranteed=True, path=provider_path)
    contract = capture_contract(provider, guaranteed=True)
    arguments = {"invoice_id": invoice_id, "amount_cents": 4200}
    operation_id = f"invoice:{invoice_id}:capture"
    with PostgresEffectLedger(url, pool_size=2) as ledger:
        held: dict[str, Any] = {}

        def handler(args: Any, *, idempotency_key: str | None) -> Any:
            record = ledger.get(operation_id)
            assert record is not None
            held["token"] = record.lease_token
            say("dispatched")
            sys.stdin.readline()
            return provider.handler(args, idempotency_key=idempotency_key)

        say("ready")
        result = EffectExecutor(ledger).execute(contract, arguments, handler)
        stale = []
        try:
            ledger.renew(operation_id, held["token"], 30)
        except FencedWriteError:
            stale.append("renew refused")
        try:
            ledger.transition(
                operation_id,
                Expect(lease_token=held["token"]),
                Changes(EffectStatus.REJECTED, lease=None, reason="stale"),
                [EventDraft(EventType.REJECTED, EffectStatus.DISPATCHED, EffectStatus.REJECTED, 1)],
            )
        except FencedWriteError:
            stale.append("transition refused")
        say(
            json.dumps(
                {
                    "status": result.status.value,
                    "output": result.output,
                    "replayed": result.replayed,
                    "stale": stale,
                }
            )
        )


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "contest":
        contest(args[0], args[1], int(args[2]))
    elif command == "migrate":
        migrate()
    elif command == "hold":
        hold(args[0], args[1], args[2])
    else:
        raise SystemExit(f"unknown command {command!r}")
