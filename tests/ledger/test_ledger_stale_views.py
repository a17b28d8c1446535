"""A writer whose view of an operation is a moment old never writes over a newer row.

Checked on every backend. The PostgreSQL ledger starts each write from what
its thread last saw of the operation (and the server's clock then) instead of
reading it again; these tests make that view stale through a second handle.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from _ledger_samples import OWNER, TOKEN_A, TOKEN_B, event, operation

from effectguard import EffectStatus, EventType
from effectguard.errors import FencedWriteError
from effectguard.ledger import Changes, Expect, Lease
from effectguard.ledger.postgres import RECENT_SECONDS, Recent

OP = "invoice:INV-1:capture"


def take_over(ledger, now=None):
    """Another worker takes OP over with TOKEN_B (RECONCILING), as after a lease expiry."""
    return ledger.transition(
        OP,
        Expect(lease_token=TOKEN_A),
        Changes(EffectStatus.RECONCILING, lease=Lease(TOKEN_B, OWNER, 30.0)),
        [event(EventType.RECONCILING, EffectStatus.RECONCILING)],
        now=now,
    )


def confirm(ledger, token=TOKEN_A, now=None):
    return ledger.transition(
        OP,
        Expect(lease_token=token),
        Changes(EffectStatus.CONFIRMED, lease=None, output_json='{"ok":true}'),
        [event()],
        now=now,
    )


@pytest.mark.parametrize("clocked", [True, False], ids=["given-clock", "ledger-clock"])
def test_a_write_from_a_stale_view_is_fenced_and_changes_nothing(make_ledger, clock, clocked):
    """After another handle took the lease over, the first handle's confirm is refused."""
    now = clock() if clocked else None
    first, second = make_ledger(), make_ledger()
    assert first.get(OP, now=now) is None  # as the executor reads before it claims
    first.claim(operation(), now=now)
    take_over(second, now)
    with pytest.raises(FencedWriteError, match="lease token is not the writer's"):
        confirm(first, now=now)
    record = second.get(OP, now=now)
    assert (record.status, record.lease_token, record.event_count) == (
        EffectStatus.RECONCILING,
        TOKEN_B,
        2,
    )
    assert second.verify().ok


@pytest.mark.parametrize("clocked", [True, False], ids=["given-clock", "ledger-clock"])
def test_a_write_from_a_view_behind_the_rows_events_extends_the_real_chain(
    make_ledger, clock, clocked
):
    """A write whose view misses an event another handle appended still chains after it."""
    now = clock() if clocked else None
    first, second = make_ledger(), make_ledger()
    assert first.get(OP, now=now) is None  # as the executor reads before it claims
    first.claim(operation(), now=now)
    take_over(second, now)
    record = confirm(first, token=TOKEN_B, now=now)
    assert (record.status, record.event_count) == (EffectStatus.CONFIRMED, 3)
    types = [item.type for item in first.events(OP)]
    assert types == [
        EventType.CLAIMED,
        EventType.RECONCILING,
        EventType.CONFIRMED,
    ]
    assert first.verify().ok


@pytest.mark.parametrize("clocked", [True, False], ids=["given-clock", "ledger-clock"])
def test_a_view_that_passes_the_fence_but_misses_an_event_still_chains_correctly(
    make_ledger, clock, clocked
):
    """An event appended elsewhere under the same lease is never overwritten or forked."""
    now = clock() if clocked else None
    first, second = make_ledger(), make_ledger()
    assert first.get(OP, now=now) is None  # as the executor reads before it claims
    first.claim(operation(), now=now)
    second.transition(
        OP,
        Expect(event_count=1),
        Changes(EffectStatus.DISPATCHED),
        [event(EventType.LATE_RESULT, EffectStatus.DISPATCHED, {"attempt": 1})],
        now=now,
    )
    record = confirm(first, now=now)
    assert (record.status, record.event_count) == (EffectStatus.CONFIRMED, 3)
    types = [item.type for item in first.events(OP)]
    assert types[1:] == [EventType.LATE_RESULT, EventType.CONFIRMED]
    assert first.verify().ok


def test_a_renewal_in_between_does_not_stop_the_holders_write(ledger):
    """A write from the claim's view applies after a renewal (which changes no event)."""
    assert ledger.get(OP) is None
    ledger.claim(operation())
    ledger.renew(OP, TOKEN_A, 60.0)
    record = confirm(ledger)
    assert (record.status, record.lease_token, record.event_count) == (
        EffectStatus.CONFIRMED,
        None,
        2,
    )
    assert ledger.verify().ok


def test_a_claim_after_seeing_nothing_returns_what_another_handle_created(make_ledger):
    """Read absent, created elsewhere, then claimed: the claim returns the other's record."""
    first, second = make_ledger(), make_ledger()
    assert first.get(OP) is None
    second.claim(operation(token=TOKEN_B))
    record, created = first.claim(operation())
    assert not created
    assert (record.lease_token, record.event_count) == (TOKEN_B, 1)
    assert len(first.events(OP)) == 1


def test_events_written_on_the_ledgers_clock_are_in_order_and_current(ledger):
    """Read, claim and confirm on the ledger's own clock: event times never go backwards."""
    started = datetime.now(UTC)
    assert ledger.get(OP) is None
    ledger.claim(operation())
    confirm(ledger)
    times = [item.at for item in ledger.events(OP)]
    assert times == sorted(times)
    # Server and test share one host here; a minute covers any clock step.
    assert abs(times[0] - started) < timedelta(minutes=1)


def test_a_view_is_forgotten_after_a_second_and_elsewhere():
    """Recent keeps one operation per thread, for at most RECENT_SECONDS."""
    recent = Recent()
    recent.saw(OP, None, datetime.now(UTC))
    assert recent.get(OP) is not None
    assert recent.get("another") is None
    seen = recent.get(OP)
    recent._local.seen = dataclasses.replace(seen, monotonic=seen.monotonic - RECENT_SECONDS - 1)
    assert recent.get(OP) is None
