"""The incident an on-call person meets: a timeout quarantines a capture; the CLI resolves it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from ops_helpers import ARGS, AUDIT, KEY, OP, Run, parsed

from effectguard import EffectContract, EffectExecutor, EffectLedger, EffectStatus
from effectguard.testkit import FakePaymentProvider, Lookup, ProviderUnavailable

TIMED = EffectContract(
    name="capture",
    operation_id=lambda a: f"invoice:{a['invoice_id']}:capture",
    provider_idempotency_key=lambda a: f"capture:{a['invoice_id']}",
    redact=frozenset({"card_token"}),
    handler_timeout=0.05,
)


def join_late_handlers() -> None:
    """Wait until every handler that outlived its deadline has finished and been recorded."""
    for thread in threading.enumerate():
        if thread.name.startswith("effectguard-handler-"):
            thread.join(timeout=30)


def test_timeout_quarantine_then_authorized_retry_commits_once(
    run: Run, make_ledger: Callable[..., EffectLedger]
) -> None:
    """Timeout → quarantined → listed → history read → retry authorized → exactly one effect."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, lookup=Lookup.NONE)
    stuck = threading.Event()
    keys: list[str | None] = []

    def capture(arguments: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
        keys.append(idempotency_key)
        if len(keys) == 1:
            # The first request hangs before it is written to the socket, then fails.
            stuck.wait()
            msg = "connection reset before the request was sent"
            raise ProviderUnavailable(msg)
        return provider.handler(arguments, idempotency_key=idempotency_key)

    executor = EffectExecutor(make_ledger())
    try:
        first = executor.execute(TIMED, ARGS, capture)
        assert first.status is EffectStatus.QUARANTINED
        assert provider.committed() == 0

        listing = run("list", "--status", "quarantined").stdout.splitlines()
        assert len(listing) == 2
        assert listing[1].split()[0] == OP
        assert listing[1].split()[2:4] == ["QUARANTINED", "1/3"]
        assert listing[1].split()[-1] == "yes"  # the stuck handler may still send
        assert run("list", "--status", "confirmed").stdout == "no operations match\n"

        history = parsed(run("events", OP, "--json"))
        assert [event["type"] for event in history] == [
            "claimed",
            "outcome_unknown",
            "reconciling",
            "quarantined",
        ]
        assert history[1]["evidence"]["handler"] == "timed_out"
        assert "may still send" in run("show", OP).stdout

        run("authorize-retry", OP, *AUDIT)
        second = executor.execute(TIMED, ARGS, capture)
        assert second.confirmed
        assert second.attempts == 2
        assert keys == [KEY, KEY]
        assert provider.committed() == 1

        assert executor.execute(TIMED, ARGS, capture).replayed
        assert keys == [KEY, KEY]
    finally:
        stuck.set()
        join_late_handlers()
    # The stuck first request's late failure is evidence only: still one effect, still confirmed.
    assert provider.committed() == 1
    record = parsed(run("show", OP, "--json"))
    assert record["status"] == "CONFIRMED"
    history = parsed(run("events", OP, "--json"))
    assert history[-1]["type"] == "late_result"
    assert "ProviderUnavailable" in history[-1]["evidence"]["handler"]
    run("verify")
